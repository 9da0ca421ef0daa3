"""Where `shardflow init` reads a file too large to read whole: pieces spread over all of it, each
starting at a record, so that a sample is never just the file's head (a table sorted by a column
holds some of its values only further on).

The pieces start at evenly spaced byte offsets (the first at the file's start), each moved on to
the next record start the way its format marks one:
- CSV, JSON Lines and text: the first record end after the offset, found by the ETL's own scan
  (`transforms.sources.cuts.scan`) of a window of the file, in the quote state (outside or
  inside a quoted field) in which the window's quotes are well placed. Where both states are
  and give different ends the offset is ambiguous and its piece is left out. The cut points
  and a CSV's header are the range reader's (`transforms.sources.ranges.pieces`): a CSV piece
  gets the file's header in front of it, as the ETL's ranges do.
- Parquet: the range reader's runs of row groups; a piece starts at a run's first row group.
- Avro: the next data block, after the file's sync marker; the file's header goes in front.
- TFRecord (uncompressed): the next frame whose length and data checksums hold.
A file that cannot be entered in the middle (compressed as a whole, text not in UTF-8, Parquet
of one row group) is one piece, from its start. A piece is read from its start to the file's end
by the format's own parser, until the reader has taken enough; the records of a piece that
starts past the file's start are numbered from that start, not the file's (`Piece.where`).

Longer than most modules because every format's way into the middle of a file is here, with the
one `Piece` they all make and the streams that read it (`_Joined`, `_Counted`), so that `plan`
and `records` each stay one choice per format.
"""

from __future__ import annotations

import codecs
import dataclasses
import io
from typing import BinaryIO, Generator, cast

import numpy as np
import pyarrow as pa

from transforms.contract.config import SourceSpec
from transforms.contract.layout import masked_crc
from transforms.files import compression_of, open_file, open_raw
from transforms.records import RawChunk, Rejected
from transforms.sources import ranges, registry
from transforms.sources.csv import CsvOptions
from transforms.sources.cuts import scan
from transforms.sources.text import TextOptions

WINDOW = 1 << 20  # bytes scanned at an offset for the next record start, doubled up to MAX_WINDOW
MAX_WINDOW = 16 << 20  # a record longer than this after an offset: the piece is left out
_TFRECORD_HEADER = 12  # a frame: length (8 bytes), its checksum (4), data, the data's checksum (4)
_MAX_FRAME = 64 << 20  # a frame length believed when looking for a frame (tfrecord's own bound)


@dataclasses.dataclass(frozen=True)
class Piece:
    """Bytes [start, end) of a file (end None: to its end), starting and ending at records,
    with the file's first `head` bytes put in front (a CSV header, an Avro header); in Parquet,
    the row groups [first, last) instead. The whole file (start 0, no end) is read as the ETL
    reads it, decompressed."""

    path: str
    start: int = 0
    end: int | None = None
    head: int = 0
    head_lines: int = 0  # the lines of `head` (a CSV header)
    unit: str = "line"  # what its parser numbers: lines, or records (Avro, TFRecord)
    row_groups: tuple[int, int] | None = None

    def where(self, location: str) -> str:
        """A record's location as its parser gave it (`path:line`, numbered from the piece's
        start), for a person to find it: `path, line 12 from byte 1,048,576`."""
        if self.start == 0:
            return location
        path, _, number = location.rpartition(":")
        if path != self.path or not number.isdigit():
            return f"{location} (in the piece from byte {self.start:,})"
        return f"{path}, {self.unit} {int(number) - self.head_lines:,} from byte {self.start:,}"


def _ended(pieces: list[Piece]) -> list[Piece]:
    """The pieces, each ending where the next starts."""
    ends = [p.start for p in pieces[1:]] + [None]
    return [dataclasses.replace(p, end=end) for p, end in zip(pieces, ends)]


@dataclasses.dataclass
class Plan:
    """The pieces of a file, and about how many records it holds where its bytes tell (the
    records per byte of the windows scanned; a Parquet file's metadata) else None."""

    pieces: list[Piece]
    records: int | None = None


