"""Large inputs read in ranges, so that several workers share one file.

A Parquet file larger than the split size with several row groups is read in runs of whole row
groups of about that size; its parser numbers each row by its place in the file, so the records
are those of a whole read.

A CSV or JSON Lines file larger than the split size (uncompressed, UTF-8) is cut without a pass
over it: `pieces` cuts it into pieces of equal size, at most the split size, from its size
alone (after a CSV's header, found in the file's first bytes); each piece is scanned on its
own, by any worker (`summarize`, the rules and the method in `transforms.sources.cuts`), and
`cut` turns the pieces' summaries, in order, into ranges: each range starts at the first
record end in its piece. A file whose quoting the scan cannot vouch for (a misplaced quote, a
lone CR, a NUL byte) is read whole, as the csv module would. `plan` does the three steps in
one process (the tests' reference); `ReadSource` spreads them over the workers.

Each range is then parsed on its own, by the format's own parser: a CSV range after the first
gets the file's header lines put in front of it, and the line numbers of its records and
rejections are moved by the lines before the range. The records, their line numbers, texts and
rejections are exactly those of reading the file whole (tests/transforms/sources/test_ranges.py
compares them at many cut points), so the output does not depend on how a file was cut.
Compressed files are read whole (a compressed stream cannot be entered in the middle): many
such files still spread over the workers, one file each.
"""

from __future__ import annotations

import codecs
import dataclasses
import io
from typing import BinaryIO, Iterable, Iterator, cast

import numpy as np
import pyarrow.parquet as pq

from transforms.contract.config import SourceSpec
from transforms.files import compression_of, open_file, open_raw
from transforms.records import RawChunk, Rejected
from transforms.sources import csv as csv_format
from transforms.sources import registry
from transforms.sources.csv import CsvOptions
from transforms.sources.cuts import Summary, scan_range
from transforms.sources.jsonl import JsonlOptions
from transforms.tuning import MIN_SPLIT_BYTES, RANGES_PER_WORKER, SPLIT_BYTES

_HEAD_BYTES = 1 << 16  # read at a file's start to find a CSV header, doubled until found
_MAX_HEAD_BYTES = 16 << 20  # a file without a header line in its first 16 MB is read whole


def split_size(total_bytes: int, workers: int) -> int:
    """The range size for `workers` sharing `total_bytes` of input: `RANGES_PER_WORKER` ranges
    per worker, between `MIN_SPLIT_BYTES` and `SPLIT_BYTES`."""
    share = total_bytes // max(1, workers * RANGES_PER_WORKER)
    return max(MIN_SPLIT_BYTES, min(SPLIT_BYTES, share))


@dataclasses.dataclass(frozen=True)
class Range:
    """Bytes [start, end) of a file (end None: to its end). `header_end` bytes at the file's
    start are put in front of the range (a CSV header); `line_shift` is added to the line
    numbers the parser gives. A Parquet range is a run of whole row groups."""

    path: str
    start: int = 0
    end: int | None = None
    header_end: int = 0
    line_shift: int = 0
    row_groups: tuple[int, int] | None = None  # Parquet: row groups [first, last) instead
    # the file's bytes it stands for, counted as read once it is parsed (progress only)
    size: int = dataclasses.field(default=0, compare=False)


@dataclasses.dataclass(frozen=True)
class Piece:
    """Bytes [start, end) of a CSV or JSON Lines file to scan: piece `index` of `count`, cut
    from the file's size alone. Pieces start after the header (`header_end` bytes, on
    `header_lines` lines)."""

    path: str
    index: int
    count: int
    start: int
    end: int
    header_end: int = 0
    header_lines: int = 0


def plan(path: str, size: int, source: SourceSpec, split_bytes: int = SPLIT_BYTES) -> list[Range]:
    """The ranges to read a file in, in one process: one, unless it can and should be cut."""
    planned = pieces(path, size, source, split_bytes)
    if not planned or isinstance(planned[0], Range):
        return cast("list[Range]", planned)  # all ranges, when the first is one
    return cut([(p, summarize(p, source)) for p in planned], source)


