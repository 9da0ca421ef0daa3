"""Local worker processes that start fast and stop together.

With `--direct_running_mode multi_processing`, Beam's FnApiRunner (2.77) starts each worker as a
new Python process (`python -m apache_beam.runners.worker.sdk_worker_main`), and each spends
about 2 s importing Beam before it takes work; 16 of them starting at once on 16 cores take
3–4 s. At the end of a run it stops them one after another, about a third of a second each.

- `start_forkserver(options)` starts, early and in the background, a fork server (the standard
  library's `multiprocessing` forkserver, `pipelines.runner.forkserver`) that imports what a worker
  needs once; `shardflow etl` starts it even before it imports Beam itself.
- For the span of a run, `local_workers()` has Beam's worker command forked from that server
  (a worker is then ready in a few milliseconds, with the same environment variables Beam gives
  it and the same harness) and the workers stopped all at once. How a worker is watched, logged
  and stopped stays Beam's: only the `subprocess.Popen` of its default command is replaced.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import spawn
from typing import Iterator

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.runners.portability import local_job_service
from apache_beam.runners.portability.fn_api_runner import worker_handlers

from pipelines.runner import forkserver

logger = logging.getLogger(__name__)

# The worker command FnApiRunner builds for multi_processing (fn_runner.py), without the Python.
BEAM_WORKER = "-m apache_beam.runners.worker.sdk_worker_main"


def forks_workers(options: PipelineOptions) -> bool:
    """Whether the run starts local worker processes (they are then forked)."""
    return (
        options.view_as(StandardOptions).runner == "FnApiRunner"
        and options.view_as(DirectOptions).direct_running_mode == "multi_processing"
    )


def start_forkserver(options: PipelineOptions) -> None:
    """Starts the fork server where the run will fork workers, unless it runs already; returns
    at once (the server imports what workers need in the background)."""
    if forks_workers(options):
        forkserver.start()


@contextlib.contextmanager
def local_workers() -> Iterator[None]:
    """For the block: local workers forked from the fork server, stopped together."""
    with closing_together(), forking():
        yield


@contextlib.contextmanager
def forking() -> Iterator[None]:
    """For the block: Beam's default worker command is forked from the fork server instead of
    run as a new process."""
    module = local_job_service.subprocess
    # setattr: a stand-in of another type takes the module's place for the block.
    setattr(local_job_service, "subprocess", _Subprocess())
    try:
        yield
    finally:
        local_job_service.subprocess = module


class _Subprocess:
    """`subprocess` as local_job_service uses it, but Popen forks Beam's default worker."""

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(command, *args, env=None, **kwargs):  # noqa: N802 - subprocess's name
        if isinstance(command, str) and command.endswith(BEAM_WORKER) and env is not None:
            return ForkedWorker(env)
        return subprocess.Popen(command, *args, env=env, **kwargs)


class ForkedWorker:
    """A Beam SDK worker forked from the fork server, seen through the part of Popen's interface
    that local_job_service uses: wait, poll, kill and returncode."""

    def __init__(self, env: dict[str, str]):
        context = multiprocessing.get_context("forkserver")
        self._process = context.Process(target=_harness, args=(env,), name="beam-sdk-worker")
        with _without_main_module():
            self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def wait(self) -> int | None:
        self._process.join()
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode

    def kill(self) -> None:
        self._process.kill()


_PREPARING = threading.Lock()


@contextlib.contextmanager
def _without_main_module() -> Iterator[None]:
    """For the block: a process started through multiprocessing does not run this process's
    main module again (multiprocessing would, as `__mp_main__`): a script that runs the ETL
    without an `if __name__ == "__main__":` guard would start over in every worker. Beam's own
    worker processes never import it either."""
    with _PREPARING:
        prepare = spawn.get_preparation_data

        def without_main(name: str) -> dict:
            data = prepare(name)
            data.pop("init_main_from_name", None)
            data.pop("init_main_from_path", None)
            return data

        spawn.get_preparation_data = without_main
        try:
            yield
        finally:
            spawn.get_preparation_data = prepare


def _harness(env: dict[str, str]) -> None:
    """In the forked worker: the environment Beam gave it and no logging handler of the fork
    server's (an import may have set one up, which would print the worker's INFO records on
    the terminal), then Beam's worker main."""
    from apache_beam.runners.worker import sdk_worker_main

    os.environ.clear()
    os.environ.update(env)
    for handler in list(logging.root.handlers):
        logging.root.removeHandler(handler)
    sdk_worker_main.main(sys.argv)


@contextlib.contextmanager
def closing_together() -> Iterator[None]:
    """For the block: WorkerHandlerManager.close_all stops every worker at once."""
    manager = worker_handlers.WorkerHandlerManager
    close_all = manager.close_all

    def close_together(self) -> None:
        handlers = {h for group in self._cached_handlers.values() for h in group}
        if handlers:
            with ThreadPoolExecutor(len(handlers)) as pool:
                list(pool.map(_close, handlers))
        self._cached_handlers = collections.defaultdict(list)
        close_all(self)  # nothing left to stop: Beam's own method closes the rest

    # setattr: Beam's method is replaced on its class for the block, then put back.
    setattr(manager, "close_all", close_together)
    try:
        yield
    finally:
        setattr(manager, "close_all", close_all)


def _close(handler) -> None:
    try:
        handler.close()
    except Exception:  # noqa: BLE001 - as Beam's close_all: log it, stop the others
        logger.error("Error closing worker_handler %s", handler, exc_info=True)
