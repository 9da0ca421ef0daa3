"""Progress lines of a running `shardflow etl`: records read, rejected and written, at a sane rate.

`Reporter` is a thread of the `shardflow etl` process that sums the counts the pipeline's steps
keep (`transforms.progress`) and prints one line to stderr every few seconds on a terminal, and
every minute otherwise (a log file must not fill with progress). Runners whose workers do not
share this machine (Dataflow, a portable worker pool elsewhere) report their own progress; the
lines then show this process's part only, or nothing. `Reporter.timings` and `finishing_steps`
give the run report its timings.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import TextIO

from apache_beam.metrics.metric import MetricsFilter

from transforms import progress
from transforms.progress import FINISHING, TIMINGS, totals

TERMINAL_INTERVAL_S = 5.0
LOG_INTERVAL_S = 60.0
_SAMPLE_INTERVAL_S = 0.5  # how often the counts are sampled for the stage timings


def line(counts: Counter, seconds: float) -> str:
    read = counts.get("read", 0)
    rate = f", {read / seconds:,.0f} records/s" if seconds > 0 and read else ""
    return (
        f"progress: {read:,} records read, {counts.get('rejected', 0):,} rejected, "
        f"{counts.get('written', 0):,} written, {seconds:.0f} s{rate}"
    )


class Reporter:
    """Prints progress lines while a run lasts (a context manager around the pipeline)."""

    def __init__(self, prefix: str, stream: TextIO | None = None, interval: float | None = None):
        """`interval`: seconds between lines (default: TERMINAL_INTERVAL_S on a terminal,
        LOG_INTERVAL_S otherwise)."""
        self._prefix = prefix
        self._stream = stream or sys.stderr
        default = TERMINAL_INTERVAL_S if self._stream.isatty() else LOG_INTERVAL_S
        self._interval = interval or default
        self._stop = threading.Event()
        self._folder: str | None = None
        self._started = 0.0
        self._thread: threading.Thread | None = None
        # per count: (seconds into the run of its first change, of its last change, its value)
        self._seen: dict[str, tuple[float, float, int]] = {}
        self._ended = 0.0

    def __enter__(self) -> Reporter:
        self._folder = tempfile.mkdtemp(prefix="shardflow-progress-")
        os.environ[progress.ENV] = self._folder
        progress.reset()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="shardflow-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample(totals(self._folder))
        self._ended = time.monotonic() - self._started
        os.environ.pop(progress.ENV, None)
        shutil.rmtree(self._folder, ignore_errors=True)

    def _loop(self) -> None:
        next_line = self._interval
        while not self._stop.wait(min(self._interval, _SAMPLE_INTERVAL_S)):
            seconds = time.monotonic() - self._started
            counts = totals(self._folder)
            self._sample(counts)
            if seconds >= next_line:
                next_line += self._interval
                print(f"{self._prefix}: {line(counts, seconds)}", file=self._stream, flush=True)

    def _sample(self, counts: Counter) -> None:
        now = time.monotonic() - self._started
        for name in ("read", "written"):
            value = counts.get(name, 0)
            first, last, before = self._seen.get(name, (None, None, 0))
            if value != before:
                self._seen[name] = (now if first is None else first, now, value)

    def timings(self) -> dict:
        """The run's elapsed time and, as far as this machine saw them (to the half second of
        its samples), its stages: reading (with validation, encoding and spilling, which go
        along), the spill files' last writes and the shards' plan (and a tf.Transform analysis)
        until the first record is written, and writing the shards; and the start-up, until the
        first record is read, as a step."""
        read = self._seen.get("read")
        written = self._seen.get("written")
        stages, steps = [], []
        if read:
            steps.append(
                {"name": "start-up, to the first record read", "seconds": round(read[0], 3)}
            )
            stages.append(_stage("read, validate and encode", read[2], read[1] - read[0]))
        if read and written:
            stages.append(_stage("spill and plan the shards", None, written[0] - read[1]))
        if written:
            stages.append(_stage("write shards", written[2], written[1] - written[0]))
        return {"elapsed_s": round(self._ended, 3), "stages": stages, "steps": steps}


def _stage(name: str, records: int | None, seconds: float) -> dict:
    """A stage's row; its seconds never below 0 (worker processes' counts arrive late)."""
    return {"name": name, "records": records, "seconds": round(max(seconds, 0.0), 3)}


def finishing_steps(result) -> list[dict]:
    """The seconds of each finishing step of a finished job (`transforms.progress.FINISHING`),
    from the metrics its workers reported, summed over them; empty where the runner cannot give
    its metrics (the dataset is published by then: the report goes without them)."""
    try:
        found = result.metrics().query(MetricsFilter().with_namespace(TIMINGS))["distributions"]
    except Exception:  # noqa: BLE001 - see above
        return []
    milliseconds: Counter = Counter()
    for metric in found:
        value = metric.committed or metric.attempted
        if value is not None and value.count:
            milliseconds[metric.key.metric.name] += value.sum
    return [
        {"name": step, "seconds": milliseconds[step] / 1000}
        for step in FINISHING
        if step in milliseconds
    ]
