"""Reads JSON Lines files into chunks of raw records: one JSON object per line.

Fields are the object's top-level keys; JSON `null` is a missing value. A line that is not
valid JSON, or not an object, is rejected with its line number. Blank lines are not records.
"""

from __future__ import annotations

import io
import json
from typing import Any, BinaryIO, Iterator

from transforms.records import CHUNK_ROWS, RawChunk, RawRow, location, rejection
from transforms.spec import SourceSpec


def parse_jsonl(
    stream: BinaryIO, path: str, source: SourceSpec, chunk_rows: int = CHUNK_ROWS
) -> Iterator[RawChunk | dict[str, Any]]:
    """Yields chunks of raw records and, for unparseable lines, rejected-record dicts."""
    text = io.TextIOWrapper(stream, encoding=source.options["encoding"], errors="surrogateescape")
    loads = json.loads
    rows: list[RawRow] = []
    record_no = 0
    for line_no, line in enumerate(text, start=1):
        if not line.strip():
            continue
        try:
            fields = loads(line)
        except ValueError as e:
            reason = "json: invalid JSON" if not isinstance(e, UnicodeError) else "json: bad encoding"
            yield rejection(source.name, location(path, line_no), reason, line.rstrip("\r\n"))
            record_no += 1
            continue
        if not isinstance(fields, dict):
            yield rejection(
                source.name, location(path, line_no), "json: not an object", line.rstrip("\r\n")
            )
            record_no += 1
            continue
        rows.append(RawRow(record_no, line_no, fields, line.rstrip("\r\n")))
        record_no += 1
        if len(rows) >= chunk_rows:
            yield RawChunk(source.name, path, rows)
            rows = []
    if rows:
        yield RawChunk(source.name, path, rows)