def pieces(path: str, size: int, source: SourceSpec, split_bytes: int) -> list[Range] | list[Piece]:
    """The pieces of a file to scan for its cuts; or its ranges, when it needs no scan (read
    whole, or a Parquet file's runs of row groups)."""
    whole = [Range(path, size=size)]
    if size > split_bytes and source.format == "parquet":
        return _plan_row_groups(path, size, split_bytes) or whole
    if (
        size <= split_bytes
        or not registry.describe(source.format).splittable
        or compression_of(path) is not None
        or codecs.lookup(_encoding(source)).name != "utf-8"
    ):
        return whole
    header_end = header_lines = 0
    if source.format == "csv":
        opts = source.options_as(CsvOptions)
        if not csv_format._arrow_can_read(opts):
            return whole
        if opts.header:
            with open_raw(path) as f:
                header = _header_end(f, ord(opts.delimiter), size)
            if header is None:
                return whole
            header_end, header_lines = header
    return even_pieces(path, size, split_bytes, header_end, header_lines) or whole


def _encoding(source: SourceSpec) -> str:
    """The text encoding of a csv or jsonl source's files."""
    opts = source.options
    if not isinstance(opts, (CsvOptions, JsonlOptions)):
        raise TypeError(f"source {source.name!r} ({source.format}) has no text encoding")
    return opts.encoding


