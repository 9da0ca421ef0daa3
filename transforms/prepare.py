"""Validation, keying, encoding and split assignment of records, a chunk at a time.

The output of this stage, `EncodedChunk`, is everything the writer needs: per record its split,
its order hash, its key (for dropping duplicates) and its serialized `tf.train.Example`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Iterator, NamedTuple

import apache_beam as beam

from transforms import encode
from transforms.records import REJECTED, RawChunk, location, rejection
from transforms.schema import RecordError, Validator, coerce_feature
from transforms.spec import DatasetSpec
from transforms.split import SplitAssigner, record_hash


class Record(NamedTuple):
    """A record ready for validation: its fields per source and its provenance."""

    parts: dict[str, dict[str, Any]]
    order: tuple  # (source index, path, record number): the tie-breaker among duplicates
    source: str
    location: str
    raw: str
    key: str | None


@dataclasses.dataclass
class EncodedChunk:
    """Validated, encoded records with their split and order hash, as parallel lists."""

    split: list[int]
    order_hash: list[int]
    key: list[str] | None
    order: list[tuple]
    payload: list[bytes]

    def __len__(self) -> int:
        return len(self.payload)


class KeyMaker:
    """The canonical text of a record's key: typed like its feature when the key is a feature."""

    def __init__(self, dataset: DatasetSpec):
        self.field = dataset.key
        self._feature = None
        if dataset.key is not None:
            for f in dataset.features:
                if f.name == dataset.key and f.is_scalar:
                    self._feature = f

    def __call__(self, value: Any) -> str:
        if value is None:
            raise RecordError(f"{self.field}: missing key")
        if self._feature is not None:
            typed = coerce_feature(self._feature, value)[0]
            return typed.decode("utf-8") if isinstance(typed, bytes) else str(typed)
        if isinstance(value, (dict, list)):
            return json.dumps(value, sort_keys=True)
        return str(value)


def records_of_chunk(
    chunk: RawChunk, source_index: int, key_maker: KeyMaker | None
) -> Iterator[Record | dict]:
    """The records of one source's chunk (union), or rejected dicts for records without key."""
    src, path = chunk.source, chunk.path
    for row in chunk.rows:
        key = None
        if key_maker is not None:
            try:
                key = key_maker(row.fields.get(key_maker.field))
            except RecordError as e:
                yield rejection(src, location(path, row.line), e.reason, row.raw)
                continue
        yield Record(
            {src: row.fields},
            (source_index, path, row.record_no),
            src,
            location(path, row.line),
            row.raw,
            key,
        )


class Preparer:
    """Validates and encodes records into an `EncodedChunk` plus rejected-record dicts."""

    def __init__(self, dataset: DatasetSpec):
        delimiters = {
            s.name: s.options["list_delimiter"] for s in dataset.sources if s.format == "csv"
        }
        self._validator = Validator(dataset.features, dataset.source_names, delimiters)
        self._features = dataset.features
        self._assign = SplitAssigner([fraction for _, fraction in dataset.splits])
        self._keyed = dataset.key is not None

    def prepare(self, records: Iterable[Record]) -> tuple[EncodedChunk, list[dict]]:
        validate = self._validator.validate
        columns: list[list] = [[] for _ in self._features]
        kept: list[Record] = []
        rejected = []
        for record in records:
            try:
                values = validate(record.parts)
            except RecordError as e:
                rejected.append(rejection(record.source, record.location, e.reason, record.raw))
                continue
            for column, value in zip(columns, values):
                column.append(value)
            kept.append(record)
        if not kept:
            return EncodedChunk([], [], [] if self._keyed else None, [], []), rejected
        arrays = [encode.to_list_array(f.type, col) for f, col in zip(self._features, columns)]
        payloads = encode.encode_columns([f.name for f in self._features], arrays)
        splits, hashes = [], []
        for record, payload in zip(kept, payloads):
            split_hash, order_hash = record_hash(
                record.key.encode("utf-8") if self._keyed else payload
            )
            splits.append(self._assign(split_hash))
            hashes.append(order_hash)
        keys = [r.key for r in kept] if self._keyed else None
        return EncodedChunk(splits, hashes, keys, [r.order for r in kept], payloads), rejected


class _PrepareChunkFn(beam.DoFn):
    """Union: validates and encodes each chunk of one source."""

    def __init__(self, dataset: DatasetSpec):
        self._dataset = dataset

    def setup(self):
        self._preparer = Preparer(self._dataset)
        self._key_maker = KeyMaker(self._dataset) if self._dataset.key is not None else None
        self._source_index = {name: i for i, name in enumerate(self._dataset.source_names)}

    def process(self, chunk: RawChunk):
        records = []
        for item in records_of_chunk(chunk, self._source_index[chunk.source], self._key_maker):
            if isinstance(item, Record):
                records.append(item)
            else:
                yield beam.pvalue.TaggedOutput(REJECTED, item)
        encoded, rejected = self._preparer.prepare(records)
        for r in rejected:
            yield beam.pvalue.TaggedOutput(REJECTED, r)
        if len(encoded):
            yield encoded


class PrepareRecords(beam.PTransform):
    """Validates, encodes and assigns splits to chunks of records. Returns (encoded, rejected)."""

    def __init__(self, dataset: DatasetSpec):
        super().__init__()
        self._dataset = dataset

    def expand(self, chunks):
        out = chunks | "ValidateAndEncode" >> beam.ParDo(
            _PrepareChunkFn(self._dataset)
        ).with_outputs(REJECTED, main="encoded")
        return out.encoded, out[REJECTED]