def plan(source: SourceSpec, path: str, size: int, count: int) -> Plan:
    """About `count` pieces of a file of `size` bytes, spread over all of it (fewer where
    offsets fall in one record or are ambiguous); one from its start when it cannot be entered
    in the middle."""
    if count < 2:
        return Plan([Piece(path)])
    split = -(-size // count)
    found: Plan | None
    if source.format == "parquet":
        found = _row_group_pieces(source, path, size, split)
    elif source.format in ("csv", "jsonl", "text"):
        found = _line_pieces(source, path, size, split)
    elif source.format == "avro":
        found = _avro_pieces(path, size, count)
    elif source.format == "tfrecord":
        found = _tfrecord_pieces(source, path, size, count)
    else:
        found = None
    return found or Plan([Piece(path)])


def records(
    source: SourceSpec, piece: Piece
) -> Generator[tuple[RawChunk | Rejected, int], None, None]:
    """The parsed items of a piece, each with the bytes of the file read so far (decompressed);
    stop iterating when you have enough."""
    parse = registry.parser(source.format)
    if piece.row_groups is not None or (piece.start == 0 and piece.end is None):
        stream: BinaryIO = open_file(piece.path)
    else:
        raw = open_raw(piece.path)
        head = raw.read(piece.head) if piece.head else b""
        stream = cast(BinaryIO, _Joined(head, raw, piece.start, piece.end))
    counted = _Counted(stream)
    with io.BufferedReader(counted, 1 << 20) as buffered, stream:
        if piece.row_groups is not None:
            groups = range(*piece.row_groups)
            items = parse(buffered, piece.path, source, row_groups=groups)
        else:
            items = parse(buffered, piece.path, source)
        try:
            for item in items:
                yield item, counted.count
        finally:
            items.close()


def records_in(source: SourceSpec, path: str, size: int) -> int | None:
    """About how many records a file holds, where that is cheap to tell: a Parquet file's
    metadata; the lines of an uncompressed text file (its first megabyte's, per byte)."""
    if source.format == "parquet":
        import pyarrow.parquet as pq

        try:
            with open_raw(path) as f:
                return pq.ParquetFile(f).metadata.num_rows
        except (OSError, pa.ArrowException):  # not Parquet: its parser says so
            return None
    compressed = compression_of(path) is not None
    if source.format not in ("csv", "jsonl", "text") or compressed or size <= WINDOW:
        return None
    with open_raw(path) as f:
        head = f.read(WINDOW)
    return round(size * head.count(b"\n") / len(head))


def _row_group_pieces(source: SourceSpec, path: str, size: int, split: int) -> Plan | None:
    planned = ranges.pieces(path, size, source, split)
    runs = [r.row_groups for r in planned if isinstance(r, ranges.Range) and r.row_groups]
    if len(runs) < 2:
        return None
    import pyarrow.parquet as pq

    with open_raw(path) as f:
        rows = pq.ParquetFile(f).metadata.num_rows
    return Plan([Piece(path, row_groups=run) for run in runs], rows)


def _line_pieces(source: SourceSpec, path: str, size: int, split: int) -> Plan | None:
    """Pieces of a CSV, JSON Lines or text file: the range reader's cut points, each moved on to
    the next record start."""
    delimiter = None
    if source.format == "text":
        opts = source.options_as(TextOptions)
        if compression_of(path) is not None or codecs.lookup(opts.encoding).name != "utf-8":
            return None
        cuts: list[ranges.Piece] = ranges.even_pieces(path, size, split)
    else:
        planned = ranges.pieces(path, size, source, split)
        if not planned or not isinstance(planned[0], ranges.Piece):
            return None  # not to be entered in the middle: compressed, not UTF-8, odd quoting
        cuts = [p for p in planned if isinstance(p, ranges.Piece)]
        if source.format == "csv":
            delimiter = ord(source.options_as(CsvOptions).delimiter)
    if not cuts:
        return None
    pieces = [Piece(path)]
    newlines = scanned = 0
    with open_raw(path) as f:
        for cut in cuts[1:]:
            start, lines, window = _record_start(f, cut.start, size, delimiter)
            newlines, scanned = newlines + lines, scanned + window
            if start is not None and start < size and start > pieces[-1].start:
                pieces.append(Piece(path, start, head=cut.header_end, head_lines=cut.header_lines))
    estimate = round((size - cuts[0].header_end) * newlines / scanned) if scanned else None
    return Plan(_ended(pieces), estimate)


def _record_start(
    f: BinaryIO, offset: int, size: int, delimiter: int | None
) -> tuple[int | None, int, int]:
    """(the first record start after `offset`, or None where the window cannot tell; the
    newlines in the window scanned, and its size)."""
    want = WINDOW
    while True:
        f.seek(offset - 1)
        data = f.read(want + 2)  # the byte before, the window, the byte after
        window = data[1 : want + 1]
        if not window:
            return None, 0, 0
        after = data[want + 1] if len(data) > want + 1 else None
        summary = scan(window, data[0], after, delimiter)
        ends = {
            first[0]
            for first, sound in zip(summary.first, summary.sound)
            if sound and first is not None
        }
        if not summary.clean or len(ends) > 1:  # a lone CR or NUL; ambiguous quoting
            return None, summary.newlines, len(window)
        if ends:
            return offset + ends.pop(), summary.newlines, len(window)
        if after is None or want >= MAX_WINDOW:  # no record end: the file's last record
            return None, summary.newlines, len(window)
        want *= 2


def _avro_pieces(path: str, size: int, count: int) -> Plan | None:
    """Pieces of an Avro file: each starts at the data block after an offset (after a sync
    marker, the last 16 bytes of the file's header); the header goes in front of it."""
    import fastavro

    with open_raw(path) as f:
        try:
            fastavro.block_reader(f)
        except Exception:  # noqa: BLE001 - read from its start: the parser says what is wrong
            return None
        head = f.tell()
        f.seek(head - 16)
        sync = f.read(16)
        pieces = [Piece(path)]
        for offset in _offsets(head, size, count)[1:]:
            found = _find(f, sync, max(offset, pieces[-1].start), size)
            if found is not None and found + 16 < size:
                pieces.append(Piece(path, found + 16, head=head, unit="record"))
    return Plan(_ended(pieces))


def _find(f: BinaryIO, marker: bytes, offset: int, size: int) -> int | None:
    """Where `marker` next occurs in the file from `offset`, looking MAX_WINDOW bytes far."""
    pos = offset
    while pos < min(size, offset + MAX_WINDOW):
        f.seek(pos)
        data = f.read(WINDOW + len(marker) - 1)
        at = data.find(marker)
        if at >= 0:
            return pos + at
        if len(data) < len(marker):
            return None
        pos += WINDOW
    return None


def _tfrecord_pieces(source: SourceSpec, path: str, size: int, count: int) -> Plan | None:
    """Pieces of an uncompressed TFRecord file: each starts at the frame after an offset."""
    from transforms.sources.tfrecord import TfrecordOptions

    compression = source.options_as(TfrecordOptions).compression
    if compression_of(path) is not None or compression not in ("auto", "none"):
        return None
    with open_raw(path) as f:
        if _frame_at(f.read(WINDOW), 0) is None:
            return None  # compressed inside (gzip or zlib), or not TFRecord: read from the start
        pieces = [Piece(path)]
        for offset in _offsets(0, size, count)[1:]:
            found = _next_frame(f, max(offset, pieces[-1].start + 1), size)
            if found is not None:
                pieces.append(Piece(path, found, unit="record"))
    return Plan(_ended(pieces))


def _next_frame(f: BinaryIO, offset: int, size: int) -> int | None:
    """The offset of the first whole frame (length and data checksums hold) from `offset`."""
    pos = offset
    while pos < min(size, offset + MAX_WINDOW):
        f.seek(pos)
        data = f.read(WINDOW + _TFRECORD_HEADER)
        if len(data) < _TFRECORD_HEADER:
            return None
        a = np.frombuffer(data, np.uint8)
        # a length under 64 MiB has its high bytes zero: checksums only where they are
        n = len(a) - _TFRECORD_HEADER + 1
        high = np.lib.stride_tricks.sliding_window_view(a[3:], 5)[:n]
        candidates = np.flatnonzero((high[:, 0] < 4) & ~high[:, 1:].any(axis=1))
        for at in candidates.tolist():
            length = _frame_at(data, at)
            if length is None:
                continue
            f.seek(pos + at)
            frame = f.read(_TFRECORD_HEADER + length + 4)
            if _frame_at(frame, 0, whole=True) is not None:
                return pos + at
        pos += WINDOW
    return None


def _frame_at(data: bytes, at: int, whole: bool = False) -> int | None:
    """The data length of the frame at `at` when its length checksum holds (and, `whole`, its
    data's too); else None."""
    header = data[at : at + _TFRECORD_HEADER]
    if len(header) < _TFRECORD_HEADER:
        return None
    length = int.from_bytes(header[:8], "little")
    if length > _MAX_FRAME or masked_crc(header[:8]) != int.from_bytes(header[8:], "little"):
        return None
    if whole:
        end = at + _TFRECORD_HEADER + length
        if len(data) < end + 4:
            return None
        if masked_crc(data[at + _TFRECORD_HEADER : end]) != int.from_bytes(
            data[end : end + 4], "little"
        ):
            return None
    return length


def _offsets(start: int, size: int, count: int) -> list[int]:
    return [start + (size - start) * i // count for i in range(count)]


class _Joined(io.RawIOBase):
    """Some bytes (a file's header), then bytes [start, end) of a file (end None: to its end),
    as one stream; seekable (fastavro's block reader seeks)."""

    def __init__(self, head: bytes, tail: BinaryIO, start: int, end: int | None):
        self._head = head
        self._tail = tail
        self._start = start
        self._size = None if end is None else len(head) + end - start
        self._pos = 0
        tail.seek(start)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence == io.SEEK_END:
            if self._size is None:
                raise io.UnsupportedOperation("seek from the end of a piece without one")
            offset += self._size
        self._pos = max(0, offset)
        if self._pos >= len(self._head):
            self._tail.seek(self._start + self._pos - len(self._head))
        return self._pos

    def readinto(self, b) -> int:
        n = len(b) if self._size is None else max(0, min(len(b), self._size - self._pos))
        if self._pos < len(self._head):
            data = self._head[self._pos : self._pos + n]
        else:
            data = self._tail.read(n) if n else b""
        b[: len(data)] = data
        self._pos += len(data)
        if self._pos == len(self._head) and len(data):
            self._tail.seek(self._start)
        return len(data)

    def close(self) -> None:
        self._tail.close()
        super().close()


class _Counted(io.RawIOBase):
    """A stream that counts the bytes read from it (seekable where it is: Parquet's reader
    seeks)."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self.count = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._stream.seekable()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._stream.seek(offset, whence)

    def tell(self) -> int:
        return self._stream.tell()

    def readinto(self, b) -> int:
        data = self._stream.read(len(b))
        b[: len(data)] = data
        self.count += len(data)
        return len(data)
