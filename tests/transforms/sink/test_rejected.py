"""WriteRejected alone on the in-process runner: every rejected record once, in the order of
source, location (line numbers as numbers), reason and line; the same bytes whatever the runs,
bundles and worker processes; files cut at the target size; only entries and counts handed on;
the runs deleted."""

from __future__ import annotations

import hashlib
import json
import pickle
import random
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline

from transforms.contract.layout import SPILL_DIR
from transforms.records import Rejected
from transforms.sink.rejected import RejectedFiles, WriteRejected, json_line, sort_key

TWO_PROCESSES = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _rejected(n: int = 3000) -> list[Rejected]:
    rng = random.Random(3)
    records = []
    for i in range(n):
        source = rng.choice(["a", "b", "a,b"])
        where = rng.choice([f"f{rng.randrange(3)}.csv:{rng.randrange(1, 200)}", "key=7", "x:"])
        reason = rng.choice(["score: not a number", "name: missing", "é: ünïcode"])
        records.append(Rejected(source, where, reason, f"r{i}\x00é"))
    return records


def _expected_lines(records: list[Rejected]) -> list[bytes]:
    return [line for _, line in sorted((sort_key(r), json_line(r)) for r in records)]


def _write(staging: Path, records, file_bytes=1 << 30, budget=None, flags=()) -> RejectedFiles:
    """WriteRejected of `records` under `staging`; returns what it handed on."""
    extra = {} if budget is None else {"budget": budget}
    result = staging.with_suffix(".result")
    with TestPipeline(runner="FnApiRunner", options=PipelineOptions(list(flags))) as p:
        files = p | beam.Create(records) | WriteRejected(str(staging), file_bytes, **extra)
        files | beam.Map(lambda f, path=str(result): Path(path).write_bytes(pickle.dumps(f)))
    return pickle.loads(result.read_bytes())


def _files(staging: Path) -> dict[str, bytes]:
    return {
        p.relative_to(staging).as_posix(): p.read_bytes()
        for p in sorted(staging.rglob("*"))
        if p.is_file()
    }


def test_every_record_once_in_order_and_the_counts_handed_on(tmp_path):
    records = _rejected()
    result = _write(tmp_path / "one", records, budget=20_000)  # many runs
    files = _files(tmp_path / "one")
    assert list(files) == ["rejected/rejected-00000-of-00001.jsonl"]  # the runs are gone
    data = files["rejected/rejected-00000-of-00001.jsonl"]
    assert data.splitlines(keepends=True) == _expected_lines(records)
    (entry,) = result.files
    assert entry == {
        "path": "rejected/rejected-00000-of-00001.jsonl",
        "records": len(records),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert result.records == len(records)
    by_pair = {}
    for r in records:
        by_pair[r.source, r.reason] = by_pair.get((r.source, r.reason), 0) + 1
    assert dict(result.counts) == by_pair
    assert sum(result.reasons().values()) == len(records)
    # line numbers sort as numbers, within a file of a source
    lines = [json.loads(line) for line in data.splitlines()]
    a_f0 = [int(r["location"].rsplit(":", 1)[1]) for r in lines if r["source"] == "a"
            and r["location"].startswith("f0.csv:")]  # fmt: skip
    assert a_f0 == sorted(a_f0) and max(a_f0) >= 100


def test_the_same_bytes_whatever_the_runs_and_the_worker_processes(tmp_path):
    records = _rejected()
    _write(tmp_path / "one", records)
    _write(tmp_path / "small", list(reversed(records)), budget=1)  # one run per record
    _write(tmp_path / "processes", records, budget=5_000, flags=TWO_PROCESSES)
    one = _files(tmp_path / "one")
    assert _files(tmp_path / "small") == one
    assert _files(tmp_path / "processes") == one


def test_files_are_cut_at_the_target_size_and_hold_the_same_lines(tmp_path):
    records = _rejected()
    whole = b"".join(_expected_lines(records))
    result = _write(tmp_path / "cut", records, file_bytes=len(whole) / 4.5, budget=30_000)
    files = _files(tmp_path / "cut")
    names = [f"rejected/rejected-0000{i}-of-00005.jsonl" for i in range(5)]
    assert list(files) == names
    assert b"".join(files[n] for n in names) == whole
    assert [f["path"] for f in result.files] == names
    assert [f["records"] for f in result.files] == [files[n].count(b"\n") for n in names]
    assert all(abs(len(files[n]) - len(whole) / 5) < 1000 for n in names)


def test_no_rejected_record_is_one_empty_file(tmp_path):
    result = _write(tmp_path / "none", [])
    assert _files(tmp_path / "none") == {"rejected/rejected-00000-of-00001.jsonl": b""}
    assert result.records == 0 and dict(result.counts) == {}
    assert not (tmp_path / "none" / SPILL_DIR).exists() or not any(
        (tmp_path / "none" / SPILL_DIR).iterdir()
    )
