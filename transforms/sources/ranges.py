"""Large inputs read in ranges, so that several workers share one file.

A Parquet file larger than `SPLIT_BYTES` with several row groups is read in runs of whole row
groups of about that size; its parser numbers each row by its place in the file, so the records
are those of a whole read.

A CSV or JSON Lines file larger than `SPLIT_BYTES` (uncompressed, UTF-8) is cut into ranges of
about that size, at record boundaries, by a first pass over the file that only looks at bytes:
newlines for JSON Lines; for CSV, newlines outside quotes, found with the quote-parity rule of
`transforms.sources.csv` (and only when that pass finds every quote well placed, no lone CR and no
NUL: otherwise the file is read whole, as the csv module would). Each range is then parsed on its
own, by the format's own parser: a CSV range after the first gets the file's header lines put
in front of it, and the line numbers of its records and rejections are moved by the lines
before the range. The records, their line numbers, texts and rejections are exactly those of
reading the file whole (tests/transforms/sources/test_ranges.py compares them), so the output does
not depend on how a file was cut.
"""

from __future__ import annotations

import codecs
import dataclasses
import io
from typing import Any, BinaryIO, Iterator

import numpy as np
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.contract.config import SourceSpec
from transforms.files import open_file
from transforms.records import RawChunk
from transforms.sources import csv as csv_format

SPLIT_BYTES = 64 << 20  # the default range size (`shardflow etl --split-mb`)
SPLITTABLE = ("csv", "jsonl", "parquet")
_SCAN_BYTES = 16 << 20


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


def plan(path: str, size: int, source: SourceSpec, split_bytes: int = SPLIT_BYTES) -> list[Range]:
    """The ranges to read a file in: one, unless it can and should be cut."""
    whole = [Range(path)]
    if size > split_bytes and source.format == "parquet":
        return _plan_row_groups(path, split_bytes) or whole
    if (
        size <= split_bytes
        or source.format not in SPLITTABLE
        or CompressionTypes.detect_compression_type(path) != CompressionTypes.UNCOMPRESSED
        or codecs.lookup(source.options["encoding"]).name != "utf-8"
    ):
        return whole
    if source.format == "csv" and not csv_format._arrow_can_read(source.options):
        return whole
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        cuts = _record_ends(f, source, split_bytes)
    if cuts is None or len(cuts) < 2:
        return whole
    header_end = 0
    header_lines = 0
    if source.format == "csv" and source.options["header"]:
        header_end, header_lines = cuts[0]
        cuts = cuts[1:]
    ranges = []
    start, lines_before = 0, 0
    for offset, lines in [c for c in cuts if c[0] > 0] + [(None, None)]:
        if start == 0:
            ranges.append(Range(path, 0, offset))
        else:
            ranges.append(Range(path, start, offset, header_end, lines_before - header_lines))
        start, lines_before = offset, lines
    return ranges if len(ranges) > 1 else whole


def _plan_row_groups(path: str, split_bytes: int) -> list[Range] | None:
    """Runs of consecutive row groups of about `split_bytes` (compressed) each; None when the
    file has one row group, or its footer cannot be read (its parser then says why)."""
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            metadata = pq.ParquetFile(f).metadata
    except Exception:  # noqa: BLE001 - read whole, and the parser reports the file's problem
        return None
    groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    if len(groups) < 2:
        return None
    ranges, first, size = [], 0, 0
    for i, group in enumerate(groups):
        size += sum(group.column(c).total_compressed_size for c in range(group.num_columns))
        if size >= split_bytes or i == len(groups) - 1:
            ranges.append(Range(path, row_groups=(first, i + 1)))
            first, size = i + 1, 0
    return ranges if len(ranges) > 1 else None


