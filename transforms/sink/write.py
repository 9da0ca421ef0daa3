"""The Beam steps that write a dataset's shards under the staging folder.

Shard counts are known only once every record is encoded. So workers first sort encoded
records, a few tens of megabytes at a time, into spill files under the staging folder
(`SpillFn`, `transforms.sink.spill`). Once the counts are known, each shard is written in
pieces, consecutive ranges of its order hashes (the maths in `transforms.shards`), each from
the slices of its split's spill files that hold them; the pieces of all shards are written in
parallel (`WritePieceFn`), those of a shard as compressed segments that one light step per
shard then joins into its file (`join_shard`, `transforms.sink.segments`). So even a dataset
of one or two shards is compressed by as many workers as it has pieces (of about 8 MB).
`transforms.sink.finalize` completes and publishes the dataset.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from transforms import progress
from transforms.contract.config import DatasetSpec, OutputSpec
from transforms.contract.layout import segment_name, shard_name
from transforms.records import EncodedChunk, PieceTask, ShardFile
from transforms.shards import shard_counts, shard_order, shard_pieces
from transforms.sink.framing import BLOCK_RECORDS, RecordFileWriter
from transforms.sink.segments import join_segments
from transforms.sink.spill import (
    PIECE_BYTES,
    SpillFile,
    piece_tasks,
    shard_parts,
    spill_folder,
    split_bytes,
    split_spills,
    write_spill_files,
)
from transforms.tuning import SPILL_BYTES, WRITE_THREADS


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

    def start_bundle(self) -> None:
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


class WritePieceFn(beam.DoFn):
    """Writes pieces of shards from the spills of their split (a side input); yields each
    piece's facts.

    A piece is read, sorted and deduplicated alone (a key's records share an order hash, hence a
    piece): writing it holds that piece's records (about PIECE_BYTES of encoded records, with
    their keys and provenance) and a megabyte of framed ones. The piece of a one-piece shard is
    the whole shard, written to its file; other pieces are written as segments of their shard
    (`transforms.sink.segments`), joined by `join_shard` once all are written.

    Pieces are written on `threads` threads at once (at most one per core), so a worker holds up
    to that many pieces:
    reading, compression, hashing and file writes release the GIL, and each segment's bytes
    depend only on its records. Once a piece fails, the bundle has failed: pieces not yet
    started are not written (each could otherwise spend a whole retry deadline on a storage
    service that is down).
    """

    def __init__(
        self, staging: str, split_names: list[str], output: OutputSpec, threads: int = WRITE_THREADS
    ):
        self._staging = staging
        self._splits = split_names
        self._output = output
        self._threads = threads

    def setup(self):
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(self._threads, os.cpu_count() or 1)))

    def start_bundle(self):
        self._pending = []
        self._failed = threading.Event()  # a piece of this bundle failed

    def process(self, task: PieceTask, spills):
        self._pending.append(self._pool.submit(self._write, task, spills, self._failed))

    def finish_bundle(self):
        pending, self._pending = self._pending, []
        for future in pending:  # in submission order: a failed piece's error comes first
            yield GlobalWindows.windowed_value(future.result())

    def teardown(self):
        self._pool.shutdown()

    def _write(self, task: PieceTask, spills, failed) -> dict[str, Any]:
        split, shard, count, pieces, piece = task
        name = shard_name(self._splits[split], shard, count, self._output.suffix)
        segment = segment_name(name, piece) if pieces > 1 else None
        if failed.is_set():
            raise RuntimeError(
                f"{segment or name}: not written, another piece of its bundle failed"
            )
        try:
            low, high = list(shard_pieces(shard, count, pieces))[piece]
            parts = shard_parts(split_spills(spills, split), low, high)
            payloads, ranked, duplicates = shard_order(parts)  # the spill slices, in order
            out = self._output
            writer = RecordFileWriter(
                f"{self._staging}/{segment or name}",
                out.compression,
                out.compression_level,
                segment=segment is not None,
                last=piece == pieces - 1,
            )
            for start in range(0, len(ranked), BLOCK_RECORDS):  # no second copy
                block = payloads.take(ranked[start : start + BLOCK_RECORDS])
                writer.write(block.combine_chunks())
                progress.add("written", len(block))
            facts = writer.close()
        except BaseException:
            failed.set()
            raise
        return {
            "split": self._splits[split],
            "path": name,
            "piece": piece,
            "pieces": pieces,
            "segment": segment,
            "duplicates": duplicates,
            **facts,
        }


def join_shard(
    item: tuple[str, Iterable[dict[str, Any]]], staging: str, output: OutputSpec
) -> ShardFile:
    """The shard from the facts of its pieces; a shard of several pieces is first joined from
    its segments (`join_segments`)."""
    name, pieces = item
    pieces = sorted(pieces, key=lambda p: p["piece"])
    if [p["piece"] for p in pieces] != list(range(pieces[0]["pieces"])):
        raise RuntimeError(f"{name}: pieces {[p['piece'] for p in pieces]} written, not all")
    split, records = pieces[0]["split"], sum(p["records"] for p in pieces)
    duplicates = sum(p["duplicates"] for p in pieces)
    if len(pieces) == 1:  # written whole
        size, sha256 = pieces[0]["bytes"], pieces[0]["sha256"]
    else:
        segments = [{**p, "file": f"{staging}/{p['segment']}"} for p in pieces]
        joined = join_segments(
            f"{staging}/{name}", segments, output.compression, output.compression_level
        )
        size, sha256 = joined["bytes"], joined["sha256"]
    return ShardFile(split, name, records, duplicates, size, sha256)


class WriteShards(beam.PTransform):
    """Writes encoded chunks as sized, sorted, deduplicated shards under `staging`.

    Returns (shard facts, shard counts per split as a one-element PCollection). `spill_bytes`:
    the encoded bytes a worker gathers before it sorts and spills them (the shards' bytes are the
    same whatever it is). `piece_bytes`: the encoded bytes of a shard's piece (a segment), which
    bounds a writer's memory and sets the parallelism of a few large shards; it changes the
    compressed bytes of a shard of several pieces (never its records). `write_threads`: the
    pieces a worker process writes at once.
    """

    def __init__(
        self,
        dataset: DatasetSpec,
        staging: str,
        spill_bytes: int = SPILL_BYTES,
        piece_bytes: int = PIECE_BYTES,
        write_threads: int = WRITE_THREADS,
    ):
        super().__init__()
        self._dataset = dataset
        self._staging = staging
        self._spill_bytes = spill_bytes
        self._piece_bytes = piece_bytes
        self._write_threads = write_threads

    def expand(self, encoded):
        out = self._dataset.output
        num_splits = len(self._dataset.splits)
        shard_bytes = out.shard_bytes
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
        # Pieces travel as numbers: the spills' descriptions, which each piece reads from, are a
        # side input, sent to a worker once rather than with each piece.
        all_spills = beam.pvalue.AsList(spills)
        write_fn = WritePieceFn(
            self._staging, list(self._dataset.split_names), out, self._write_threads
        )
        facts = (
            counts
            | "PlanPieces" >> beam.FlatMap(piece_tasks, all_spills, self._piece_bytes)
            | "SpreadPieces" >> beam.Reshuffle()
            | "WritePiece" >> beam.ParDo(write_fn, all_spills)
            | "ByShard" >> beam.Map(lambda piece: (piece["path"], piece))
            | "GatherPieces" >> beam.GroupByKey()
            | "JoinShard" >> beam.Map(join_shard, self._staging, out)
        )
        return facts, counts
