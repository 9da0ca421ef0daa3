"""Reading any configured source into chunks of raw records, rejected records and read counts.

Each file format contributes one parse function `parse(stream, path, source)` that yields
`RawChunk`s and rejected-record dicts; `ReadSource` does the rest (matching files, opening them,
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
    gc_paused,
    read_counter,
)
from transforms.sources import ranges, registry


class _ParseFileFn(beam.DoFn):
    def __init__(self, source: SourceSpec):
        self._source = source
        self._parse = registry.parser(source.format)

    def process(self, metadata):
        with open_file(metadata.path) as stream, gc_paused():
            yield from tagged(self._parse(stream, metadata.path, self._source), self._source.name)
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
    def __init__(self, source: SourceSpec):
        self._source = source
        self._parse = registry.parser(source.format)

    def process(self, rng: ranges.Range):
        with gc_paused():
            yield from tagged(ranges.read(rng, self._source, self._parse), self._source.name)
        progress.add("bytes", rng.size)  # the range is read


class ReadSource(beam.PTransform):
    """Reads the files of one source. Returns (chunks, rejected, counts).

    CSV, JSON Lines and Parquet files larger than `split_bytes` are read in ranges, spread over
    the workers; a CSV or JSON Lines file is first cut into pieces of that size, which workers
    scan in parallel for the record ends to cut at (transforms.sources.ranges). Other files are
    read whole, each by one worker.
    """

    def __init__(self, source: SourceSpec, split_bytes: int = ranges.SPLIT_BYTES):
        super().__init__()
        self._source = source
        self._split_bytes = split_bytes

    def expand(self, pbegin):
        path = self._source.path
        pattern = file_pattern(path, recursive=self._source.format in RECURSIVE_FORMATS)
        root = pattern_root(path)
        files = (
            pbegin
            | "MatchFiles" >> fileio.MatchFiles(pattern)
            | "SkipHiddenFiles" >> beam.Filter(lambda metadata: is_input(metadata.path, root))
        )
        if self._source.format in ranges.SPLITTABLE:
            source = self._source
            parse = _ParseRangeFn(source)
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
            parse = _ParseFileFn(self._source)
        parsed = files | "ParseRecords" >> beam.ParDo(parse).with_output_types(
            RawChunk
        ).with_outputs(REJECTED, COUNTS, main="chunks")
        return parsed.chunks, parsed[REJECTED], parsed[COUNTS]
