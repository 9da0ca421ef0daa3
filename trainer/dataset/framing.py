"""TFRecord shards read without TensorFlow: decompressed, unframed and checked.

A shard is a gzip or zlib stream (or none) of frames: an 8-byte little-endian length and its
masked CRC-32C, then the record and its masked CRC-32C. `read_shard` streams a shard in large
pieces (inflated by ISA-L through `isal`, about twice as fast as zlib on these streams;
CRCs by google-crc32c), checks both checksums of every frame as tf.data does, and
yields the records a piece at a time. It also checks that the shard is the one the manifest
lists: its size, and its sha256 computed on the way (a shard that reads without an error but
differs was replaced after the dataset was written: ShardChangedError; `trainer.dataset.verify`
runs the same check over every shard before a run).

A local shard whose manifest lists its sha256 is checked whole before any of its records is
read (the file is mapped into memory and hashed, as fast as the disk gives it): bytes equal to
those the ETL wrote need no check of each frame, so its records are cut by their lengths alone,
which costs a fraction of the per-frame CRCs. A shard that fails that check, a shard on Cloud
Storage and one without a listed sha256 are read frame by frame with both CRCs checked, so a
damaged shard is named as precisely as before.

A shard that fails to read (a checksum mismatch, a truncation, bad compressed data) is corrupt:
CorruptShardError names it and the record. With `skip_corrupt`, the rest of that shard is
skipped instead, as the tf.data path's `--skip-corrupt` does (a reader cannot resynchronize
after a bad frame), and a warning says how many listed records were lost.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import IO, cast

from isal import isal_zlib

from trainer.dataset import storage
from transforms.contract.layout import masked_crc
from transforms.contract.manifest import FileEntry, ManifestError

logger = logging.getLogger(__name__)

PIECE = 4 << 20  # compressed bytes read at a time
STEP = 256 << 10  # compressed bytes inflated and unframed at a time: what they give stays in cache
_HEADER = struct.Struct("<QI")
_LENGTH = struct.Struct("<Q")
_TRAILER = struct.Struct("<I")
_GZIP = 31
_INFLATE_ERRORS = (zlib.error, cast("type[Exception]", isal_zlib.error))


class CorruptShardError(ValueError):
    """A shard whose records cannot all be read back."""


class ShardChangedError(ManifestError):
    """A shard that reads without an error but is not the one the manifest lists."""


def read_shard(
    shard: FileEntry, wbits: int | None, *, skip_corrupt: bool = False, check_sha256: bool = True
) -> Iterator[list[bytes]]:
    """The records of `shard`, in file order, in lists of consecutive records; `wbits`: the
    zlib window bits of its compression (None: uncompressed)."""
    if check_sha256 and shard.sha256 and not storage.is_remote(shard.path):
        with _mapped(shard.path) as data:
            if _intact(shard, data):
                yield from _trusted(shard, data, wbits)
                return
    digest = hashlib.sha256() if check_sha256 and shard.sha256 else None
    unframe = _Unframer()
    read = 0

    def pieces(f: IO[bytes]) -> Iterator[bytes]:
        nonlocal read
        while piece := f.read(PIECE):
            read += len(piece)
            if digest is not None:
                digest.update(piece)
            yield piece

    try:
        with storage.open_read(shard.path) as f:
            for data in _inflated(pieces(f), wbits):
                records = unframe.feed(data)
                if records:
                    yield records
                if unframe.error:
                    raise _Broken(unframe.error)
            if unframe.pending:
                raise _Broken(f"the last record is cut short ({unframe.pending} bytes left)")
    except (_Broken, *_INFLATE_ERRORS) as e:
        why = f"bad compressed data ({e})" if isinstance(e, _INFLATE_ERRORS) else str(e)
        where = f"after record {unframe.records}" if unframe.records else "at its start"
        lost = max(0, (shard.records or 0) - unframe.records)
        if not skip_corrupt:
            raise CorruptShardError(
                f"corrupt shard {shard.path}: {why} {where}: only {unframe.records} of its "
                f"{shard.records} records can be read; rerun the ETL"
            ) from None
        logger.warning(
            "corrupt shard %s: %s %s: skipping %d of its %d records",
            shard.path, why, where, lost, shard.records,
        )  # fmt: skip
        return
    problem = _difference(shard, read, digest, unframe.records)
    if problem:
        raise changed(shard, unframe.records, read, problem)


def changed(shard: FileEntry, records: int, size: int, problem: str) -> ShardChangedError:
    """The error of a shard that reads whole but is not the one its manifest lists."""
    listed = "?" if shard.bytes is None else f"{shard.bytes:,}"
    return ShardChangedError(
        f"{shard.path}: holds {records:,} records in {size:,} bytes where the manifest lists "
        f"{shard.records or 0:,} in {listed} ({problem}): the dataset changed after it was "
        "written (a shard replaced or rewritten, or the manifest edited); rerun the ETL"
    )


def _inflated(pieces: Iterable[bytes | memoryview], wbits: int | None) -> Iterator[bytes]:
    """The bytes of a stream read in `pieces`, inflated (`wbits`: zlib's window bits; None:
    not compressed; gzip may hold several members); _Broken if it ends early."""
    inflate = isal_zlib.decompressobj(wbits) if wbits is not None else None
    for piece in _stepped(pieces):
        while piece:
            if inflate is None:
                yield bytes(piece)
                break
            data = inflate.decompress(piece)
            piece = b""
            if inflate.eof and inflate.unused_data and wbits == _GZIP:
                piece = inflate.unused_data  # the next gzip member
                inflate = isal_zlib.decompressobj(wbits)
            yield data
    if inflate is not None and not inflate.eof:
        raise _Broken("the compressed stream ends early (truncated)")


def _stepped(pieces: Iterable[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    """The pieces in slices of at most STEP bytes (views, not copies)."""
    for piece in pieces:
        if len(piece) <= STEP:
            yield piece
            continue
        view = memoryview(piece)
        try:
            for start in range(0, len(view), STEP):
                yield view[start : start + STEP]
        finally:
            view.release()


class _mapped:
    """A local file's bytes, mapped into memory (b"" for an empty file)."""

    def __init__(self, path: str):
        self.path = path
        self.map: mmap.mmap | None = None

    def __enter__(self) -> bytes | mmap.mmap:
        with open(self.path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self.map

    def __exit__(self, *exc: object) -> None:
        if self.map is not None:
            self.map.close()


def _intact(shard: FileEntry, data: bytes | mmap.mmap) -> bool:
    """True when the shard's bytes are those the manifest lists (size and sha256)."""
    if shard.bytes is not None and len(data) != shard.bytes:
        return False
    return hashlib.sha256(data).hexdigest() == shard.sha256


def _trusted(shard: FileEntry, data: bytes | mmap.mmap, wbits: int | None) -> Iterator[list[bytes]]:
    """The records of a shard whose bytes are known good, cut by their lengths alone."""
    unframe = _Unframer(check=False)
    view = memoryview(data)
    try:
        for chunk in _inflated([view], wbits):  # in STEP slices
            if records := unframe.feed(chunk):
                yield records
    except (_Broken, *_INFLATE_ERRORS) as e:  # bytes the ETL wrote so: not a TFRecord stream
        raise CorruptShardError(f"corrupt shard {shard.path}: {e}; rerun the ETL") from None
    finally:
        view.release()
    if unframe.pending:
        raise CorruptShardError(
            f"corrupt shard {shard.path}: the last record is cut short ({unframe.pending} bytes "
            "left); rerun the ETL"
        )
    if unframe.records != shard.records:
        raise changed(shard, unframe.records, len(data), "record count differs")


def _difference(shard: FileEntry, read: int, digest, records: int) -> str | None:
    if shard.bytes is not None and read != shard.bytes:
        return "size differs"
    if digest is not None and digest.hexdigest() != shard.sha256:
        return "sha256 differs"
    if records != shard.records:
        return "record count differs"
    return None


class _Broken(Exception):
    """A framing error: a bad checksum or a record cut short."""


class _Unframer:
    """Cuts the frames of a byte stream fed in pieces, checking their CRCs (unless `check` is
    off: bytes known good); after a bad checksum, `error` says which and nothing more is
    read."""

    def __init__(self, check: bool = True) -> None:
        self.check = check
        self.records = 0
        self.error: str | None = None  # why the stream stops being readable
        self._rest = b""

    @property
    def pending(self) -> int:
        return len(self._rest)

    def feed(self, data: bytes) -> list[bytes]:
        if not self.check:
            return self._cut(data)
        buf = self._rest + data if self._rest else data
        n, pos = len(buf), 0
        out: list[bytes] = []
        crc = masked_crc
        while n - pos >= 12:
            length, length_crc = _HEADER.unpack_from(buf, pos)
            if crc(buf[pos : pos + 8]) != length_crc:
                number = self.records + len(out) + 1
                self.error = f"the length of record {number} fails its checksum"
                break
            end = pos + 12 + length
            if end + 4 > n:
                break
            record = buf[pos + 12 : end]
            if crc(record) != _TRAILER.unpack_from(buf, end)[0]:
                self.error = f"record {self.records + len(out) + 1} fails its checksum"
                break
            out.append(record)
            pos = end + 4
        self._rest = b"" if self.error else buf[pos:]
        self.records += len(out)
        return out

    def _cut(self, data: bytes) -> list[bytes]:
        """The whole frames of the stream so far, by their lengths alone."""
        buf = self._rest + data if self._rest else data
        last, pos = len(buf) - 16, 0  # a frame starting after `last` is cut short
        out: list[bytes] = []
        length_at, keep = _LENGTH.unpack_from, out.append
        while pos <= last:
            start = pos + 12
            end = start + length_at(buf, pos)[0]
            if end > last + 12:
                break
            keep(buf[start:end])
            pos = end + 4
        self._rest = buf[pos:]
        self.records += len(out)
        return out
