"""Spill files: encoded records sorted into the staging folder, read back one shard at a time.

The writer cannot route a record to its shard until every record is encoded (the shard counts
come from the bytes of each split), and holding every encoded record until then makes a job's
memory grow with its input. So each worker sorts what it encoded, a few tens of megabytes at a
time, by order hash, and writes it to a *spill file* under `<staging>/_spill/`; only a small
description of each (`SpillFile`) travels on through the pipeline. A shard is a contiguous
range of order hashes (`transforms.split.shard_of`), hence a contiguous slice of every spill
file of its split, and so is each piece of a shard (`piece_tasks`): its writer reads just
those slices (`shard_parts`), and memory stays within a few pieces' worth.

A spill file holds, for one split, in order-hash order:

    payloads   the serialized examples, back to back
    metadata   keyed datasets only: one JSON line `[key, provenance]` per record
    entries    per record: order hash, end of its payload, end of its metadata (3 x uint64 LE)

`SpillFile.fence` holds the order hash of every `FENCE_STRIDE`-th record, so that a shard's slice
is found by reading a few entries around its bounds, not all of them.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections import Counter
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
from apache_beam import coders
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.contract.layout import SPILL_DIR
from transforms.prepare import EncodedChunk
from transforms.records import ChunkCoder
from transforms.shards import ShardPart
from transforms.sink.storage import create_file
from transforms.split import binary, binary_offsets

FENCE_STRIDE = 1024
PIECE_BYTES = 8 << 20  # encoded bytes of a shard's piece: read, sorted and compressed at once
_ENTRY = np.dtype([("hash", "<u8"), ("payload_end", "<u8"), ("meta_end", "<u8")])


@dataclasses.dataclass
class SpillFile:
    """Where a spill file is and what it holds (all but its records)."""

    split: int
    path: str
    records: int
    payload_bytes: int
    meta_bytes: int
    fence: np.ndarray  # uint64: order hash of records 0, FENCE_STRIDE, 2 * FENCE_STRIDE, ...

    def approx_bytes(self) -> int:
        return 64 + len(self.path) + self.fence.nbytes


coders.registry.register_coder(SpillFile, ChunkCoder)


def spill_folder(staging: str) -> str:
    return f"{staging}/{SPILL_DIR}"


def write_spill_files(
    chunks: Iterable[EncodedChunk], folder: str, keyed: bool
) -> Iterator[SpillFile]:
    """Writes the records of `chunks` as one sorted spill file per split they touch."""
    chunks = [c for c in chunks if len(c)]
    if not chunks:
        return
    splits = np.concatenate([c.split for c in chunks])
    hashes = np.concatenate([np.asarray(c.order_hash, np.uint64) for c in chunks])
    payloads = pa.concat_arrays([binary(c.payload).cast(pa.large_binary()) for c in chunks])
    keys = [k for c in chunks for k in c.key] if keyed else None
    orders = [o for c in chunks for o in c.order] if keyed else None
    del chunks  # the caller passes its last reference: only one copy of the records is held
    for split in np.unique(splits).tolist():
        rows = np.flatnonzero(splits == split)
        rows = rows[np.argsort(hashes[rows], kind="stable")]
        yield _write_spill_file(
            f"{folder}/{split}-{uuid.uuid4().hex}.spill",
            split,
            hashes[rows],
            payloads.take(rows),
            [json.dumps([keys[i], orders[i]], ensure_ascii=False) for i in rows.tolist()]
            if keyed
            else None,
        )


def _write_spill_file(
    path: str, split: int, hashes: np.ndarray, payloads: pa.Array, metas: list[str] | None
) -> SpillFile:
    n = len(payloads)
    offsets = binary_offsets(payloads)
    data = payloads.buffers()[2]
    payload_bytes = int(offsets[-1] - offsets[0])
    entries = np.empty(n, _ENTRY)
    entries["hash"] = hashes
    entries["payload_end"] = offsets[1:] - offsets[0]
    meta = b""
    if metas is not None:
        meta = "".join(m + "\n" for m in metas).encode("utf-8")
        lengths = np.fromiter((len(m.encode("utf-8")) + 1 for m in metas), np.uint64, n)
        entries["meta_end"] = np.cumsum(lengths)
    else:
        entries["meta_end"] = 0
    with create_file(path, "application/octet-stream") as f:
        if payload_bytes:
            f.write(memoryview(data)[int(offsets[0]) : int(offsets[-1])])
        f.write(meta)
        f.write(entries.tobytes())
    return SpillFile(split, path, n, payload_bytes, len(meta), hashes[::FENCE_STRIDE].copy())


def read_slice(spill: SpillFile, low: int, high: int | None) -> ShardPart | None:
    """The records of a spill with order hash in [low, high), or None if it has none."""
    fence = spill.fence
    first_block = max(int(np.searchsorted(fence, np.uint64(low), "left")) - 1, 0)
    last_block = (
        len(fence) if high is None else int(np.searchsorted(fence, np.uint64(high), "left"))
    )
    start, stop = first_block * FENCE_STRIDE, min(last_block * FENCE_STRIDE, spill.records)
    if start >= stop:
        return None
    with FileSystems.open(
        spill.path,
        mime_type="application/octet-stream",
        compression_type=CompressionTypes.UNCOMPRESSED,
    ) as f:
        # the entries of records [start, stop), and of the one before (where their data begins)
        before = 1 if start else 0
        f.seek(spill.payload_bytes + spill.meta_bytes + (start - before) * _ENTRY.itemsize)
        entries = np.frombuffer(_read(f, (stop - start + before) * _ENTRY.itemsize, spill), _ENTRY)
        ends = entries[before:]
        i = int(np.searchsorted(ends["hash"], np.uint64(low), "left"))
        j = (
            len(ends)
            if high is None
            else int(np.searchsorted(ends["hash"], np.uint64(high), "left"))
        )
        if i >= j:
            return None
        # ends of the record before the slice (0 at the spill's start) and of each of its records
        first = before + i - 1
        payload_ends = _with_start(entries["payload_end"], first, before + j)
        meta_ends = _with_start(entries["meta_end"], first, before + j)
        f.seek(int(payload_ends[0]))
        data = _read(f, int(payload_ends[-1] - payload_ends[0]), spill)
        metas = None
        if spill.meta_bytes:
            f.seek(spill.payload_bytes + int(meta_ends[0]))
            metas = _read(f, int(meta_ends[-1] - meta_ends[0]), spill)
    n = j - i
    offsets = payload_ends - payload_ends[0]
    kind, width = (
        (pa.binary(), np.int32) if offsets[-1] < (1 << 31) else (pa.large_binary(), np.int64)
    )
    payload = pa.Array.from_buffers(
        kind, n, [None, pa.py_buffer(offsets.astype(width)), pa.py_buffer(data)]
    )
    key = order = None
    if metas is not None:
        decoded = json.loads(b"[" + metas.rstrip(b"\n").replace(b"\n", b",") + b"]")
        key = [m[0] for m in decoded]
        order = [tuple(m[1]) for m in decoded]
    return ShardPart(ends["hash"][i:j].copy(), key, order, payload)


def _with_start(ends: np.ndarray, first: int, stop: int) -> np.ndarray:
    """ends[first:stop] as int64, with a 0 in front when first is -1 (the spill's start)."""
    if first < 0:
        return np.concatenate(([0], ends[:stop].astype(np.int64)))
    return ends[first:stop].astype(np.int64)


def _read(f, size: int, spill: SpillFile) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise OSError(f"{spill.path}: spill file is truncated ({len(data)} of {size} bytes read)")
    return data


def split_bytes(spill: SpillFile) -> tuple[int, int]:
    return spill.split, spill.payload_bytes


def piece_tasks(
    counts: list[int], spills: list[SpillFile], piece_bytes: int
) -> Iterator[tuple[int, int, int, int, int]]:
    """(split, shard, shards in the split, pieces, piece) for every piece of every shard.

    A shard is written in `pieces`, consecutive ranges of its order hashes of about `piece_bytes`
    each (`transforms.shards.shard_pieces`), so that no writer holds the whole shard and its
    pieces are compressed in parallel. Their number comes from the split's bytes and shard count
    alone: it is the same however the records were spilled, and so are the shard's bytes.
    """
    sizes: Counter = Counter()
    for spill in spills:
        sizes[spill.split] += spill.payload_bytes
    for split, count in enumerate(counts):
        pieces = max(1, -(-sizes[split] // (count * piece_bytes)))
        for shard in range(count):
            for piece in range(pieces):
                yield split, shard, count, pieces, piece


def split_spills(spills: list[SpillFile], split: int) -> list[SpillFile]:
    """The spills of one split, by path."""
    return sorted((s for s in spills if s.split == split), key=lambda s: s.path)


def shard_parts(spills: list[SpillFile], low: int, high: int | None) -> list[ShardPart]:
    """The records with order hashes in [low, high), from the slices of the spill files that
    hold them."""
    parts = (read_slice(spill, low, high) for spill in spills)
    return [part for part in parts if part is not None]
