"""What MODEL_DIR holds of an earlier run (trainer/run/modeldir.py), and the paper cuts on the way
to a trained model: a label some records lack, an image without image_size, a dataset with
nothing to learn from. Every refusal is one line and exit 2."""

from __future__ import annotations

import io
import json
import random
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.trainer.datasets import make_rows, write_dataset
from trainer.task import main as train

FAST = ["--epochs", "1", "--batch-size", "32"]


def _train(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    code = train(list(argv))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_a_model_dir_of_another_dataset_is_refused_naming_fresh_which_starts_anew(
    dataset, tmp_path, capsys
):
    model_dir = tmp_path / "model"
    code, _, _ = _train(capsys, "--data", str(dataset.root), "--model-dir", str(model_dir), *FAST)
    assert code == 0
    other = write_dataset(tmp_path / "other", make_rows(200, seed=3))

    code, out, err = _train(capsys, "--data", str(other.root), "--model-dir", str(model_dir))

    assert (code, out) == (2, [])
    assert err == [
        f"shardflow train: --model-dir {model_dir}: holds a run of other data ({dataset.root}): "
        "rerun with --fresh to start anew, or choose another --model-dir"
    ]
    code, out, _ = _train(
        capsys, "--data", str(other.root), "--model-dir", str(model_dir), "--fresh", *FAST
    )
    assert code == 0
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert (metrics["dataset"], metrics["initial_epoch"]) == (str(other.root), 0)
    run = json.loads((model_dir / "run.json").read_text())
    assert (run["complete"], run["epochs_trained"]) == (True, 1)


def test_new_records_in_the_same_dataset_are_refused_too(dataset, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(dataset.root, data)
    model_dir = tmp_path / "model"
    assert _train(capsys, "--data", str(data), "--model-dir", str(model_dir), *FAST)[0] == 0
    write_dataset(data, make_rows(300, seed=11))  # a new ETL run into the same folder

    code, _, err = _train(capsys, "--data", str(data), "--model-dir", str(model_dir), *FAST)

    assert code == 2
    assert err == [
        f"shardflow train: --model-dir {model_dir}: holds a run of other records of this dataset "
        "(its shards changed since: a new ETL run?): rerun with --fresh to start anew, or "
        "choose another --model-dir"
    ]


@pytest.mark.parametrize("fresh", [[], ["--fresh"]])
def test_checkpoints_without_a_record_of_their_run_are_refused_and_kept(
    dataset, tmp_path, capsys, fresh
):
    model_dir = tmp_path / "model"
    (model_dir / "checkpoints" / "chief").mkdir(parents=True)
    (model_dir / "checkpoints" / "chief" / "checkpoint").write_text("old")
    argv = ["--data", str(dataset.root), "--model-dir", str(model_dir), *fresh]
    code, _, err = _train(capsys, *argv)
    assert code == 2
    assert err == [
        f"shardflow train: --model-dir {model_dir}: is not a model folder (no run.json) but "
        "holds checkpoints/, which shardflow did not write and would write over: nothing was "
        "deleted; choose another --model-dir (a new or empty folder)"
    ]
    assert (model_dir / "checkpoints" / "chief" / "checkpoint").read_text() == "old"
    assert sorted(p.name for p in model_dir.iterdir()) == ["checkpoints"]


def test_a_complete_run_is_not_trained_again(dataset, tmp_path, capsys):
    model_dir = tmp_path / "model"
    argv = ["--data", str(dataset.root), "--model-dir", str(model_dir), *FAST]
    assert _train(capsys, *argv)[0] == 0
    before = (model_dir / "metrics.json").read_text()

    code, out, _ = _train(capsys, *argv)

    assert (code, (model_dir / "metrics.json").read_text()) == (0, before)
    assert out == [
        f"{model_dir} holds this run already, complete (1 epochs; export/, metrics.json, "
        "report.html): nothing to train. --fresh trains anew, --epochs N trains on to N epochs"
    ]


def test_records_without_the_label_are_left_out_and_counted(tmp_path, capsys):
    # body_mass_g is optional: every 5th row has none (make_rows)
    data = write_dataset(tmp_path / "data", make_rows(300), label="body_mass_g")
    model_dir = tmp_path / "model"

    code, out, _ = _train(capsys, "--data", str(data.root), "--model-dir", str(model_dir), *FAST)

    assert code == 0
    assert "records without the label, left out: 60 (eval 12, train 48)" in out
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["records_without_label"] == {"eval": 12, "train": 48}
    assert (metrics["train_records"], metrics["eval"]["records"]) == (192, 48)
    assert metrics["steps_per_epoch"] == 6  # 192 labelled train records in batches of 32


def _png(height: int, width: int, shade: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), shade, np.uint8)).save(out, "PNG")
    return out.getvalue()


