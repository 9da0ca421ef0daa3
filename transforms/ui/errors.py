"""The errors every command reports the same way: one line naming what to fix."""

from __future__ import annotations

from transforms.ui.safe import masked


class ShardflowError(Exception):
    """An error a command reports as one line, without a traceback: the user's input (a flag,
    a config, a dataset, OUTPUT) is not what it needs to be, and the message says which.

    Its message is masked when it is made (`transforms.ui.safe.masked`): a password in a URI
    it names never reaches a terminal, a log or a traceback."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(masked(a) if isinstance(a, str) else a for a in args))


class UsageError(ShardflowError, ValueError):
    """A bad command line, or a flag value wrong for this dataset or machine; the message names
    the flag (exit status 2)."""
