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

import dataclasses
from typing import Iterator

import pyarrow as pa

from transforms import encode
from transforms.contract.config import DatasetSpec, SourceSpec
from transforms.files import open_file
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
    dataset: DatasetSpec, source: SourceSpec, paths: list[str]
) -> Iterator[Examples | dict]:
    """The records of `paths`, read as `source` of `dataset`: `Examples` for each chunk of
    valid ones (in input order), and a rejected-record dict for each invalid one."""
    parse = registry.parser(source.format)
    index = [s.name for s in dataset.sources].index(source.name)
    key_maker = KeyMaker(dataset) if dataset.key is not None else None
    preparer = Preparer(dataset)
    names = [f.name for f in dataset.features]
    for path in paths:
        with open_file(path) as stream, gc_paused():
            for item in parse(stream, path, source):
                if not isinstance(item, RawChunk):
                    yield item
                    continue
                batch, rejected = batch_of_chunk(item, index, key_maker)
                yield from rejected
                if batch.keys is None:  # provenance only: where each record came from
                    nulls = pa.nulls(batch.size, pa.string())
                    batch.keys = key_columns(nulls, index, item.lines, [item.path])
                valid, rejected = preparer.validate(batch)
                yield from rejected
                if not len(valid.columns[0]):
                    continue
                lines = valid.keys.column("line").to_pylist()
                where = [location(item.path, line) for line in lines]
                keys = valid.keys.column("key").to_pylist() if key_maker is not None else where
                serialized = encode.encode_columns(names, valid.columns).to_pylist()
                yield Examples(keys, where, serialized)