def _images(root, sizes) -> str:
    """A dataset whose only feature is an image without image_size; the label, bright or dark,
    is told by its shade."""
    rng = random.Random(5)
    features = {
        "photo": {"type": "image", "shape": [], "required": True},
        "label": {"type": "string", "shape": [], "required": True, "values": ["dark", "light"]},
    }
    splits = {}
    for split, n in (("train", 64), ("eval", 16)):
        (root / split).mkdir(parents=True)
        rel = f"{split}/{split}-00000-of-00001.tfrecord"
        with tf.io.TFRecordWriter(str(root / rel)) as writer:
            for i in range(n):
                light = rng.random() < 0.5
                image = _png(*sizes[i % len(sizes)], 220 if light else 30)
                example = tf.train.Example(features=tf.train.Features(feature={
                    "photo": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
                    "label": tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[b"light" if light else b"dark"])),
                }))  # fmt: skip
                writer.write(example.SerializeToString())
        splits[split] = {"records": n, "files": [{"path": rel, "records": n}]}
    manifest = {
        "format_version": 1, "name": "pictures", "created": "2026-11-27T10:00:00Z",
        "config_sha256": "0" * 64, "compression": "none", "features": features,
        "label": "label", "sources": {"pictures": {"format": "images", "records": 80}},
        "splits": splits, "rejected": {"records": 0, "reasons": {}}, "duplicates": 0,
        "transform": None,
    }  # fmt: skip
    (root / "manifest.json").write_text(json.dumps(manifest))
    return str(root)


def test_an_image_without_image_size_takes_the_one_size_of_its_images(tmp_path, capsys):
    data = _images(tmp_path / "same", [(12, 10)])
    model_dir = tmp_path / "model"
    code, _, _ = _train(capsys, "--data", data, "--model-dir", str(model_dir), *FAST)
    assert code == 0
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["features"]["photo"] == {
        "inputs": ["photo"], "as": "image", "image_size": [12, 10, 3],
    }  # fmt: skip


def test_images_of_several_sizes_without_image_size_are_refused_naming_it(tmp_path, capsys):
    data = _images(tmp_path / "mixed", [(12, 10), (8, 8)])
    code, out, err = _train(capsys, "--data", data, "--model-dir", str(tmp_path / "m"), *FAST)
    assert (code, out) == (2, [])
    assert err == [
        "shardflow train: no feature can be a model input: photo: an image feature without "
        "image_size, and its train images differ in size (declare image_size: [height, width] "
        "to learn from it)"
    ]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--include-features", "nope"], "--include-features: no feature 'nope'"),
        (["--class-weight", "heavy"], "argument --class-weight: invalid choice: 'heavy'"),
    ],
)
def test_bad_new_flags_are_one_line_and_exit_2(dataset, tmp_path, capsys, flags, message):
    code, _, err = _train(
        capsys, "--data", str(dataset.root), "--model-dir", str(tmp_path / "m"), *flags
    )
    assert code == 2
    assert message in err[-1]


