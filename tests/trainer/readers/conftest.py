"""Fixtures of the reader tests: the trainer tests' penguins dataset (tests/trainer/conftest.py),
the shapes sample through the ETL once per session, and a runner of Python code in a clean
child process (loader workers are forked: never from a process that runs TensorFlow or JAX
threads)."""

from __future__ import annotations

import runpy
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.trainer.datasets import REPO, run_python

SHAPES = REPO / "examples" / "shapes"


@pytest.fixture(scope="session")
def shapes(tmp_path_factory) -> Path:
    """The shapes sample (210 PNGs of three classes) as a dataset, by `python -m pipelines.etl`
    in a child process (the test process imports no Beam)."""
    base = tmp_path_factory.mktemp("shapes")
    runpy.run_path(str(SHAPES / "generate.py"))["generate"](base)
    shutil.copy(SHAPES / "shapes.yaml", base)
    out = base / "out"
    proc = run_python(
        "-m", "pipelines.etl", "--config", str(base / "shapes.yaml"), "--output", str(out)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def run_code(code: str, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """Runs `python -c CODE ARGS` from the repository root; fails the test on a non-zero exit."""
    proc = run_python("-c", textwrap.dedent(code), *args, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc
