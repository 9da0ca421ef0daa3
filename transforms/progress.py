"""Progress of a running ETL: records read, rejected and written, reported at a sane rate.

The pipeline's steps count into this module (`add`). The counts of the process the job runs in
are read directly; worker processes of a local multi-process run (which inherit the
environment) each keep theirs in a small JSON file of a folder that `Reporter` creates, written
at most once a second. `Reporter` is a thread of the `shardflow etl` process that sums them and
prints one line to stderr every few seconds on a terminal, and every minute otherwise (a log
file must not fill with progress). Runners whose workers do not share this machine (Dataflow, a
portable worker pool elsewhere) report their own progress; the lines then show this process's
part only, or nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import TextIO

ENV = "SHARDFLOW_PROGRESS_DIR"
INTERVAL_ENV = "SHARDFLOW_PROGRESS_SECONDS"  # overrides the reporting interval
TERMINAL_INTERVAL_S = 5.0
LOG_INTERVAL_S = 60.0
_FLUSH_INTERVAL_S = 1.0
COUNTS = ("read", "rejected", "written")

_counts: Counter = Counter()
_lock = threading.Lock()
_flushed = 0.0


def add(name: str, n: int) -> None:
    """Counts `n` more records under `name` (one of COUNTS), when a run is being watched."""
    global _flushed
    folder = os.environ.get(ENV)
    if not folder or not n:
        return
    with _lock:
        _counts[name] += n
        now = time.monotonic()
        if now - _flushed >= _FLUSH_INTERVAL_S:
            _flushed = now
            _write(folder, dict(_counts))


def _write(folder: str, counts: dict[str, int]) -> None:
    path = os.path.join(folder, f"{os.getpid()}.json")
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(counts, f)
        os.replace(path + ".tmp", path)
    except OSError:  # the run is over and its folder gone, or the disk is full: not our job
        pass


def totals(folder: str) -> Counter:
    """The counts of every process of the run: this one's, and the files of the others."""
    with _lock:
        total = Counter(_counts)
    mine = f"{os.getpid()}.json"
    for name in os.listdir(folder):
        if name.endswith(".json") and name != mine:
            try:
                with open(os.path.join(folder, name)) as f:
                    total.update(json.load(f))
            except (OSError, ValueError):
                continue
    return total


def line(counts: Counter, seconds: float) -> str:
    read = counts.get("read", 0)
    rate = f", {read / seconds:,.0f} records/s" if seconds > 0 and read else ""
    return (
        f"progress: {read:,} records read, {counts.get('rejected', 0):,} rejected, "
        f"{counts.get('written', 0):,} written, {seconds:.0f} s{rate}"
    )


class Reporter:
    """Prints progress lines while a run lasts (a context manager around the pipeline)."""

    def __init__(self, prefix: str, stream: TextIO | None = None):
        self._prefix = prefix
        self._stream = stream or sys.stderr
        default = TERMINAL_INTERVAL_S if self._stream.isatty() else LOG_INTERVAL_S
        self._interval = float(os.environ.get(INTERVAL_ENV) or default)
        self._stop = threading.Event()
        self._folder: str | None = None
        self._started = 0.0
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Reporter:
        self._folder = tempfile.mkdtemp(prefix="shardflow-progress-")
        os.environ[ENV] = self._folder
        with _lock:
            _counts.clear()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="shardflow-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        os.environ.pop(ENV, None)
        shutil.rmtree(self._folder, ignore_errors=True)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            seconds = time.monotonic() - self._started
            text = line(totals(self._folder), seconds)
            print(f"{self._prefix}: {text}", file=self._stream, flush=True)