def even_pieces(
    path: str, size: int, split_bytes: int, header_end: int = 0, header_lines: int = 0
) -> list[Piece]:
    """Bytes [header_end, size) as pieces of equal size, at most `split_bytes`; none if one."""
    count = -(-(size - header_end) // split_bytes)
    if count < 2:
        return []
    bounds = [header_end + (size - header_end) * i // count for i in range(count + 1)]
    return [
        Piece(path, i, count, start, end, header_end, header_lines)
        for i, (start, end) in enumerate(zip(bounds, bounds[1:]))
    ]


def _header_end(f: BinaryIO, delimiter: int, size: int) -> tuple[int, int] | None:
    """(offset, newlines before it) of the end of a CSV's header, the first line that is not
    blank; None when the first bytes of the file cannot tell (unsound quoting, no header line
    in the first `_MAX_HEAD_BYTES`)."""
    want, buf = _HEAD_BYTES, b""
    while True:
        buf += f.read(want - len(buf))
        eof = len(buf) >= size or len(buf) < want
        scan = csv_format._Scan(memoryview(buf), delimiter, eof)
        if not scan.sound:
            return None
        bom = len(codecs.BOM_UTF8) if buf.startswith(codecs.BOM_UTF8) else 0
        starts = np.concatenate(([bom], scan.ends[:-1]))
        a = np.frombuffer(buf, np.uint8)
        filled = np.flatnonzero(~csv_format._blank_records(a, starts, scan.ends, delimiter))
        if len(filled):
            end = int(scan.ends[filled[0]])
            return end, int(np.searchsorted(scan.newlines, end))
        if eof or want >= _MAX_HEAD_BYTES:
            return None
        want *= 2


def summarize(piece: Piece, source: SourceSpec) -> Summary:
    """The summary of one piece (`transforms.sources.cuts`)."""
    opts = source.options
    delimiter = ord(opts.delimiter) if isinstance(opts, CsvOptions) else None
    with open_raw(piece.path) as f:
        return scan_range(f, piece.path, piece.start, piece.end, delimiter)


def cut(summaries: Iterable[tuple[Piece, Summary]], source: SourceSpec) -> list[Range]:
    """The ranges of a file from the summaries of all its pieces (in any order): each range but
    the first starts at the first record end in its piece; the whole file when a piece is not
    sound in the state it really starts in."""
    done = sorted(summaries, key=lambda item: item[0].index)
    first = done[0][0]
    if [p.index for p, _ in done] != list(range(first.count)):
        raise RuntimeError(f"{first.path}: scanned pieces {[p.index for p, _ in done]}")
    size = done[-1][0].end
    whole = [Range(first.path, size=size)]
    state, lines = 0, 0  # quote state at the piece's start, newlines before it (after the header)
    starts: list[tuple[int, int]] = []
    for piece, summary in done:
        if not summary.clean or not summary.sound[state]:
            return whole
        first_end = summary.first[state]
        if piece.index > 0 and first_end is not None:
            starts.append((piece.start + first_end[0], lines + first_end[1]))
        state ^= summary.odd
        lines += summary.newlines
    starts = [s for s in starts if s[0] < size]
    if not starts:
        return whole
    ranges = [Range(first.path, 0, starts[0][0], size=starts[0][0])]
    for (start, shift), (end, _) in zip(starts, starts[1:] + [(None, None)]):
        share = (size if end is None else end) - start
        ranges.append(Range(first.path, start, end, first.header_end, shift, size=share))
    return ranges


def _plan_row_groups(path: str, file_size: int, split_bytes: int) -> list[Range] | None:
    """Runs of consecutive row groups of about `split_bytes` (compressed) each; None when the
    file has one row group, or its footer cannot be read (its parser then says why)."""
    try:
        with open_raw(path) as f:
            metadata = pq.ParquetFile(f).metadata
    except Exception:  # noqa: BLE001 - read whole, and the parser reports the file's problem
        return None
    groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    if len(groups) < 2:
        return None
    ranges, first, size, counted = [], 0, 0, 0
    for i, group in enumerate(groups):
        size += sum(group.column(c).total_compressed_size for c in range(group.num_columns))
        if size >= split_bytes or i == len(groups) - 1:
            last = i == len(groups) - 1  # the last run stands for the rest (footer included)
            share = file_size - counted if last else size
            ranges.append(Range(path, row_groups=(first, i + 1), size=share))
            first, counted, size = i + 1, counted + size, 0
    return ranges if len(ranges) > 1 else None


def read(rng: Range, source: SourceSpec, parse) -> Iterator[RawChunk | Rejected]:
    """The records of one range, with the line numbers of the whole file."""
    if rng.row_groups is not None:
        with open_file(rng.path) as stream:
            yield from parse(stream, rng.path, source, row_groups=range(*rng.row_groups))
        return
    if rng.start == 0 and rng.end is None:  # the whole file, decompressed by its extension
        with open_file(rng.path) as stream:
            yield from parse(stream, rng.path, source)
        return
    raw = open_raw(rng.path)
    with raw:
        head = b""
        if rng.header_end:
            head = raw.read(rng.header_end)
        raw.seek(rng.start)
        window: io.RawIOBase = _Window(raw, None if rng.end is None else rng.end - rng.start)
        if head:
            # RawIOBase.read is typed `bytes | None`; None is for non-blocking streams only
            window = csv_format._Chained(head, window)  # type: ignore[arg-type]
        stream = io.BufferedReader(window, 1 << 20)
        for item in parse(stream, rng.path, source):
            yield _shifted(item, rng) if rng.line_shift else item


def _shifted(item, rng: Range):
    if isinstance(item, RawChunk):
        if isinstance(item.lines, np.ndarray):
            item.lines = item.lines + rng.line_shift
        else:
            item.lines = [n + rng.line_shift for n in item.lines]
        return item
    where, line = item.place()
    if where == rng.path and line:
        return item._replace(location=f"{where}:{line + rng.line_shift}")
    return item


class _Window(io.RawIOBase):
    """At most `size` bytes of a stream from where it is (all of it with None)."""

    def __init__(self, stream: BinaryIO, size: int | None):
        self._stream = stream
        self._left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = len(b) if self._left is None else min(len(b), self._left)
        if n <= 0:
            return 0
        data = self._stream.read(n)
        b[: len(data)] = data
        if self._left is not None:
            self._left -= len(data)
        return len(data)
