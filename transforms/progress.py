"""The progress counts of a running ETL (records read, rejected and written) and the times of
its finishing steps.

The pipeline's steps count into this module (`add`) while a run is watched (the entry point's
`pipelines.runner.progress.Reporter` sets `ENV` to a folder). The counts of the process the job
runs in are read directly; worker processes of a local multi-process run (which inherit the
environment) each keep theirs in a small JSON file of that folder, written at most once a
second; `totals` sums them.

The finishing steps (`FINISHING`) time themselves (`timed`) into Beam metrics, which runners
bring back to the process that ran the job, wherever its workers were.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from typing import Iterator

ENV = "SHARDFLOW_PROGRESS_DIR"
_FLUSH_INTERVAL_S = 1.0
COUNTS = ("read", "rejected", "written")
TIMINGS = "shardflow.timings"  # the Beam metrics namespace of the finishing steps' milliseconds
FINISHING = (
    "statistics merge",
    "delete spill files",
    "rejected records",
    "manifest and checks",
    "validation",
    "publish",
)

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


def reset() -> None:
    """Forgets this process's counts (a new run is watched)."""
    with _lock:
        _counts.clear()


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


@contextlib.contextmanager
def timed(step: str) -> Iterator[None]:
    """Adds the block's milliseconds to the Beam metric (a distribution) of `step`, one of
    FINISHING; a step timed several times, or on several workers, adds up."""
    started = time.monotonic()
    yield
    from apache_beam.metrics import Metrics  # Beam: only once a pipeline's step runs

    Metrics.distribution(TIMINGS, step).update(round((time.monotonic() - started) * 1000))
