"""The Beam steps of record preparation: `PrepareRecords` validates, encodes and assigns splits
to chunks of records (`transforms.prepare`, which imports no Beam: `shardflow predict` and
`init` prepare records with it outside a pipeline), and `MergeStats` merges the statistics of
its bundles.
"""

from __future__ import annotations

from typing import Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

import transforms.coders  # noqa: F401 - registers the coders of the chunks made here
from transforms import progress
from transforms.contract.config import DatasetSpec
from transforms.keys import KeyMaker
from transforms.prepare import Encoder, Preparer, batch_of_chunk
from transforms.records import FACTS, REJECTED, STATS, EncodedChunk, RawChunk, gc_paused
from transforms.stats import DatasetStats
from transforms.tuning import ENCODE_THREADS


class EncodingFn(beam.DoFn):
    """A step that validates records and encodes them with its worker's `Encoder` (its helper
    threads started per bundle, its last chunk, statistics and facts given at the bundle's end:
    `finish_encoding`); a subclass's `process` yields what `self._encoder.push` gives."""

    def __init__(self, dataset: DatasetSpec, staging: str, threads: int):
        self._dataset = dataset
        self._staging = staging
        self._threads = threads

    def setup(self):
        self._preparer = Preparer(self._dataset)
        self._encoder = Encoder(self._preparer, self._threads, self._staging)

    def start_bundle(self):
        self._encoder.start()

    def finish_bundle(self):
        yield from finish_encoding(self._encoder)

    def teardown(self):
        self._encoder.close()


class _PrepareChunkFn(EncodingFn):
    """Union: validates and encodes each chunk of one source."""

    def setup(self):
        super().setup()
        self._key_maker = KeyMaker(self._dataset) if self._dataset.key is not None else None
        self._source_index = {name: i for i, name in enumerate(self._dataset.source_names)}
        self._patterns = {s.name: s.path for s in self._dataset.sources}

    def process(self, chunk: RawChunk):
        with gc_paused():
            batch, rejected = batch_of_chunk(
                chunk, self._source_index[chunk.source], self._key_maker,
                self._patterns[chunk.source],
            )  # fmt: skip
            valid, invalid = self._preparer.validate(batch)
        for r in rejected + invalid:
            yield beam.pvalue.TaggedOutput(REJECTED, r)
        yield from self._encoder.push(valid)


def finish_encoding(encoder: Encoder) -> Iterator:
    """The finish_bundle outputs of a step that encodes with `encoder`: its last chunk, then
    the bundle's merged statistics as the STATS output and the (bucket, piece) pairs of its
    facts spill files (`transforms.facts.spill`) as the FACTS output (once per bundle: far
    fewer elements than one per chunk)."""
    for encoded in encoder.flush():
        yield GlobalWindows.windowed_value(encoded)
    if encoder.stats.records:
        yield beam.pvalue.TaggedOutput(STATS, GlobalWindows.windowed_value(encoder.stats))
    for piece in encoder.spilled_facts():
        yield beam.pvalue.TaggedOutput(FACTS, GlobalWindows.windowed_value(piece))


class PrepareRecords(beam.PTransform):
    """Validates, encodes and assigns splits to chunks of records.

    Returns (encoded, rejected, statistics: DatasetStats of bundles, to be merged, facts:
    (bucket, FactsPiece) of the facts spill files written under `staging`, to be analyzed:
    `transforms.facts.AnalyzeFacts`). `encode_threads`: the helper threads of each worker's
    `Encoder`."""

    def __init__(self, dataset: DatasetSpec, staging: str, encode_threads: int = ENCODE_THREADS):
        super().__init__()
        self._dataset = dataset
        self._staging = staging
        self._encode_threads = encode_threads

    def expand(self, chunks):
        out = chunks | "ValidateAndEncode" >> beam.ParDo(
            _PrepareChunkFn(self._dataset, self._staging, self._encode_threads)
        ).with_output_types(EncodedChunk).with_outputs(REJECTED, STATS, FACTS, main="encoded")
        return out.encoded, out[REJECTED], out[STATS], out[FACTS]


class MergeStats(beam.CombineFn):
    """Merges the chunks' DatasetStats into one; the merges of the workers' statistics are
    timed as the finishing step `statistics merge` (`transforms.progress`)."""

    def create_accumulator(self) -> DatasetStats:
        return DatasetStats()

    def add_input(self, accumulator: DatasetStats, stats: DatasetStats) -> DatasetStats:
        return accumulator.merge(stats)

    def merge_accumulators(self, accumulators) -> DatasetStats:
        with progress.timed("statistics merge"):
            merged = DatasetStats()
            for accumulator in accumulators:
                merged.merge(accumulator)
        return merged

    def extract_output(self, accumulator: DatasetStats) -> DatasetStats:
        return accumulator
