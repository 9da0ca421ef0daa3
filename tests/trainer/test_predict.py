"""`trainer.predict`: the export's answers as JSON lines; a regression's `prediction` (the
classification answers are checked end to end in tests/e2e/test_demo.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.trainer.datasets import make_rows, write_dataset
from trainer.predict import MAX_PREDICT_TAKE, PredictError, ServedModel, predict_split
from trainer.task import main as train


@pytest.mark.slow
def test_a_regression_answers_with_its_prediction(tmp_path, capsys):
    data = write_dataset(tmp_path / "data", make_rows(120), label="flipper_mm")
    model_dir = tmp_path / "model"
    assert train(["--data", str(data.root), "--model-dir", str(model_dir), "--epochs", "1",
                  "--batch-size", "32", "--exclude-features", "species"]) == 0  # fmt: skip
    label = json.loads((model_dir / "export/assets.extra/label.json").read_text())
    assert (label["name"], label["task"]) == ("flipper_mm", "regression")
    scale = label["scale"]  # how the model's standardized answers become millimetres
    flippers = np.array([r["flipper_mm"] for r in data.rows["train"]])
    assert scale["mean"] == pytest.approx(flippers.mean(), rel=1e-4) and not scale["log"]
    assert label["inputs"]["island"] == {"type": "string", "shape": []}  # what it parses
    assert "flipper_mm" not in label["inputs"] and "species" not in label["inputs"]
    capsys.readouterr()
    assert predict_split(str(model_dir), str(data.root), "eval", 3) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [sorted(line) for line in lines] == [["label", "prediction"]] * 3  # no key here
    expected = [r["flipper_mm"] for r in data.rows["eval"][:3]]
    assert [line["label"] for line in lines] == pytest.approx(expected, rel=1e-6)
    assert all(isinstance(line["prediction"], float) for line in lines)
    # in millimetres, near the train flippers (one epoch: not far from their mean)
    assert all(150 < line["prediction"] < 250 for line in lines)
    assert ServedModel(str(model_dir)).classes is None


def test_a_model_dir_without_an_export_is_refused(tmp_path):
    with pytest.raises(PredictError, match="no export/ in"):
        ServedModel(str(tmp_path))


@pytest.mark.parametrize("take", [0, -1, MAX_PREDICT_TAKE + 1, 10**12])
def test_take_out_of_range_is_refused_before_anything_is_read(tmp_path, capsys, take):
    """Checked first: no manifest, model or shard is opened, nothing is allocated."""
    assert predict_split(str(tmp_path / "m"), str(tmp_path / "no-data"), "test", take) == 2
    assert capsys.readouterr().err == (
        f"shardflow predict: --take: {take} is not from 1 to 1,000,000 (the examples to serve, "
        "held in memory)\n"
    )
