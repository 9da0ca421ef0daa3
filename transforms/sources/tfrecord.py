"""Reads TFRecord files of `tf.train.Example`s into chunks of raw records, without TensorFlow.

Each feature of an Example is a field whose value is the feature's list of values (int64_list →
ints, float_list → floats, bytes_list → bytes); the Validator turns one-element lists into the
scalars of scalar features. A feature absent from an Example, or present without a kind, is a
missing value. Examples are decoded a chunk at a time by tfx-bsl's C++ decoder, which needs no
TensorFlow import (`import tensorflow` costs seconds and hundreds of MB in every worker).

Framing: a record is its length (u64), the masked CRC-32C of the length, the data and the masked
CRC-32C of the data; both checksums are verified. Record numbers (1-based, in file order) are the
records' "lines". Rejected, with these reasons, and the reading goes on:
  `tfrecord: data checksum mismatch`      the record's data is corrupt
  `tfrecord: not a tf.train.Example`      the data is not a serialized Example
  `tfrecord: corrupt record length`       the length's checksum fails: one record, and the
                                          reading goes on at the next whole frame (the length
                                          itself when the data's checksum holds for it, else
                                          the next offset where a length, its checksum and the
                                          data's checksum all hold, found byte by byte), so
                                          the records behind a damaged length are read
Rejected as one record, ending the reading of the file (what follows cannot be framed):
  `tfrecord: truncated record`            the file ends inside a record
  `tfrecord: corrupt compressed data`     the compressed stream cannot be inflated
The length is checked against its checksum before anything is read for the record, and the data
is read a bounded block at a time as the file yields it: a length that claims more than the rest
of the file (2**62, say) makes that rest one truncated record, and memory never grows past what
the file holds.

Compression (option `compression`): names ending in `.gz`, `.bz2`, `.deflate`, `.zst`, `.xz`
or `.lzma` are decompressed by Beam whatever the option. For other names, `auto` inflates `.zz`
(shardflow's zlib suffix) as zlib and otherwise looks at the data: a valid TFRecord header is
uncompressed data, else the gzip magic or a zlib header says which. `gzip`, `zlib` and `none`
force the choice. A compressed file that ends early is read like an uncompressed one that does:
every record inflated whole is kept, the rest is one `tfrecord: truncated record`. Corrupt
compressed data ends the file the same way, with `tfrecord: corrupt compressed data`; what the
block of compressed input holding the damage (64 KB) would inflate to is lost with it. For `.gz`
names this takes the reader's own inflater: the stream it is given (`transforms.files.open_file`,
Python's gzip module) raises at the damage and drops what it had inflated in that read (up to a
megabyte of records), so when it fails the reader inflates the file's bytes itself, from the
start, and goes on from where the stream stopped.

Longer than most modules because framing, checksums and inflating are one reader: where a
corrupt length, a truncated record or damaged compressed data ends a record or the file depends
on all three, so the frames and the inflating streams stay together.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from typing import Any, BinaryIO, Iterator

from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

from transforms.contract.config import SourceOptions, SourceSpec
from transforms.contract.layout import COMPRESSIONS, RECORD_SUFFIX, masked_crc
from transforms.files import CorruptFile, compression_of, open_raw
from transforms.records import CHUNK_ROWS, RawChunk, Rejected, location, rejection
from transforms.sources.registry import FILE_COMPRESSIONS, Format, OptionsReader

COMPRESSION_CHOICES = ("auto", *COMPRESSIONS)  # of a TFRecord source: auto detects it
CHECKSUM_MISMATCH = "tfrecord: data checksum mismatch"
NOT_AN_EXAMPLE = "tfrecord: not a tf.train.Example"
CORRUPT_LENGTH = "tfrecord: corrupt record length"
TRUNCATED = "tfrecord: truncated record"
CORRUPT_COMPRESSED = "tfrecord: corrupt compressed data"

_HEADER = struct.Struct("<QI")
MAX_RESYNC_LENGTH = 64 << 20  # a record length believed when reading past a corrupt one
_CRC = struct.Struct("<I")
_READ_BYTES = 1 << 20
_INFLATE_BYTES = 1 << 16  # compressed input per step: bounds what one step inflates to
_GZIP_MAGIC = b"\x1f\x8b"


@dataclasses.dataclass(frozen=True)
class TfrecordOptions(SourceOptions):
    """The options of a tfrecord source: the compression of its files."""

    compression: str = "auto"  # one of COMPRESSION_CHOICES; auto: told by each file's name


def options(raw: dict[str, Any]) -> TfrecordOptions:
    """The tfrecord options, checked, with their defaults."""
    opts = OptionsReader(raw)
    out = TfrecordOptions(compression=opts.choice("compression", COMPRESSION_CHOICES, "auto"))
    opts.done()
    return out


def parse_tfrecord(
    stream: BinaryIO, path: str, source: SourceSpec, chunk_rows: int = CHUNK_ROWS
) -> Iterator[RawChunk | Rejected]:
    """Yields chunks of Examples' fields and, for broken records, `Rejected` records."""
    decoder = ExamplesToRecordBatchDecoder()
    payloads: list[bytes] = []
    numbers: list[int] = []
    for number, offset, data, reason in read_records(
        stream, path, source.options_as(TfrecordOptions).compression
    ):
        if reason is not None:
            yield rejection(source.name, location(path, number), reason, {"offset": offset})
            continue
        assert data is not None  # a sound record has its data
        payloads.append(data)
        numbers.append(number)
        if len(payloads) >= chunk_rows:
            yield from _decode(decoder, source.name, path, payloads, numbers)
            payloads, numbers = [], []
    if payloads:
        yield from _decode(decoder, source.name, path, payloads, numbers)


