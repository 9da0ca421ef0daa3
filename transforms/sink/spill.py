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
    keys       keyed datasets only: the records' keys (UTF-8), back to back
    paths      keyed datasets only: the files of the records' provenance, one JSON list
    entries    per record: order hash and end of its payload (2 x uint64 LE); keyed datasets
               add the end of its key, its line (int64 LE), the index of its source and of
               its file in `paths` (2 x uint32 LE)

Keys and provenance are columns (`transforms.keys.KEYS`) written and read as whole arrays: a
shard's slice of keys is one Arrow string array over the bytes read, its provenance numpy columns
of the entries.

`SpillFile.fence` holds the order hash of every `FENCE_STRIDE`-th record, so that a shard's slice
is found by reading a few entries around its bounds, not all of them.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections import Counter
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
from apache_beam import coders
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.coders import ChunkCoder
from transforms.contract.layout import SPILL_DIR
from transforms.files import create_file
from transforms.keys import KEYS
from transforms.records import EncodedChunk, PieceTask
from transforms.shards import ShardPart
from transforms.split import binary, binary_offsets

FENCE_STRIDE = 1024
PIECE_BYTES = 8 << 20  # encoded bytes of a shard's piece: read, sorted and compressed at once
_ENTRY = np.dtype([("hash", "<u8"), ("payload_end", "<u8")])
_KEYED_ENTRY = np.dtype(
    [
        ("hash", "<u8"),
        ("payload_end", "<u8"),
        ("key_end", "<u8"),
        ("line", "<i8"),
        ("source", "<u4"),
        ("path", "<u4"),
    ]
)


@dataclasses.dataclass
class SpillFile:
    """Where a spill file is and what it holds (all but its records)."""

    split: int
    path: str
    records: int
    payload_bytes: int
    key_bytes: int
    paths_bytes: int  # 0 without a key
    fence: np.ndarray  # uint64: order hash of records 0, FENCE_STRIDE, 2 * FENCE_STRIDE, ...

    @property
    def keyed(self) -> bool:
        return self.paths_bytes > 0

    @property
    def entry(self) -> np.dtype:
        return _KEYED_ENTRY if self.keyed else _ENTRY

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
    keys = pa.concat_batches([c.keys for c in chunks]) if keyed else None
    del chunks  # the caller passes its last reference: only one copy of the records is held
    for split in np.unique(splits).tolist():
        rows = np.flatnonzero(splits == split)
        rows = rows[np.argsort(hashes[rows], kind="stable")]
        yield _write_spill_file(
            f"{folder}/{split}-{uuid.uuid4().hex}.spill",
            split,
            hashes[rows],
            payloads.take(rows),
            keys.take(rows) if keys is not None else None,
        )


def _write_spill_file(
    path: str, split: int, hashes: np.ndarray, payloads: pa.Array, keys: pa.RecordBatch | None
) -> SpillFile:
    n = len(payloads)
    offsets = binary_offsets(payloads)
    data = payloads.buffers()[2]
    payload_bytes = int(offsets[-1] - offsets[0])
    entries = np.empty(n, _KEYED_ENTRY if keys is not None else _ENTRY)
    entries["hash"] = hashes
    entries["payload_end"] = offsets[1:] - offsets[0]
    key_data: bytes | memoryview = b""
    paths = b""
    if keys is not None:
        texts = keys.column("key").cast(pa.large_string())
        key_offsets = binary_offsets(texts)
        key_data = memoryview(texts.buffers()[2] or b"")[key_offsets[0] : key_offsets[-1]]
        entries["key_end"] = key_offsets[1:] - key_offsets[0]
        entries["line"] = keys.column("line").to_numpy()
        entries["source"] = keys.column("source").to_numpy()
        files = keys.column("path")
        entries["path"] = files.indices.to_numpy()
        # ASCII JSON: undecodable file-name bytes travel as \udcXX escapes
        names = [p.decode("utf-8", "surrogateescape") for p in files.dictionary.to_pylist()]
        paths = json.dumps(names).encode("ascii")
    with create_file(path, "application/octet-stream") as f:
        if payload_bytes:
            f.write(memoryview(data)[int(offsets[0]) : int(offsets[-1])])
        f.write(key_data)
        f.write(paths)
        f.write(entries.tobytes())
    fence = hashes[::FENCE_STRIDE].copy()
    return SpillFile(split, path, n, payload_bytes, len(key_data), len(paths), fence)


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
    entry = spill.entry
    with FileSystems.open(
        spill.path,
        mime_type="application/octet-stream",
        compression_type=CompressionTypes.UNCOMPRESSED,
    ) as f:
        # the entries of records [start, stop), and of the one before (where their data begins)
        before = 1 if start else 0
        table_start = spill.payload_bytes + spill.key_bytes + spill.paths_bytes
        f.seek(table_start + (start - before) * entry.itemsize)
        entries = np.frombuffer(_read(f, (stop - start + before) * entry.itemsize, spill), entry)
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
        f.seek(int(payload_ends[0]))
        data = _read(f, int(payload_ends[-1] - payload_ends[0]), spill)
        keys = None
        if spill.keyed:
            key_ends = _with_start(entries["key_end"], first, before + j)
            f.seek(spill.payload_bytes + int(key_ends[0]))
            texts = _binary(pa.string(), key_ends, _read(f, int(key_ends[-1] - key_ends[0]), spill))
            f.seek(spill.payload_bytes + spill.key_bytes)
            names = json.loads(_read(f, spill.paths_bytes, spill))
            mine = ends[i:j]
            files = pa.DictionaryArray.from_arrays(
                pa.array(mine["path"].astype(np.int32)),
                pa.array([p.encode("utf-8", "surrogateescape") for p in names], pa.binary()),
            )
            keys = pa.RecordBatch.from_arrays(
                [
                    texts,
                    pa.array(mine["source"].astype(np.int16)),
                    files,
                    pa.array(mine["line"]),
                ],
                schema=KEYS,
            )
    return ShardPart(ends["hash"][i:j].copy(), keys, _binary(pa.binary(), payload_ends, data))


def _binary(kind: pa.DataType, ends: np.ndarray, data: bytes) -> pa.Array:
    """The values whose ends (from the start of `data`, with a 0 in front) are `ends`, as an
    array of `kind` (large when they need 64-bit offsets)."""
    offsets = ends - ends[0]
    width: type[np.signedinteger[Any]]
    if offsets[-1] >= 1 << 31:
        kind, width = (pa.large_binary() if kind == pa.binary() else pa.large_string()), np.int64
    else:
        width = np.int32
    return pa.Array.from_buffers(
        kind, len(offsets) - 1, [None, pa.py_buffer(offsets.astype(width)), pa.py_buffer(data)]
    )


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
) -> Iterator[PieceTask]:
    """Every piece of every shard (`PieceTask`: split, shard, shards in the split, pieces, piece).

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
                yield PieceTask(split, shard, count, pieces, piece)


def split_spills(spills: list[SpillFile], split: int) -> list[SpillFile]:
    """The spills of one split, by path."""
    return sorted((s for s in spills if s.split == split), key=lambda s: s.path)


def shard_parts(spills: list[SpillFile], low: int, high: int | None) -> list[ShardPart]:
    """The records with order hashes in [low, high), from the slices of the spill files that
    hold them."""
    parts = (read_slice(spill, low, high) for spill in spills)
    return [part for part in parts if part is not None]
