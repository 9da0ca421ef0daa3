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

from transforms.records import CHUNK_ROWS, RawChunk, location, rejection
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
    chunk = _ChunkBuilder(source.name, path, columns, nulls)
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
        raw = consumed[0] if len(consumed) == 1 else "".join(consumed)
        if len(values) != width:
            yield rejection(
                source.name,
                location(path, start),
                f"csv: expected {width} fields, got {len(values)}",
                raw,
            )
        else:
            chunk.add(values, record_no, start, raw)
            if len(chunk.rows) >= chunk_rows:
                yield chunk.build()
        record_no += 1
    if chunk.rows:
        yield chunk.build()


class _ChunkBuilder:
    """Collects parsed rows and turns them into a columnar `RawChunk`."""

    def __init__(self, source: str, path: str, columns: list[str], nulls: frozenset[str]):
        self._source, self._path, self._columns, self._nulls = source, path, columns, nulls
        self.rows: list[list[str]] = []
        self._record_nos: list[int] = []
        self._lines: list[int] = []
        self._raws: list[str] = []

    def add(self, values: list[str], record_no: int, line: int, raw: str) -> None:
        self.rows.append(values)
        self._record_nos.append(record_no)
        self._lines.append(line)
        self._raws.append(raw)

    def build(self) -> RawChunk:
        nulls = self._nulls
        columns = {
            name: [None if v in nulls else v for v in values]
            for name, values in zip(self._columns, zip(*self.rows))
        }
        chunk = RawChunk(
            self._source, self._path, columns, self._record_nos, self._lines, self._raws, text=True
        )
        self.rows, self._record_nos, self._lines, self._raws = [], [], [], []
        return chunk
