"""The hostile corpus of `predict`: it is given outputs that would write over what it reads, flags
out of range, models and datasets that are not what they claim (tests/reliability/hostile.py
has the harness and its invariants). One small model serves every case (trained once for the
session, `tests.deploy.test_predict.tiny_model`); a case that could damage a model gets a copy
of it. Besides the harness's checks, no case leaves a temporary file (`.predict-*.part`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.deploy.test_predict import CONFIG, new_records, temp_files, tiny_model
from tests.reliability.hostile import Case, run_case

_MODEL: dict[str, Path] = {}


@pytest.fixture(scope="module", autouse=True)
def trained(tmp_path_factory):
    _MODEL["model"] = tiny_model(tmp_path_factory)
    _MODEL["data"] = _MODEL["model"].parent / "data"


def _predict(*flags: str, input: str = "new.csv", records: str = "", copy: bool = False,
             prepare=None):  # fmt: skip
    """A case's setup: c.yaml and new.csv (3 records and a rejected one, or `records`) in its
    folder, `prepare(d)` run, then `predict --input` with `flags` ({d}: the folder, {m}: the
    model folder, a copy in d/m with `copy`)."""

    def setup(d: Path) -> tuple[str, list[str]]:
        (d / "c.yaml").write_text(CONFIG)
        (d / "new.csv").write_text(records or new_records(0, 3, bad=1))
        model = _MODEL["model"]
        if copy:
            model = Path(shutil.copytree(model, d / "m"))
        if prepare is not None:
            prepare(d)
        argv = ["--model-dir", str(model), "--config", str(d / "c.yaml"), "--input", str(d / input)]
        return "predict", argv + [f.format(d=d, m=model) for f in flags]

    return setup


def _data(*flags: str, model: str = "model"):
    """`predict --data` of the module's dataset with `flags`."""
    return lambda d: ("predict", ["--model-dir", str(_MODEL[model]), "--data",
                                  str(_MODEL["data"]), *flags])  # fmt: skip


def _link(name: str, target: str, hard: bool = False):
    def prepare(d: Path) -> None:
        (os.link if hard else os.symlink)(d / target, d / name)

    return prepare


def _label_file_to(d: Path, target: str) -> None:
    """The copied model's export/label.json replaced by a link to `target`."""
    label = d / "m" / "export" / "assets.extra" / "label.json"
    label.unlink()
    label.symlink_to(target)


def _folder_of_csvs(d: Path) -> None:
    (d / "in").mkdir()
    (d / "in" / "a.csv").write_text(new_records(0, 2))
    (d / "in" / "b.csv").write_text(new_records(2, 2, bad=1))


def _old_outputs(d: Path) -> None:
    (d / "answers.jsonl").write_text("old answers\n")
    (d / "rejected.jsonl").write_text("old rejected\n")


def _old_outputs_and_a_killed_runs_file(d: Path) -> None:
    _old_outputs(d)
    (d / ".predict-killed.part").write_text('{"key": "half a li')


def _not_ours_named_like_ours(d: Path) -> None:
    """A folder, a pipe and a link (to the config) named like predict's temporary files."""
    (d / ".predict-folder.part").mkdir()
    os.mkfifo(d / ".predict-pipe.part")
    os.symlink(d / "c.yaml", d / ".predict-link.part")


def _left_alone(d: Path) -> None:
    assert (d / ".predict-folder.part").is_dir() and (d / ".predict-pipe.part").is_fifo()
    assert (d / ".predict-link.part").resolve() == (d / "c.yaml").resolve()
    assert len((d / "answers.jsonl").read_text().splitlines()) == 3


def _replaced(d: Path) -> None:
    answers = (d / "answers.jsonl").read_text().splitlines()
    assert [a[:12] for a in answers] == ['{"key": "0",', '{"key": "1",', '{"key": "2",']
    assert '"reason": "bill_length_mm: not a number"' in (d / "rejected.jsonl").read_text()


READS = "predict never writes over or into what it reads"
OUTPUTS = ("--output", "{d}/answers.jsonl", "--rejected", "{d}/rejected.jsonl")

