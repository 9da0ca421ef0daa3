"""Argument types and the argument parser of every command."""

from __future__ import annotations

import argparse
from typing import Callable

from transforms.ui.errors import UsageError
from transforms.ui.suggest import flag_hint


def whole_number(text: str) -> int:
    """An argparse type: a whole number."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def between(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high] (no upper bound: None); the error names
    the bound it breaks."""

    def bounded(text: str) -> int:
        value = whole_number(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} must be at least {low:,}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{text!r} must be at most {high:,}")
        return value

    return bounded


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    return between(1)(text)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose "unrecognized arguments" error suggests the nearest flag.

    `one_line`: an error raises UsageError (the command prints it as one line and exits 2)
    instead of printing argparse's usage block."""

    def __init__(self, *args, one_line: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self._one_line = one_line

    def error(self, message: str):
        message += unrecognized_hint(self, message)
        if self._one_line:
            raise UsageError(message)
        super().error(message)


def unrecognized_hint(parser: argparse.ArgumentParser, message: str) -> str:
    """The flag hint of argparse's "unrecognized arguments: ..." message; "" for others."""
    prefix = "unrecognized arguments: "
    return flag_hint(message[len(prefix) :].split(), parser) if message.startswith(prefix) else ""
