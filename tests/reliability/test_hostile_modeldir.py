"""The hostile corpus, model folders: a --model-dir that is, holds or lies inside a dataset, a
folder shardflow did not make (with --fresh too), a file, a symbolic link, a folder another run
holds, a run.json that is not shardflow's, a loss that becomes NaN, a complete folder whose
export was deleted (tests/reliability/hostile.py has the harness and its invariants). Refusals
come before any training, in one line naming the folder, and delete nothing (`keep=`)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.reliability.hostile import Case, run_case
from tests.trainer.datasets import make_rows, write_dataset

_SOURCE: dict[str, Path] = {}
_HELD: list[int] = []  # lock files the `lock-held` case holds while train runs
FAST = ["--epochs", "1", "--batch-size", "8", "--hidden-units", "8"]


@pytest.fixture(scope="module", autouse=True)
def source_dataset(tmp_path_factory):
    _SOURCE["d"] = write_dataset(tmp_path_factory.mktemp("hostile") / "d", make_rows(60)).root


def _copy(d: Path) -> Path:
    root = d / "d"
    shutil.copytree(_SOURCE["d"], root)
    return root


def _train(model_dir: str, *flags: str, data: str = "d"):
    """`train` of a copy of the dataset at d/DATA into d/MODEL_DIR, after `prepare(d)`."""

    def setup(d: Path) -> tuple[str, list[str]]:
        if not (d / data).exists():
            (d / data).parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(_SOURCE["d"], d / data)
        rest = [str(d / f[1:]) if f.startswith("@") else f for f in flags]  # @NAME: d/NAME
        return "train", ["--data", str(d / data), "--model-dir", str(d / model_dir), *rest]

    return setup


def _with(prepare, model_dir: str = "m", *flags: str, data: str = "d"):
    def setup(d: Path) -> tuple[str, list[str]]:
        _copy(d)
        prepare(d)
        return _train(model_dir, *flags, data=data)(d)

    return setup


def _foreign(*names: str):
    """d/m holds the user's own folders NAMES, each with a file."""

    def prepare(d: Path) -> None:
        for name in names:
            (d / "m" / name).mkdir(parents=True)
            (d / "m" / name / "mine.txt").write_text(f"the user's {name}")

    return prepare


def _run_json(content: str | None):
    """d/m/run.json holding CONTENT (None: a folder), beside the user's export/."""

    def prepare(d: Path) -> None:
        _foreign("export")(d)
        if content is None:
            (d / "m" / "run.json").mkdir()
        else:
            (d / "m" / "run.json").write_text(content)

    return prepare


def _run_json_special(kind: str):
    """d/m/run.json a FIFO (`fifo`) or a link to /dev/zero (`zero`), beside the user's export/."""

    def prepare(d: Path) -> None:
        _foreign("export")(d)
        if kind == "fifo":
            os.mkfifo(d / "m" / "run.json")
        else:
            (d / "m" / "run.json").symlink_to("/dev/zero")

    return prepare


def _module(target: str):
    """d/module.py a link to TARGET (/dev/zero), or a FIFO for `fifo`."""

    def prepare(d: Path) -> None:
        if target == "fifo":
            os.mkfifo(d / "module.py")
        else:
            (d / "module.py").symlink_to(target)

    return prepare


def _symlink(d: Path) -> None:
    (d / "link").symlink_to(d / "d", target_is_directory=True)


def _a_file(d: Path) -> None:
    (d / "m").write_text("not a folder")


def _dataset_inside(d: Path) -> None:
    shutil.copytree(d / "d", d / "m" / "data")