CASES = [
    # --- an output over or into what the run reads --------------------------------------------
    Case("output-is-the-input", "overwrite", _predict("--output", "{d}/new.csv"), 2,
         "new.csv' is --input '", keep=("new.csv",)),
    Case("output-a-symlink-to-the-input", "overwrite",
         _predict("--output", "{d}/out.csv", prepare=_link("out.csv", "new.csv")), 2,
         "out.csv' is --input '", keep=("new.csv",)),
    Case("output-a-hard-link-to-the-input", "overwrite",
         _predict("--output", "{d}/out.csv", prepare=_link("out.csv", "new.csv", hard=True)), 2,
         "out.csv' is --input '", keep=("new.csv",)),
    Case("output-holds-the-input", "overwrite",
         _predict("--output", "{d}/in", input="in/a.csv", prepare=_folder_of_csvs), 2,
         "in' holds --input '", keep=("in",)),
    Case("output-in-the-model-export", "overwrite",
         _predict("--output", "{m}/export/saved_model.pb", copy=True), 2,
         "saved_model.pb' is inside --model-dir '", keep=("m", "new.csv")),
    Case("output-is-the-model-dir", "overwrite", _predict("--output", "{m}", copy=True), 2,
         f"{READS}; choose another --output", keep=("m",)),
    Case("output-into-the-model-through-dotdot", "overwrite",
         _predict("--rejected", "{d}/in/../m/metrics.json", copy=True, prepare=_folder_of_csvs),
         2, "metrics.json' is inside --model-dir '", keep=("m",)),
    Case("output-a-symlink-into-the-model-export", "overwrite",
         _predict("--output", "{d}/model.pb", copy=True,
                  prepare=_link("model.pb", "m/export/saved_model.pb")), 2,
         "model.pb' is inside --model-dir '", keep=("m",)),
    Case("rejected-is-the-config", "overwrite", _predict("--rejected", "{d}/c.yaml"), 2,
         "c.yaml' is --config '", keep=("c.yaml",)),
    Case("output-is-rejected", "overwrite",
         _predict("--output", "{d}/a.jsonl", "--rejected", "{d}/a.jsonl"), 2,
         "the answers and the rejected records need two files apart"),
    Case("input-glob-would-read-the-output", "overwrite",
         _predict("--output", "{d}/in/answers.jsonl", input="in/*", prepare=_folder_of_csvs), 2,
         "answers.jsonl' is among the files --input '", keep=("in",)),
    Case("input-folder-would-read-rejected", "overwrite",
         _predict("--source", "s", "--rejected", "{d}/in/r.jsonl", input="in",
                  prepare=_folder_of_csvs), 2,
         "r.jsonl' is among the files --input '", keep=("in",)),
    Case("output-an-existing-folder", "overwrite",
         _predict("--output", "{d}/in", prepare=_folder_of_csvs), 2,
         "in': is a folder; name the file to write", keep=("in",)),
    Case("output-folder-missing", "overwrite", _predict("--output", "{d}/no/such/a.jsonl"), 2,
         "/no/such' does not exist; create it or choose another --output"),
    Case("output-empty", "overwrite", _predict("--output", ""), 2,
         "--output: an empty path; name the file to write"),
    # --- nothing published but on success ---------------------------------------------------
    Case("every-record-rejected-keeps-the-old-outputs", "publish",
         _predict(*OUTPUTS, records=new_records(0, 0, bad=3), prepare=_old_outputs), 1,
         "nothing written to --output or --rejected", keep=("answers.jsonl", "rejected.jsonl")),
    Case("success-replaces-both-and-a-killed-runs-temporary-file", "publish",
         _predict(*OUTPUTS, prepare=_old_outputs_and_a_killed_runs_file), 0,
         "3 predicted, 1 rejected (in ", check=_replaced),
    Case("a-folder-a-pipe-and-a-link-named-like-a-temporary-file", "publish",
         _predict(*OUTPUTS, prepare=_not_ours_named_like_ours), 0, "3 predicted, 1 rejected",
         check=_left_alone, keep=("c.yaml",)),
    # --- flags out of range, models and datasets that are not what they claim -----------------
    Case("take-zero", "flags", _data("--take", "0"), 2, "--take: 0 is not from 1 to 1,000,000"),
    Case("take-negative", "flags", _data("--take", "-1"), 2, "--take: -1 is not from 1 to"),
    Case("take-10-to-the-12", "flags", _data("--take", str(10**12)), 2,
         "--take: 1000000000000 is not from 1 to 1,000,000"),
    Case("split-missing", "flags", _data("--split", "tset"), 2,
         "no split 'tset' in the manifest (splits: eval, train)"),
    Case("model-export-deleted", "model",
         _predict(copy=True, prepare=lambda d: shutil.rmtree(d / "m" / "export")), 2,
         "no export/ in", keep=("m", "new.csv")),
    Case("model-label-file-links-to-dev-zero", "model",
         _predict(copy=True, prepare=lambda d: _label_file_to(d, "/dev/zero")), 2,
         "label.json: a character device, not a regular file: refused unread",
         keep=("new.csv",)),
    Case("model-dir-is-the-dataset", "model", _data("--split", "eval", model="data"), 2,
         "no export/ in"),
]  # fmt: skip


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_predict(case: Case, tmp_path: Path, capfd):
    run_case(case, tmp_path, capfd)
    assert [t for folder in (tmp_path, *tmp_path.rglob("*/")) for t in temp_files(folder)] == []
