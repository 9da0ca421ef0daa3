"""The dataset config: its YAML read and checked into `transforms.contract.config.DatasetSpec`
(`loader`, with `fields` for single values, `transform` for the `transform:` section and
`validation` for the `validation:` section), and the reference of its keys (`reference*`) that
the loader takes them from and `doc` renders as docs/reference/config.md and
docs/config.schema.json."""
