"""Local worker processes are stopped together at the end of a run (pipelines/workers.py)."""

from __future__ import annotations

import time

from apache_beam.runners.portability.fn_api_runner import worker_handlers

from pipelines.workers import closing_together


class _Handler:
    """Stands for a worker handler: closing it takes a while, as a worker process's exit does."""

    def __init__(self, fails: bool = False):
        self.closed_at: float | None = None
        self._fails = fails

    def close(self) -> None:
        time.sleep(0.3)
        self.closed_at = time.monotonic()
        if self._fails:
            raise RuntimeError("cannot stop")


def _manager(handlers) -> worker_handlers.WorkerHandlerManager:
    manager = worker_handlers.WorkerHandlerManager({}, None)
    manager._cached_handlers["env"] = list(handlers)
    return manager


def test_handlers_are_closed_at_once_and_beams_method_is_restored():
    original = worker_handlers.WorkerHandlerManager.close_all
    handlers = [_Handler() for _ in range(8)]
    with closing_together():
        assert worker_handlers.WorkerHandlerManager.close_all is not original
        start = time.monotonic()
        _manager(handlers).close_all()
    assert worker_handlers.WorkerHandlerManager.close_all is original
    assert all(h.closed_at is not None for h in handlers)
    assert max(h.closed_at for h in handlers) - start < 8 * 0.3 / 2  # not one after another


def test_a_handler_that_fails_to_close_is_logged_and_the_others_still_close(caplog):
    handlers = [_Handler(), _Handler(fails=True), _Handler()]
    manager = _manager(handlers)
    with closing_together():
        manager.close_all()
    assert all(h.closed_at is not None for h in handlers)
    assert "Error closing worker_handler" in caplog.text and "cannot stop" in caplog.text
    assert not manager._cached_handlers
