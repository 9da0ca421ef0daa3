"""The Beam steps that write a dataset's shards under the staging folder.

Shard counts are known only once every record is encoded. So workers first sort encoded
records, a few tens of megabytes at a time, into spill files under the staging folder
(`SpillFn`, `transforms.sink.spill`); once the counts are known, each shard is written from
the slices of its split's spill files that hold its order hashes (`WriteShardFn`, the maths in
`transforms.shards`). `transforms.sink.finalize` completes and publishes the dataset.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from transforms import progress
from transforms.contract.config import DatasetSpec, OutputSpec
from transforms.contract.layout import shard_name
from transforms.prepare import EncodedChunk
from transforms.shards import shard_counts, shard_order, shard_pieces
from transforms.sink.framing import BLOCK_RECORDS, RecordFileWriter
from transforms.sink.spill import (
    SpillFile,
    shard_parts,
    shard_tasks,
    spill_folder,
    split_bytes,
    write_spill_files,
)

# encoded bytes a worker gathers before it sorts and spills them (`shardflow etl --spill-mb`)
SPILL_BYTES = 32 << 20


class SpillFn(beam.DoFn):
    """Sorts encoded records into spill files under the staging folder; yields a `SpillFile` for
    each.

    Records are gathered until about `budget` bytes, so that spill files are few and large and a
    worker holds no more than that.
    """

    def __init__(self, staging: str, keyed: bool, budget: int = SPILL_BYTES):
        self._folder = spill_folder(staging)
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
        for spill in self._spill():
            yield GlobalWindows.windowed_value(spill)

    def _spill(self) -> Iterator[SpillFile]:
        chunks, self._chunks, self._size = self._chunks, [], 0
        # write_spill_files holds the chunks from now on: this DoFn keeps no other reference
        return write_spill_files(chunks, self._folder, self._keyed)


class WriteShardFn(beam.DoFn):
    """Writes shards from the spills of their split; yields each shard's file facts.

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
        (split, shard, count, pieces), spills = element
        self._pending.append(
            self._pool.submit(self._write, split, shard, count, pieces, list(spills), self._failed)
        )

    def finish_bundle(self):
        pending, self._pending = self._pending, []
        for future in pending:  # in submission order: a failed shard's error comes first
            yield GlobalWindows.windowed_value(future.result())

    def teardown(self):
        self._pool.shutdown()

    def _write(self, split, shard, count, pieces, spills, failed) -> dict[str, Any]:
        name = shard_name(self._splits[split], shard, count, self._output.suffix)
        if failed.is_set():
            raise RuntimeError(f"{name}: not written, another shard of its bundle failed")
        try:
            writer = _writer(f"{self._staging}/{name}", self._output)
            duplicates = 0
            for low, high in shard_pieces(shard, count, pieces):
                payloads, ranked, dropped = shard_order(shard_parts(spills, low, high))
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


class WriteShards(beam.PTransform):
    """Writes encoded chunks as sized, sorted, deduplicated shards under `staging`.

    Returns (shard facts, shard counts per split as a one-element PCollection). `spill_bytes`:
    the encoded bytes a worker gathers before it sorts and spills them.
    """

    def __init__(self, dataset: DatasetSpec, staging: str, spill_bytes: int = SPILL_BYTES):
        super().__init__()
        self._dataset = dataset
        self._staging = staging
        self._spill_bytes = spill_bytes

    def expand(self, encoded):
        out = self._dataset.output
        num_splits = len(self._dataset.splits)
        shard_bytes = out.shard_size_mb * 1024 * 1024
        spills = encoded | "Spill" >> beam.ParDo(
            SpillFn(self._staging, self._dataset.key is not None, self._spill_bytes)
        ).with_output_types(SpillFile)
        counts = (
            spills
            | "MeasureSplits" >> beam.Map(split_bytes)
            | "SumSplitBytes" >> beam.CombinePerKey(sum)
            | "CollectSplitBytes" >> beam.combiners.ToDict()
            | "CountShards" >> beam.Map(shard_counts, num_splits, shard_bytes)
        )
        facts = (
            counts
            | "PlanShards" >> beam.FlatMap(shard_tasks, beam.pvalue.AsList(spills))
            | "SpreadShards" >> beam.Reshuffle()
            | "WriteShard"
            >> beam.ParDo(WriteShardFn(self._staging, list(self._dataset.split_names), out))
        )
        return facts, counts