parse = parse_tfrecord
FORMAT = Format(
    name="tfrecord",
    kind="file",
    options_type=TfrecordOptions,
    options=options,
    reader=parse_tfrecord,
    extensions=(RECORD_SUFFIX, ".tfrecords", ".tfrec"),
    compressed=(*FILE_COMPRESSIONS, COMPRESSIONS["zlib"].suffix),  # shardflow's own shards
    stem_pattern=r"-\d{5}-of-\d{5}$",  # TFX and TFDS shards: train-00000-of-00004
)


def _decode(decoder, source: str, path: str, payloads: list[bytes], numbers: list[int]):
    """The chunk of these Examples, and a `Rejected` for each payload that is not one."""
    try:
        batch = decoder.DecodeBatch(payloads)
    except RuntimeError:
        # An unparseable payload, or a feature whose kind differs between Examples: one by one.
        yield from _decode_one_by_one(decoder, source, path, payloads, numbers)
        return
    yield RawChunk(source, path, batch.to_pydict(), numbers)


def _decode_one_by_one(
    decoder: ExamplesToRecordBatchDecoder,
    source: str,
    path: str,
    payloads: list[bytes],
    numbers: list[int],
) -> Iterator[RawChunk | Rejected]:
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    for data, number in zip(payloads, numbers):
        try:
            batch = decoder.DecodeBatch([data])
        except RuntimeError:
            yield rejection(source, location(path, number), NOT_AN_EXAMPLE, {"data": data})
            continue
        rows.append({name: values[0] for name, values in batch.to_pydict().items()})
        lines.append(number)
    if rows:
        names = dict.fromkeys(name for row in rows for name in row)
        columns = {name: [row.get(name) for row in rows] for name in names}
        yield RawChunk(source, path, columns, lines)


def read_records(
    stream: BinaryIO, path: str, compression: str
) -> Iterator[tuple[int, int, bytes | None, str | None]]:
    """(record number, offset, data, None) per sound record; (number, offset, None, reason) per
    broken one. Offsets are in the uncompressed stream."""
    if compression_of(path) != "gzip":
        yield from _read_records(stream, path, compression)
        return
    reinflating = _Reinflating(stream, path)
    try:
        yield from _read_records(reinflating, path, compression)
    finally:
        reinflating.close()


