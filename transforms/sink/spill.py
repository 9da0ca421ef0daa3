"""Sorted runs: encoded records spilled to the staging folder, read back one shard at a time.

The writer cannot route a record to its shard until every record is encoded (the shard counts
come from the bytes of each split), and holding every encoded record until then makes a job's
memory grow with its input. So each worker sorts what it encoded, a few tens of megabytes at a
time, by order hash, and writes it to a *run* file under `<staging>/_runs/`; only a small
description of each run (`Run`) travels on through the pipeline. A shard is a contiguous range
of order hashes (`transforms.split.shard_of`), hence a contiguous slice of every run of its
split: its writer reads just those slices, and memory stays within a few shards' worth.

A run file holds, for one split, in order-hash order:

    payloads   the serialized examples, back to back
    metadata   keyed datasets only: one JSON line `[key, provenance]` per record
    entries    per record: order hash, end of its payload, end of its metadata (3 x uint64 LE)

`Run.fence` holds the order hash of every `FENCE_STRIDE`-th record, so that a shard's slice is
found by reading a few entries around its bounds, not all of them.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
from apache_beam import coders
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.prepare import EncodedChunk
from transforms.records import ChunkCoder
from transforms.sink.publish import create_file
from transforms.split import binary_offsets

RUN_FOLDER = "_runs"
FENCE_STRIDE = 1024
_ENTRY = np.dtype([("hash", "<u8"), ("payload_end", "<u8"), ("meta_end", "<u8")])


@dataclasses.dataclass
class Run:
    """Where a run file is and what it holds (all but its records)."""

    split: int
    path: str
    records: int
    payload_bytes: int
    meta_bytes: int
    fence: np.ndarray  # uint64: order hash of records 0, FENCE_STRIDE, 2 * FENCE_STRIDE, ...

    def approx_bytes(self) -> int:
        return 64 + len(self.path) + self.fence.nbytes


coders.registry.register_coder(Run, ChunkCoder)


@dataclasses.dataclass
class ShardPart:
    """Records that belong to one shard, from one chunk or one run."""

    order_hash: np.ndarray  # uint64
    key: list[str] | None
    order: list[tuple] | None  # provenance, for ties among a key's records (keyed datasets)
    payload: pa.BinaryArray

    def approx_bytes(self) -> int:
        return _binary(self.payload).nbytes + 16 * len(self.payload)


coders.registry.register_coder(ShardPart, ChunkCoder)


def run_folder(staging: str) -> str:
    return f"{staging}/{RUN_FOLDER}"


def write_runs(chunks: Iterable[EncodedChunk], folder: str, keyed: bool) -> Iterator[Run]:
    """Writes the records of `chunks` as one sorted run file per split they touch."""
    chunks = [c for c in chunks if len(c)]
    if not chunks:
        return
    splits = np.concatenate([c.split for c in chunks])
    hashes = np.concatenate([np.asarray(c.order_hash, np.uint64) for c in chunks])
    payloads = pa.concat_arrays([_binary(c.payload).cast(pa.large_binary()) for c in chunks])
    keys = [k for c in chunks for k in c.key] if keyed else None
    orders = [o for c in chunks for o in c.order] if keyed else None
    del chunks  # the caller passes its last reference: only one copy of the records is held
    for split in np.unique(splits).tolist():
        rows = np.flatnonzero(splits == split)
        rows = rows[np.argsort(hashes[rows], kind="stable")]
        yield _write_run(
            f"{folder}/{split}-{uuid.uuid4().hex}.run",
            split,
            hashes[rows],
            payloads.take(rows),
            [json.dumps([keys[i], orders[i]], ensure_ascii=False) for i in rows.tolist()]
            if keyed
            else None,
        )


def _binary(array) -> pa.Array:
    return array if isinstance(array, pa.Array) else pa.array(array, pa.binary())


def _write_run(
    path: str, split: int, hashes: np.ndarray, payloads: pa.Array, metas: list[str] | None
) -> Run:
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
    return Run(split, path, n, payload_bytes, len(meta), hashes[::FENCE_STRIDE].copy())


def shard_bounds(shard: int, count: int) -> tuple[int, int | None]:
    """[low, high) of the order hashes of a shard (high None: to the end), as `shard_of` maps."""

    def start(k: int) -> int:
        return (((k << 32) + count - 1) // count) << 32

    return start(shard), None if shard + 1 == count else start(shard + 1)


def read_slice(run: Run, low: int, high: int | None) -> ShardPart | None:
    """The records of a run with order hash in [low, high), or None if it has none."""
    fence = run.fence
    first_block = max(int(np.searchsorted(fence, np.uint64(low), "left")) - 1, 0)
    last_block = (
        len(fence) if high is None else int(np.searchsorted(fence, np.uint64(high), "left"))
    )
    start, stop = first_block * FENCE_STRIDE, min(last_block * FENCE_STRIDE, run.records)
    if start >= stop:
        return None
    with FileSystems.open(
        run.path,
        mime_type="application/octet-stream",
        compression_type=CompressionTypes.UNCOMPRESSED,
    ) as f:
        # the entries of records [start, stop), and of the one before (where their data begins)
        before = 1 if start else 0
        f.seek(run.payload_bytes + run.meta_bytes + (start - before) * _ENTRY.itemsize)
        entries = np.frombuffer(_read(f, (stop - start + before) * _ENTRY.itemsize, run), _ENTRY)
        ends = entries[before:]
        i = int(np.searchsorted(ends["hash"], np.uint64(low), "left"))
        j = (
            len(ends)
            if high is None
            else int(np.searchsorted(ends["hash"], np.uint64(high), "left"))
        )
        if i >= j:
            return None
        # ends of the record before the slice (0 at the run's start) and of each of its records
        first = before + i - 1
        payload_ends = _with_start(entries["payload_end"], first, before + j)
        meta_ends = _with_start(entries["meta_end"], first, before + j)
        f.seek(int(payload_ends[0]))
        data = _read(f, int(payload_ends[-1] - payload_ends[0]), run)
        metas = None
        if run.meta_bytes:
            f.seek(run.payload_bytes + int(meta_ends[0]))
            metas = _read(f, int(meta_ends[-1] - meta_ends[0]), run)
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
    """ends[first:stop] as int64, with a 0 in front when first is -1 (the run's start)."""
    if first < 0:
        return np.concatenate(([0], ends[:stop].astype(np.int64)))
    return ends[first:stop].astype(np.int64)


def _read(f, size: int, run: Run) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise OSError(f"{run.path}: run file is truncated ({len(data)} of {size} bytes read)")
    return data
