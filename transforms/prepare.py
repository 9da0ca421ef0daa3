"""Validation, keying, encoding and split assignment of records, a chunk at a time.

The output of this stage, `EncodedChunk`, is everything the writer needs: per record its split,
its order hash, its key (for dropping duplicates) and its serialized `tf.train.Example`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam import coders
from apache_beam.transforms.window import GlobalWindows

from transforms import encode
from transforms.contract.config import DatasetSpec
from transforms.keys import KeyMaker, key_columns
from transforms.records import REJECTED, STATS, ChunkCoder, RawChunk, gc_paused, location, rejection
from transforms.schema import SourceColumns, Validator
from transforms.split import SplitAssigner, record_hashes
from transforms.stats import DatasetStats, chunk_stats


@dataclasses.dataclass
class Batch:
    """Records ready for validation: each source's fields as columns, plus (keyed datasets)
    the key and provenance of each record (`transforms.keys.KEYS`).

    `describe(i)` gives (source, location, raw text) of record i, for the rejected output; it is
    called only for rejected records.
    """

    size: int
    tables: dict[str, SourceColumns]
    keys: pa.RecordBatch | None
    describe: Callable[[int], tuple[str, str, str]]


@dataclasses.dataclass
class EncodedChunk:
    """Validated, encoded records with their split and order hash, as parallel sequences."""

    split: np.ndarray  # int16 split index per record
    order_hash: np.ndarray  # uint64
    keys: pa.RecordBatch | None  # keyed datasets: key and provenance (transforms.keys.KEYS)
    payload: pa.BinaryArray

    def __len__(self) -> int:
        return len(self.payload)

    def approx_bytes(self) -> int:
        return self.payload.nbytes + 16 * len(self.payload)


coders.registry.register_coder(EncodedChunk, ChunkCoder)


def batch_of_chunk(
    chunk: RawChunk, source_index: int, key_maker: KeyMaker | None
) -> tuple[Batch, list[dict]]:
    """The batch of one source's chunk (union), and the rejected records that have no key."""
    rejected: list[dict] = []
    keys = None
    if key_maker is not None:
        texts, rejected = key_maker.keys(chunk)
        if rejected:
            valid = texts.is_valid()
            chunk = chunk.take(pc.indices_nonzero(valid).to_pylist())
            texts = texts.filter(valid)
        keys = key_columns(texts, source_index, chunk.lines, [chunk.path])
    src, path, lines = chunk.source, chunk.path, chunk.lines
    batch = Batch(
        size=len(chunk),
        tables={src: SourceColumns(chunk.columns, chunk.text)},
        keys=keys,
        describe=lambda i: (src, location(path, lines[i]), chunk.raw(i)),
    )
    return batch, rejected


class Preparer:
    """Validates and encodes records into an `EncodedChunk` plus rejected-record dicts."""

    def __init__(self, dataset: DatasetSpec):
        delimiters = {
            s.name: s.options["list_delimiter"] for s in dataset.sources if s.format == "csv"
        }
        self._validator = Validator(dataset.features, dataset.source_names, delimiters)
        self._features = dataset.features
        self._names = [f.name for f in dataset.features]
        self._types = [f.type for f in dataset.features]
        self._assign = SplitAssigner([fraction for _, fraction in dataset.splits])
        self._keyed = dataset.key is not None

    def prepare(self, batch: Batch) -> tuple[EncodedChunk, list[dict], DatasetStats]:
        """(the valid records encoded, the rejected ones, the statistics of the valid ones)."""
        columns, reasons = self._validator.validate(batch.size, batch.tables)
        rejected = []
        for i, reason in sorted(reasons.items()):
            source, where, raw = batch.describe(i)
            rejected.append(rejection(source, where, reason, raw))
        keys = batch.keys
        if reasons:
            keep = np.ones(batch.size, bool)
            keep[list(reasons)] = False
            keep = pa.array(keep)
            columns = [c.filter(keep) for c in columns]
            keys = keys.filter(keep) if keys is not None else None
        if len(reasons) == batch.size:
            empty = np.zeros(0, np.uint64)
            payloads = pa.array([], pa.binary())
            encoded = EncodedChunk(empty.astype(np.int16), empty, keys, payloads)
            return encoded, rejected, DatasetStats()
        payloads = encode.encode_columns(self._names, columns)
        split_hashes, order_hashes = record_hashes(keys.column("key") if self._keyed else payloads)
        splits = self._assign(split_hashes)
        stats = chunk_stats(self._names, self._types, columns, splits)
        return EncodedChunk(splits, order_hashes, keys, payloads), rejected, stats


class _PrepareChunkFn(beam.DoFn):
    """Union: validates and encodes each chunk of one source."""

    def __init__(self, dataset: DatasetSpec):
        self._dataset = dataset

    def setup(self):
        self._preparer = Preparer(self._dataset)
        self._key_maker = KeyMaker(self._dataset) if self._dataset.key is not None else None
        self._source_index = {name: i for i, name in enumerate(self._dataset.source_names)}

    def start_bundle(self):
        self._stats = DatasetStats()

    def process(self, chunk: RawChunk):
        with gc_paused():
            batch, rejected = batch_of_chunk(
                chunk, self._source_index[chunk.source], self._key_maker
            )
            encoded, invalid, stats = self._preparer.prepare(batch)
            self._stats.merge(stats)
        for r in rejected + invalid:
            yield beam.pvalue.TaggedOutput(REJECTED, r)
        if len(encoded):
            yield encoded

    def finish_bundle(self):
        yield from bundle_stats(self._stats)


def bundle_stats(stats: DatasetStats) -> Iterator[beam.pvalue.TaggedOutput]:
    """A bundle's merged statistics, as the STATS output of its finish_bundle (once per bundle:
    far fewer elements than one per chunk)."""
    if stats.records:
        yield beam.pvalue.TaggedOutput(STATS, GlobalWindows.windowed_value(stats))


class PrepareRecords(beam.PTransform):
    """Validates, encodes and assigns splits to chunks of records.

    Returns (encoded, rejected, statistics: DatasetStats of bundles, to be merged)."""

    def __init__(self, dataset: DatasetSpec):
        super().__init__()
        self._dataset = dataset

    def expand(self, chunks):
        out = chunks | "ValidateAndEncode" >> beam.ParDo(
            _PrepareChunkFn(self._dataset)
        ).with_output_types(EncodedChunk).with_outputs(REJECTED, STATS, main="encoded")
        return out.encoded, out[REJECTED], out[STATS]
