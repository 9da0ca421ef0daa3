"""Progress of a running ETL: the counts (transforms/progress.py) and the lines
(pipelines/runner/progress.py)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import apache_beam as beam
import pytest

from pipelines.runner.progress import Reporter, finishing_steps, line
from transforms import progress

SHARDFLOW = Path(sys.executable).parent / "shardflow"
LINE = re.compile(
    r"shardflow etl: p: progress: ([\d,]+) records read, ([\d,]+) rejected, ([\d,]+) written, "
    r"\d+ s(, [\d,]+ records/s)?(; \d+ % of [\d.]+ MB read, about \d+ s left|; all .* read)?"
)


def test_counts_of_this_process_and_of_worker_files_add_up(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.ENV, str(tmp_path))
    monkeypatch.setattr(progress, "_counts", Counter())
    progress.add("read", 10)
    progress.add("rejected", 1)
    (tmp_path / "99999.json").write_text(json.dumps({"read": 5, "written": 4}))
    (tmp_path / "99998.json.tmp").write_text("{")  # a file being written: not read
    assert progress.totals(str(tmp_path)) == Counter(read=15, rejected=1, written=4)
    assert line(Counter(read=1500, written=3), 3.0) == (
        "progress: 1,500 records read, 0 rejected, 3 written, 3 s, 500 records/s"
    )


def test_with_the_input_s_size_a_line_tells_how_much_is_read_and_how_long_is_left():
    counts = Counter(read=1500, written=3, bytes=2_500_000)
    assert line(counts, 10.0, total_bytes=10_000_000) == (
        "progress: 1,500 records read, 0 rejected, 3 written, 10 s, 150 records/s; "
        "25 % of 10.0 MB read, about 30 s left"
    )
    assert line(Counter(read=9, bytes=10), 2.0, total_bytes=10).endswith("; all 0.0 MB read")
    assert line(Counter(read=9), 2.0, total_bytes=10).endswith("records/s")  # no byte read yet


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_one_line_is_rewritten_in_place(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "_counts", Counter())
    terminal = _Terminal()
    with Reporter("p", stream=terminal, total_bytes=1000):
        progress.add("read", 10)
        progress.add("bytes", 500)
        time.sleep(2.2)  # rewritten each second
    out = terminal.getvalue()
    assert out.startswith("\rp: progress: 10 records read") and out.endswith("\x1b[K\n")
    assert out.count("\r") >= 2 and "\n" not in out[:-1]  # one line, rewritten
    assert "50 % of 0.0 MB read" in out


def test_off_a_terminal_lines_come_at_10_20_30_s_then_every_minute():
    reporter = Reporter("p", stream=io.StringIO())
    assert list(reporter._times) == [10.0, 20.0, 30.0] and reporter._interval == 60.0


def test_the_stages_and_the_start_up_come_from_when_the_counts_moved():
    reporter = Reporter("p")
    reporter._seen = {"read": (1.5, 9.0, 300), "written": (10.0, 12.5, 290)}
    reporter._ended = 14.0
    assert reporter.timings() == {
        "elapsed_s": 14.0,
        "stages": [
            {"name": "read, validate and encode", "records": 300, "seconds": 7.5},
            {"name": "spill and plan the shards", "records": None, "seconds": 1.0},
            {"name": "write shards", "records": 290, "seconds": 2.5},
        ],
        "steps": [{"name": "start-up, to the first record read", "seconds": 1.5}],
    }


class _Finishing(beam.DoFn):
    def process(self, step):
        with progress.timed(step):
            time.sleep(0.05)
        yield step


def test_finishing_steps_add_up_what_the_workers_timed_in_their_order():
    with beam.Pipeline(runner="FnApiRunner") as p:
        p | beam.Create(["publish", "statistics merge", "publish"]) | beam.ParDo(_Finishing())
    steps = finishing_steps(p.result)
    assert [s["name"] for s in steps] == ["statistics merge", "publish"]  # FINISHING's order
    assert 0.05 <= steps[0]["seconds"] < steps[1]["seconds"] and steps[1]["seconds"] >= 0.1


def test_nothing_is_counted_when_no_run_is_watched(monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.setattr(progress, "_counts", Counter())
    progress.add("read", 10)
    assert progress._counts == Counter()


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers", [[], ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]]
)
def test_a_run_reports_growing_counts_then_its_summary(tmp_path, workers):
    rows = ["id,name"] + [f"{i},n{i}" for i in range(60_000)] + ["x,bad"]
    (tmp_path / "in.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "p.yaml").write_text(
        "name: p\nsources: [{name: s, format: csv, path: in.csv}]\n"
        "features: {id: {type: int}, name: {type: string}}\noutput: {path: out}\n"
    )
    done = subprocess.run(
        [str(SHARDFLOW), "etl", "--config", str(tmp_path / "p.yaml"), "--progress-seconds", "0.2",
         *workers],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    counts = [
        tuple(int(g.replace(",", "")) for g in m.groups()[:3])
        for m in map(LINE.fullmatch, done.stderr.splitlines())
        if m
    ]
    assert len(counts) >= 2
    for before, after in zip(counts, counts[1:]):  # never going back
        assert all(a <= b for a, b in zip(before, after))
    assert max(c[0] for c in counts) <= 60_001 and max(c[2] for c in counts) <= 60_000
    assert any(c[0] > 0 for c in counts)
    assert "shardflow etl: p: 60001 records read in" in done.stdout
    assert not os.environ.get(progress.ENV)


def test_a_short_run_off_a_terminal_prints_no_progress_line(tmp_path):
    (tmp_path / "in.csv").write_text("id\n1\n2\n")
    (tmp_path / "p.yaml").write_text(
        "name: p\nsources: [{name: s, format: csv, path: in.csv}]\n"
        "features: {id: {type: int}}\nsplits: {train: 1.0}\noutput: {path: out}\n"
    )
    done = subprocess.run(
        [str(SHARDFLOW), "etl", "--config", str(tmp_path / "p.yaml")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "progress:" not in done.stderr
