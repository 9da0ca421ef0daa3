"""Writing the dataset: shard sizing, TFRecord shards, the rejected records and their file facts.

Shard counts come from the encoded bytes of each split (`ceil(bytes / shard_size)`), known only
once every record is encoded. So encoded records are first sorted, a few tens of megabytes at a
time, into run files under the staging folder (`transforms.sink.spill`); once the counts are known,
each shard is written from the slices of its split's runs that hold its order hashes. Within a
shard, records are sorted by (order hash, key, provenance) and duplicates of a key dropped, so a
shard's bytes depend only on its records, never on bundle order, input splitting or runner.
Shards are written under a staging folder; `transforms.sink.publish` moves them into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import threading
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator, Sequence

import apache_beam as beam
import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions
from apache_beam.transforms.window import GlobalWindows

from transforms import progress
from transforms.contract.config import DatasetSpec, OutputSpec
from transforms.contract.layout import (
    COMPRESSIONS,
    DEFAULT_COMPRESSION_LEVEL,
    REJECTED_FILE,
    STATISTICS,
    shard_name,
)
from transforms.contract.manifest import FileEntry
from transforms.prepare import EncodedChunk
from transforms.quality import check_dataset, check_rejections
from transforms.sink.manifest import build_manifest
from transforms.sink.publish import (
    Expected,
    abandon,
    create_file,
    delete_folder,
    publish,
)
from transforms.sink.spill import (
    Run,
    ShardPart,
    read_slice,
    run_folder,
    shard_bounds,
    write_runs,
)
from transforms.split import binary_offsets, shard_of

_BUFFER = 1 << 20
BLOCK_RECORDS = 4096  # records framed at a time
# encoded bytes a worker gathers before it sorts and spills them (`shardflow etl --spill-mb`)
RUN_BYTES = 32 << 20
PIECE_BYTES = 8 << 20  # encoded bytes of a shard that its writer reads and sorts at a time


def binary(payloads: Sequence[bytes] | pa.Array) -> pa.Array:
    """Payloads as an Arrow binary array (lists of bytes are converted)."""
    return payloads if isinstance(payloads, pa.Array) else pa.array(payloads, pa.binary())


def _mask(crc: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC-32C, of many CRCs at once."""
    crc = crc.astype(np.uint32)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)


def frame_records(payloads: Sequence[bytes] | pa.Array) -> bytes:
    """Each payload as a TFRecord, concatenated.

    A TFRecord is: length (u64), masked CRC-32C of the length, data, masked CRC-32C of the data.
    Headers and trailers are built for all records at once with numpy (the length's CRC once per
    distinct length); Arrow joins them with the payloads in one pass.
    """
    payloads = binary(payloads)
    n = len(payloads)
    if not n:
        return b""
    offsets = binary_offsets(payloads)
    crc = google_crc32c.value
    lengths = np.diff(offsets).astype("<u8")
    distinct, which = np.unique(lengths, return_inverse=True)
    length_crcs = np.array([crc(x.tobytes()) for x in distinct], np.uint32)
    # google_crc32c takes bytes only: one copy of this block's values, sliced per record
    data, first = payloads.buffers()[2], int(offsets[0])
    blob = data.slice(first, int(offsets[-1]) - first).to_pybytes() if data is not None else b""
    bounds = (offsets - first).tolist()
    data_crcs = np.fromiter((crc(blob[a:b]) for a, b in zip(bounds, bounds[1:])), np.uint32, n)
    heads = np.empty((n, 12), np.uint8)
    heads[:, :8] = lengths.view(np.uint8).reshape(n, 8)
    heads[:, 8:] = _mask(length_crcs)[which].astype("<u4").view(np.uint8).reshape(n, 4)
    tails = _mask(data_crcs).astype("<u4").view(np.uint8).reshape(n, 4)
    framed = pc.binary_join_element_wise(_fixed_width(heads), payloads, _fixed_width(tails), b"")
    size = int(offsets[-1] - offsets[0]) + 16 * n
    return framed.buffers()[2].slice(0, size).to_pybytes()


def _fixed_width(rows: np.ndarray) -> pa.Array:
    """The rows of a 2-d uint8 array as a binary array."""
    n, width = rows.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.BinaryArray.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(rows))]
    )


class RecordFileWriter:
    """Writes framed, optionally compressed TFRecords to a local or gs:// path.

    Tracks the written file's size and SHA-256. The gzip header zlib writes has no timestamp, so
    the same records give the same bytes.
    """

    def __init__(self, path: str, compression: str, level: int = DEFAULT_COMPRESSION_LEVEL):
        self.path = path
        self._file = FileSystems.create(
            path,
            mime_type="application/octet-stream",
            compression_type=CompressionTypes.UNCOMPRESSED,
        )
        wbits = COMPRESSIONS[compression].wbits
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, wbits) if wbits else None
        self._sha = hashlib.sha256()
        self._pending: list[bytes] = []
        self._pending_size = 0
        self.records = 0
        self.bytes = 0

    def write(self, payloads: Sequence[bytes] | pa.Array) -> None:
        """Appends records, framed, in blocks of about a megabyte."""
        payloads = binary(payloads)
        with self._abandoned_on_error():
            for start in range(0, len(payloads), BLOCK_RECORDS):
                block = payloads.slice(start, BLOCK_RECORDS)
                self._pending.append(frame_records(block))
                self._pending_size += len(self._pending[-1])
                self.records += len(block)
                if self._pending_size >= _BUFFER:
                    self._flush_pending()

    def _flush_pending(self) -> None:
        block = b"".join(self._pending)
        self._pending, self._pending_size = [], 0
        if self._compressor is not None:
            block = self._compressor.compress(block)
        self._emit(block)

    def _emit(self, block: bytes) -> None:
        if block:
            self._sha.update(block)
            self.bytes += len(block)
            self._file.write(block)

    @contextlib.contextmanager
    def _abandoned_on_error(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            abandon(self._file, self.path)
            raise

    def close(self) -> dict[str, Any]:
        with self._abandoned_on_error():
            self._flush_pending()
            if self._compressor is not None:
                self._emit(self._compressor.flush())
            self._file.close()
        return {"records": self.records, "bytes": self.bytes, "sha256": self._sha.hexdigest()}


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
        index = rows.tolist()
        yield (
            (int(chunk.split[first]), int(shards[first])),
            ShardPart(
                chunk.order_hash[rows],
                [chunk.key[i] for i in index] if chunk.key is not None else None,
                [chunk.order[i] for i in index] if chunk.order is not None else None,
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
    hashes = np.concatenate([np.asarray(p.order_hash, np.uint64) for p in parts] or [[]]).astype(
        np.uint64
    )
    arrays = [binary(p.payload) for p in parts]
    kind = pa.binary() if all(a.type == pa.binary() for a in arrays) else pa.large_binary()
    payloads = pa.chunked_array([a.cast(kind) for a in arrays], kind)
    order = np.argsort(hashes, kind="stable")
    keyed = bool(parts) and parts[0].key is not None
    keys = [k for p in parts for k in p.key] if keyed else None
    orders = [o for p in parts for o in p.order] if keyed else None
    # Runs of equal hashes (a key's duplicates; without a key, equal content but for a 2**-64
    # chance) are put in a canonical order: by key and provenance, or by content.
    runs = _equal_runs(hashes[order])
    if not runs and not keyed:
        return payloads, order, 0
    ranked = order.tolist()
    tie_key = (lambda i: (keys[i], orders[i])) if keyed else (lambda i: payloads[i].as_py())
    for start, stop in runs:
        ranked[start:stop] = sorted(ranked[start:stop], key=tie_key)
    if not keyed:
        return payloads, np.array(ranked, np.int64), 0
    out, duplicates, last_key = [], 0, None
    for i in ranked:
        if keys[i] == last_key:
            duplicates += 1
            continue
        last_key = keys[i]
        out.append(i)
    return payloads, np.array(out, np.int64), duplicates


def _equal_runs(values: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) of each run of two or more equal neighbours in a sorted array."""
    if len(values) < 2:
        return []
    equal = np.concatenate(([0], (values[1:] == values[:-1]).astype(np.int8), [0]))
    edges = np.diff(equal)
    return list(
        zip(np.flatnonzero(edges == 1).tolist(), (np.flatnonzero(edges == -1) + 1).tolist())
    )


class SpillRunsFn(beam.DoFn):
    """Sorts encoded records into run files under the staging folder; yields a `Run` for each.

    Records are gathered until about `budget` bytes, so that runs are few and large and a worker
    holds no more than that.
    """

    def __init__(self, staging: str, keyed: bool, budget: int = RUN_BYTES):
        self._folder = run_folder(staging)
        self._keyed = keyed
        self._budget = budget

    def start_bundle(self):
        self._chunks: list[EncodedChunk] = []
        self._size = 0

    def process(self, chunk: EncodedChunk):
        self._chunks.append(chunk)
        self._size += chunk.approx_bytes()
        if self._size >= self._budget:
            yield from self._spill()

    def finish_bundle(self):
        for run in self._spill():
            yield GlobalWindows.windowed_value(run)

    def _spill(self) -> Iterator[Run]:
        chunks, self._chunks, self._size = self._chunks, [], 0
        return write_runs(chunks, self._folder, self._keyed)  # which holds the chunks from now


def split_bytes(run: Run) -> tuple[int, int]:
    return run.split, run.payload_bytes


def shard_tasks(
    counts: list[int], runs: list[Run]
) -> Iterator[tuple[tuple[int, int, int, int], list[Run]]]:
    """((split, shard, shards in the split, pieces), the split's runs) for every shard.

    A shard is written in `pieces`, consecutive ranges of its order hashes of about PIECE_BYTES
    each, so that its writer never holds the whole shard.
    """
    by_split: dict[int, list[Run]] = {}
    for run in runs:
        by_split.setdefault(run.split, []).append(run)
    for split, count in enumerate(counts):
        split_runs = sorted(by_split.get(split, []), key=lambda r: r.path)
        shard_bytes = sum(r.payload_bytes for r in split_runs) / count
        pieces = max(1, math.ceil(shard_bytes / PIECE_BYTES))
        for shard in range(count):
            yield (split, shard, count, pieces), split_runs


def shard_pieces(shard: int, count: int, pieces: int) -> Iterator[tuple[int, int | None]]:
    """[low, high) of each piece of a shard's order hashes, in order (high None: to the end).

    Records with equal hashes (a key's duplicates) always fall in the same piece.
    """
    low, high = shard_bounds(shard, count)
    end = 1 << 64 if high is None else high
    bounds = [low + (end - low) * k // pieces for k in range(pieces)] + [high]
    yield from zip(bounds[:-1], bounds[1:])


def shard_parts(runs: list[Run], low: int, high: int | None) -> list[ShardPart]:
    """The records with order hashes in [low, high), from the slices of the runs that hold them."""
    parts = (read_slice(run, low, high) for run in runs)
    return [part for part in parts if part is not None]


class WriteShardFn(beam.DoFn):
    """Writes shards from the runs of their split; yields each shard's file facts.

    Shards are written on a few threads at once: reading, compression, hashing and file writes
    release the GIL, and each file's bytes depend only on its records. Once a shard fails, the
    bundle has failed: shards not yet started are not written (each could otherwise spend a
    whole retry deadline on a storage service that is down).
    """

    def __init__(self, staging: str, split_names: list[str], output: OutputSpec):
        self._staging = staging
        self._splits = split_names
        self._output = output

    def setup(self):
        self._pool = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1))

    def start_bundle(self):
        self._pending = []
        self._failed = threading.Event()  # a shard of this bundle failed

    def process(self, element):
        (split, shard, count, pieces), runs = element
        self._pending.append(
            self._pool.submit(self._write, split, shard, count, pieces, list(runs), self._failed)
        )

    def finish_bundle(self):
        pending, self._pending = self._pending, []
        for future in pending:  # in submission order: a failed shard's error comes first
            yield GlobalWindows.windowed_value(future.result())

    def teardown(self):
        self._pool.shutdown()

    def _write(self, split, shard, count, pieces, runs, failed) -> dict[str, Any]:
        name = shard_name(self._splits[split], shard, count, self._output.suffix)
        if failed.is_set():
            raise RuntimeError(f"{name}: not written, another shard of its bundle failed")
        try:
            writer = _writer(f"{self._staging}/{name}", self._output)
            duplicates = 0
            for low, high in shard_pieces(shard, count, pieces):
                payloads, ranked, dropped = shard_order(shard_parts(runs, low, high))
                duplicates += dropped
                for start in range(0, len(ranked), BLOCK_RECORDS):  # no second copy
                    block = payloads.take(ranked[start : start + BLOCK_RECORDS])
                    writer.write(block.combine_chunks())
                    progress.add("written", len(block))
            facts = writer.close()
        except BaseException:
            failed.set()
            raise
        return {"split": self._splits[split], "path": name, "duplicates": duplicates, **facts}


def _writer(path: str, output: OutputSpec) -> RecordFileWriter:
    return RecordFileWriter(path, output.compression, output.compression_level)


def write_rejected(staging: str, rejected: list[dict[str, Any]]) -> dict[str, Any]:
    """Writes all rejected records, in a stable order, as one JSON Lines file."""
    rejected = sorted(
        rejected, key=lambda r: (r["source"], _location_key(r["location"]), r["reason"])
    )
    name = REJECTED_FILE
    sha = hashlib.sha256()
    size = 0
    with create_file(f"{staging}/{name}", "application/x-ndjson") as f:
        for record in rejected:
            line = (json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n").encode(
                "utf-8", errors="backslashreplace"
            )
            sha.update(line)
            size += len(line)
            f.write(line)
    return {"path": name, "records": len(rejected), "bytes": size, "sha256": sha.hexdigest()}


def write_json(staging: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Writes one JSON file of the dataset; returns its manifest entry (path, bytes, sha256)."""
    data = (json.dumps(body, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    with create_file(f"{staging}/{name}", "application/json") as f:
        f.write(data)
    return {"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _location_key(loc: str) -> tuple:
    """Sorts `file:12` before `file:100`."""
    head, _, tail = loc.rpartition(":")
    return (head, int(tail)) if tail.isdigit() else (loc, 0)


class WriteShards(beam.PTransform):
    """Writes encoded chunks as sized, sorted, deduplicated shards under `staging`.

    Returns (shard facts, shard counts per split as a one-element PCollection). `spill_bytes`:
    the encoded bytes a worker gathers before it sorts and spills them.
    """

    def __init__(self, dataset: DatasetSpec, staging: str, spill_bytes: int = RUN_BYTES):
        super().__init__()
        self._dataset = dataset
        self._staging = staging
        self._spill_bytes = spill_bytes

    def expand(self, encoded):
        out = self._dataset.output
        num_splits = len(self._dataset.splits)
        shard_bytes = out.shard_size_mb * 1024 * 1024
        runs = encoded | "SpillRuns" >> beam.ParDo(
            SpillRunsFn(self._staging, self._dataset.key is not None, self._spill_bytes)
        ).with_output_types(Run)
        counts = (
            runs
            | "MeasureSplits" >> beam.Map(split_bytes)
            | "SumSplitBytes" >> beam.CombinePerKey(sum)
            | "CollectSplitBytes" >> beam.combiners.ToDict()
            | "CountShards" >> beam.Map(shard_counts, num_splits, shard_bytes)
        )
        facts = (
            counts
            | "PlanShards" >> beam.FlatMap(shard_tasks, beam.pvalue.AsList(runs))
            | "SpreadShards" >> beam.Reshuffle()
            | "WriteShard"
            >> beam.ParDo(WriteShardFn(self._staging, list(self._dataset.split_names), out))
        )
        return facts, counts


class _PublishFn(beam.DoFn):
    def __init__(self, dataset: DatasetSpec, staging: str, expected: Expected):
        self._dataset = dataset
        self._staging = staging
        self._expected = expected

    def process(self, _, shards, shard_count, rejected, counts, transform=None, statistics=None):
        out = self._dataset.output
        shards = list(shards)
        expected = {
            shard_name(split, index, n, out.suffix)
            for split, n in zip(self._dataset.split_names, shard_count)
            for index in range(n)
        }
        written = sorted(s["path"] for s in shards)
        if sorted(expected) != written:  # every shard is written once, if empty, or the run fails
            raise RuntimeError(
                f"shards written {written} differ from those planned {sorted(expected)}"
            )
        delete_folder(run_folder(self._staging))
        rejected = list(rejected)
        rejected_file = write_rejected(self._staging, rejected)
        reasons = Counter(r["reason"] for r in rejected)
        counts = dict(counts)
        manifest = build_manifest(self._dataset, shards, rejected_file, reasons, counts, transform)
        if statistics is not None:
            body = statistics.to_json(self._dataset.split_names)
            entry = write_json(self._staging, STATISTICS, body)
            manifest = manifest.with_statistics(FileEntry(**entry))
        check_dataset(self._dataset, manifest, counts, rejected)
        check_rejections(self._dataset, manifest)
        publish(self._staging, out.path, manifest, self._expected)
        yield manifest


class PublishDataset(beam.PTransform):
    """Completes the staged dataset (empty shards, rejected file, manifest) and publishes it.

    `transform`, when the dataset has a tf.Transform, is a one-element PCollection holding the
    manifest's `transform` section; publication waits for it (the transform is written under
    the staging folder too, and published with the rest). `expected` is what publication may
    replace at OUTPUT (`transforms.sink.publish.expect`, taken when the run started; by default
    nothing).
    """

    def __init__(
        self,
        dataset: DatasetSpec,
        staging: str,
        shards,
        shard_count,
        rejected,
        counts,
        transform=None,
        statistics=None,
        expected: Expected = Expected(),
    ):
        super().__init__()
        self._dataset = dataset
        self._staging = staging
        self._expected = expected
        self._inputs = (shards, shard_count, rejected, counts, transform, statistics)

    def expand(self, pbegin):
        shards, shard_count, rejected, counts, transform, statistics = self._inputs
        side_inputs = [
            beam.pvalue.AsList(shards),
            beam.pvalue.AsSingleton(shard_count),
            beam.pvalue.AsList(rejected),
            beam.pvalue.AsDict(counts),
        ]
        if transform is not None:
            side_inputs.append(beam.pvalue.AsSingleton(transform))
        extra = {}
        if statistics is not None:
            extra["statistics"] = beam.pvalue.AsSingleton(statistics)
        expected = self._expected
        if pbegin.pipeline.options.view_as(GoogleCloudOptions).template_location:
            # a template runs later, maybe many times: what OUTPUT holds now binds none of them
            expected = expected.unpinned()
        publish_fn = _PublishFn(self._dataset, self._staging, expected)
        return (
            pbegin
            | "Start" >> beam.Create([None])
            | "WriteManifestAndPublish" >> beam.ParDo(publish_fn, *side_inputs, **extra)
        )
