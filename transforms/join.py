"""Joining the records of several sources on the dataset's key (`combine: join`).

A full outer join: every key found in any source yields one record holding each source's fields
for that key; the schema then decides (a required feature that no source provides rejects it).
Within one source, the first record of a key (in file and line order) is kept and the others are
counted as duplicates. Records are grouped by a hash bucket of their key, so a group holds many
keys and Beam moves chunks, not single records.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.contract.config import DatasetSpec
from transforms.keys import KeyMaker, key_columns, path_bytes
from transforms.prepare import ENCODE_THREADS, Batch
from transforms.prepare_records import EncodingFn
from transforms.records import (
    COUNTS,
    FACTS,
    REJECTED,
    STATS,
    EncodedChunk,
    RawChunk,
    Rejected,
    gc_paused,
    location,
)
from transforms.schema import SourceColumns
from transforms.split import record_hashes

JOIN_BUCKETS = 64


def bucket_rows(
    chunk: RawChunk, source_index: int, key_maker: KeyMaker, buckets: int = JOIN_BUCKETS
) -> Iterator[tuple[int, tuple[int, pa.Array, RawChunk]] | Rejected]:
    """(bucket, (source index, keys, sub-chunk)) per bucket the chunk touches, or rejected records.

    A key's bucket is its order hash modulo `buckets`."""
    keys, rejected = key_maker.keys(chunk)
    yield from rejected
    rows = np.flatnonzero(keys.is_valid().to_numpy(zero_copy_only=False))
    _, order_hashes = record_hashes(keys.take(rows))
    bucket_of = order_hashes % np.uint64(buckets)
    touched = np.unique(bucket_of)
    groups = [rows[bucket_of == bucket] for bucket in touched]
    for bucket, mine, part in zip(touched.tolist(), groups, chunk.take_each(groups)):
        yield bucket, (source_index, keys.take(mine), part)


def join_bucket(
    groups: Iterable[tuple[int, pa.Array, RawChunk]], source_names: list[str]
) -> tuple[Batch, int, int]:
    """Joins the records of one bucket into a batch. Returns (batch, duplicates, joined).

    `joined` counts the source records folded into another source's record of the same key: a
    key present in k sources gives one record and adds k - 1. The records of all groups are
    sorted once by (key, source, file, line): the first of each key and source is its part, the
    others are duplicates, and the first part of a key gives the joined record's provenance.
    """
    groups = list(groups)
    sizes = np.array([len(keys) for _, keys, _ in groups], np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)))  # of each group's records, in `table`
    group_of = np.repeat(np.arange(len(groups)), sizes)
    source_of = np.array([source for source, _, _ in groups], np.int16)[group_of]
    paths = [chunk.path for _, _, chunk in groups]
    table = pa.table(
        {
            "key": pa.concat_arrays([pa.array([], pa.string())] + [k for _, k, _ in groups]),
            "source": source_of,
            "path": pa.array([path_bytes(p) for p in paths], pa.binary()).take(group_of),
            "line": np.concatenate([np.zeros(0, np.int64)] + [c.lines for _, _, c in groups]),
        }
    )
    names = ("key", "source", "path", "line")
    ranked = pc.sort_indices(table, sort_keys=[(n, "ascending") for n in names]).to_numpy()
    ranked_keys = table.column("key").take(ranked)
    new_key = np.ones(len(ranked), bool)
    new_key[1:] = ~pc.equal(ranked_keys[1:], ranked_keys[:-1]).to_numpy(zero_copy_only=False)
    new_part = new_key.copy()
    new_part[1:] |= source_of[ranked][1:] != source_of[ranked][:-1]
    parts = ranked[new_part]  # per (key, source), by key then source: its first record
    part_key = np.cumsum(new_key)[new_part] - 1  # the joined record each part goes to
    keys = ranked_keys.filter(pa.array(new_key)).combine_chunks()
    firsts = np.flatnonzero(np.concatenate(([True], part_key[1:] != part_key[:-1])))
    duplicates, joined = len(ranked) - len(parts), len(parts) - len(keys)

    tables = {}
    for source_index, name in enumerate(source_names):
        mine = [g for g, (s, _, _) in enumerate(groups) if s == source_index]
        if not mine:
            continue
        # the record of each key from this source, as a row of the source's groups put together
        local = np.full(len(ranked), -1, np.int64)
        local[np.concatenate([np.arange(starts[g], starts[g + 1]) for g in mine])] = np.arange(
            sizes[mine].sum()
        )
        pick = np.full(len(keys), -1, np.int64)
        here = source_of[parts] == source_index
        pick[part_key[here]] = local[parts[here]]
        chunks = [groups[g][2] for g in mine]
        fields = dict.fromkeys(f for c in chunks for f in c.columns)
        columns = {field: _gathered(chunks, field, pick) for field in fields}
        tables[name] = SourceColumns(columns, all(c.text for c in chunks))

    def describe(i: int) -> tuple[str, str, str]:
        stop = firsts[i + 1] if i + 1 < len(firsts) else len(parts)
        found = []  # (chunk, row in it) of each part of record i
        for row in parts[firsts[i] : stop].tolist():
            g = int(group_of[row])
            found.append((groups[g][2], row - int(starts[g])))
        source = ",".join(chunk.source for chunk, _ in found)
        where = "; ".join(location(chunk.path, chunk.lines[row]) for chunk, row in found)
        if len(found) == 1:
            raw = found[0][0].raw(found[0][1])
        else:
            raw = json.dumps({c.source: c.raw(row) for c, row in found}, ensure_ascii=False)
        return source, where, raw

    first = parts[firsts]
    batch = Batch(
        size=len(keys),
        tables=tables,
        keys=key_columns(
            keys, source_of[first], table.column("line").to_numpy()[first], paths, group_of[first]
        ),
        describe=describe,
    )
    return batch, duplicates, joined


