"""Reads samples of the files behind each `--source` of `shardflow init`, with the ETL's own file
matching (`transforms.files`) and parsers (`transforms.sources.<format>.parse`), so that what
init infers from is what `shardflow etl` will read.

A source samples at most `limit` records, spread over its files in name order (each file gets an
even share of what is left, so a short file leaves more to the next; of many files, `MAX_FILES`
evenly spaced ones) and read from the start of each: a parser is a generator, and reading stops
when the share is taken, so a large file costs a chunk or two, not its size.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
from typing import Any, Generator

from pipelines.config.fields import ConfigError
from pipelines.init import detect
from transforms.contract.config import SourceSpec
from transforms.files import (
    CorruptFile,
    FileError,
    is_remote,
    location_problem,
    match_files,
    open_file,
)
from transforms.records import CHUNK_ROWS, RawChunk
from transforms.sources import csv as csv_format
from transforms.sources import registry

_GLOB_CHARS = "*?["
MAX_FILES = 50  # files of one source that a sample reads from: opening one costs, remotely


@dataclasses.dataclass
class Sample:
    """One source of the config to write, and the records sampled from its files."""

    name: str
    format: str
    path: str  # as given on the command line: a file, glob or folder
    options: dict[str, Any]  # the source's `options` to write (checked by the format)
    files: list[str]
    text: bool = False  # the values are text (CSV cells, lines): numbers are told from them
    records: int = 0
    columns: dict[str, list[Any]] = dataclasses.field(default_factory=dict)  # None: missing
    reads: list[tuple[str, int]] = dataclasses.field(default_factory=list)  # (file, records)
    whole: bool = True  # every file was read to its end
    rejected: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    notes: dict[str, str] = dataclasses.field(default_factory=dict)  # option → why

    @property
    def spec(self) -> SourceSpec:
        options = registry.check_options(self.format, self.options)
        return SourceSpec(self.name, self.format, self.path, options)


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


def read_sample(sample: Sample, limit: int) -> None:
    """Fills `sample` with up to `limit` records of its files; for CSV, first detects the
    options. ConfigError for a file that cannot be read, or a source without records."""
    if sample.format == "csv":
        _detect_csv(sample, limit)
    elif sample.format == "jsonl":
        _check_json_lines(sample.files[0])
    _read(sample, limit)
    if sample.records == 0:
        if sample.rejected:
            first = sample.rejected[0]
            raise ConfigError(
                "--source",
                f"{sample.path!r}: no record could be read as {sample.format} (first: "
                f"{first['reason']} at {first['location']})",
            )
        raise ConfigError("--source", f"{sample.path!r}: {_short(sample.files)} holds no records")


def _read(sample: Sample, limit: int) -> None:
    spec = sample.spec
    sample.text = sample.format in ("csv", "text")
    sample.records, sample.columns, sample.reads, sample.rejected = 0, {}, [], []
    files = spread(sample.files, MAX_FILES)
    sample.whole = len(files) == len(sample.files)
    for i, path in enumerate(files):
        left = limit - sample.records
        if left <= 0:
            sample.whole = False
            break
        share = -(-left // (len(files) - i))  # ceil: what is left, spread over the rest
        taken, whole = _read_file(sample, spec, path, share)
        sample.reads.append((path, taken))
        sample.whole = sample.whole and whole


def spread(files: list[str], most: int) -> list[str]:
    """At most `most` of the files, evenly spaced in name order, the first and last included
    (partitions by date: the oldest and the newest)."""
    if len(files) <= most:
        return files
    if most == 1:
        return files[:1]
    return [files[round(i * (len(files) - 1) / (most - 1))] for i in range(most)]


def _read_file(sample: Sample, spec: SourceSpec, path: str, share: int) -> tuple[int, bool]:
    """Reads up to `share` records of one file into the sample: (records taken, whether the
    file ended)."""
    taken = 0
    items = _parse(spec, path, min(share, CHUNK_ROWS))
    try:
        for item in items:
            if taken >= share:
                return taken, False
            if not isinstance(item, RawChunk):
                sample.rejected.append(item)
                taken += 1
                continue
            if len(item) > share - taken:
                item = item.take(range(share - taken))
            _add(sample, item)
            taken += len(item)
        return taken, True
    finally:
        items.close()


def _parse(spec: SourceSpec, path: str, chunk_rows: int) -> Generator[RawChunk | dict, None, None]:
    try:
        with open_file(path) as stream:
            yield from registry.parser(spec.format)(stream, path, spec, chunk_rows)
    except (FileError, CorruptFile) as e:
        raise ConfigError("--source", str(e)) from None
    except OSError as e:
        raise ConfigError("--source", f"cannot read {path!r}: {e.strerror or e}") from None


def _add(sample: Sample, chunk: RawChunk) -> None:
    """Appends a chunk's records to the sample's columns (None where a record lacks a field)."""
    n = len(chunk)
    for name in chunk.columns:
        if name not in sample.columns:
            sample.columns[name] = [None] * sample.records
    for name, values in sample.columns.items():
        values.extend(chunk.values(name) if name in chunk.columns else [None] * n)
    sample.records += n


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


def _detect_csv(sample: Sample, limit: int) -> None:
    """The csv options of a source, from its first file: encoding, delimiter, header (or
    column names), then the null markers found in a first read of the sample."""
    head, whole = _head(sample.files[0])
    text, encoding = detect.decode_head(head, whole)
    ending = registry.split_suffix(sample.files[0])[1]
    tabs = ending in csv_format.TAB_SEPARATED
    delimiter = detect.sniff_delimiter(text, whole, "\t" if tabs else ",")
    if delimiter is None and "text" in registry.formats_of_extension(ending):
        sample.format = "text"  # lines, not delimited text
        sample.options = {"encoding": encoding} if encoding != "utf-8" else {}
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
    _read(sample, limit)
    markers = detect.null_markers(sample.columns.values())
    sample.options = {**detected, "null_values": ["", *markers]}
    if markers:
        holders = [
            name for name, values in sample.columns.items() if any(v in markers for v in values)
        ]
        shown = ", ".join(holders[:3]) + (" ..." if len(holders) > 3 else "")
        verb = "marks a missing value" if len(markers) == 1 else "mark missing values"
        sample.notes["null_values"] = f"{', '.join(markers)} {verb} in {shown}"


def relative_to(path: str, folder: str) -> str:
    """A source path as the config at `folder` names it (configs resolve paths against their
    own folder); remote and absolute paths stay as they are."""
    if is_remote(path) or os.path.isabs(path):
        return path
    return os.path.relpath(os.path.abspath(path), folder)
