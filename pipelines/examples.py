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

from pipelines.flags import VALIDATE_SAMPLE
from transforms import encode
from transforms.contract.config import DatasetSpec, SourceSpec
from transforms.files import RECURSIVE_FORMATS, match_files, open_file
from transforms.keys import KeyMaker, key_columns
from transforms.prepare import Preparer, batch_of_chunk
from transforms.records import RawChunk, Rejected, gc_paused, location
from transforms.sources import registry
from transforms.sources.csv import CsvOptions
from transforms.sources.jsonl import JsonlOptions
from transforms.sources.text import TextOptions


@dataclasses.dataclass
class Examples:
    """Valid records of one chunk, in input order: each one's key (the config's `key`; its
    location when the config has none), location (`path:line`) and serialized Example."""

    keys: list[str]
    locations: list[str]
    serialized: list[bytes]


def encode_files(
    dataset: DatasetSpec, source: SourceSpec, paths: list[str], limit: int | None = None
) -> Iterator[Examples | Rejected]:
    """The records of `paths`, read as `source` of `dataset`: `Examples` for each chunk of
    valid ones (in input order), and a `Rejected` record for each invalid one. With `limit`,
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


def _encoded(chunk: RawChunk, index, key_maker, preparer, names) -> Iterator[Examples | Rejected]:
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


MOSTLY_REJECTED = 0.9  # a sample rejected this much is a config that does not fit its files


class SampleRejected(ValueError):
    """(Nearly) every sampled record of a source is rejected: the config does not describe its
    files (a wrong delimiter or encoding); the message names the likely cause."""


def sample_report(dataset: DatasetSpec, limit: int = VALIDATE_SAMPLE) -> list[str]:
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
        assert source.path is not None  # a file source's path is required (pipelines.config.loader)
        paths = match_files(source.path, recursive=source.format in RECURSIVE_FORMATS)
        valid = 0
        reasons: collections.Counter[str] = collections.Counter()  # rejections by reason
        first: dict[str, str] = {}  # reason -> where it first happened
        for item in encode_files(checked, source, paths, limit):
            if isinstance(item, Examples):
                valid += len(item.keys)
            else:
                reasons[item.reason] += 1
                first.setdefault(item.reason, item.location)
        rejected = sum(reasons.values())
        lines.append(
            f"{where}: {valid + rejected} records sampled from the start: {valid} valid, "
            f"{rejected} rejected"
        )
        for reason, count in reasons.most_common(5):
            lines.append(f"    {reason}: {count} (first at {first[reason]})")
        if rejected and rejected >= MOSTLY_REJECTED * (valid + rejected):
            i = dataset.sources.index(source)
            cause = likely_cause(source, paths[0]) if paths else None
            raise SampleRejected(
                "\n".join(lines)
                + f"\nsources[{i}] {source.name!r}: {rejected} of {valid + rejected} sampled "
                "records rejected: the config does not describe its files; "
                + (cause or "check the source's options and the features' names and types")
            )
    return lines


def likely_cause(source: SourceSpec, path: str) -> str | None:
    """What the first bytes of a source's file suggest is wrong with its options, if anything:
    a UTF-16 byte order mark read as another encoding, a delimiter other than the one set."""
    import codecs

    from pipelines.init import detect  # the same sniffing as `shardflow init`

    try:
        with open_file(path) as stream:
            head = stream.read(detect.HEAD_BYTES + 1)
    except OSError:
        return None
    whole = len(head) <= detect.HEAD_BYTES
    text, found = detect.decode_head(head[: detect.HEAD_BYTES], whole)
    opts = source.options
    text_encoding = "utf-8"  # a format without an encoding option reads no text
    if isinstance(opts, (CsvOptions, JsonlOptions, TextOptions)):
        text_encoding = opts.encoding
    encoding = codecs.lookup(text_encoding).name
    if found.startswith("utf-16") and not encoding.startswith("utf-16"):
        return (
            f"{path} starts with a UTF-16 byte order mark, but options.encoding is "
            f"{encoding!r}: set encoding: utf-16"
        )
    if not isinstance(opts, CsvOptions):
        return None
    delimiter = opts.delimiter
    sniffed = detect.sniff_delimiter(text, whole, delimiter)
    if sniffed is not None and sniffed != delimiter:
        return (
            f"the first rows of {path} are split by {sniffed!r}, not by options.delimiter "
            f"{delimiter!r}: set delimiter: {sniffed!r}"
        )
    return None
