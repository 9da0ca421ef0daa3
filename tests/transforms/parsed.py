"""What a format's `parse` yielded, split and flattened for assertions."""

from __future__ import annotations

from typing import Iterable

from transforms.records import RawChunk, Rejected


def split(items: Iterable) -> tuple[list[RawChunk], list[Rejected]]:
    """(chunks, `Rejected` records); chunks of binary formats carry no raw text."""
    chunks, rejected = [], []
    for item in items:
        if isinstance(item, RawChunk):
            assert not item.text and item.raw_text is None
            chunks.append(item)
        else:
            rejected.append(item)
    return chunks, rejected


def rows(chunks: list[RawChunk], skip_missing: bool = False) -> list[tuple[int, dict]]:
    """(record number, {field: value}) of every record; `skip_missing` leaves out None values."""
    out = []
    for c in chunks:
        columns = {name: c.values(name) for name in c.columns}
        for i in range(len(c)):
            fields = {name: v[i] for name, v in columns.items()}
            if skip_missing:
                fields = {name: v for name, v in fields.items() if v is not None}
            out.append((c.lines[i], fields))
    return out
