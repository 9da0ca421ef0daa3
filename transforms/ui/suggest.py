""" "Did you mean": the nearest valid name to one a user typed, for every error message that
refuses a name (commands, flags, config keys, types, formats, options, features).

One rule everywhere: a name that differs only in case or in `-` for `_` is that name;
otherwise the closest spelling by difflib's ratio, when it is close enough (0.6).
`transforms.ui.args.ArgumentParser` gives the commands' unknown flags the same hint.
"""

from __future__ import annotations

import argparse
import difflib
from typing import Any, Iterable


def nearest(value: Any, choices: Iterable[Any]) -> str | None:
    """The valid name nearest to `value`, or None when none is close."""
    names = [str(c) for c in choices]
    typed = str(value)
    folded = {n.lower().replace("-", "_"): n for n in names}
    exact = folded.get(typed.lower().replace("-", "_"))
    if exact is not None and exact != typed:
        return exact
    close = difflib.get_close_matches(typed, names, n=1, cutoff=0.6)
    return close[0] if close and close[0] != typed else None


def did_you_mean(value: Any, choices: Iterable[Any]) -> str:
    """ "; did you mean 'NAME'?" for the nearest valid name, or "" when none is close."""
    name = nearest(value, choices)
    return f"; did you mean {name!r}?" if name is not None else ""


def flag_hint(unknown: Iterable[str], *parsers: argparse.ArgumentParser) -> str:
    """ "; did you mean '--FLAG'?" for the first of the `unknown` arguments close to a flag of
    the `parsers`, or ""."""
    known = [s for p in parsers for s in p._option_string_actions if s.startswith("--")]
    for arg in unknown:
        if arg.startswith("--"):
            name = nearest(arg.split("=", 1)[0], known)
            if name is not None:
                return f"; did you mean {name!r}?"
    return ""
