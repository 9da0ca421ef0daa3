"""Deterministic hashing of records: which split a record belongs to, and its place in a shard.

Two 64-bit hashes of each record: the first chooses the split by the configured fractions, the
second orders records within a split and chooses their shard. A keyed record's are the two
halves of the 128-bit XXH3 hash of its key. A record without a key is hashed by its identity
(`identity_hashes`): its source, its file (from the source's folder: the data may move) and its
line or number in the file, not by its content, so that copies of one row land in splits
independently of each other, as any other two records do (hashed by content, every copy went
to the split of the first, and a test split never held a row that train had). XXH3's and
SplitMix64's outputs are fixed by their specifications, so the same record lands in the same
split and shard on every run, runner, worker count and machine; never Python's `hash()`, never
`random`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
from xxhash import xxh3_64_intdigest, xxh3_128_digest, xxh3_128_intdigest

_LOW = (1 << 64) - 1


def record_hash(data: bytes) -> tuple[int, int]:
    """(split hash, order hash) of one record's key or content."""
    h = xxh3_128_intdigest(data)
    return h >> 64, h & _LOW


def record_hashes(data: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(split hashes, order hashes) of many records' keys (text) or contents (binary), as uint64
    arrays."""
    # Arrow makes the bytes objects and xxhash digests them, both in C; the canonical
    # (big-endian) 16-byte digests are read as two 64-bit halves in one go.
    values = data.cast(pa.large_binary() if _is_large(data.type) else pa.binary()).to_pylist()
    digests = np.frombuffer(b"".join(map(xxh3_128_digest, values)), ">u8").reshape(-1, 2)
    return digests[:, 0].astype(np.uint64), digests[:, 1].astype(np.uint64)


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / the golden ratio: spreads consecutive ints
_ORDER = np.uint64(0xD6E8FEB86659FD93)
_GLOB_CHARS = "*?[{"


def mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, element-wise on uint64 (wrapping arithmetic): the 64-bit mix of
    identity hashes and of the facts' values and rows."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def identity_hashes(
    source: str, file: str, lines: np.ndarray | list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(split hashes, order hashes) of records without a key, by identity: the source's name,
    the file as `file_identity` gives it, and each record's line (or number) in the file."""
    base = np.uint64(xxh3_64_intdigest(f"{source}\0{file}".encode("utf-8", "surrogateescape")))
    placed = np.asarray(lines, np.int64).astype(np.uint64) * GOLDEN
    split = mix(mix(placed ^ base) + GOLDEN)
    return split, mix(split ^ _ORDER)


def file_identity(pattern: str | None, path: str) -> str:
    """A source file's name for `identity_hashes`: the path from the folder of the source's
    `path` (up to its first glob character), so that a dataset built again from the same files
    in another place splits the same; the whole path for a file elsewhere or a query."""
    if pattern is None:
        return path
    cut = min((i for i in (pattern.find(c) for c in _GLOB_CHARS) if i >= 0), default=len(pattern))
    folder = pattern[: pattern[:cut].rfind("/") + 1]
    return path[len(folder) :] if folder and path.startswith(folder) else path


def _is_large(kind: pa.DataType) -> bool:
    return pa.types.is_large_binary(kind) or pa.types.is_large_string(kind)


def binary_offsets(array: pa.Array) -> np.ndarray:
    """The n + 1 value offsets of an Arrow (large) binary or string array into its data
    buffer."""
    kind = np.int64 if _is_large(array.type) else np.int32
    offsets = np.frombuffer(array.buffers()[1], kind)
    return offsets[array.offset : array.offset + len(array) + 1]


class SplitAssigner:
    """Maps split hashes to the indexes of their splits, by cumulative fractions."""

    def __init__(self, fractions: Sequence[float]):
        bounds, total = [], 0.0
        for fraction in fractions[:-1]:
            total += fraction
            bounds.append(min(int(total * 2.0**64), _LOW))
        self._bounds = np.array(bounds, np.uint64)

    def __call__(self, split_hashes: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._bounds, split_hashes, side="right").astype(np.int16)


def shard_of(order_hashes: np.ndarray, num_shards: np.ndarray | int) -> np.ndarray:
    """The shard of each record: contiguous ranges of the order hash's high 32 bits."""
    counts = np.asarray(num_shards, np.uint64)
    return ((order_hashes >> np.uint64(32)) * counts) >> np.uint64(32)


def binary(payloads: Sequence[bytes] | pa.Array) -> pa.Array:
    """Payloads as an Arrow binary array (lists of bytes are converted)."""
    return payloads if isinstance(payloads, pa.Array) else pa.array(payloads, pa.binary())


def shard_bounds(shard: int, count: int) -> tuple[int, int | None]:
    """[low, high) of the order hashes of a shard (high None: to the end), as `shard_of` maps."""

    def start(k: int) -> int:
        return (((k << 32) + count - 1) // count) << 32

    return start(shard), None if shard + 1 == count else start(shard + 1)
