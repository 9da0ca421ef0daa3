"""Reading any configured source into chunks of raw records, rejected records and read counts.

Each file format contributes one parse function `parse(stream, path, source)` that yields
`RawChunk`s and `Rejected` records; `ReadSource` does the rest (matching files, opening them,
counting every record read, so that the manifest's ledger can be checked). Which files a path
matches is `transforms.files`' business: `ReadSource` and the ETL's input check agree on it.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.io import fileio

import transforms.coders  # noqa: F401 - registers the coder of the RawChunks read here
from transforms import progress
from transforms.contract.config import SourceSpec
from transforms.files import (
    RECURSIVE_FORMATS,
    file_pattern,
    is_input,
    open_file,
    pattern_root,
)
from transforms.records import (
    COUNTS,
    REJECTED,
    RawChunk,
    Rejected,
    gc_paused,
    read_counter,
)
from transforms.sources import ranges, registry


class _ParseFileFn(beam.DoFn):
    def __init__(self, source: SourceSpec, limit: int | None = None):
        self._source = source
        self._parse = registry.parser(source.format)
        self._limit = limit

    def process(self, metadata):
        with open_file(metadata.path) as stream, gc_paused():
            items = self._parse(stream, metadata.path, self._source)
            yield from tagged(first(items, self._limit), self._source.name)
        progress.add("bytes", metadata.size_in_bytes)  # the file is read


def tagged(items, source_name: str):
    """A reader's chunks as the main output, its rejected records tagged REJECTED, and then the
    number of records read (chunk records + rejected) tagged COUNTS."""
    read = 0
    for item in items:
        if isinstance(item, RawChunk):
            read += len(item)
            progress.add("read", len(item))
            yield item
        else:
            read += 1
            progress.add("read", 1)
            yield beam.pvalue.TaggedOutput(REJECTED, item)
    yield beam.pvalue.TaggedOutput(COUNTS, (read_counter(source_name), read))


def first(items, limit: int | None):
    """A reader's chunks and rejected records of one file or range, until they hold the first
    `limit` records of it (None: all); the reader is not asked for more.

    A reader yields a rejected record when it meets it, but the good records before it only
    with their chunk, later; or a whole chunk first and then the rejected records of its stretch
    of the file. Either way, once a chunk holds only records after the first `limit` positions
    seen, every record before them has been yielded: the reading stops there (never at a
    rejected record). `FirstRecords` makes the exact cut.
    """
    if limit is None:
        yield from items
        return
    smallest: list[int] = []  # the first `limit` positions seen, once there are that many
    for item in items:
        is_chunk = isinstance(item, RawChunk)
        lines = item.lines if is_chunk else [record_key(item)[1]]
        if is_chunk and len(smallest) == limit and lines and min(lines) > smallest[-1]:
            return
        yield item
        smallest.extend(lines)
        if len(smallest) >= limit:
            smallest = sorted(smallest)[:limit]


def record_key(item: Rejected) -> tuple[str, int]:
    """Where a rejected record is in its source, as (file, line or record number): the order of
    `FirstRecords`."""
    return item.place()


class FirstRecords(beam.PTransform):
    """The first `limit` records of one source, in (file name, position) order: of its chunks
    and rejected records, those among the first `limit` keys; and the number of records kept,
    as the source's read count (`shardflow etl --limit`).

    Each file or range hands over at most `limit` records (`first`), so a record among the first
    `limit` of the source is among the first `limit` of its file or range: every one of them is
    here, and the cut is the same whatever the ranges and workers.

    Keys are unique but for BigQuery rows, numbered by a hash of their content: of the records
    that share the last key kept (identical rows), just enough are kept to make `limit`.
    """

    def __init__(self, source_name: str, limit: int):
        super().__init__()
        self._name = source_name
        self._limit = limit

    def expand(self, read):
        chunks, rejected = read
        keys = (
            chunks | "ChunkKeys" >> beam.FlatMap(lambda c: [(c.path, n) for n in c.lines]),
            rejected | "RejectedKeys" >> beam.Map(record_key),
        ) | "AllKeys" >> beam.Flatten()
        last = (
            keys
            | "FirstKeys" >> beam.combiners.Top.Smallest(self._limit)
            | "LastKey" >> beam.Map(_last_key, self._limit)
        )
        last_key = beam.pvalue.AsSingleton(last)
        kept = chunks | "KeepChunks" >> beam.FlatMap(_kept_chunk, last_key).with_outputs(
            _TIED, main="kept"
        )
        kept_rejected = rejected | "KeepRejected" >> beam.FlatMap(
            _kept_rejected, last_key
        ).with_outputs(_TIED, main="kept")
        tied = (
            (kept[_TIED], kept_rejected[_TIED])
            | "Tied" >> beam.Flatten()
            | "AllTied" >> beam.combiners.ToList()
            | "EnoughTied"
            >> beam.FlatMap(_enough_tied, last_key).with_outputs(REJECTED, main="chunks")
        )
        all_chunks = (kept.kept, tied.chunks) | "KeptChunks" >> beam.Flatten()
        all_rejected = (kept_rejected.kept, tied[REJECTED]) | "KeptRejected" >> beam.Flatten()
        counts = (
            (
                all_chunks | "ChunkSizes" >> beam.Map(len),
                all_rejected | "OneEach" >> beam.Map(lambda _: 1),
            )
            | "Kept" >> beam.Flatten()
            | "CountKept" >> beam.CombineGlobally(sum)
            | "ReadCount" >> beam.Map(lambda n, name: (read_counter(name), n), self._name)
        )
        return all_chunks, all_rejected, counts


_TIED = "tied"


def _last_key(top: list, limit: int):
    """The last key kept and how many records of that key are kept; None: keep everything."""
    return (top[-1], top.count(top[-1])) if len(top) >= limit else None


def _kept_chunk(chunk: RawChunk, last):
    """The chunk's records before the last key; those of the last key, one by one, tagged."""
    if last is None:
        yield chunk
        return
    key = last[0]
    before = [i for i, n in enumerate(chunk.lines) if (chunk.path, n) < key]
    if len(before) == len(chunk):
        yield chunk
    elif before:
        yield chunk.take(before)
    for i, n in enumerate(chunk.lines):
        if (chunk.path, n) == key:
            yield beam.pvalue.TaggedOutput(_TIED, chunk.take([i]))


