"""The rejected records of a run, written by a step of their own in bounded memory.

A run may reject millions of records (a few percent of a large input), so no worker ever holds
them all. Workers sort the rejected records they see, about 16 MB at a time (RUN_BYTES), into
*runs*: spill files under the staging folder (`<staging>/_spill/rejected-*.run`) holding each
record's sort key and its final JSON line (`SortRejectedFn`). Only a small description of each
run (`RejectedRun`: path, records, bytes, counts per source and reason) travels on. One step then
merges the runs, streaming (`heapq.merge`, one buffered reader per run), into the rejected files
`rejected/rejected-NNNNN-of-MMMMM.jsonl`, cut at `output.shard_size_mb` of JSON lines (one file
for anything smaller; an empty one when nothing was rejected), and hands only their manifest
entries and the counts to publication (`RejectedFiles`).

The order is total and depends on the records alone: by source, then location (`file:12` before
`file:100`), reason, and the JSON line itself. So the files are byte-identical whatever the
workers, bundles or runs were.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import json
import math
import uuid
from collections import Counter
from typing import Any, Iterable, Iterator, Mapping

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from transforms.contract.layout import REJECTED_DIR, REJECTED_SUFFIX, shard_name
from transforms.files import create_file
from transforms.progress import timed
from transforms.records import Rejected
from transforms.sink.spill import spill_folder
from transforms.sink.storage import delete_paths

RUN_BYTES = 16 << 20  # what a worker holds of rejected records before it sorts and writes a run
_MIME = "application/x-ndjson"
SortKey = tuple[str, str, int, str]


@dataclasses.dataclass(frozen=True)
class RejectedRun:
    """A sorted run of rejected records in a spill file: `records` JSON lines of `bytes` bytes
    (as the rejected files will hold them), and how many per (source, reason)."""

    path: str
    records: int
    bytes: int
    counts: Mapping[tuple[str, str], int]


@dataclasses.dataclass(frozen=True)
class RejectedFiles:
    """What publication needs of the rejected records: the files' manifest entries (path,
    records, bytes, sha256) and the records per (source, reason). A record rejected after a
    join names every source it holds (`"a,b"`)."""

    files: tuple[dict[str, Any], ...]
    counts: Mapping[tuple[str, str], int]

    @property
    def records(self) -> int:
        return sum(f["records"] for f in self.files)

    def reasons(self) -> Counter:
        """Records per reason."""
        out: Counter = Counter()
        for (_, reason), n in self.counts.items():
            out[reason] += n
        return out


def sort_key(record: Rejected) -> SortKey:
    """Source, location (`file:12` before `file:100`), reason."""
    return (record.source, *record.place(), record.reason)


def json_line(record: Rejected) -> bytes:
    """A rejected record as its line of a rejected file."""
    text = json.dumps(record.to_json(), ensure_ascii=False, sort_keys=True) + "\n"
    return text.encode("utf-8", errors="backslashreplace")


class SortRejectedFn(beam.DoFn):
    """Sorts rejected records into runs of about `budget` bytes under the staging folder;
    yields a `RejectedRun` for each."""

    def __init__(self, staging: str, budget: int = RUN_BYTES):
        self._folder = spill_folder(staging)
        self._budget = budget

    def start_bundle(self) -> None:
        self._lines: list[tuple[SortKey, bytes]] = []
        self._size = 0

    def process(self, record: Rejected):
        line = json_line(record)
        self._lines.append((sort_key(record), line))
        self._size += len(line) + 256  # with the key and the list's entry
        if self._size >= self._budget:
            yield self._write_run()

    def finish_bundle(self):
        if self._lines:
            yield GlobalWindows.windowed_value(self._write_run())

    def _write_run(self) -> RejectedRun:
        lines, self._lines, self._size = self._lines, [], 0
        lines.sort()
        counts: Counter = Counter()
        size = 0
        path = f"{self._folder}/rejected-{uuid.uuid4().hex}.run"
        with create_file(path, "application/octet-stream") as f:
            for key, line in lines:
                counts[key[0], key[3]] += 1
                size += len(line)
                f.write(json.dumps(key).encode("ascii") + b"\t" + line)
        return RejectedRun(path, len(lines), size, dict(counts))


def _read_run(path: str) -> Iterator[tuple[SortKey, bytes]]:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for entry in f:
            key, _, line = entry.partition(b"\t")
            yield tuple(json.loads(key)), line


def write_rejected_files(
    staging: str, runs: Iterable[RejectedRun], file_bytes: float
) -> RejectedFiles:
    """Merges the runs into the rejected files (about `file_bytes` each) under `staging`;
    deletes the runs."""
    runs = sorted(runs, key=lambda r: r.path)
    total = sum(r.bytes for r in runs)
    count = max(1, math.ceil(total / file_bytes)) if file_bytes > 0 else 1
    counts: Counter = Counter()
    for run in runs:
        counts.update(run.counts)
    merged = heapq.merge(*(_read_run(r.path) for r in runs))
    files = []
    offset = 0
    pending = next(merged, None)
    for index in range(count):
        name = shard_name(REJECTED_DIR, index, count, REJECTED_SUFFIX)
        end = total * (index + 1) // count  # a record goes to the file its first byte falls in
        sha, size, records = hashlib.sha256(), 0, 0
        with create_file(f"{staging}/{name}", _MIME) as f:
            while pending is not None and (offset < end or index == count - 1):
                line = pending[1]
                f.write(line)
                sha.update(line)
                size += len(line)
                offset += len(line)
                records += 1
                pending = next(merged, None)
        files.append({"path": name, "records": records, "bytes": size, "sha256": sha.hexdigest()})
    if runs:
        delete_paths([r.path for r in runs])
    return RejectedFiles(tuple(files), dict(counts))


class WriteRejected(beam.PTransform):
    """Writes the rejected records as sorted JSON Lines files under `staging`; returns a
    one-element PCollection holding their `RejectedFiles`.

    Applied to the PCollections of rejected records as their steps made them (a dict, by the
    name of the step): each is sorted into runs by a step fused with the one that rejected
    them, so that no runner holds the records between steps (a Flatten first would have the
    local runner buffer them all).
    """

    def __init__(self, staging: str, file_bytes: float, budget: int = RUN_BYTES):
        super().__init__()
        self._staging = staging
        self._file_bytes = file_bytes
        self._budget = budget

    def expand(self, rejected):
        if isinstance(rejected, beam.PCollection):
            rejected = {"": rejected}
        sort_fn = SortRejectedFn(self._staging, self._budget)
        runs = [
            records | f"SortRuns[{name}]" >> beam.ParDo(sort_fn).with_output_types(RejectedRun)
            for name, records in rejected.items()
        ]
        all_runs = runs | "MergeRunLists" >> beam.Flatten()
        return (
            all_runs.pipeline
            | "Start" >> beam.Create([None])
            | "MergeRuns"
            >> beam.Map(_merge, self._staging, self._file_bytes, beam.pvalue.AsList(all_runs))
        )


def _merge(_, staging: str, file_bytes: float, runs: list[RejectedRun]) -> RejectedFiles:
    with timed("rejected records"):
        return write_rejected_files(staging, runs, file_bytes)
