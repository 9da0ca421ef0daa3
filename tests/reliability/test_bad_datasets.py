"""A damaged or hand-edited dataset: every command that reads it (`inspect`, `train`,
`validate`) refuses it with one line naming the file and what is wrong, never a traceback.

The datasets are written by tests/trainer/datasets.py (as the ETL would), then damaged here:
manifest.json replaced by bytes that are not UTF-8, by a folder; a feature's type edited to one
the shards do not hold; statistics.json not JSON.
"""

from __future__ import annotations

import json
import shutil

import pytest

from pipelines.validate import main as validate
from tests.trainer.datasets import make_rows, write_dataset
from trainer.inspect import main as inspect
from trainer.task import main as train


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("d") / "d", make_rows(60), splits={"train": 1})


def _copy(written, tmp_path):
    root = tmp_path / "d"
    shutil.copytree(written.root, root)
    return root


def _one_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("INFO")]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_a_manifest_that_is_not_utf8_is_refused_by_every_command(written, tmp_path, capsys):
    root = _copy(written, tmp_path)
    (root / "manifest.json").write_bytes(b"\xff\xfegarbage")
    why = (
        f"{root}/manifest.json: not valid JSON: 'utf-8' codec can't decode byte 0xff in "
        "position 0: invalid start byte"
    )
    assert inspect([str(root)]) == 2
    assert _one_line(capsys) == f"shardflow inspect: {why}"
    assert train(["--data", str(root), "--model-dir", str(tmp_path / "m")]) == 2
    assert _one_line(capsys) == f"shardflow train: {why}"
    assert validate([str(root)]) == 2
    assert _one_line(capsys) == f"shardflow validate: error: {why}"


def test_a_folder_as_manifest_is_refused(written, tmp_path, capsys):
    root = _copy(written, tmp_path)
    (root / "manifest.json").unlink()
    (root / "manifest.json").mkdir()
    assert inspect([str(root)]) == 2
    assert _one_line(capsys) == (
        f"shardflow inspect: {root}/manifest.json: is a folder, not a file: not a shardflow dataset"
    )
    assert train(["--data", str(root), "--model-dir", str(tmp_path / "m")]) == 2
    assert "is a folder, not a file" in _one_line(capsys)


@pytest.mark.parametrize(("feature", "edited", "held"), [
    ("flipper_mm", "string", "float"),
    ("flipper_mm", "int", "float"),
    ("island", "float", "string or bytes"),
])  # fmt: skip
def test_a_hand_edited_feature_type_is_named_with_what_the_shards_hold(
    written, tmp_path, capsys, feature, edited, held
):
    root = _copy(written, tmp_path)
    path = root / "manifest.json"
    raw = json.loads(path.read_text())
    raw["features"][feature]["type"] = edited
    raw["features"][feature].pop("values", None)
    raw["features"][feature].pop("min", None)
    path.write_text(json.dumps(raw))
    why = (
        f"{root}: feature {feature!r}: the shards hold {held} values where manifest.json declares "
        f"{edited}: the manifest was edited after the ETL wrote it, or is not these shards' "
        "manifest; rerun the ETL"
    )
    assert inspect([str(root), "--take", "2"]) == 2
    assert _one_line(capsys).endswith(f"shardflow inspect: {why}")
    code = train(["--data", str(root), "--model-dir", str(tmp_path / "m"), "--epochs", "1"])
    assert code == 2
    assert _one_line(capsys) == f"shardflow train: {why}"
    assert not (tmp_path / "m" / "export").exists()


def test_statistics_that_are_not_json_are_refused_naming_the_file(written, tmp_path, capsys):
    root = _copy(written, tmp_path)
    (root / "statistics.json").write_text("[1,2")
    assert inspect([str(root), "--stats"]) == 2
    assert _one_line(capsys) == (
        f"shardflow inspect: {root}/statistics.json: not valid JSON: Expecting ',' delimiter: "
        "line 1 column 5 (char 4)"
    )
    assert validate([str(root)]) == 2
    assert "statistics.json: not valid JSON" in _one_line(capsys)