@pytest.mark.parametrize(
    "model_dir, how",
    [(".", "is"), ("./model", "is inside"), ("..", "holds")],
)
def test_a_model_dir_that_is_in_or_holds_the_dataset_is_refused_before_any_work(
    dataset, capsys, model_dir, how
):
    model_dir = str((dataset.root / model_dir).resolve())
    before = sorted(p.relative_to(dataset.root) for p in dataset.root.rglob("*"))

    code, out, err = _train(capsys, "--data", str(dataset.root), "--model-dir", model_dir)

    assert (code, out) == (2, [])
    assert err == [
        f"shardflow train: --model-dir {model_dir!r} {how} --data {str(dataset.root)!r}: a "
        "model folder must be apart from the datasets it reads (an ETL run that replaces the "
        "dataset would delete it): choose another --model-dir"
    ]
    assert sorted(p.relative_to(dataset.root) for p in dataset.root.rglob("*")) == before


@pytest.mark.parametrize(
    "variable, name",
    [("AIP_CHECKPOINT_DIR", "the checkpoint folder"),
     ("AIP_TENSORBOARD_LOG_DIR", "the TensorBoard log folder")],
)  # fmt: skip
def test_checkpoints_or_logs_inside_the_dataset_are_refused(
    dataset, tmp_path, capsys, monkeypatch, variable, name
):
    inside = str(dataset.root / "train" / "x")
    monkeypatch.setenv(variable, inside)

    code, _, err = _train(capsys, "--data", str(dataset.root), "--model-dir", str(tmp_path / "m"))

    assert code == 2
    assert err[-1].startswith(
        f"shardflow train: {name} {inside!r} is inside --data {str(dataset.root)!r}: "
    )
    assert not (dataset.root / "train" / "x").exists() and not (tmp_path / "m").exists()


_DIVERGING = """
import os
import tensorflow as tf


def build_model(spec):
    keras = spec.keras
    x = keras.layers.Flatten()(spec.inputs["flipper_mm"])
    logits = keras.layers.Dense(len(spec.label.classes))(x)
    # NaN probabilities once a file `diverge` lies beside this one
    diverge = os.path.exists(os.path.join(os.path.dirname(__file__), "diverge"))
    scale = float("inf") if diverge else 1.0
    out = keras.layers.Lambda(lambda t: tf.nn.softmax(t * scale))(logits)
    return keras.Model(spec.inputs, out)
"""


def test_a_loss_that_becomes_nan_stops_the_run_naming_epoch_and_step_and_keeps_the_export(
    dataset, tmp_path, capsys
):
    module, model_dir = tmp_path / "model.py", tmp_path / "m"
    module.write_text(_DIVERGING)
    argv = ["--data", str(dataset.root), "--model-dir", str(model_dir), "--model-module",
            str(module), "--batch-size", "32", "--hidden-units", "8"]  # fmt: skip
    assert _train(capsys, *argv, "--epochs", "1")[0] == 0
    published = {
        str(p.relative_to(model_dir)): p.read_bytes()
        for p in model_dir.rglob("*")
        if p.is_file()
        and p.parts[len(model_dir.parts)]
        in ("export", "metrics.json", "history.csv", "report.html")
    }
    (tmp_path / "diverge").touch()

    code, out, err = _train(capsys, *argv, "--epochs", "2")

    assert code == 1
    assert err[-1] == (
        "shardflow train: the training loss became nan at epoch 2, step 1: nothing was exported "
        "(an earlier export is untouched); try a lower --learning-rate (it was 0.001), and check "
        "the label's values (huge or extreme values) and the features' ranges"
    )
    assert "Traceback" not in "\n".join(out + err)
    assert published == {k: (model_dir / k).read_bytes() for k in published}
    assert not [p for p in model_dir.iterdir() if p.name.startswith(".")]
    run = json.loads((model_dir / "run.json").read_text())
    assert (run["complete"], run["epochs_trained"]) == (True, 1)
