"""Deterministic hashing of records: which split a record belongs to, and its place in a shard.

One 128-bit BLAKE2b digest of the record's key (of its encoded content when there is no key):
the first 64 bits choose the split by the configured fractions, the last 64 bits order records
within a split and choose their shard. Never Python's `hash()` and never `random`: the same record
lands in the same split and shard on every run, runner and machine.
"""

from __future__ import annotations

import bisect
import hashlib
from typing import Sequence

_SCALE = float(1 << 64)


def record_hash(data: bytes) -> tuple[int, int]:
    """(split hash, order hash) of a record's key or content."""
    digest = hashlib.blake2b(data, digest_size=16).digest()
    return int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big")


class SplitAssigner:
    """Maps a split hash to the index of its split, by cumulative fractions."""

    def __init__(self, fractions: Sequence[float]):
        bounds, total = [], 0.0
        for fraction in fractions[:-1]:
            total += fraction
            bounds.append(int(total * _SCALE))
        self._bounds = bounds

    def __call__(self, split_hash: int) -> int:
        return bisect.bisect_right(self._bounds, split_hash)


def shard_of(order_hash: int, num_shards: int) -> int:
    """The shard of a record among `num_shards` (contiguous ranges of the order hash)."""
    return (order_hash * num_shards) >> 64
