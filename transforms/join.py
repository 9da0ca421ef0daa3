"""Joining the records of several sources on the dataset's key (`combine: join`).

A full outer join: every key found in any source yields one record holding each source's fields
for that key; the schema then decides (a required feature that no source provides rejects it).
Within one source, the first record of a key (in file and line order) is kept and the others are
counted as duplicates. Records are grouped by a hash bucket of their key, so a group holds many
keys and Beam moves chunks, not single records.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Iterable, Iterator

import apache_beam as beam

from transforms.prepare import KeyMaker, Preparer, Record
from transforms.records import COUNTS, REJECTED, RawChunk, RawRow, location, rejection
from transforms.schema import RecordError
from transforms.spec import DatasetSpec
from transforms.split import record_hash

JOIN_BUCKETS = 64


def bucket_rows(
    chunk: RawChunk, source_index: int, key_maker: KeyMaker, buckets: int = JOIN_BUCKETS
) -> Iterator[tuple[int, tuple] | dict]:
    """(bucket, (source index, path, [(key, row), ...])) per bucket, or rejected dicts."""
    by_bucket: dict[int, list[tuple[str, RawRow]]] = defaultdict(list)
    for row in chunk.rows:
        try:
            key = key_maker(row.fields.get(key_maker.field))
        except RecordError as e:
            yield rejection(chunk.source, location(chunk.path, row.line), e.reason, row.raw)
            continue
        by_bucket[record_hash(key.encode("utf-8"))[1] % buckets].append((key, row))
    for bucket, rows in sorted(by_bucket.items()):
        yield bucket, (source_index, chunk.source, chunk.path, rows)


def join_bucket(
    groups: Iterable[tuple[int, str, str, list[tuple[str, RawRow]]]],
) -> tuple[list[Record], int, int]:
    """Joins the rows of one bucket. Returns (records, duplicates, joined).

    `joined` counts the source records folded into another source's record of the same key: a
    key present in k sources gives one record and adds k - 1.
    """
    by_key: dict[str, dict[int, tuple]] = defaultdict(dict)
    duplicates = 0
    for source_index, source, path, rows in groups:
        for key, row in rows:
            order = (source_index, path, row.record_no)
            current = by_key[key].get(source_index)
            if current is not None:
                duplicates += 1
                if current[0] <= order:
                    continue
            by_key[key][source_index] = (order, source, path, row)
    records, joined = [], 0
    for key in sorted(by_key):
        parts = [by_key[key][i] for i in sorted(by_key[key])]
        joined += len(parts) - 1
        if len(parts) == 1:
            order, source, path, row = parts[0]
            raw = row.raw
        else:
            raw = json.dumps({p[1]: p[3].raw for p in parts}, ensure_ascii=False)
        records.append(
            Record(
                parts={p[1]: p[3].fields for p in parts},
                order=parts[0][0],
                source=",".join(p[1] for p in parts),
                location="; ".join(location(p[2], p[3].line) for p in parts),
                raw=raw,
                key=key,
            )
        )
    return records, duplicates, joined


class _BucketRowsFn(beam.DoFn):
    def __init__(self, dataset: DatasetSpec):
        self._dataset = dataset

    def setup(self):
        self._key_maker = KeyMaker(self._dataset)
        self._source_index = {name: i for i, name in enumerate(self._dataset.source_names)}

    def process(self, chunk: RawChunk):
        for item in bucket_rows(chunk, self._source_index[chunk.source], self._key_maker):
            if isinstance(item, dict):
                yield beam.pvalue.TaggedOutput(REJECTED, item)
            else:
                yield item


class _JoinBucketFn(beam.DoFn):
    def __init__(self, dataset: DatasetSpec):
        self._dataset = dataset

    def setup(self):
        self._preparer = Preparer(self._dataset)

    def process(self, element):
        _, groups = element
        records, duplicates, joined = join_bucket(groups)
        encoded, rejected = self._preparer.prepare(records)
        for r in rejected:
            yield beam.pvalue.TaggedOutput(REJECTED, r)
        yield beam.pvalue.TaggedOutput(COUNTS, ("duplicates", duplicates))
        yield beam.pvalue.TaggedOutput(COUNTS, ("joined", joined))
        if len(encoded):
            yield encoded


class JoinByKey(beam.PTransform):
    """Joins chunks of all sources on the key, then validates and encodes the joined records.

    Returns (encoded, rejected, counts) with counts `duplicates` and `joined`.
    """

    def __init__(self, dataset: DatasetSpec):
        super().__init__()
        self._dataset = dataset

    def expand(self, chunks):
        keyed = chunks | "BucketByKey" >> beam.ParDo(_BucketRowsFn(self._dataset)).with_outputs(
            REJECTED, main="keyed"
        )
        joined = (
            keyed.keyed
            | "GroupBuckets" >> beam.GroupByKey()
            | "JoinAndEncode"
            >> beam.ParDo(_JoinBucketFn(self._dataset)).with_outputs(REJECTED, COUNTS, main="encoded")
        )
        rejected = (keyed[REJECTED], joined[REJECTED]) | "MergeRejected" >> beam.Flatten()
        return joined.encoded, rejected, joined[COUNTS]
