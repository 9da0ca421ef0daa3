"""End to end: an image folder → `shardflow etl` (with `image_size`) → `shardflow train`, which
decodes and resizes the images on the host and learns from them with its convolutional tower.

Three classes of 24×24 PNGs: a square of the class's colour, at a random place and size, on a
grey noisy background. The label has no `values`: its classes come from the statistics.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from pipelines import etl
from trainer.task import main as train

pytestmark = pytest.mark.slow

COLOURS = {"blue": (40, 60, 220), "green": (40, 200, 60), "red": (220, 50, 40)}
PER_CLASS = 70


def _picture(rng: np.random.Generator, colour: tuple[int, int, int]) -> bytes:
    pixels = rng.integers(90, 150, (24, 24, 3)).astype(np.uint8)
    size = int(rng.integers(6, 13))
    top, left = rng.integers(0, 24 - size, 2)
    pixels[top : top + size, left : left + size] = colour
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("shapes")
    rng = np.random.default_rng(7)
    for label, colour in COLOURS.items():
        folder = base / "pictures" / label
        folder.mkdir(parents=True)
        for i in range(PER_CLASS):
            (folder / f"{i:03d}.png").write_bytes(_picture(rng, colour))
    config = base / "shapes.yaml"
    config.write_text(
        "name: shapes\n"
        "sources: [{name: pictures, format: images, path: pictures}]\n"
        "features:\n"
        "  image: {type: image, image_size: [16, 16]}\n"
        "  label: {type: string}\n"
        "label: label\n"
        "splits: {train: 0.7, eval: 0.15, test: 0.15}\n"
        "output: {path: dataset}\n"
    )
    assert etl.run(["--config", str(config)]) == 0
    model_dir = base / "model"
    code = train(
        ["--data", str(base / "dataset"), "--model-dir", str(model_dir), "--epochs", "8",
         "--batch-size", "16", "--deterministic"]
    )  # fmt: skip
    assert code == 0
    return base / "dataset", model_dir


def test_the_manifest_declares_the_image_size(trained):
    dataset, _ = trained
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest["features"]["image"]["image_size"] == [16, 16, 3]


def test_the_model_learns_from_the_images(trained):
    _, model_dir = trained
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["model_inputs"] == ["image"]
    assert metrics["classes"] == sorted(COLOURS) and metrics["classes_from"] == "statistics"
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
    classes = np.array(inputs.model_spec.label.values)
    assert served["probabilities"].shape == (12, 3)
    # the served classes of the first records are those the model gives the same records
    expected = model.model(batch, training=False).numpy()[:12]
    np.testing.assert_allclose(served["probabilities"].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert [c.decode() for c in served["classes"].numpy()] == list(classes[expected.argmax(1)])
    assert (expected.argmax(1) == labels.numpy()[:12]).mean() > 0.8
