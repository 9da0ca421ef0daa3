"""Beam's portable runner on 127.0.0.1 for tests: a job service and an external SDK worker pool.

This is how Dataflow Runner v2, Flink and Spark run Python code: the job goes to a job service,
whose runner sends every bundle over the Fn API (gRPC) to SDK harness processes it does not own.
Here both are Beam's own local parts, each a separate process of the project's venv:

- the job service, `python -m apache_beam.runners.portability.local_job_service_main` (it binds
  `localhost` only and runs each job with Beam's FnApiRunner);
- the external worker pool: Beam's `BeamFnExternalWorkerPoolServicer`, which starts one SDK
  harness process (`python -c "...SdkHarness(...).run()"`, found on PATH) per worker the runner
  asks for. Beam's `worker_pool_main` binds every interface; tests/services/worker_pool.py serves
  the same servicer on 127.0.0.1 only, since whoever reaches the pool can make it start processes.

A pipeline then runs on them with
`--runner PortableRunner --job_endpoint JOB --environment_type EXTERNAL --environment_config POOL`
(`BeamPortableServices.flags()`).

`beam_portable_services` is a session fixture: it starts both on free ports (each process picks
its port and writes it to a file), waits until they accept connections, and at the end stops both
process groups, so the SDK harness processes the pool started go too. By default the pool runs
from the repository root with the venv first on PATH: its harnesses import the project's modules
like the test process does; `running_services(Pool(...))` starts it otherwise (a clean worker
environment: tests/deploy/test_clean_worker.py). Their logs go to files the tests can read
(`job_log`, `pool_log`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
WORKER_POOL = Path(__file__).resolve().parent / "worker_pool.py"
HOST = "127.0.0.1"
_START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 10.0
_LOG_TAIL_CHARS = 3000
# The worker pool logs this line each time it starts an SDK harness process for a job.
WORKER_STARTED = "Starting worker with command"


@dataclasses.dataclass(frozen=True)
class BeamPortableServices:
    """The running job service and worker pool: their endpoints, PIDs and log files."""

    job_endpoint: str
    pool_endpoint: str
    job_pid: int
    pool_pid: int
    job_log: Path
    pool_log: Path

    def flags(self) -> list[str]:
        """The Beam pipeline options that run a job on these services."""
        return [
            "--runner",
            "PortableRunner",
            "--job_endpoint",
            self.job_endpoint,
            "--environment_type",
            "EXTERNAL",
            "--environment_config",
            self.pool_endpoint,
        ]

    def workers_started(self) -> int:
        """How many SDK harness processes the worker pool has started so far."""
        return self.pool_log.read_text(errors="replace").count(WORKER_STARTED)


def _tail(path: Path) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-_LOG_TAIL_CHARS:] or "(no output)"


@dataclasses.dataclass(frozen=True)
class Pool:
    """How the worker pool is started: its command (tests/services/worker_pool.py run by some
    Python, with `--port_file` added), working folder and environment variables."""

    command: list[str]
    cwd: Path
    env: dict[str, str]


def _start(args: list[str], log: Path, env: dict[str, str], cwd: Path = ROOT) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            args,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped with its children
        )


def _wait_for_port(
    name: str, proc: subprocess.Popen, port_file: Path, log: Path, deadline: float
) -> int:
    """The port `proc` wrote to `port_file`, once it accepts connections on 127.0.0.1."""
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"the Beam {name} exited with status {proc.returncode} while starting; "
                f"its output ends with:\n{_tail(log)}"
            )
        port = None
        with contextlib.suppress(OSError, ValueError):
            port = int(port_file.read_text())
        if port is not None:
            with contextlib.suppress(OSError):
                with socket.create_connection((HOST, port), timeout=0.5):
                    return port
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the Beam {name} did not accept connections within {_START_TIMEOUT_S:.0f} s; "
                f"its output ends with:\n{_tail(log)}"
            )
        time.sleep(0.1)  # a readiness poll, bounded by the deadline


def _stop(proc: subprocess.Popen) -> None:
    """Stops the process group of `proc` (SIGTERM, then SIGKILL after a grace period)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; its group may still hold harness processes
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return


@contextlib.contextmanager
def running_services(pool: Pool | None = None) -> Iterator[BeamPortableServices]:
    """Starts a job service and a worker pool on free loopback ports; stops both after. The
    pool: `pool`, by default this venv's Python from the repository root."""
    with tempfile.TemporaryDirectory(prefix="beam-portable-") as tmp:
        folder = Path(tmp)
        env = dict(
            os.environ,
            # the pool starts harnesses with `python` from PATH: the venv's
            PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            TF_CPP_MIN_LOG_LEVEL="2",
        )
        job_log, pool_log = folder / "job-service.log", folder / "worker-pool.log"
        job_port_file, pool_port_file = folder / "job.port", folder / "pool.port"
        procs = []
        try:
            if pool is None:
                pool = Pool([sys.executable, str(WORKER_POOL)], ROOT, env)
            procs.append(
                job := _start(
                    [
                        sys.executable,
                        "-m",
                        "apache_beam.runners.portability.local_job_service_main",
                        "--port",
                        "0",
                        "--port_file",
                        str(job_port_file),
                        "--staging_dir",
                        str(folder / "staging"),
                    ],
                    job_log,
                    env,
                )
            )
            procs.append(
                pool_proc := _start(
                    [*pool.command, "--port_file", str(pool_port_file)],
                    pool_log,
                    pool.env,
                    pool.cwd,
                )
            )
            deadline = time.monotonic() + _START_TIMEOUT_S
            job_port = _wait_for_port("job service", job, job_port_file, job_log, deadline)
            pool_port = _wait_for_port("worker pool", pool_proc, pool_port_file, pool_log, deadline)
            yield BeamPortableServices(
                job_endpoint=f"localhost:{job_port}",
                pool_endpoint=f"{HOST}:{pool_port}",
                job_pid=job.pid,
                pool_pid=pool_proc.pid,
                job_log=job_log,
                pool_log=pool_log,
            )
        finally:
            for proc in procs:
                _stop(proc)


@pytest.fixture(scope="session")
def beam_portable_services() -> Iterator[BeamPortableServices]:
    """A running Beam job service and external SDK worker pool on 127.0.0.1."""
    with running_services() as services:
        yield services
