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
import numpy as np
import pyarrow as pa

from transforms.contract.config import DatasetSpec
from transforms.keys import KeyMaker, key_columns
from transforms.prepare import Batch, EncodedChunk, Preparer, bundle_stats
from transforms.records import COUNTS, REJECTED, STATS, RawChunk, gc_paused, location
from transforms.schema import SourceColumns
from transforms.split import record_hashes
from transforms.stats import DatasetStats

JOIN_BUCKETS = 64


def bucket_rows(
    chunk: RawChunk, source_index: int, key_maker: KeyMaker, buckets: int = JOIN_BUCKETS
) -> Iterator[tuple[int, tuple[int, list[str], RawChunk]] | dict]:
    """(bucket, (source index, keys, sub-chunk)) per bucket the chunk touches, or rejected dicts.

    A key's bucket is its order hash modulo `buckets`."""
    keys, rejected = key_maker.keys(chunk)
    yield from rejected
    rows = np.flatnonzero(keys.is_valid().to_numpy(zero_copy_only=False))
    _, order_hashes = record_hashes(keys.take(rows))
    bucket_of = order_hashes % np.uint64(buckets)
    for bucket in np.unique(bucket_of).tolist():
        mine = rows[bucket_of == bucket]
        yield bucket, (source_index, keys.take(mine).to_pylist(), chunk.take(mine.tolist()))


def join_bucket(
    groups: Iterable[tuple[int, list[str], RawChunk]], source_names: list[str]
) -> tuple[Batch, int, int]:
    """Joins the records of one bucket into a batch. Returns (batch, duplicates, joined).

    `joined` counts the source records folded into another source's record of the same key: a
    key present in k sources gives one record and adds k - 1.
    """
    groups = list(groups)
    # key -> source index -> (order, group number, row in the group's chunk)
    by_key: dict[str, dict[int, tuple[tuple, int, int]]] = defaultdict(dict)
    duplicates = 0
    for g, (source_index, keys, chunk) in enumerate(groups):
        for row, key in enumerate(keys):
            ref = ((source_index, chunk.path, chunk.lines[row]), g, row)
            current = by_key[key].get(source_index)
            if current is not None:
                duplicates += 1
                if current[0] <= ref[0]:
                    continue
            by_key[key][source_index] = ref
    keys = sorted(by_key)
    parts = [[by_key[k][i] for i in sorted(by_key[k])] for k in keys]
    joined = sum(len(p) - 1 for p in parts)

    tables = {}
    for source_index, name in enumerate(source_names):
        chunks = {g: c for g, (i, _, c) in enumerate(groups) if i == source_index}
        if not chunks:
            continue
        refs = [by_key[k].get(source_index) for k in keys]
        fields = dict.fromkeys(f for c in chunks.values() for f in c.columns)
        columns = {
            field: [
                None if ref is None else chunks[ref[1]].columns.get(field, _NONE)[ref[2]]
                for ref in refs
            ]
            for field in fields
        }
        tables[name] = SourceColumns(columns, all(c.text for c in chunks.values()))

    def describe(i: int) -> tuple[str, str, str]:
        found = [(groups[g][2], row) for _, g, row in parts[i]]
        source = ",".join(chunk.source for chunk, _ in found)
        where = "; ".join(location(chunk.path, chunk.lines[row]) for chunk, row in found)
        if len(found) == 1:
            raw = found[0][0].raw(found[0][1])
        else:
            raw = json.dumps({c.source: c.raw(row) for c, row in found}, ensure_ascii=False)
        return source, where, raw

    firsts = [p[0][0] for p in parts]  # (source index, path, line) of each record's first part
    batch = Batch(
        size=len(keys),
        tables=tables,
        keys=key_columns(
            pa.array(keys, pa.string()),
            [source for source, _, _ in firsts],
            [path for _, path, _ in firsts],
            [line for _, _, line in firsts],
        ),
        describe=describe,
    )
    return batch, duplicates, joined


class _Missing:
    """A column lookup for a field absent from one chunk: every row is missing."""

    def __getitem__(self, _):
        return None


_NONE = _Missing()


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

    def start_bundle(self):
        self._stats = DatasetStats()

    def finish_bundle(self):
        yield from bundle_stats(self._stats)

    def process(self, element):
        _, groups = element
        with gc_paused():
            batch, duplicates, joined = join_bucket(groups, list(self._dataset.source_names))
            encoded, rejected, stats = self._preparer.prepare(batch)
            self._stats.merge(stats)
        for r in rejected:
            yield beam.pvalue.TaggedOutput(REJECTED, r)
        yield beam.pvalue.TaggedOutput(COUNTS, ("duplicates", duplicates))
        yield beam.pvalue.TaggedOutput(COUNTS, ("joined", joined))
        if len(encoded):
            yield encoded


class JoinByKey(beam.PTransform):
    """Joins chunks of all sources on the key, then validates and encodes the joined records.

    Returns (encoded, rejected, counts, statistics) with counts `duplicates` and `joined`.
    """

    def __init__(self, dataset: DatasetSpec):
        super().__init__()
        self._dataset = dataset

    def expand(self, chunks):
        keyed = chunks | "BucketByKey" >> beam.ParDo(
            _BucketRowsFn(self._dataset)
        ).with_output_types(tuple[int, tuple[int, list[str], RawChunk]]).with_outputs(
            REJECTED, main="keyed"
        )
        joined = (
            keyed.keyed
            | "GroupBuckets" >> beam.GroupByKey()
            | "JoinAndEncode"
            >> beam.ParDo(_JoinBucketFn(self._dataset))
            .with_output_types(EncodedChunk)
            .with_outputs(REJECTED, COUNTS, STATS, main="encoded")
        )
        rejected = (keyed[REJECTED], joined[REJECTED]) | "MergeRejected" >> beam.Flatten()
        return joined.encoded, rejected, joined[COUNTS], joined[STATS]
