"""The ground floor: what every command shows its user, the same way in every package.

`errors` (the base error class and UsageError), `args` (argument types and the one argparse
class), `suggest` ("did you mean"), `safe` (what a command may show: secrets masked, terminal
controls escaped), `locations` (whether two named locations are one or hold each other),
`style` (the HTML reports' look). Nothing of ours is imported here; every layer, the contract
and the trainer included, may import it.
"""
