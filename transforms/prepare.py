"""Validation, keying, encoding and split assignment of records, a chunk at a time.

The output of this stage, `EncodedChunk`, is everything the writer needs: per record its split,
its order hash, its key (for dropping duplicates) and its serialized `tf.train.Example`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam import coders
from apache_beam.transforms.window import GlobalWindows

from transforms import encode
from transforms.contract.config import DatasetSpec
from transforms.records import (
    REJECTED,
    STATS,
    ChunkCoder,
    RawChunk,
    gc_paused,
    location,
    rejection,
)
from transforms.schema import RecordError, SourceColumns, Validator, coerce_feature
from transforms.split import SplitAssigner, binary_values, record_hashes
from transforms.stats import DatasetStats, chunk_stats


@dataclasses.dataclass
class Batch:
    """Records ready for validation: each source's fields as columns, plus provenance.

    `describe(i)` gives (source, location, raw text) of record i, for the rejected output; it is
    called only for rejected records.
    """

    size: int
    tables: dict[str, SourceColumns]
    keys: list[str] | None
    order: Callable[[int], tuple]  # (source index, path, line) of record i
    describe: Callable[[int], tuple[str, str, str]]


@dataclasses.dataclass
class EncodedChunk:
    """Validated, encoded records with their split and order hash, as parallel sequences."""

    split: np.ndarray  # int16 split index per record
    order_hash: np.ndarray  # uint64
    key: list[str] | None
    order: list[tuple] | None  # provenance, kept for keyed datasets only
    payload: pa.BinaryArray

    def __len__(self) -> int:
        return len(self.payload)

    def approx_bytes(self) -> int:
        return self.payload.nbytes + 16 * len(self.payload)


coders.registry.register_coder(EncodedChunk, ChunkCoder)


class KeyMaker:
    """The canonical text of a record's key: typed like its feature when the key is a feature.

    Otherwise: text as it is, bytes (TFRecord, Parquet binary) as UTF-8 text, numbers as `str`
    gives them (`7`, `7.5`, `inf`), booleans as `True`/`False`, and lists and objects as their
    ASCII JSON with sorted keys (bytes in them as UTF-8 text, other values as `str`: a TFRecord
    field is a list of bytes, a Parquet one may hold dates or decimals). A key must be valid
    text, because it is hashed and written as UTF-8: a value holding undecodable input (a lone
    surrogate, e.g. a CSV byte that is not UTF-8 or a JSON `"\\udc80"` escape) rejects its
    record with `KEY: not valid text`.
    """

    def __init__(self, dataset: DatasetSpec):
        self.field = dataset.key
        self._feature = None
        if dataset.key is not None:
            for f in dataset.features:
                if f.name == dataset.key and f.is_scalar:
                    self._feature = f

    def keys(self, chunk: RawChunk) -> tuple[list[str | None], list[dict]]:
        """The key of every record of a chunk (None where it has none), and the records rejected."""
        values = chunk.values(self.field)
        keys: list[str | None] = []
        rejected = []
        for i, value in enumerate(values):
            try:
                keys.append(self(value))
            except RecordError as e:
                keys.append(None)
                rejected.append(
                    rejection(
                        chunk.source, location(chunk.path, chunk.lines[i]), e.reason, chunk.raw(i)
                    )
                )
        return keys, rejected

    def __call__(self, value: Any) -> str:
        if value is None:
            raise RecordError(f"{self.field}: missing key")
        if self._feature is not None:
            value = coerce_feature(self._feature, value)[0]
        if isinstance(value, bytes):
            text = self._text(value)
        elif isinstance(value, (dict, list)):
            text = json.dumps(value, sort_keys=True, default=self._json)
        else:
            text = str(value)
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise RecordError(f"{self.field}: not valid text") from None
        return text

    def _text(self, value: bytes) -> str:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise RecordError(f"{self.field}: not valid text") from None

    def _json(self, value: Any) -> Any:
        return self._text(value) if isinstance(value, bytes) else str(value)


def batch_of_chunk(
    chunk: RawChunk, source_index: int, key_maker: KeyMaker | None
) -> tuple[Batch, list[dict]]:
    """The batch of one source's chunk (union), and the rejected records that have no key."""
    rejected: list[dict] = []
    keys = None
    if key_maker is not None:
        keys, rejected = key_maker.keys(chunk)
        if rejected:
            keep = [i for i, key in enumerate(keys) if key is not None]
            chunk = chunk.take(keep)
            keys = [keys[i] for i in keep]
    src, path, lines = chunk.source, chunk.path, chunk.lines
    batch = Batch(
        size=len(chunk),
        tables={src: SourceColumns(chunk.columns, chunk.text)},
        keys=keys,
        order=lambda i: (source_index, path, lines[i]),
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
        kept = range(batch.size)
        if reasons:
            kept = [i for i in kept if i not in reasons]
            keep = pa.array([i not in reasons for i in range(batch.size)])
            columns = [c.filter(keep) for c in columns]
        if not kept:
            empty = np.zeros(0, np.uint64)
            keyed = [] if self._keyed else None
            payloads = pa.array([], pa.binary())
            encoded = EncodedChunk(empty.astype(np.int16), empty, keyed, keyed, payloads)
            return encoded, rejected, DatasetStats()
        payloads = encode.encode_columns(self._names, columns)
        keys = [batch.keys[i] for i in kept] if self._keyed else None
        split_hashes, order_hashes = record_hashes(
            [k.encode("utf-8") for k in keys] if self._keyed else binary_values(payloads)
        )
        order = [batch.order(i) for i in kept] if self._keyed else None
        splits = self._assign(split_hashes)
        stats = chunk_stats(self._names, self._types, columns, splits)
        return EncodedChunk(splits, order_hashes, keys, order, payloads), rejected, stats


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
