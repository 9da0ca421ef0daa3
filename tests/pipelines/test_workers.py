"""Local worker processes are forked from a fork server and stopped together at the end of a
run (pipelines/runner/workers.py)."""

from __future__ import annotations

import json
import logging
import multiprocessing.forkserver
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability import local_job_service
from apache_beam.runners.portability.fn_api_runner import worker_handlers

from pipelines.runner import forkserver
from pipelines.runner.workers import (
    ForkedWorker,
    _harness,
    closing_together,
    forking,
    local_workers,
    start_forkserver,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


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


def _write_worker_facts(element: int, folder: str) -> None:
    with open("/proc/self/cmdline", "rb") as f:
        command = f.read().replace(b"\0", b" ").decode()
    facts = [os.getpid(), os.getppid(), command, os.environ.get("WORKER_ID", "")]
    with open(os.path.join(folder, f"{element}.json"), "w") as f:
        json.dump(facts, f)


def _run_two_workers(folder: Path) -> list[tuple[int, int, str, str]]:
    """Runs a pipeline on two local worker processes; returns what each element saw there."""
    options = PipelineOptions(
        ["--direct_num_workers=2", "--direct_running_mode=multi_processing"], runner="FnApiRunner"
    )
    start_forkserver(options)
    folder.mkdir()
    with local_workers():
        with beam.Pipeline(options=options) as p:
            _ = (
                p
                | beam.Create(range(40))
                | beam.Reshuffle()
                | beam.Map(_write_worker_facts, str(folder))
            )
    return [tuple(json.loads(path.read_text())) for path in folder.glob("*.json")]


def test_local_workers_are_forked_from_the_fork_server_with_beams_environment(tmp_path):
    facts = _run_two_workers(tmp_path / "first")
    assert len(facts) == 40
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    assert server is not None
    pids = {pid for pid, _, _, _ in facts}
    assert pids and os.getpid() not in pids
    assert {parent for _, parent, _, _ in facts} == {server}
    assert all("from multiprocessing.forkserver import main" in c for _, _, c, _ in facts)
    assert all(worker.startswith("worker_") for _, _, _, worker in facts)  # Beam's variables
    # Beam's method is back, and the fork server is reused by the next run.
    assert local_job_service.subprocess is subprocess
    assert {parent for _, parent, _, _ in _run_two_workers(tmp_path / "second")} == {server}


def test_other_commands_still_run_as_processes():
    with forking():
        process = local_job_service.subprocess.Popen("exit 3", shell=True, env=dict(os.environ))
        assert isinstance(process, subprocess.Popen)
        assert process.wait() == 3
        assert local_job_service.subprocess.PIPE == subprocess.PIPE


def test_a_forked_worker_reports_its_exit_code():
    env = dict(os.environ, CONTROL_API_SERVICE_DESCRIPTOR="url: 'localhost:1'")
    start_forkserver(
        PipelineOptions(["--direct_running_mode=multi_processing"], runner="FnApiRunner")
    )
    worker = ForkedWorker(env)
    worker.kill()
    assert worker.wait() not in (0, None) and worker.poll() == worker.returncode


@pytest.mark.parametrize(
    "argv, wanted",
    [
        (["--direct_running_mode", "multi_processing", "--direct_num_workers", "4"], True),
        (["--config", "c.yaml", "--direct_running_mode=multi_processing"], True),
        (["--direct_running_mode", "multi_threading"], False),
        (["--direct_running_mode"], False),
        (["--config", "multi_processing"], False),
        ([], False),
    ],
)
def test_the_command_line_asks_for_local_worker_processes(argv, wanted):
    assert forkserver.wanted(argv) is wanted


def test_shardflow_etl_starts_the_fork_server_before_it_imports_beam(tmp_path):
    (tmp_path / "a.csv").write_text("y\n1\n")
    config = tmp_path / "c.yaml"
    config.write_text("name: c\nsources: [{name: a, format: csv, path: a.csv}]\n"
                      "features: {y: {type: int}}\noutput: {path: out}\n")  # fmt: skip
    code = textwrap.dedent(
        f"""
        import importlib, multiprocessing.forkserver, sys
        from pipelines import cli

        real_import = importlib.import_module

        def import_module(name, *args):
            if name != "pipelines.etl":  # the config's check imports its format's module
                return real_import(name, *args)
            running = multiprocessing.forkserver._forkserver._forkserver_pid is not None
            print(name, "apache_beam" in sys.modules, running)
            sys.exit(0)

        cli.importlib.import_module = import_module
        cli.main(["etl", "--config", {str(config)!r}, "--direct_running_mode", "multi_processing"])
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60
    )
    assert run.stdout.split() == ["pipelines.etl", "False", "True"], run.stderr


def test_a_forked_worker_starts_without_logging_handlers_of_the_fork_server(monkeypatch):
    from apache_beam.runners.worker import sdk_worker_main

    seen = []
    monkeypatch.setattr(
        sdk_worker_main, "main", lambda argv: seen.append(list(logging.root.handlers))
    )
    kept = list(logging.root.handlers)
    logging.root.addHandler(logging.StreamHandler())  # as a basicConfig() during an import
    try:
        _harness(dict(os.environ))
    finally:
        logging.root.handlers[:] = kept
    assert seen == [[]]


def test_a_script_without_a_main_guard_is_not_run_again_in_each_worker(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(REPO_ROOT)!r})
            import apache_beam as beam
            from apache_beam.options.pipeline_options import PipelineOptions
            from pipelines.runner.workers import local_workers, start_forkserver

            print("started", flush=True)  # printed again by any worker that runs this file
            options = PipelineOptions(
                ["--direct_num_workers=2", "--direct_running_mode=multi_processing"],
                runner="FnApiRunner",
            )
            start_forkserver(options)
            with local_workers():
                with beam.Pipeline(options=options) as p:
                    _ = p | beam.Create(range(10)) | beam.Reshuffle() | beam.Map(abs)
            print("done", flush=True)
            """
        )
    )
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["started", "done"]