def _record_ends(f: BinaryIO, source: SourceSpec, split_bytes: int) -> list[tuple[int, int]] | None:
    """(offset, newlines before it) of the record ends to cut at: the header's end first (for a
    CSV with a header), then the first record end at or past every `split_bytes`; None when
    the file must be read whole."""
    is_csv = source.format == "csv"
    delimiter = ord(source.options["delimiter"]) if is_csv else 0
    cuts: list[tuple[int, int]] = []
    want_header = is_csv and source.options["header"]
    target = split_bytes
    base, lines, carry, eof = 0, 0, b"", False
    while not eof:
        piece = f.read(_SCAN_BYTES)
        eof = not piece
        buf = carry + piece
        if not buf:
            break
        a = np.frombuffer(buf, np.uint8)
        if is_csv:
            scan = csv_format._Scan(memoryview(buf), delimiter, eof)
            if not scan.sound:
                return None
            ends, newlines = scan.ends, scan.newlines
        else:
            newlines = np.flatnonzero(a == csv_format._LF)
            if _lone_cr(a, eof):
                return None
            ends = newlines + 1
        if not len(ends):
            if eof:
                break
            carry = buf
            continue
        line_of = np.searchsorted(newlines, ends)  # newlines before each end (in buf)
        if want_header:  # the first line that is not blank, as the parser finds it
            bom = len(codecs.BOM_UTF8) if base == 0 and buf.startswith(codecs.BOM_UTF8) else 0
            starts = np.concatenate(([bom], ends[:-1]))
            filled = np.flatnonzero(~csv_format._blank_records(a, starts, ends, delimiter))
            if len(filled):
                header = int(filled[0])
                cuts.append((base + int(ends[header]), lines + int(line_of[header])))
                target = max(target, base + int(ends[header]))  # no cut inside the header
                want_header = False
        while not want_header:
            i = int(np.searchsorted(ends, target - base))
            if i >= len(ends):
                break
            cuts.append((base + int(ends[i]), lines + int(line_of[i])))
            target = base + int(ends[i]) + split_bytes
        cut = int(ends[-1])
        lines += int(np.searchsorted(newlines, cut))
        base += cut
        carry = buf[cut:]
    # a cut at the very end of the file leaves nothing after it
    return [c for c in cuts if not (eof and c[0] >= base + len(carry))] if cuts else cuts


def _lone_cr(a: np.ndarray, eof: bool) -> bool:
    """A CR not followed by LF: a JSON Lines file holding one is read whole. That is only
    caution: the JSON Lines reader, like this scan, ends lines at LF alone."""
    cr = np.flatnonzero(a == csv_format._CR)
    inside = cr[cr + 1 < len(a)]
    return bool((a[inside + 1] != csv_format._LF).any()) or (eof and len(cr) > len(inside))


def read(rng: Range, source: SourceSpec, parse) -> Iterator[RawChunk | dict[str, Any]]:
    """The records of one range, with the line numbers of the whole file."""
    if rng.row_groups is not None:
        with open_file(rng.path) as stream:
            yield from parse(stream, rng.path, source, row_groups=range(*rng.row_groups))
        return
    if rng.start == 0 and rng.end is None:  # the whole file, decompressed by its extension
        with open_file(rng.path) as stream:
            yield from parse(stream, rng.path, source)
        return
    raw = FileSystems.open(rng.path, compression_type=CompressionTypes.UNCOMPRESSED)
    with raw:
        head = b""
        if rng.header_end:
            head = raw.read(rng.header_end)
        raw.seek(rng.start)
        stream: BinaryIO = _Window(raw, None if rng.end is None else rng.end - rng.start)
        if head:
            stream = csv_format._Chained(head, stream)
        stream = io.BufferedReader(stream, 1 << 20)
        for item in parse(stream, rng.path, source):
            yield _shifted(item, rng) if rng.line_shift else item


def _shifted(item, rng: Range):
    if isinstance(item, RawChunk):
        if isinstance(item.lines, np.ndarray):
            item.lines = item.lines + rng.line_shift
        else:
            item.lines = [n + rng.line_shift for n in item.lines]
        return item
    where, _, line = item["location"].rpartition(":")
    if where == rng.path and line.isdigit():
        item["location"] = f"{where}:{int(line) + rng.line_shift}"
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