def _read_records(stream, path: str, compression: str):
    try:
        head = stream.read(_HEADER.size)
    except zlib.error:  # a file Beam decompresses by extension
        yield 1, 0, None, CORRUPT_COMPRESSED
        return
    except EOFError:  # ... that ends within its first bytes (`_Reinflating`)
        yield 1, 0, None, TRUNCATED
        return
    kind = _compression(path, compression, head)
    if kind != "none":
        stream = _Inflating(_Prefixed(head, stream), _wbits(kind))
        head = b""
    yield from _Frames(_Prefixed(head, stream))


def _wbits(kind: str) -> int:
    """The zlib window bits of a compressed stream (gzip, zlib)."""
    wbits = COMPRESSIONS[kind].wbits
    assert wbits is not None, kind  # only "none" has none
    return wbits


def _compression(path: str, option: str, head: bytes) -> str:
    """What is left to undo of the file's compression: none, gzip or zlib."""
    if compression_of(path) is not None:
        return "none"  # decompressed by Beam, by extension
    if option != "auto":
        return option
    if path.endswith(COMPRESSIONS["zlib"].suffix):
        return "zlib"
    if len(head) == _HEADER.size and _is_header(head):
        return "none"
    if head.startswith(_GZIP_MAGIC):
        return "gzip"
    if len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        return "zlib"
    return "none"


def _is_header(header: bytes) -> bool:
    return masked_crc(header[:8]) == _CRC.unpack_from(header, 8)[0]


class _Frames:
    """The records of an uncompressed TFRecord stream, read in blocks of about a megabyte.

    Reads are never sized by a record's length: a long record takes several, so that a length
    larger than the rest of the stream costs no more memory than that rest.
    """

    def __init__(self, stream: _Prefixed) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._pos = 0  # of the next record in the buffer
        self._base = 0  # stream offset of the buffer's first byte
        self._eof = False
        self._broken: str | None = None  # why the stream cannot be read further

    def __iter__(self) -> Iterator[tuple[int, int, bytes | None, str | None]]:
        number = 0
        while True:
            ok = self._fill(_HEADER.size)
            offset = self._base + self._pos
            if not ok:
                if self._broken or len(self._buffer) > self._pos:
                    yield number + 1, offset, None, self._broken or TRUNCATED
                return
            number += 1
            length, length_crc = _HEADER.unpack_from(self._buffer, self._pos)
            if masked_crc(bytes(self._buffer[self._pos : self._pos + 8])) != length_crc:
                # The frames after it are still records: skip to the next whole one
                yield number, offset, None, CORRUPT_LENGTH
                skip = self._whole_frame(0, length, check_header=False) or self._next_frame()
                if skip is None:
                    return
                self._pos += skip
                continue
            if not self._fill(_HEADER.size + length + _CRC.size):
                yield number, offset, None, self._broken or TRUNCATED
                return
            start = self._pos + _HEADER.size
            with memoryview(self._buffer) as view:  # one copy of the data, not two
                data = bytes(view[start : start + length])
            (data_crc,) = _CRC.unpack_from(self._buffer, start + length)
            self._pos = start + length + _CRC.size
            if masked_crc(data) != data_crc:
                yield number, offset, None, CHECKSUM_MISMATCH
            else:
                yield number, offset, data, None

    def _whole_frame(self, at: int, length: int, check_header: bool = True) -> int | None:
        """The size of the frame `at` bytes past the next record when it is whole (its data
        checksum holds, and its length's unless not `check_header`); else None. A length over
        MAX_RESYNC_LENGTH is not believed."""
        if length > MAX_RESYNC_LENGTH:
            return None
        size = _HEADER.size + length + _CRC.size
        if not self._fill(at + size):
            return None
        start = self._pos + at
        if check_header:
            head = bytes(self._buffer[start : start + 8])
            if masked_crc(head) != _HEADER.unpack_from(self._buffer, start)[1]:
                return None
        data = bytes(self._buffer[start + _HEADER.size : start + _HEADER.size + length])
        (data_crc,) = _CRC.unpack_from(self._buffer, start + _HEADER.size + length)
        return at + size if masked_crc(data) == data_crc else None

    def _next_frame(self) -> int | None:
        """How many bytes past the next record's start the next whole frame begins (its length
        and data checksums hold), searched byte by byte; None when none is left."""
        at = 1
        while self._fill(at + _HEADER.size):
            start = self._pos + at
            length, length_crc = _HEADER.unpack_from(self._buffer, start)
            if masked_crc(bytes(self._buffer[start : start + 8])) == length_crc:
                if self._whole_frame(at, length) is not None:
                    return at
            at += 1
        return None

    def _fill(self, need: int) -> bool:
        """Makes `need` bytes available from the next record on; False if the stream ends first."""
        while len(self._buffer) - self._pos < need and not self._eof:
            try:
                piece = self._stream.read(_READ_BYTES)
            except zlib.error:
                self._eof, self._broken = True, CORRUPT_COMPRESSED
                break
            except EOFError:  # a compressed stream that ends early
                self._eof, self._broken = True, TRUNCATED
                break
            if not piece:
                self._eof = True
                break
            if self._pos:
                del self._buffer[: self._pos]
                self._base += self._pos
                self._pos = 0
            self._buffer += piece
        return len(self._buffer) - self._pos >= need


