"""The errors every command reports the same way: one line naming what to fix."""

from __future__ import annotations


class ShardflowError(Exception):
    """An error a command reports as one line, without a traceback: the user's input (a flag,
    a config, a dataset, OUTPUT) is not what it needs to be, and the message says which."""


class UsageError(ShardflowError, ValueError):
    """A bad command line, or a flag value wrong for this dataset or machine; the message names
    the flag (exit status 2)."""
