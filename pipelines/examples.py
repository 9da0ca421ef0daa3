"""The ETL's record work on a few files, in this process and without a pipeline: parse them in a
source's format, validate the records against the config and encode the valid ones as
serialized tf.train.Examples.

For a handful of records, where a job's start-up would cost more than the work
(`shardflow predict --input`). It calls what the ETL's steps call (the format's parse function,
`KeyMaker`, `Preparer`, `transforms.encode`), so a record is accepted, rejected and encoded here
exactly as `shardflow etl` would do it, and a rejected record is the same dict as in the
dataset's rejected/ files.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Iterator

import pyarrow as pa

from pipelines.flags import SAMPLE_RECORDS
from transforms import encode
from transforms.contract.config import DatasetSpec, SourceSpec
from transforms.files import RECURSIVE_FORMATS, match_files, open_file
from transforms.keys import KeyMaker, key_columns
from transforms.prepare import Preparer, batch_of_chunk
from transforms.records import RawChunk, gc_paused, location
from transforms.sources import registry


@dataclasses.dataclass
class Examples:
    """Valid records of one chunk, in input order: each one's key (the config's `key`; its
    location when the config has none), location (`path:line`) and serialized Example."""

    keys: list[str]
    locations: list[str]
    serialized: list[bytes]


def encode_files(
    dataset: DatasetSpec, source: SourceSpec, paths: list[str], limit: int | None = None
) -> Iterator[Examples | dict]:
    """The records of `paths`, read as `source` of `dataset`: `Examples` for each chunk of
    valid ones (in input order), and a rejected-record dict for each invalid one. With `limit`,
    `limit` records (valid or not) from the start of the input, then no more (a format that
    rejects malformed records as it cuts its chunks may reject some of a later chunk's first:
    the sample is from the start, not exactly its first records)."""
    parse = registry.parser(source.format)
    index = [s.name for s in dataset.sources].index(source.name)
    key_maker = KeyMaker(dataset) if dataset.key is not None else None
    preparer = Preparer(dataset)
    names = [f.name for f in dataset.features]
    left = -1 if limit is None else limit
    for path in paths:
        with open_file(path) as stream, gc_paused():
            for item in parse(stream, path, source):
                if left == 0:
                    return
                if not isinstance(item, RawChunk):
                    left -= 1
                    yield item
                    continue
                if 0 < left < len(item):
                    item = item.take(list(range(left)))
                left -= len(item)
                yield from _encoded(item, index, key_maker, preparer, names)
        if left == 0:
            return


def _encoded(chunk: RawChunk, index, key_maker, preparer, names) -> Iterator[Examples | dict]:
    """A chunk's rejected records, then its valid ones as `Examples`."""
    batch, rejected = batch_of_chunk(chunk, index, key_maker)
    yield from rejected
    if batch.keys is None:  # provenance only: where each record came from
        nulls = pa.nulls(batch.size, pa.string())
        batch.keys = key_columns(nulls, index, chunk.lines, [chunk.path])
    valid, rejected = preparer.validate(batch)
    yield from rejected
    if not len(valid.columns[0]):
        return
    lines = valid.keys.column("line").to_pylist()
    where = [location(chunk.path, line) for line in lines]
    keys = valid.keys.column("key").to_pylist() if key_maker is not None else where
    serialized = encode.encode_columns(names, valid.columns).to_pylist()
    yield Examples(keys, where, serialized)


def sample_report(dataset: DatasetSpec, limit: int = SAMPLE_RECORDS) -> list[str]:
    """What reading and validating `limit` records from the start of each file source finds: a line
    per source (records read, valid, rejected) and its most frequent rejection reasons, each
    with where it first happened. In a joined dataset a record is checked against the features
    with none required: the other sources bring the rest when the job joins them. Query
    sources (sql, bigquery) are not sampled."""
    checked = dataset
    if dataset.combine == "join":
        relaxed = tuple(dataclasses.replace(f, required=False) for f in dataset.features)
        checked = dataclasses.replace(dataset, features=relaxed)
    lines = []
    for source in dataset.sources:
        where = f"  {source.name} ({source.format})"
        if source.format in registry.QUERY_FORMATS:
            lines.append(f"{where}: not sampled (its query runs with the job)")
            continue
        paths = match_files(source.path, recursive=source.format in RECURSIVE_FORMATS)
        valid, reasons, first = 0, collections.Counter(), {}
        for item in encode_files(checked, source, paths, limit):
            if isinstance(item, Examples):
                valid += len(item.keys)
            else:
                reasons[item["reason"]] += 1
                first.setdefault(item["reason"], item["location"])
        rejected = sum(reasons.values())
        lines.append(
            f"{where}: {valid + rejected} records sampled from the start: {valid} valid, "
            f"{rejected} rejected"
        )
        for reason, count in reasons.most_common(5):
            lines.append(f"    {reason}: {count} (first at {first[reason]})")
    return lines
