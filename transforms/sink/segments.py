"""Shards written in segments: the pieces of a shard compressed in parallel, then joined.

A shard is written a piece at a time (`transforms.shards.shard_pieces`), and each piece can be
compressed on its own, by any worker, into a *segment* file of the staging folder
(`transforms.contract.layout.segment_name`); `join_segments` then copies a shard's segments, in
order, into the shard file. The shard is still one gzip or zlib stream, as any reader expects:
a segment of a compressed shard is raw deflate data (no header, no trailer) that ends on a byte
boundary with an empty stored block (Z_SYNC_FLUSH), or, for the shard's last piece, with the
final block (Z_FINISH); deflate data never refers back across a segment's start. The join
writes the stream's header first (as zlib writes it for the compression and level) and, last,
its trailer: the checksum of the whole uncompressed data (gzip: CRC-32 and length; zlib:
Adler-32), combined from the segments' own (`crc32_combine`, `adler32_combine`) without reading
them again. An uncompressed shard is its segments back to back. (Concatenated streams would
not do: TensorFlow reads only the first of several zlib streams, and stops, silently, at a gzip
member that holds no data, as the segment of an empty piece would.)

Where a segment starts changes the compressed bytes, not the records: pieces are ranges of
order hashes whose number comes from their split's bytes and shard count, so a shard's bytes
still depend on the data alone, never on workers, bundles or spills.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
import zlib
from typing import Any, Callable

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.contract.layout import COMPRESSIONS
from transforms.files import create_file

RAW_WBITS = -zlib.MAX_WBITS  # raw deflate with the 32 KiB window of the gzip and zlib streams
_COPY_BYTES = 1 << 20
_CRC32_POLY = 0xEDB88320  # CRC-32 (gzip's), bit-reversed
_ADLER_BASE = 65521


def _multiply_mod_poly(a: int, b: int) -> int:
    """a * b modulo the CRC-32 polynomial, in zlib's bit-reversed representation (a != 0)."""
    m, product = 1 << 31, 0
    while True:
        if a & m:
            product ^= b
            if not a & (m - 1):
                return product
        m >>= 1
        b = (b >> 1) ^ _CRC32_POLY if b & 1 else b >> 1


def _powers_of_x() -> list[int]:
    """x^(2^k) modulo the CRC-32 polynomial, for k in 0..31."""
    powers = [1 << 30]  # x^1
    for _ in range(31):
        powers.append(_multiply_mod_poly(powers[-1], powers[-1]))
    return powers


_X_POWERS = _powers_of_x()


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC-32 of A + B from crc1 = zlib.crc32(A), crc2 = zlib.crc32(B) and len(B) (zlib's
    crc32_combine): crc1 is moved past len(B) zero bytes, x^(8 len(B)) modulo the polynomial."""
    power, k, n = 1 << 31, 3, length2  # x^0; 8 * n bits = n * 2^3
    while n:
        if n & 1:
            power = _multiply_mod_poly(_X_POWERS[k & 31], power)
        n >>= 1
        k += 1
    return _multiply_mod_poly(power, crc1) ^ crc2


def adler32_combine(adler1: int, adler2: int, length2: int) -> int:
    """The Adler-32 of A + B from adler1 = zlib.adler32(A), adler2 = zlib.adler32(B) and len(B)
    (zlib's adler32_combine). Adler-32 is s1 = 1 + the sum of the bytes and s2 = the sum of each
    prefix's s1, modulo 65521: s1 = s1(A) + s1(B) - 1, s2 = s2(A) + s2(B) + len(B) (s1(A) - 1)."""
    s1a, s2a = adler1 & 0xFFFF, adler1 >> 16
    s1b, s2b = adler2 & 0xFFFF, adler2 >> 16
    s1 = (s1a + s1b - 1) % _ADLER_BASE
    s2 = (s2a + s2b + length2 * (s1a - 1)) % _ADLER_BASE
    return s1 | s2 << 16


@dataclasses.dataclass(frozen=True)
class Wrapper:
    """What a compression's stream holds around its raw deflate data: a header of
    `header_bytes` and a trailer made of the uncompressed data's `checksum` (a zlib function:
    data, running value; `initial` for no data) and length."""

    header_bytes: int
    checksum: Callable[[bytes, int], int]
    initial: int
    combine: Callable[[int, int, int], int]
    trailer: Callable[[int, int], bytes]


# zlib's stream wrappers, by the window bits that ask for them (`Compression.wbits`)
_WRAPPERS = {
    31: Wrapper(10, zlib.crc32, 0, crc32_combine, lambda c, n: struct.pack("<II", c, n % 2**32)),
    15: Wrapper(2, zlib.adler32, 1, adler32_combine, lambda c, n: struct.pack(">I", c)),
}


def wrapper(compression: str) -> Wrapper | None:
    """The wrapper of a compression's stream (gzip, zlib); None for uncompressed files."""
    wbits = COMPRESSIONS[compression].wbits
    return None if wbits is None else _WRAPPERS.get(wbits)


def header(compression: str, level: int) -> bytes:
    """The header zlib writes for the compression and level (gzip: no name, no timestamp)."""
    wbits = COMPRESSIONS[compression].wbits
    assert wbits is not None  # called for gzip and zlib only: an uncompressed file has no header
    return zlib.compress(b"", level, wbits)[: _WRAPPERS[wbits].header_bytes]


def join_segments(
    path: str, segments: list[dict[str, Any]], compression: str, level: int
) -> dict[str, Any]:
    """Writes the record file at `path` (local or gs://) from its segments, in order; returns
    its size and SHA-256 (`bytes`, `sha256`).

    Each segment is what `RecordFileWriter(..., segment=True)` closed: `file` (its path) with
    the facts its close returned (`bytes`; for gzip and zlib `raw_bytes` and `checksum`). A
    segment file shorter or longer than its facts say is an error; the shard file is then
    abandoned (`transforms.files.abandon`).
    """
    stream = wrapper(compression)
    sha, size = hashlib.sha256(), 0
    with create_file(path, "application/octet-stream") as f:

        def emit(block: bytes) -> None:
            nonlocal size
            sha.update(block)
            size += len(block)
            f.write(block)

        if stream is not None:
            emit(header(compression, level))
        for segment in segments:
            copied = 0
            with FileSystems.open(
                segment["file"],
                mime_type="application/octet-stream",
                compression_type=CompressionTypes.UNCOMPRESSED,
            ) as source:
                while block := source.read(_COPY_BYTES):
                    emit(block)
                    copied += len(block)
            if copied != segment["bytes"]:
                raise OSError(
                    f"{segment['file']}: segment holds {copied} bytes, {segment['bytes']} written"
                )
        if stream is not None:
            checksum, length = stream.initial, 0
            for segment in segments:
                checksum = stream.combine(checksum, segment["checksum"], segment["raw_bytes"])
                length += segment["raw_bytes"]
            emit(stream.trailer(checksum, length))
    return {"bytes": size, "sha256": sha.hexdigest()}
