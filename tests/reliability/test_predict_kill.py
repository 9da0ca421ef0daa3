"""Faults: `shardflow predict --output F --rejected R` killed with SIGKILL at each of its pause
points leaves F and R each either as they were (byte-identical) or complete, never half
written; a rerun then writes the bytes of a clean run and leaves no temporary file. Ctrl-C
(SIGINT) leaves the old files and no temporary file at once.

The kill points are `deploy.predict.PAUSE_POINTS`: the model loaded; the answers of the first
input file written (mid-way: --input matches two files); every answer written, nothing
published; F published, R not yet; both published. The runs are subprocesses of the real
command line (`pipelines.cli`), reached through the test-only hook `pause_at` of
`deploy.predict.main`: this module run as a program
(`python -m tests.reliability.test_predict_kill FLAG POINT ARGS...`) creates FLAG at POINT and
waits to be killed. They run side by side, each in its own folder; the reruns run in this
process.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.deploy.test_predict import CONFIG, new_records, temp_files, tiny_model

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

ARGV = ["--config", "c.yaml", "--input", "in/*.csv",
        "--output", "answers.jsonl", "--rejected", "rejected.jsonl"]  # fmt: skip
OLD = {"answers.jsonl": b"old answers\n", "rejected.jsonl": b"old rejected\n"}

# After a kill at each point: which of F and R are new (else old), and the temporary files left.
AFTER_KILL = {
    "loaded": ((), 2),
    "writing": ((), 2),
    "written": ((), 2),
    "output-published": (("answers.jsonl",), 1),
    "published": (("answers.jsonl", "rejected.jsonl"), 0),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tiny_model(tmp_path_factory)  # shared with test_hostile_predict.py


def _folder(folder: Path) -> Path:
    """c.yaml, two input files of 3 records and a rejected one each, old F and R."""
    folder.mkdir()
    (folder / "c.yaml").write_text(CONFIG)
    (folder / "in").mkdir()
    (folder / "in" / "a.csv").write_text(new_records(0, 3, bad=1))
    (folder / "in" / "b.csv").write_text(new_records(4, 3, bad=1))
    for name, data in OLD.items():
        (folder / name).write_bytes(data)
    return folder


def _outputs(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in OLD}


def _start(folder: Path, model: Path, point: str) -> subprocess.Popen:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.test_predict_kill", "paused", point,
         "--model-dir", str(model), *ARGV],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, killed whole
    )  # fmt: skip


def _wait_paused(runs: dict[str, tuple[Path, subprocess.Popen]], seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    waiting = dict(runs)
    while waiting:
        for name, (folder, proc) in list(waiting.items()):
            if (folder / "paused").exists():
                del waiting[name]
            elif proc.poll() is not None:
                pytest.fail(f"{name}: the run ended before its pause point: {proc.stderr.read()}")
        assert time.monotonic() < deadline, f"pause points never reached: {sorted(waiting)}"
        time.sleep(0.02)


@pytest.mark.timeout(420)
def test_a_killed_run_leaves_old_or_complete_files_and_a_rerun_the_clean_bytes(
    model, tmp_path, monkeypatch
):
    from deploy import predict

    assert tuple(AFTER_KILL) == predict.PAUSE_POINTS
    runs = {}
    for point in (*AFTER_KILL, "interrupt"):
        folder = _folder(tmp_path / point)
        runs[point] = (folder, _start(folder, model, "writing" if point == "interrupt" else point))
    clean = _folder(tmp_path / "clean")  # meanwhile: an uninterrupted run, in this process
    monkeypatch.chdir(clean)
    assert predict.main(["--model-dir", str(model), *ARGV]) == 0
    new = _outputs(clean)
    assert len(new["answers.jsonl"].splitlines()) == 6
    assert len(new["rejected.jsonl"].splitlines()) == 2
    try:
        _wait_paused(runs)
    finally:
        for point, (_, proc) in runs.items():
            os.killpg(proc.pid, signal.SIGINT if point == "interrupt" else signal.SIGKILL)
    for point, (folder, proc) in runs.items():
        _, err = proc.communicate(timeout=120)
        if point == "interrupt":  # Ctrl-C: cleaned up at once
            assert proc.returncode == 130 and err.endswith("shardflow predict: interrupted\n")
            assert (_outputs(folder), temp_files(folder)) == (OLD, [])
            continue
        assert proc.returncode == -signal.SIGKILL, err
        published, left = AFTER_KILL[point]
        expected = {name: new[name] if name in published else OLD[name] for name in OLD}
        assert _outputs(folder) == expected, point
        assert len(temp_files(folder)) == left, point
        monkeypatch.chdir(folder)  # the rerun: the clean bytes, no temporary file left
        assert predict.main(["--model-dir", str(model), *ARGV]) == 0, point
        assert (_outputs(folder), temp_files(folder)) == (new, []), point


def _pause_at(point: str, flag: str):
    """A `pause_at` hook: at `point`, creates `flag` and waits to be killed."""

    def pause(at: str) -> None:
        if at == point:
            Path(flag).touch()
            while True:
                time.sleep(0.05)

    return pause


if __name__ == "__main__":
    from deploy import predict
    from pipelines import cli

    flag, point, *args = sys.argv[1:]
    predict.main = functools.partial(predict.main, pause_at=_pause_at(point, flag))
    cli.main(["predict", *args])
