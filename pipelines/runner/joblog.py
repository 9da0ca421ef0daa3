"""What the runner logs stays out of the terminal unless asked for; a failed run keeps it in a file.

A failed Beam job logs the worker's traceback at ERROR and raises an exception whose text repeats
it. Users get one line (`shardflow etl: job failed: REASON (details: FILE)`); the runner's log
records and the traceback go to FILE, in the temporary folder, written only when a run fails.
`--verbose` prints both to the terminal instead (and the runner's INFO records as they come).
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import logging
import os
import sys
import tempfile
import traceback
from typing import Iterator

_KEPT = 2000  # the last records of a run: enough for any failure, bounded for long runs
_RUNNER_LOGGERS = ("apache_beam", "tensorflow", "tensorflow_transform", "tfx_bsl", "absl")
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Kept(logging.Handler):
    """Keeps the last records of a run, formatted, for the log file of a failure."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: collections.deque[str] = collections.deque(maxlen=_KEPT)
        self.setFormatter(logging.Formatter(_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # noqa: BLE001 - logging must never fail the run
            self.handleError(record)


def _from_runner(record: logging.LogRecord) -> bool:
    return record.name.split(".", 1)[0] in _RUNNER_LOGGERS


class _Capture:
    def __init__(self, verbose: bool):
        self.verbose = verbose
        self.kept = _Kept()


_active: _Capture | None = None


@contextlib.contextmanager
def captured(verbose: bool = False) -> Iterator[None]:
    """For the block: the runner's log records are kept (and printed with `verbose` only)."""
    global _active
    root = logging.getLogger()
    capture = _Capture(verbose)
    quiet = [
        h for h in root.handlers
        if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) is sys.stderr
    ]  # fmt: skip
    level = root.level
    root.addHandler(capture.kept)
    if verbose:
        root.setLevel(min(level, logging.INFO))
    else:
        for handler in quiet:
            handler.addFilter(_not_from_runner)
    previous, _active = _active, capture
    try:
        yield
    finally:
        _active = previous
        root.removeHandler(capture.kept)
        root.setLevel(level)
        for handler in quiet:
            handler.removeFilter(_not_from_runner)


def _not_from_runner(record: logging.LogRecord) -> bool:
    return not _from_runner(record)


def failure(error: BaseException) -> str:
    """Records a failed job: with --verbose, its traceback on stderr (and returns ""); else in
    a log file with the run's log records, and returns " (details: FILE)" to add to the line
    that says the job failed."""
    text = "".join(traceback.format_exception(error))
    if _active is None or _active.verbose:
        sys.stderr.write(text)
        return ""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    fd, path = tempfile.mkstemp(prefix=f"shardflow-etl-{stamp}-", suffix=".log")
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
        f.writelines(line + "\n" for line in _active.kept.lines)
        f.write(text)
    return f" (details: {path}; --verbose prints them)"
