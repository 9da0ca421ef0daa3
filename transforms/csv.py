"""Reads CSV files into chunks of raw records, with Python's C `csv` parser.

Quoted fields, embedded delimiters and newlines, CRLF and a header row are the parser's job; we
add line tracking (so a rejected record names its first line and carries its exact text), null
markers, and rejection of rows whose field count does not match the header. Blank lines are not
records. Values stay text here; `transforms.schema` types them.
"""

from __future__ import annotations

import csv
import io
import itertools
from typing import Any, BinaryIO, Iterator

from transforms.records import CHUNK_ROWS, RawChunk, location, rejection
from transforms.spec import SourceSpec

csv.field_size_limit(1 << 30)
_EMPTY_ONLY = frozenset([""])


class FileError(ValueError):
    """A whole file cannot be read as configured (e.g. a broken header): the job fails."""


def parse_csv(
    stream: BinaryIO, path: str, source: SourceSpec, chunk_rows: int = CHUNK_ROWS
) -> Iterator[RawChunk | dict[str, Any]]:
    """Yields chunks of raw records and, for unparseable rows, rejected-record dicts."""
    opts = source.options
    text = io.TextIOWrapper(stream, encoding=opts["encoding"], errors="surrogateescape", newline="")
    window = _LineWindow(text)
    reader = csv.reader(window.lines, delimiter=opts["delimiter"], strict=True)
    nulls = frozenset(opts["null_values"])
    columns = opts["columns"]
    if opts["header"]:
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise FileError(f"{path}: unreadable CSV header: {e}") from None
        if columns is None:
            columns = header
    if len(set(columns)) != len(columns):
        raise FileError(f"{path}: duplicate column names in {columns!r}")
    width = len(columns)
    rows: list[list[str]] = []
    starts: list[int] = []
    ends: list[int] = []
    prev = reader.line_num  # lines consumed so far: the next record starts on line prev + 1
    window.mark(prev)
    done = False
    while not done:
        try:
            for values in reader:
                cur = reader.line_num
                if len(values) == width:
                    rows.append(values)
                    starts.append(prev)
                    ends.append(cur)
                    if len(rows) >= chunk_rows:
                        yield _chunk(source.name, path, columns, nulls, rows, starts, ends, window)
                        rows, starts, ends = [], [], []
                elif values:  # a blank line is not a record
                    reason = f"csv: expected {width} fields, got {len(values)}"
                    raw = window.text(prev, cur)
                    yield rejection(source.name, location(path, prev + 1), reason, raw)
                if not rows:  # nothing pending: the lines read so far are needed no more
                    window.mark(cur)
                prev = cur
            done = True
        except csv.Error as e:
            cur = reader.line_num
            yield rejection(source.name, location(path, prev + 1), f"csv: {e}", window.text(prev, cur))
            if not rows:
                window.mark(cur)
            prev = cur
    if rows:
        yield _chunk(source.name, path, columns, nulls, rows, starts, ends, window)


class _LineWindow:
    """The input lines the parser has read, kept from a mark on, to give records their text.

    Lines are read in blocks (C `readlines`) and chained in C, so tracking costs no Python call
    per line; `reader.line_num` says how many lines each record took.
    """

    def __init__(self, text: io.TextIOBase):
        self._text = text
        self._buffer: list[str] = []
        self._base = 0  # line number (0-based) of _buffer[0]
        self.lines = itertools.chain.from_iterable(iter(self._read_block, []))

    def _read_block(self) -> list[str]:
        block = self._text.readlines(1 << 16)
        self._buffer.extend(block)
        return block

    def take(self, start: int, end: int) -> list[str]:
        """Lines start..end (0-based, end excluded)."""
        return self._buffer[start - self._base : end - self._base]

    def text(self, start: int, end: int) -> str:
        return "".join(self.take(start, end))

    def mark(self, start: int) -> None:
        """Forgets the lines before `start`."""
        del self._buffer[: start - self._base]
        self._base = start


def _chunk(source, path, columns, nulls, rows, starts, ends, window) -> RawChunk:
    first, end = starts[0], ends[-1]
    lines = window.take(first, end)
    window.mark(end)
    values = {}
    for name, column in zip(columns, zip(*rows)):
        # Most columns hold no null marker: a C-level scan spares them the per-value pass.
        if nulls == _EMPTY_ONLY:
            values[name] = [v or None for v in column] if "" in column else list(column)
        elif any(marker in column for marker in nulls):
            values[name] = [None if v in nulls else v for v in column]
        else:
            values[name] = list(column)
    return RawChunk(
        source,
        path,
        values,
        [s + 1 for s in starts],
        lines,
        [s - first for s in starts],
        [e - first for e in ends],
        text=True,
    )
