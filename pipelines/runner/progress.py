"""Progress lines of a running `shardflow etl`: records read, rejected and written, at a sane rate.

`Reporter` is a thread of the `shardflow etl` process that sums the counts the pipeline's steps
keep (`transforms.progress`). On a terminal it keeps one line of stderr up to date (rewritten in
place every second); otherwise it prints a line at 10, 20 and 30 s, then every minute (a log
file must not fill with progress). With the input's size known, a line also says how much of
it is read and about how long reading has left (the readers count a file's bytes, or a range's,
once it is parsed). A line written in place needs nothing but a carriage return, so no
progress-bar library is used. Runners whose workers do not
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
from collections.abc import Iterator
from typing import TextIO

from apache_beam.metrics.metric import MetricsFilter

from transforms import progress
from transforms.progress import FINISHING, TIMINGS, totals

TERMINAL_INTERVAL_S = 1.0  # between rewrites of the line on a terminal
LOG_TIMES_S = (10.0, 20.0, 30.0)  # the first lines off a terminal; then every LOG_INTERVAL_S
LOG_INTERVAL_S = 60.0
_SAMPLE_INTERVAL_S = 0.5  # how often the counts are sampled for the stage timings


def line(counts: Counter, seconds: float, total_bytes: int | None = None) -> str:
    read = counts.get("read", 0)
    rate = f", {read / seconds:,.0f} records/s" if seconds > 0 and read else ""
    text = (
        f"progress: {read:,} records read, {counts.get('rejected', 0):,} rejected, "
        f"{counts.get('written', 0):,} written, {seconds:.0f} s{rate}"
    )
    done = counts.get("bytes", 0)
    if not total_bytes or not done:
        return text
    if done >= total_bytes:
        return f"{text}; all {_mb(total_bytes)} read"
    left = (total_bytes - done) * seconds / done
    share = f"{100 * done / total_bytes:.0f} % of {_mb(total_bytes)} read"
    return f"{text}; {share}, about {left:.0f} s left"


def _mb(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


class Reporter:
    """Prints progress lines while a run lasts (a context manager around the pipeline)."""

    def __init__(
        self,
        prefix: str,
        stream: TextIO | None = None,
        interval: float | None = None,
        total_bytes: int | None = None,
    ):
        """`interval`: seconds between lines, each on a line of its own (default: the line
        rewritten in place every TERMINAL_INTERVAL_S on a terminal; lines at LOG_TIMES_S, then
        every LOG_INTERVAL_S, otherwise). `total_bytes`: the input's size, when known."""
        self._prefix = prefix
        self._stream = stream or sys.stderr
        self._in_place = interval is None and self._stream.isatty()
        self._times: Iterator[float]
        if interval is not None:
            self._times = iter(())
            self._interval = interval
        elif self._in_place:
            self._times, self._interval = iter(()), TERMINAL_INTERVAL_S
        else:
            self._times, self._interval = iter(LOG_TIMES_S), LOG_INTERVAL_S
        self._total_bytes = total_bytes
        self._shown = False  # a line is on the terminal, not ended yet
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
        assert self._folder is not None  # made by __enter__
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._shown:  # the line written in place ends; what follows starts below it
            print(file=self._stream, flush=True)
        self._sample(totals(self._folder))
        self._ended = time.monotonic() - self._started
        os.environ.pop(progress.ENV, None)
        shutil.rmtree(self._folder, ignore_errors=True)

    def _loop(self) -> None:
        assert self._folder is not None  # made by __enter__ before the thread starts
        next_line = next(self._times, None) or self._interval
        while not self._stop.wait(min(self._interval, _SAMPLE_INTERVAL_S)):
            seconds = time.monotonic() - self._started
            counts = totals(self._folder)
            self._sample(counts)
            if seconds < next_line:
                continue
            next_line = next(self._times, None) or next_line + self._interval
            text = f"{self._prefix}: {line(counts, seconds, self._total_bytes)}"
            if self._in_place:  # back to the line's start, the rest of it cleared
                self._stream.write(f"\r{text}\x1b[K")
                self._stream.flush()
                self._shown = True
            else:
                print(text, file=self._stream, flush=True)

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
