"""Local worker processes that stop together.

When a pipeline ends, Beam's FnApiRunner (2.77) stops its worker processes one after another
(`WorkerHandlerManager.close_all`), and each takes about a third of a second to exit: with 16
`--direct_running_mode multi_processing` workers, over 5 s pass after the job's last step.
`closing_together()` has them stopped all at once for the span of a run; what is stopped, and
how a failure to stop is logged, stay Beam's.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from apache_beam.runners.portability.fn_api_runner import worker_handlers

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def closing_together() -> Iterator[None]:
    manager = worker_handlers.WorkerHandlerManager
    close_all = manager.close_all

    def close_together(self) -> None:
        handlers = {h for group in self._cached_handlers.values() for h in group}
        if handlers:
            with ThreadPoolExecutor(len(handlers)) as pool:
                list(pool.map(_close, handlers))
        self._cached_handlers = collections.defaultdict(list)
        close_all(self)  # nothing left to stop: Beam's own method closes the rest

    manager.close_all = close_together
    try:
        yield
    finally:
        manager.close_all = close_all


def _close(handler) -> None:
    try:
        handler.close()
    except Exception:  # noqa: BLE001 - as Beam's close_all: log it, stop the others
        logger.error("Error closing worker_handler %s", handler, exc_info=True)
