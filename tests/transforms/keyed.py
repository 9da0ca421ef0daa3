"""Keys and provenance (`transforms.keys.KEYS` columns) to and from Python, for assertions."""

from __future__ import annotations

import pyarrow as pa

from transforms.keys import key_columns


def key_rows(keys: pa.RecordBatch | None) -> list[tuple[str, tuple[int, str, int]]] | None:
    """(key, (source index, path, line)) of every record."""
    if keys is None:
        return None
    return [
        (k["key"], (k["source"], k["path"].decode("utf-8", "surrogateescape"), k["line"]))
        for k in keys.to_pylist()
    ]


def keys_of(keys: list[str], orders: list[tuple[int, str, int]]) -> pa.RecordBatch:
    """The KEYS columns of records given as keys and (source index, path, line) tuples."""
    paths = list(dict.fromkeys(o[1] for o in orders))
    return key_columns(
        pa.array(keys, pa.string()),
        [o[0] for o in orders],
        [o[2] for o in orders],
        paths,
        [paths.index(o[1]) for o in orders],
    )
