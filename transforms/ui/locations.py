"""Whether two locations a user named (local paths or gs:// URIs) are one, or one holds the
other: the rule that no command writes over or deletes what it did not make starts here.

Every command that writes checks each of its outputs against its inputs and its other outputs
before any work (`clash`), and refuses a pair that is the same file or folder, or where one is
inside the other, naming both. Local paths are compared as real paths (a symbolic link, `..` or
a hard link to the same file does not hide a clash); URIs as their text, without a trailing
slash. Nothing of ours is imported here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

SAME, INSIDE, CONTAINS = "is", "is inside", "holds"


def _is_uri(location: str) -> bool:
    return "://" in location


def _normal(location: str) -> str:
    if _is_uri(location):
        scheme, _, rest = location.partition("://")
        return f"{scheme.lower()}://{rest.rstrip('/')}"
    return os.path.realpath(os.path.expanduser(location))


def relation(a: str, b: str) -> str | None:
    """How location `a` stands to `b`: SAME, INSIDE (a is under b), CONTAINS (b is under a), or
    None when neither holds the other (a local path and a URI never clash)."""
    if _is_uri(a) != _is_uri(b):
        return None
    if not _is_uri(a):
        try:
            if os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b):
                return SAME
        except OSError:
            pass
    na, nb = _normal(a), _normal(b)
    if na == nb:
        return SAME
    if na.startswith(nb.rstrip("/") + "/"):
        return INSIDE
    if nb.startswith(na.rstrip("/") + "/"):
        return CONTAINS
    return None


def clash(outputs: Iterable[tuple[str, str]], others: Iterable[tuple[str, str]]) -> str | None:
    """The first clash of an output with an input or with another output, in words naming both
    (`--output 'a.jsonl' is --input 'a.jsonl'`), or None. `outputs` and `others` are pairs
    (what names it, e.g. a flag, location); each output is checked against every other output
    and every one of `others`. Empty locations are skipped."""
    outputs = [(name, where) for name, where in outputs if where]
    others = [(name, where) for name, where in others if where]
    for i, (name, where) in enumerate(outputs):
        for other_name, other in outputs[i + 1 :] + others:
            how = relation(where, other)
            if how is not None:
                return f"{name} {where!r} {how} {other_name} {other!r}"
    return None