def _hold_lock(d: Path) -> None:
    """d/m, a model folder of this run whose writer (this process) holds its lock."""
    (d / "m").mkdir()
    (d / "m" / "run.json").write_text(json.dumps({"fingerprint": {}, "pid": os.getpid()}))
    fd = os.open(d / "m", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _HELD.append(fd)


def _release_lock(d: Path) -> None:
    while _HELD:
        os.close(_HELD.pop())
    assert [p.name for p in (d / "m").iterdir()] == ["run.json"]


def _another_run(d: Path) -> None:
    """A model folder of another run: its marker lists export/ and metrics.json."""
    _foreign("export")(d)
    (d / "m" / "metrics.json").write_text("{}")
    marker = {"fingerprint": {"datasets": ["/elsewhere"]}, "complete": True,
              "epochs_trained": 3, "wrote": ["export", "metrics.json", "run.json"],
              "checkpoints": None}  # fmt: skip
    (d / "m" / "run.json").write_text(json.dumps(marker))


def _another_run_and_user_files(d: Path) -> None:
    _another_run(d)
    (d / "m" / "notes.txt").write_text("the user's notes")
    (d / "m" / "plots").mkdir()
    (d / "m" / "plots" / "a.svg").write_text("<svg/>")


def _fresh_kept_the_user_files(d: Path) -> None:
    m = d / "m"
    assert (m / "notes.txt").read_text() == "the user's notes"
    assert (m / "plots" / "a.svg").read_text() == "<svg/>"
    assert not (m / "export" / "mine.txt").exists()  # the earlier run's export: replaced
    assert (m / "export" / "saved_model.pb").is_file()
    assert json.loads((m / "run.json").read_text())["complete"] is True


def _complete_without_export(d: Path) -> None:
    from trainer.task import main

    assert main(["--data", str(d / "d"), "--model-dir", str(d / "m"), *FAST]) == 0
    shutil.rmtree(d / "m" / "export")


def _exported_again(d: Path) -> None:
    assert (d / "m" / "export" / "saved_model.pb").is_file()
    run = json.loads((d / "m" / "run.json").read_text())
    assert (run["complete"], run["epochs_trained"]) == (True, 1)


def _nothing_exported(d: Path) -> None:
    assert not (d / "m" / "export").exists()
    assert not (d / "m" / "metrics.json").exists()
    assert json.loads((d / "m" / "run.json").read_text())["complete"] is False


def _diverging_model(d: Path) -> None:
    """A --model-module whose probabilities are NaN (its logits times infinity)."""
    (d / "nan_model.py").write_text(
        "import tensorflow as tf\n\n\n"
        "def build_model(spec):\n"
        "    keras = spec.keras\n"
        "    x = keras.layers.Flatten()(spec.inputs['flipper_mm'])\n"
        "    logits = keras.layers.Dense(len(spec.label.classes))(x)\n"
        "    out = keras.layers.Lambda(lambda t: tf.nn.softmax(t * float('inf')))(logits)\n"
        "    return keras.Model(spec.inputs, out)\n"
    )


_NOT_MODEL = "is not a model folder (no run.json) but holds"
_NOT_RECORD = "run.json is not shardflow's record of a run"

CASES = [
    # a model folder apart from the datasets (an `etl --overwrite` would delete the model)
    Case("model-dir-is-the-dataset", "modeldir", _train("d", *FAST), 2,
         "--model-dir", keep=("d",)),
    Case("model-dir-inside-the-dataset", "modeldir", _train("d/model", *FAST), 2,
         "is inside --data", keep=("d",),
         check=lambda d: None if not (d / "d" / "model").exists() else pytest.fail("written")),
    Case("dataset-inside-the-model-dir", "modeldir",
         _with(_dataset_inside, "m", *FAST, data="m/data"), 2, "holds --data",
         keep=("d", "m")),
    Case("model-dir-a-symlink-to-the-dataset", "modeldir", _with(_symlink, "link", *FAST), 2,
         "is --data", keep=("d",)),
    # a folder shardflow did not make: nothing in it is deleted, --fresh or not
    Case("fresh-into-a-folder-with-the-users-logs-export-checkpoints", "modeldir",
         _with(_foreign("logs", "export", "checkpoints"), "m", "--fresh", *FAST), 2,
         f"{_NOT_MODEL} checkpoints/, export/, logs/", keep=("m",)),
    Case("a-folder-with-the-users-export", "modeldir", _with(_foreign("export"), "m", *FAST), 2,
         f"{_NOT_MODEL} export/", keep=("m",)),
    Case("model-dir-is-a-file", "modeldir", _with(_a_file, "m", *FAST), 2,
         "is a file, not a folder", keep=("m",)),
    Case("run-json-is-garbage", "modeldir", _with(_run_json("{not json"), "m", "--fresh", *FAST),
         2, f"{_NOT_RECORD} (not JSON)", keep=("m",)),
    Case("run-json-is-a-folder", "modeldir", _with(_run_json(None), "m", "--fresh", *FAST), 2,
         f"{_NOT_RECORD} (a folder)", keep=("m",)),
    Case("run-json-without-a-fingerprint", "modeldir",
         _with(_run_json('{"complete": true}'), "m", *FAST), 2,
         f"{_NOT_RECORD} (no fingerprint of a run in it)", keep=("m",)),
    Case("run-json-is-a-fifo", "modeldir", _with(_run_json_special("fifo"), "m", "--fresh", *FAST),
         2, "run.json: a FIFO (named pipe), not a regular file: refused unread", keep=("m",)),
    Case("run-json-links-to-dev-zero", "modeldir",
         _with(_run_json_special("zero"), "m", "--fresh", *FAST), 2,
         "run.json: a character device, not a regular file: refused unread", keep=("m/export",)),
    Case("model-module-links-to-dev-zero", "modeldir",
         _with(_module("/dev/zero"), "m", "--model-module", "@module.py", *FAST), 2,
         "--model-module: ", keep=("d",)),
    Case("model-module-is-a-fifo", "modeldir",
         _with(_module("fifo"), "m", "--model-module", "@module.py", *FAST), 2,
         "module.py: a FIFO (named pipe), not a regular file: refused unread", keep=("d",)),
    Case("model-folder-of-another-run-without-fresh", "modeldir", _with(_another_run, "m", *FAST),
         2, "holds a run of other data (/elsewhere): rerun with --fresh",
         keep=("m",)),
    # one writer
    Case("model-dir-locked-by-another-train", "modeldir", _with(_hold_lock, "m", *FAST), 2,
         f"another `shardflow train` is writing to it (pid {os.getpid()})",
         keep=("m",), check=_release_lock),
    # runs that train
    Case("fresh-deletes-only-what-the-marker-lists", "modeldir",
         _with(_another_run_and_user_files, "m", "--fresh", *FAST), 0, "model exported to",
         keep=("m/notes.txt", "m/plots"), check=_fresh_kept_the_user_files),
    Case("loss-becomes-nan", "modeldir",
         _with(_diverging_model, "m", "--model-module", "@nan_model.py", *FAST), 1,
         "the training loss became nan at epoch 1, step 1: nothing was exported",
         check=_nothing_exported),
    Case("complete-folder-whose-export-was-deleted", "modeldir",
         _with(_complete_without_export, "m", *FAST), 0,
         "lacks export/saved_model.pb: not complete", check=_exported_again),
]  # fmt: skip


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_model_dir(case: Case, tmp_path: Path, capfd):
    try:
        run_case(case, tmp_path, capfd)
    finally:
        for fd in _HELD:
            os.close(fd)
        _HELD.clear()