def _gathered(chunks: list[RawChunk], field: str, pick: np.ndarray) -> list | pa.Array:
    """The values of a field at rows `pick` of the chunks put together (None where -1 or where
    a chunk lacks the field): Arrow when every chunk holds it as Arrow of one type."""
    columns = [c.columns.get(field) for c in chunks]
    kinds = {c.type for c in columns if isinstance(c, pa.Array)}
    if len(kinds) == 1 and all(c is None or isinstance(c, pa.Array) for c in columns):
        (kind,) = kinds
        arrays = [pa.nulls(len(c), kind) if v is None else v for c, v in zip(chunks, columns)]
        return pa.concat_arrays(arrays).take(pa.array(pick, mask=pick < 0))
    values: list[Any] = []
    for chunk, column in zip(chunks, columns):
        values += [None] * len(chunk) if column is None else chunk.values(field)
    return [values[i] if i >= 0 else None for i in pick.tolist()]


class _BucketRowsFn(beam.DoFn):
    def __init__(self, dataset: DatasetSpec):
        self._dataset = dataset

    def setup(self):
        self._key_maker = KeyMaker(self._dataset)
        self._source_index = {name: i for i, name in enumerate(self._dataset.source_names)}

    def process(self, chunk: RawChunk):
        for item in bucket_rows(chunk, self._source_index[chunk.source], self._key_maker):
            if isinstance(item, Rejected):
                yield beam.pvalue.TaggedOutput(REJECTED, item)
            else:
                yield item


class _JoinBucketFn(EncodingFn):
    """Validates and encodes the records joined in each bucket of keys."""

    def process(self, element):
        _, groups = element
        with gc_paused():
            batch, duplicates, joined = join_bucket(groups, list(self._dataset.source_names))
            valid, rejected = self._preparer.validate(batch)
        for r in rejected:
            yield beam.pvalue.TaggedOutput(REJECTED, r)
        yield beam.pvalue.TaggedOutput(COUNTS, ("duplicates", duplicates))
        yield beam.pvalue.TaggedOutput(COUNTS, ("joined", joined))
        yield from self._encoder.push(valid)


class JoinByKey(beam.PTransform):
    """Joins chunks of all sources on the key, then validates and encodes the joined records.

    Returns (encoded, rejected, counts, statistics, facts) with counts `duplicates` and
    `joined` (statistics and facts as `transforms.prepare_records.PrepareRecords` returns them, the
    facts spilled under `staging`). `encode_threads`: the helper threads of each worker's
    `Encoder`.
    """

    def __init__(self, dataset: DatasetSpec, staging: str, encode_threads: int = ENCODE_THREADS):
        super().__init__()
        self._dataset = dataset
        self._staging = staging
        self._encode_threads = encode_threads

    def expand(self, chunks):
        keyed = chunks | "BucketByKey" >> beam.ParDo(
            _BucketRowsFn(self._dataset)
        ).with_output_types(tuple[int, tuple[int, pa.Array, RawChunk]]).with_outputs(
            REJECTED, main="keyed"
        )
        joined = (
            keyed.keyed
            | "GroupBuckets" >> beam.GroupByKey()
            | "JoinAndEncode"
            >> beam.ParDo(_JoinBucketFn(self._dataset, self._staging, self._encode_threads))
            .with_output_types(EncodedChunk)
            .with_outputs(REJECTED, COUNTS, STATS, FACTS, main="encoded")
        )
        rejected = (keyed[REJECTED], joined[REJECTED]) | "MergeRejected" >> beam.Flatten()
        return joined.encoded, rejected, joined[COUNTS], joined[STATS], joined[FACTS]
