"""Shard maths: how many shards each split gets, which records a shard holds, in which order.

Shard counts come from the encoded bytes of each split (`ceil(bytes / shard_size)`). A record's
shard is a function of its order hash (`transforms.split.shard_of`), so each shard is a range of
order hashes (`shard_bounds`), written in pieces of consecutive hashes (`shard_pieces`). Within a
shard, records are sorted by (order hash, key, provenance) and duplicates of a key dropped
(`transforms.keys.tie_order`): a shard's bytes depend only on its records, never on bundle
order, input splitting or runner. No Beam here.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
from apache_beam import coders

from transforms.coders import ChunkCoder
from transforms.keys import equal_spans, tie_order
from transforms.records import EncodedChunk
from transforms.split import binary, shard_bounds, shard_of


@dataclasses.dataclass
class ShardPart:
    """Records that belong to one shard, from one chunk or one spill file."""

    order_hash: np.ndarray  # uint64
    keys: pa.RecordBatch | None  # keyed datasets: key and provenance (transforms.keys.KEYS)
    payload: pa.BinaryArray

    def approx_bytes(self) -> int:
        return binary(self.payload).nbytes + 16 * len(self.payload)


coders.registry.register_coder(ShardPart, ChunkCoder)


def shard_counts(split_bytes: dict[int, int], num_splits: int, shard_bytes: float) -> list[int]:
    """Shards per split: enough for `shard_bytes` each, at least one (an empty split too)."""
    return [max(1, math.ceil(split_bytes.get(i, 0) / shard_bytes)) for i in range(num_splits)]


def route_chunk(
    chunk: EncodedChunk, counts: list[int]
) -> Iterator[tuple[tuple[int, int], ShardPart]]:
    """Splits a chunk into the parts of each (split, shard) it touches, in (split, shard) order."""
    if not len(chunk):
        return
    shards = shard_of(chunk.order_hash, np.asarray(counts, np.uint64)[chunk.split])
    dest = chunk.split.astype(np.int64) * (1 << 32) + shards.astype(np.int64)
    order = np.argsort(dest, kind="stable")
    bounds = np.flatnonzero(np.diff(dest[order])) + 1
    payload = binary(chunk.payload)
    for rows in np.split(order, bounds):
        first = int(rows[0])
        yield (
            (int(chunk.split[first]), int(shards[first])),
            ShardPart(
                chunk.order_hash[rows],
                chunk.keys.take(rows) if chunk.keys is not None else None,
                payload.take(rows),
            ),
        )


def sorted_records(parts: Iterable[ShardPart]) -> tuple[pa.Array, int]:
    """The payloads of a shard in their canonical order, first record of each key only.

    Returns (payloads, duplicates dropped).
    """
    payloads, ranked, duplicates = shard_order(parts)
    return payloads.take(ranked).combine_chunks(), duplicates


def shard_order(parts: Iterable[ShardPart]) -> tuple[pa.ChunkedArray, np.ndarray, int]:
    """A shard's payloads (as they came), the indexes of its records in canonical order (first
    record of each key only), and the number of duplicates dropped."""
    parts = list(parts)
    empty = np.zeros(0, np.uint64)
    hashes = np.concatenate([np.asarray(p.order_hash, np.uint64) for p in parts] or [empty]).astype(
        np.uint64
    )
    arrays = [binary(p.payload) for p in parts]
    kind = pa.binary() if all(a.type == pa.binary() for a in arrays) else pa.large_binary()
    payloads = pa.chunked_array([a.cast(kind) for a in arrays], kind)
    keyed = bool(parts) and parts[0].keys is not None
    keys = pa.Table.from_batches([p.keys for p in parts]) if keyed else None
    order, duplicates = tie_order(hashes, keys)
    if keyed:
        return payloads, order, duplicates
    # Without a key, equal hashes mean equal content but for a 2**-64 chance: by content.
    spans = equal_spans(hashes[order])
    if not spans:
        return payloads, order, 0
    ranked = order.tolist()
    for start, stop in spans:
        ranked[start:stop] = sorted(ranked[start:stop], key=lambda i: payloads[i].as_py())
    return payloads, np.array(ranked, np.int64), 0


def shard_pieces(shard: int, count: int, pieces: int) -> Iterator[tuple[int, int | None]]:
    """[low, high) of each piece of a shard's order hashes, in order (high None: to the end).

    Records with equal hashes (a key's duplicates) always fall in the same piece.
    """
    low, high = shard_bounds(shard, count)
    end = 1 << 64 if high is None else high
    bounds = [low + (end - low) * k // pieces for k in range(pieces)] + [high]
    yield from zip(bounds[:-1], bounds[1:])