def _kept_rejected(item: Rejected, last):
    if last is None or record_key(item) < last[0]:
        yield item
    elif record_key(item) == last[0]:
        yield beam.pvalue.TaggedOutput(_TIED, item)


def _enough_tied(tied: list, last):
    """As many of the records of the last key as are kept, in a stable order (they are the same
    row, for a BigQuery source, or one record)."""
    if last is None:
        return
    order = sorted(tied, key=lambda t: (isinstance(t, Rejected), t.record
                                        if isinstance(t, Rejected) else t.raw(0)))  # fmt: skip
    for item in order[: last[1]]:
        yield item if isinstance(item, RawChunk) else beam.pvalue.TaggedOutput(REJECTED, item)


_PIECES = "pieces"


class _PlanRangesFn(beam.DoFn):
    """A file's ranges when it needs no scan; else its pieces to scan, tagged `_PIECES`."""

    def __init__(self, source: SourceSpec, split_bytes: int):
        self._source = source
        self._split_bytes = split_bytes

    def process(self, metadata):
        size = metadata.size_in_bytes
        for item in ranges.pieces(metadata.path, size, self._source, self._split_bytes):
            is_piece = isinstance(item, ranges.Piece)
            yield beam.pvalue.TaggedOutput(_PIECES, item) if is_piece else item


class _ParseRangeFn(beam.DoFn):
    def __init__(self, source: SourceSpec, limit: int | None = None):
        self._source = source
        self._parse = registry.parser(source.format)
        self._limit = limit

    def process(self, rng: ranges.Range):
        with gc_paused():
            items = ranges.read(rng, self._source, self._parse)
            yield from tagged(first(items, self._limit), self._source.name)
        progress.add("bytes", rng.size)  # the range is read


class ReadSource(beam.PTransform):
    """Reads the files of one source. Returns (chunks, rejected, counts).

    CSV, JSON Lines and Parquet files larger than `split_bytes` are read in ranges, spread over
    the workers; a CSV or JSON Lines file is first cut into pieces of that size, which workers
    scan in parallel for the record ends to cut at (transforms.sources.ranges). Other files are
    read whole, each by one worker.

    With `limit`, only the first `limit` records of the source are read (`FirstRecords`).
    """

    def __init__(
        self, source: SourceSpec, split_bytes: int = ranges.SPLIT_BYTES, limit: int | None = None
    ):
        super().__init__()
        self._source = source
        self._split_bytes = split_bytes
        self._limit = limit

    def expand(self, pbegin):
        path = self._source.path
        pattern = file_pattern(path, recursive=self._source.format in RECURSIVE_FORMATS)
        root = pattern_root(path)
        files = (
            pbegin
            | "MatchFiles" >> fileio.MatchFiles(pattern)
            | "SkipHiddenFiles" >> beam.Filter(lambda metadata: is_input(metadata.path, root))
        )
        if registry.describe(self._source.format).splittable:
            source = self._source
            parse = _ParseRangeFn(source, self._limit)
            planned = files | "PlanRanges" >> beam.ParDo(
                _PlanRangesFn(source, self._split_bytes)
            ).with_outputs(_PIECES, main="ranges")
            cut = (
                planned[_PIECES]
                | "SpreadPieces" >> beam.Reshuffle()
                | "ScanPieces" >> beam.Map(lambda p: (p.path, (p, ranges.summarize(p, source))))
                | "GroupPieces" >> beam.GroupByKey()
                | "CutRanges" >> beam.FlatMap(lambda item: ranges.cut(item[1], source))
            )
            files = (
                (planned.ranges, cut)
                | "AllRanges" >> beam.Flatten()
                | "SpreadRanges" >> beam.Reshuffle()
            )
        else:
            parse = _ParseFileFn(self._source, self._limit)
        parsed = files | "ParseRecords" >> beam.ParDo(parse).with_output_types(
            RawChunk
        ).with_outputs(REJECTED, COUNTS, main="chunks")
        if self._limit is not None:
            return (parsed.chunks, parsed[REJECTED]) | "FirstRecords" >> FirstRecords(
                self._source.name, self._limit
            )
        return parsed.chunks, parsed[REJECTED], parsed[COUNTS]