class _Prefixed:
    """A stream whose first bytes were already read."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self._head = head
        self._stream = stream

    def read(self, size: int) -> bytes:
        if self._head:  # alone: a read of the stream that raises must not take it along
            head, self._head = self._head, b""
            return head
        return self._stream.read(size)


class _Inflating:
    """The inflated bytes of a gzip or zlib stream (concatenated members too).

    `read` returns what one block of compressed input inflates to (b"" at the end), so memory
    stays bounded and nothing inflated is held back when an error follows. Raises EOFError when
    the compressed data ends inside a member, zlib.error when it is corrupt.
    """

    def __init__(self, stream, wbits: int):
        self._stream = stream
        self._wbits = wbits
        self._inflate = zlib.decompressobj(wbits)
        self._started = False  # the current member has had input
        self._input = b""  # compressed bytes read but not yet inflated

    def read(self, size: int = -1) -> bytes:
        while True:
            if not self._input:
                self._input = self._stream.read(_INFLATE_BYTES)
                if not self._input:
                    if self._started and not self._inflate.eof:
                        raise EOFError("compressed data ends inside a stream")
                    return b""
            if self._inflate.eof:  # the next member of a concatenation
                self._inflate = zlib.decompressobj(self._wbits)
            self._started = True
            out = self._inflate.decompress(self._input)
            self._input = self._inflate.unused_data if self._inflate.eof else b""
            if out:
                return out


class _Reinflating:
    """The decompressed stream of a `.gz` file, and, once it fails, the reader's own inflation
    of the file's bytes from where that stream stopped.

    Python's gzip module raises when the data ends early or is corrupt, and its buffered reads
    drop what they had inflated in the failing read: records whole in the file would be lost.
    `_Inflating` hands over what it inflates block by block and then raises EOFError for an early
    end, zlib.error for corrupt data, which is what `_Frames` reports. From then on a read
    returns what `_Inflating` gives, which may be more than `size`.
    """

    def __init__(self, stream: BinaryIO, path: str):
        self._stream: BinaryIO | _Inflating = stream
        self._path = path
        self._offset = 0  # bytes handed out so far
        # the file's compressed bytes, once the given stream failed
        self._raw: BinaryIO | None = None
        self._skip = 0  # inflated bytes to drop before going on from _offset

    def read(self, size: int) -> bytes:
        if self._raw is None:
            try:
                data = self._stream.read(size)
            except CorruptFile:
                self._raw = open_raw(self._path)
                self._stream = _Inflating(self._raw, _wbits("gzip"))
                self._skip = self._offset
                return self.read(size)
        else:
            data = self._stream.read(size)
            while self._skip and data:
                if len(data) > self._skip:
                    data, self._skip = data[self._skip :], 0
                else:
                    self._skip -= len(data)
                    data = self._stream.read(size)
        self._offset += len(data)
        return data

    def close(self) -> None:
        if self._raw is not None:
            self._raw.close()
