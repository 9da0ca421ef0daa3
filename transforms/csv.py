"""Reads CSV files into chunks of raw records, with Python's C `csv` parser.

Quoted fields, embedded delimiters and newlines, CRLF and a header row are the parser's job; we
add line tracking (so a rejected record names its first line and carries its exact text), null
markers, and rejection of rows whose field count does not match the header. Blank lines are not
records. Values stay text here; `transforms.schema` types them.
"""

from __future__ import annotations

import csv
import io
from typing import Any, BinaryIO, Iterator

from transforms.records import CHUNK_ROWS, RawChunk, RawRow, location, rejection
from transforms.spec import SourceSpec

csv.field_size_limit(1 << 30)


class FileError(ValueError):
    """A whole file cannot be read as configured (e.g. a broken header): the job fails."""


def parse_csv(
    stream: BinaryIO, path: str, source: SourceSpec, chunk_rows: int = CHUNK_ROWS
) -> Iterator[RawChunk | dict[str, Any]]:
    """Yields chunks of raw records and, for unparseable rows, rejected-record dicts."""
    opts = source.options
    text = io.TextIOWrapper(stream, encoding=opts["encoding"], errors="surrogateescape", newline="")
    consumed: list[str] = []

    def lines() -> Iterator[str]:
        for line in text:
            consumed.append(line)
            yield line

    reader = csv.reader(lines(), delimiter=opts["delimiter"], strict=True)
    nulls = frozenset(opts["null_values"])
    columns = opts["columns"]
    line_no = 0
    if opts["header"]:
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise FileError(f"{path}: unreadable CSV header: {e}") from None
        line_no = len(consumed)
        if columns is None:
            columns = header
    if len(set(columns)) != len(columns):
        raise FileError(f"{path}: duplicate column names in {columns!r}")
    width = len(columns)
    rows: list[RawRow] = []
    record_no = 0
    while True:
        consumed.clear()
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            start = line_no + 1
            line_no += len(consumed)
            yield rejection(source.name, location(path, start), f"csv: {e}", "".join(consumed))
            record_no += 1
            continue
        start = line_no + 1
        line_no += len(consumed)
        if not values:
            continue  # a blank line is not a record
        raw = "".join(consumed)
        if len(values) != width:
            yield rejection(
                source.name,
                location(path, start),
                f"csv: expected {width} fields, got {len(values)}",
                raw,
            )
            record_no += 1
            continue
        fields = dict(zip(columns, [None if v in nulls else v for v in values]))
        rows.append(RawRow(record_no, start, fields, raw))
        record_no += 1
        if len(rows) >= chunk_rows:
            yield RawChunk(source.name, path, rows)
            rows = []
    if rows:
        yield RawChunk(source.name, path, rows)
