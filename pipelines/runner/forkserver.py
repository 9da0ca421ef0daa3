"""The fork server that local worker processes are forked from (`pipelines.runner.workers`).

This module imports no Beam, so that `shardflow etl` can start the server first thing: the
server then imports Beam and the ETL's steps while the command imports them too, and the first
worker is forked from a ready server when the job starts.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver

# What the server imports before it forks: Beam's worker harness and the steps of an ETL run.
PRELOAD = [
    "apache_beam.runners.worker.sdk_worker_main",
    "pipelines.runner.workers",
    "transforms.sources.read",
    "transforms.prepare",
    "transforms.join",
    "transforms.stats",
    "transforms.quality",
    "transforms.sink.write",
    "transforms.sink.finalize",
]


def wanted(argv: list[str]) -> bool:
    """Whether a command line asks for local worker processes (`--direct_running_mode
    multi_processing`), read before Beam parses it; `pipelines.runner.workers.forks_workers` decides
    from the parsed options."""
    for i, arg in enumerate(argv):
        if arg == "--direct_running_mode=multi_processing":
            return True
        if arg == "--direct_running_mode" and argv[i + 1 : i + 2] == ["multi_processing"]:
            return True
    return False


def start() -> None:
    """Starts the server (once per process); returns at once, while it imports PRELOAD."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
    multiprocessing.forkserver.ensure_running()
