"""`shardflow train` killed with SIGKILL at five points, then run again: the model folder holds,
after every kill and after the rerun, one run's outputs whole (trainer/run/modeldir.py).

A first run trains 1 epoch: the old complete model. Then runs asked for 2 epochs are killed, one
after the other, at the points of trainer.task.POINTS, reached through the test-only `pause`
hook of `trainer.task.main` (the child prints `PAUSED POINT` and sleeps until it is killed):
- `claimed`: run.json written, the folder's lock held (a second train is refused, naming the
  pid of the paused one);
- `checkpoint`: mid-epoch, just after a step's checkpoint (--checkpoint-every 1);
- `staged`: the new export written to its hidden staging folder, not yet renamed;
- `export-published`: the new export renamed into place, metrics.json not yet written;
- `published`: every output written, run.json not yet saying complete.
Until publishing starts the folder holds the old model byte for byte and run.json says it is
complete; from then on run.json says the folder is not complete and each output is whole (the
old one or the new one, never half an export). A last run completes the new model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainer.datasets import REPO, make_rows, write_dataset
from trainer.run.report import read_history
from trainer.task import POINTS
from trainer.task import main as train

pytestmark = pytest.mark.slow

OUTPUTS = ("metrics.json", "history.csv", "report.html")
_CHILD = """
import sys, time
from trainer import task

def pause(point):
    if point == sys.argv[1]:
        print("PAUSED " + point, flush=True)
        time.sleep(600)

sys.exit(task.main(sys.argv[2:], pause=pause))
"""


def _env() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO))
    env.pop("TPU_NAME", None)
    env.pop("TF_CONFIG", None)
    return env


def _argv(data: Path, model_dir: Path, epochs: int) -> list[str]:
    return [
        "--data", str(data), "--model-dir", str(model_dir), "--epochs", str(epochs),
        "--batch-size", "8", "--checkpoint-every", "1", "--hidden-units", "8", "--deterministic",
    ]  # fmt: skip


def _train(argv: list[str], point: str = "none", stderr=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, point, *argv],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=stderr if stderr is not None else subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _paused_at(proc: subprocess.Popen, point: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == f"PAUSED {point}":
            return
        assert time.monotonic() < deadline, f"{point} never reached"
    raise AssertionError(f"the run ended before {point}: exit {proc.wait()}")


def _outputs(model_dir: Path) -> dict[str, bytes]:
    """Relative path → bytes of the export and the published files."""
    files = {
        str(p.relative_to(model_dir)): p.read_bytes()
        for p in (model_dir / "export").rglob("*")
        if p.is_file()
    }
    files.update({n: (model_dir / n).read_bytes() for n in OUTPUTS if (model_dir / n).exists()})
    return files


def _export(files: dict[str, bytes]) -> dict[str, bytes]:
    return {k: v for k, v in files.items() if k.startswith("export/")}


def _whole_export(model_dir: Path) -> None:
    export = model_dir / "export"
    assert (export / "saved_model.pb").is_file()
    assert (export / "variables" / "variables.index").is_file()
    assert json.loads((export / "assets.extra" / "label.json").read_text())["name"] == "species"


def _run_json(model_dir: Path) -> dict:
    return json.loads((model_dir / "run.json").read_text())


def test_a_run_killed_anywhere_leaves_one_whole_model_and_a_rerun_completes_it(tmp_path, capsys):
    data = write_dataset(tmp_path / "data", make_rows(40)).root
    model_dir = tmp_path / "model"
    # the first and last runs in this process: a child's start (TensorFlow's import) costs
    assert train(_argv(data, model_dir, 1)) == 0, capsys.readouterr()
    old = _outputs(model_dir)
    _whole_export(model_dir)
    assert json.loads(old["metrics.json"])["epochs_trained"] == 1

    for point in POINTS:
        proc = _train(_argv(data, model_dir, 2), point)
        try:
            _paused_at(proc, point)
            if point == "claimed":
                # one writer: a second run is refused at once, naming the paused one's pid
                code = train(_argv(data, model_dir, 2))
                err = capsys.readouterr().err.splitlines()
                assert (code, err[-1]) == (
                    2,
                    f"shardflow train: --model-dir {model_dir}: another `shardflow train` is "
                    f"writing to it (pid {proc.pid}): wait for it to end, or choose another "
                    "--model-dir",
                )
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL

        now, run = _outputs(model_dir), _run_json(model_dir)
        _whole_export(model_dir)
        if point in ("claimed", "checkpoint", "staged"):
            assert now == old, point  # the old complete model, byte for byte
            assert (run["complete"], run["epochs_trained"]) == (True, 1), point
        else:
            assert run["complete"] is False, point  # not reported complete while mixed
            assert _export(now) != _export(old), point  # the new export, whole
            if point == "export-published":
                assert {n: now[n] for n in OUTPUTS} == {n: old[n] for n in OUTPUTS}
            else:
                assert json.loads(now["metrics.json"])["epochs_trained"] == 2

    assert train(_argv(data, model_dir, 2)) == 0, capsys.readouterr()
    _whole_export(model_dir)
    run = _run_json(model_dir)
    assert (run["complete"], run["epochs_trained"]) == (True, 2)
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["epochs_trained"] == 2
    assert [row["epoch"] for row in read_history(str(model_dir / "history.csv"))] == [0, 1]
    left = [p.name for p in model_dir.iterdir() if p.name.startswith(".")]
    assert left == [], left  # what the killed runs staged is gone
    names = {p.name for p in model_dir.iterdir()} - {"logs"}  # logs/: with tensorboard only
    assert names == {"checkpoints", "export", "history.csv", "metrics.json", "report.html",
                     "run.json"}  # fmt: skip
