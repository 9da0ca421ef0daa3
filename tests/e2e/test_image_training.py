"""End to end: the shapes sample (examples/shapes: an image folder, its config with
`image_size`) → `shardflow etl` → `shardflow train`, which decodes and resizes the images on the
host and learns from them, with its built-in convolutional tower and with the example CNN of
examples/shapes/model.py.

Three classes of 24×24 PNGs: a square of the class's colour, at a random place and size, on a
grey noisy background. The label has no `values`: its classes come from the statistics.
"""

from __future__ import annotations

import json
import runpy
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from pipelines import etl
from trainer.task import main as train

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "shapes"
CLASSES = ["blue", "green", "red"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("shapes")
    runpy.run_path(str(EXAMPLE / "generate.py"))["generate"](base)
    shutil.copy(EXAMPLE / "shapes.yaml", base)
    assert etl.run(["--config", str(base / "shapes.yaml"), "--output", str(base / "out")]) == 0
    return base / "out"


@pytest.fixture(scope="module")
def trained(dataset) -> tuple[Path, Path]:
    model_dir = dataset.parent / "model"
    code = train(
        ["--data", str(dataset), "--model-dir", str(model_dir), "--epochs", "8",
         "--batch-size", "16", "--deterministic"]
    )  # fmt: skip
    assert code == 0
    return dataset, model_dir


def test_the_manifest_declares_the_image_size(trained):
    dataset, _ = trained
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest["features"]["image"]["image_size"] == [16, 16, 3]


def test_the_model_learns_from_the_images(trained):
    _, model_dir = trained
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["model_inputs"] == ["image"]
    assert metrics["classes"] == CLASSES and metrics["classes_from"] == "facts"
    assert metrics["test"]["accuracy"] > 0.9  # three classes: chance is a third


def test_served_raw_images_get_the_predictions_of_the_training_path(trained):
    dataset, model_dir = trained
    from trainer import data

    inputs = data.inputs(str(dataset))
    model = tf.saved_model.load(str(model_dir / "export"))
    serve = model.signatures["serving_default"]
    files = inputs.manifest.split_files("test")
    records = list(tf.data.TFRecordDataset(files, compression_type="GZIP").take(12))
    served = serve(examples=tf.stack(records))
    batch, labels = next(iter(inputs.dataset("test", 64, shuffle=False, deterministic=True)))
    classes = np.array(inputs.recipe.label.classes)
    assert served["probabilities"].shape == (12, 3)
    # the served classes of the first records are those the model gives the same records
    expected = model.model(batch, training=False).numpy()[:12]
    np.testing.assert_allclose(served["probabilities"].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert [c.decode() for c in served["classes"].numpy()] == list(classes[expected.argmax(1)])
    assert (expected.argmax(1) == labels.numpy()[:12]).mean() > 0.8


def test_profile_input_times_decoding_and_resizing(trained, capsys):
    dataset, _ = trained
    capsys.readouterr()
    code = train(["--data", str(dataset), "--profile-input", "--batch-size", "16",
                  "--profile-batches", "5"])  # fmt: skip
    assert code == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["images"] == ["image"] and result["host_examples_per_sec"] > 0


def test_predict_names_the_class_of_new_pictures(trained, tmp_path, capsys):
    from deploy import predict

    dataset, model_dir = trained
    sample = runpy.run_path(str(EXAMPLE / "generate.py"))
    rng = np.random.default_rng(2026)  # pictures the model has never seen
    new = tmp_path / "new"  # no class folders: new pictures have no label
    new.mkdir()
    truth = {}
    for i in range(30):
        colour = CLASSES[i % 3]
        path = new / f"{i:02d}.png"
        path.write_bytes(sample["picture"](rng, sample["COLOURS"][colour]))
        truth[f"{path}:1"] = colour
    (new / "broken.png").write_bytes(b"not a picture")
    (new / "notes.txt").write_text("not an image file: skipped, as in the ETL")
    config = dataset.parent / "shapes.yaml"
    capsys.readouterr()
    code = predict.main(
        ["--model-dir", str(model_dir), "--config", str(config), "--input", str(new)]
    )
    assert code == 0
    out, err = capsys.readouterr()
    answers = [json.loads(line) for line in out.splitlines()]
    assert [a["key"] for a in answers] == sorted(truth)  # no key: the location
    assert all(list(a["probabilities"]) == CLASSES for a in answers)
    right = sum(a["class"] == truth[a["location"]] for a in answers)
    assert right / len(answers) > 0.8
    assert err.splitlines()[-1] == "shardflow predict: 30 predicted, 1 rejected"
    assert f"shardflow predict: rejected {new / 'broken.png'}:1: " in err


def test_the_example_cnn_learns_from_the_images_too(dataset):
    model_dir = dataset.parent / "cnn"
    code = train(
        ["--data", str(dataset), "--model-dir", str(model_dir), "--epochs", "6",
         "--batch-size", "16", "--model-module", str(EXAMPLE / "model.py")]
    )  # fmt: skip
    assert code == 0
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["model"] == str(EXAMPLE / "model.py")
    assert metrics["test"]["accuracy"] > 0.8
