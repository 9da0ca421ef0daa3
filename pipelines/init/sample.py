"""Reads the records of the files behind each `--source` of `shardflow init`, with the ETL's own
file matching (`transforms.files`) and parsers (`transforms.sources.<format>.parse`), so that
what init infers from is what `shardflow etl` will read.

A source is read within a budget: at most `limit` records (`--sample`) and about `max_bytes`
bytes of its files (`pipelines.init.WHOLE_BYTES`). A source that fits is read whole, every
record of every file, and only then may init write what needs all of them (a closed `values:`
list). A source that does not is sampled: each of its files (of many, `MAX_FILES` evenly
spaced ones) gets an even share of what is left of the budget, read in up to `PIECES` pieces
spread over the whole file (`pipelines.init.pieces`: byte offsets moved on to the next record,
Parquet row groups, Avro blocks), never only its head: a table sorted by a column holds some
values only at its end. A file that cannot be entered in the middle (compressed as a whole) is
read from its start. A parser is a generator: a piece costs the records taken, not the rest of
its file.

Longer than most modules because the read budget is one piece: which files are read, the share
of records and bytes each file and piece gets, and whether that was all of a source (which a
closed `values:` list needs); where a piece starts is `pipelines.init.pieces`.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
from typing import Any

import pyarrow as pa

from pipelines.config.fields import ConfigError
from pipelines.init import WHOLE_BYTES, detect, pieces
from pipelines.init.pieces import Piece
from transforms.contract.config import SourceSpec
from transforms.files import (
    CorruptFile,
    FileError,
    is_remote,
    location_problem,
    match_files,
    open_file,
)
from transforms.records import RawChunk, Rejected
from transforms.sources import csv as csv_format
from transforms.sources import registry

_GLOB_CHARS = "*?["
MAX_FILES = 50  # files of one source that a sample reads from: opening one costs, remotely
PIECES = 32  # pieces a file too large to read whole is read in, spread over it


@dataclasses.dataclass
class Read:
    """What was read of one file: the records taken, the pieces they came from, whether that is
    all of the file, and about how many records it holds where that is known (None: unknown)."""

    path: str
    size: int  # bytes, as stored
    records: int
    pieces: int
    whole: bool
    estimate: int | None = None


@dataclasses.dataclass
class Sample:
    """One source of the config to write, and the records read of its files."""

    name: str
    format: str
    path: str  # as given on the command line: a file, glob or folder
    options: dict[str, Any]  # the source's `options` to write (checked by the format)
    files: list[str]
    records: int = 0  # records in `chunks`
    chunks: list[tuple[Piece, RawChunk]] = dataclasses.field(default_factory=list)
    names: list[str] = dataclasses.field(default_factory=list)  # fields, in order of appearance
    reads: list[Read] = dataclasses.field(default_factory=list)
    whole: bool = True  # every record of every file was read
    rejected: list[tuple[Piece, Rejected]] = dataclasses.field(default_factory=list)
    notes: dict[str, str] = dataclasses.field(default_factory=dict)  # option → why

    @property
    def spec(self) -> SourceSpec:
        options = registry.check_options(self.format, self.options)
        return SourceSpec(self.name, self.format, self.path, options)

    def parts(self, name: str) -> list[tuple[pa.Array | list[Any], bool]]:
        """The values of field `name` (None: missing) in each chunk that has the field, with
        whether they are text; Arrow arrays as the CSV reader gives them, else lists."""
        return [
            (chunk.columns[name], chunk.text) for _, chunk in self.chunks if name in chunk.columns
        ]

    def column(self, name: str) -> pa.ChunkedArray | list[Any]:
        """All values of field `name` read (chunks without it left out), as one Arrow column
        where the reader gave Arrow arrays, else as a list."""
        parts = [values for values, _ in self.parts(name)]
        arrays = [p.cast(pa.string()) for p in parts if isinstance(p, pa.Array)]
        if parts and len(arrays) == len(parts):
            return pa.chunked_array(arrays, pa.string())
        return [v for p in parts for v in (p.to_pylist() if isinstance(p, pa.Array) else p)]

    @property
    def estimate(self) -> int | None:
        """About how many records the source's files hold: the records read when all were,
        else from the files read (their own counts, or what their bytes tell), scaled to all
        files; None when a file read in part does not tell."""
        if self.whole:
            return self.records
        counts = [r.records if r.whole else r.estimate for r in self.reads]
        known = [c for c in counts if c is not None]
        if not counts or len(known) < len(counts):
            return None
        return round(sum(known) * len(self.files) / len(counts))

    def describe(self, where: str | None = None) -> str:
        """What was read, for a person: `all 2,700 records of its 1 file`, `200,000 of about
        5,000,000 records, in 32 pieces spread over its 1 file`; `where` names the files
        (default: `its N files`)."""
        count = len(self.files)
        where = where or f"its {count:,} file" + ("s" if count != 1 else "")
        if self.whole:
            return f"all {self.records:,} records of {where}"
        taken = sum(r.records for r in self.reads)
        estimate = self.estimate
        if estimate is not None:
            estimate = max(estimate, taken)
        what = f"{taken:,} of about {estimate:,} records" if estimate else f"{taken:,} records"
        if len(self.reads) < count:
            where = f"{len(self.reads):,} (evenly spaced) of {where}"
        pieces = sum(r.pieces for r in self.reads)
        if pieces > len(self.reads):
            return f"{what}, in {pieces:,} pieces spread over {where}"
        if all(r.whole for r in self.reads):
            return f"{what}: all of {where}"
        return f"{what}, from the start of {where}"


def find_sources(groups: list[list[str]]) -> list[Sample]:
    """A source per `--source` value (files named one by one in one `--source`, as a shell
    expands a glob, are one source when their folder's glob matches exactly them), each with
    its matched files and format; names from the file names, unique. ConfigError for a value
    that matches nothing or files of several formats."""
    found = []
    for values in groups:
        matched = [(value, *_files_of(value)) for value in values]
        merged = _one_glob(matched) if len(matched) > 1 else None
        found += [merged] if merged is not None else matched
    samples: list[Sample] = []
    names: set[str] = set()
    for path, files, fmt in found:
        name = unique_name(source_name(path, fmt), names)
        names.add(name)
        samples.append(Sample(name, fmt, path, {}, files))
    return samples


def _files_of(value: str) -> tuple[list[str], str]:
    """The files of one --source value, and their format."""
    problem = location_problem(value)
    if problem is not None:
        raise ConfigError("--source", problem)
    if not is_remote(value) and not any(c in value for c in _GLOB_CHARS):
        if not os.path.exists(value):
            raise ConfigError("--source", f"{value!r}: no such file or folder")
    # Beam matches local globs from an absolute root (a config's paths are resolved so too)
    try:
        files = match_files(value if is_remote(value) else os.path.abspath(value))
    except FileError as e:  # a pipe or a device: never sampled
        raise ConfigError("--source", str(e)) from None
    if not files:
        raise ConfigError("--source", f"no files match {value!r}")
    formats: dict[str, list[str]] = {}
    for f in files:
        formats.setdefault(detect.file_format(f), []).append(f)
    if len(formats) > 1:
        kinds = "; ".join(f"{fmt}: {_short(fs)}" for fmt, fs in sorted(formats.items()))
        raise ConfigError(
            "--source",
            f"{value!r} matches files of several formats ({kinds}); give one --source per format",
        )
    return files, next(iter(formats))


def _short(files: list[str]) -> str:
    names = [f.rsplit("/", 1)[-1] for f in files]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _one_glob(matched: list[tuple[str, list[str], str]]) -> tuple[str, list[str], str] | None:
    """The files of several values as one source `folder/*.ext`, when that glob matches exactly
    them and they are files of one format and one ending."""
    values = [value for value, _, _ in matched]
    if any(is_remote(v) or any(c in v for c in _GLOB_CHARS) for v in values):
        return None
    folders = {os.path.dirname(v) for v in values}
    endings = {"".join(registry.split_suffix(v)[1:]) for v in values}
    formats = {fmt for _, _, fmt in matched}
    if len(folders) != 1 or len(endings) != 1 or len(formats) != 1 or "" in endings:
        return None
    glob = os.path.join(folders.pop(), "*" + endings.pop())
    files = sorted({f for _, fs, _ in matched for f in fs})
    if match_files(os.path.abspath(glob)) != files:
        return None
    return glob, files, formats.pop()


def source_name(path: str, fmt: str) -> str:
    """A source name from a path: the file name without its endings or wildcards, else the
    folder's name, else the format."""
    parts = [p for p in path.rstrip("/").split("/") if p not in ("", ".", "..")]
    for part in reversed(parts[-2:]):
        stem = re.sub(r"[*?]|\[[^]]*\]", "", registry.split_suffix(part)[0])
        name = re.sub(r"[^A-Za-z0-9_-]+", "_", stem).strip("_-")
        if name:
            return name
    return fmt


def unique_name(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    return candidate


# --- reading ------------------------------------------------------------------------------


def read_sample(sample: Sample, limit: int, max_bytes: int | None = None) -> None:
    """Fills `sample` with the records of its files within the budget (module docstring): at
    most `limit` records and about `max_bytes` bytes (default `WHOLE_BYTES`); for CSV, first
    detects the options. ConfigError for a file that cannot be read, or a source without
    records."""
    max_bytes = WHOLE_BYTES if max_bytes is None else max_bytes
    if sample.format == "csv":
        _detect_csv(sample, limit, max_bytes)
    else:
        if sample.format == "jsonl":
            _check_json_lines(sample.files[0])
        _read(sample, limit, max_bytes)
    if sample.records == 0:
        if sample.rejected:
            piece, first = sample.rejected[0]
            raise ConfigError(
                "--source",
                f"{sample.path!r}: no record could be read as {sample.format} (first: "
                f"{first.reason} at {piece.where(first.location)})",
            )
        raise ConfigError("--source", f"{sample.path!r}: {_short(sample.files)} holds no records")


def _read(sample: Sample, limit: int, max_bytes: int) -> None:
    """Reads the source's files whole when they fit the budget, else in pieces."""
    spec = sample.spec
    files = spread(sample.files, MAX_FILES)
    sizes = [_size(f) for f in files]
    if (
        len(files) == len(sample.files)
        and sum(sizes) <= max_bytes
        and sum(pieces.records_in(spec, f, size) or 0 for f, size in zip(files, sizes)) <= limit
    ):
        _start(sample)
        if _read_whole(sample, spec, files, sizes, limit, max_bytes):
            return
        # more records than the budget (or, decompressed, more bytes): pieces instead
    _start(sample)
    _read_pieces(sample, spec, files, sizes, limit, max_bytes)
    # pieces that each ended where the next one starts are all of their file
    sample.whole = len(sample.reads) == len(sample.files) and all(r.whole for r in sample.reads)


def _read_pieces(
    sample: Sample, spec: SourceSpec, files: list[str], sizes: list[int], limit: int, max_bytes: int
) -> None:
    """Reads pieces spread over each file: each file gets an even share of what is left of the
    budget, each of its pieces an even share of what is left of the file's."""
    left, left_bytes = limit, max_bytes
    for i, (path, size) in enumerate(zip(files, sizes)):
        if left <= 0:
            break
        share = -(-left // (len(files) - i))  # ceil: a short file leaves more to the next
        share_bytes = -(-left_bytes // (len(files) - i))
        plan = pieces.plan(spec, path, size, min(PIECES, share))
        taken = used = 0
        whole = True
        for j, piece in enumerate(plan.pieces):
            rest = len(plan.pieces) - j
            most, most_bytes = -(-(share - taken) // rest), -(-(share_bytes - used) // rest)
            got, got_bytes, ended = _take(sample, spec, piece, most, most_bytes)
            taken, used, whole = taken + got, used + got_bytes, whole and ended
        sample.reads.append(Read(path, size, taken, len(plan.pieces), whole, plan.records))
        left, left_bytes = left - taken, left_bytes - used


def _start(sample: Sample) -> None:
    sample.records, sample.chunks, sample.names, sample.reads, sample.rejected = 0, [], [], [], []
    sample.whole = True


def _read_whole(
    sample: Sample, spec: SourceSpec, files: list[str], sizes: list[int], limit: int, max_bytes: int
) -> bool:
    """Reads every record of the files; False (and a part read) when they hold more than the
    budget."""
    for path, size in zip(files, sizes):
        left = limit - sum(r.records for r in sample.reads)
        used = sum(r.size for r in sample.reads)
        taken, _, ended = _take(sample, spec, Piece(path), left, max_bytes - used)
        if not ended:
            return False
        sample.reads.append(Read(path, size, taken, 1, True))
    return True


def spread(files: list[str], most: int) -> list[str]:
    """At most `most` of the files, evenly spaced in name order, the first and last included
    (partitions by date: the oldest and the newest)."""
    if len(files) <= most:
        return files
    if most == 1:
        return files[:1]
    return [files[round(i * (len(files) - 1) / (most - 1))] for i in range(most)]


def _size(path: str) -> int:
    try:
        if "://" not in path:
            return os.stat(path).st_size
        from apache_beam.io.filesystems import FileSystems  # Beam: a URI's size

        return FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    except (OSError, IndexError) as e:
        raise ConfigError("--source", f"cannot read {path!r}: {e}") from None


def _take(
    sample: Sample, spec: SourceSpec, piece: Piece, most: int, most_bytes: int
) -> tuple[int, int, bool]:
    """Reads records of a piece into the sample until `most` records (rejected ones too) or,
    after a chunk of them, `most_bytes` bytes are taken: (records taken, bytes read, whether the
    piece ended first)."""
    taken = used = 0
    chunked = False  # a parser rejects a record before yielding the chunk around it
    items = pieces.records(spec, piece)
    try:
        for item, read in items:
            if taken >= most or (chunked and used > most_bytes):
                return taken, used, False
            used = read
            if not isinstance(item, RawChunk):
                sample.rejected.append((piece, item))
                taken += 1
                continue
            chunked = True
            if len(item) > most - taken:  # the rest of the chunk is left: not the piece's end
                _add(sample, piece, item.take(range(most - taken)))
                return most, used, False
            _add(sample, piece, item)
            taken += len(item)
        return taken, used, True
    except (FileError, CorruptFile) as e:
        raise ConfigError("--source", str(e)) from None
    except OSError as e:
        raise ConfigError("--source", f"cannot read {piece.path!r}: {e.strerror or e}") from None
    finally:
        items.close()


def _add(sample: Sample, piece: Piece, chunk: RawChunk) -> None:
    sample.chunks.append((piece, chunk))
    sample.names += [name for name in chunk.columns if name not in sample.names]
    sample.records += len(chunk)


def _head(path: str) -> tuple[bytes, bool]:
    """The first HEAD_BYTES of a file (decompressed), and whether that is all of it."""
    try:
        with open_file(path) as stream:
            head = stream.read(detect.HEAD_BYTES + 1)
    except (FileError, CorruptFile) as e:
        raise ConfigError("--source", str(e)) from None
    except OSError as e:
        raise ConfigError("--source", f"cannot read {path!r}: {e.strerror or e}") from None
    return head[: detect.HEAD_BYTES], len(head) <= detect.HEAD_BYTES


def _check_json_lines(path: str) -> None:
    head, _ = _head(path)
    if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
        raise ConfigError(
            "--source",
            f"{path}: a JSON array, not JSON Lines (one object per line); convert it, e.g. "
            "`jq -c '.[]' FILE > FILE.jsonl`",
        )


def _detect_csv(sample: Sample, limit: int, max_bytes: int) -> None:
    """Reads a CSV source, after detecting its options from its first file: encoding,
    delimiter, header (or column names); then the null markers found in what was read (read
    again with them, when there are some)."""
    head, whole = _head(sample.files[0])
    text, encoding = detect.decode_head(head, whole)
    ending = registry.split_suffix(sample.files[0])[1]
    tabs = ending in csv_format.TAB_SEPARATED
    delimiter = detect.sniff_delimiter(text, whole, "\t" if tabs else ",")
    if delimiter is None and "text" in registry.formats_of_extension(ending):
        sample.format = "text"  # lines, not delimited text
        sample.options = {"encoding": encoding} if encoding != "utf-8" else {}
        _read(sample, limit, max_bytes)
        return
    delimiter = delimiter or ","
    rows = detect.sample_rows(text, delimiter, whole)
    header = detect.has_header(rows)
    widths = collections.Counter(len(r) for r in rows)
    width = len(rows[0]) if header else (widths.most_common(1)[0][0] if rows else 1)
    names, renamed = detect.column_names(rows[0] if header and rows else None, width)
    detected: dict[str, Any] = {"delimiter": delimiter, "header": header}
    if renamed:
        detected["columns"] = names
        sample.notes["columns"] = (
            "the file has no header row: name the columns"
            if not header
            else "renames header cells that cannot name a feature (empty or repeated)"
        )
    if encoding != "utf-8":
        detected["encoding"] = encoding
        sample.notes["encoding"] = "the file is not UTF-8"
    sample.options = {**detected, "null_values": [""]}
    _read(sample, limit, max_bytes)
    columns = {name: sample.column(name) for name in sample.names}
    markers = detect.null_markers(columns.values())
    sample.options = {**detected, "null_values": ["", *markers]}
    if markers:
        holders = [name for name, values in columns.items() if detect.holds_any(values, markers)]
        shown = ", ".join(holders[:3]) + (" ..." if len(holders) > 3 else "")
        verb = "marks a missing value" if len(markers) == 1 else "mark missing values"
        sample.notes["null_values"] = f"{', '.join(markers)} {verb} in {shown}"
        del columns
        _read(sample, limit, max_bytes)


def relative_to(path: str, folder: str) -> str:
    """A source path as the config at `folder` names it (configs resolve paths against their
    own folder); remote and absolute paths stay as they are."""
    if is_remote(path) or os.path.isabs(path):
        return path
    return os.path.relpath(os.path.abspath(path), folder)
