"""Bring your own model (`--model-module`, trainer/keras/usermodel.py), the Python API of the input
(trainer/data.py) and the two examples that use them."""

from __future__ import annotations

import json
import runpy
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tests.trainer.datasets import FEATURES, make_rows, run_python, to_example
from trainer import data
from trainer.config import ModelConfig
from trainer.keras.model import build_model
from trainer.keras.usermodel import load_module
from trainer.recipe.words import CATEGORY, NUMBER
from transforms.ui.errors import UsageError

REPO_ROOT = Path(__file__).resolve().parents[3]
TABULAR = REPO_ROOT / "examples" / "tabular" / "model.py"
SMALL = ModelConfig(hidden_units=(8,), embedding_dim=2, hash_bins=16, one_hot_max=2)


def _module(tmp_path, source: str):
    path = tmp_path / "my_model.py"
    path.write_text(textwrap.dedent(source))
    return load_module(str(path))


def test_the_spec_describes_numeric_inputs_moments_and_the_label(dataset):
    spec = data.model_spec(str(dataset.root), model=SMALL)
    assert spec.keras is tf_keras
    assert (spec.label.name, spec.label.task) == ("species", "classification")
    assert spec.label.classes == ("Adelie", "Chinstrap", "Gentoo") and spec.label.units == 3
    assert spec.features["flipper_mm"].kind == NUMBER and spec.features["island"].kind == CATEGORY
    assert {n: i.dtype for n, i in spec.inputs.items()} == {
        n: f.dtype for n, f in spec.features.items()
    }
    assert set(spec.moments) == {"id", "bill_length_mm", "flipper_mm", "body_mass_g", "embedding"}


def test_make_dataset_gives_the_model_inputs_and_encoded_labels(dataset):
    spec = data.model_spec(str(dataset.root), model=SMALL)
    batches = list(data.make_dataset(str(dataset.root), "eval", 16, model=SMALL))
    features, labels = batches[0]
    assert sorted(features) == sorted(spec.inputs)
    assert all(t.dtype != tf.string for t in features.values())
    assert labels.dtype == tf.int32 and labels.shape == (16,)
    # every eval record once (eval is not repeated), each label its class index
    classes = list(spec.label.classes)
    expected = [classes.index(r["species"]) for r in dataset.rows["eval"]]
    seen = [int(y) for _, labels in batches for y in labels.numpy()]
    assert sorted(seen) == sorted(expected)


def test_an_uncompiled_model_is_compiled_and_a_compiled_one_is_kept(dataset, tmp_path):
    inputs = data.inputs(str(dataset.root), model=SMALL)
    uncompiled = _module(
        tmp_path,
        """
        def build_model(spec):
            layers = spec.keras.layers
            x = layers.Reshape((1,))(spec.inputs["flipper_mm"])
            out = layers.Dense(spec.label.units, activation="softmax")(x)
            return spec.keras.Model(spec.inputs, out)
        """,
    )
    model = build_model(inputs.recipe, SMALL, module=uncompiled)
    assert isinstance(model.optimizer, tf_keras.optimizers.AdamW)
    assert model.compiled_loss is not None
    history = model.fit(
        inputs.dataset("train", 32, shuffle=False).repeat(), steps_per_epoch=2, verbose=0
    )
    assert sorted(history.history) == ["accuracy", "loss"]

    compiled = _module(
        tmp_path,
        """
        def build_model(spec):
            layers = spec.keras.layers
            x = layers.Reshape((1,))(spec.inputs["flipper_mm"])
            model = spec.keras.Model(spec.inputs, layers.Dense(3, activation="softmax")(x))
            model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
            return model
        """,
    )
    model = build_model(inputs.recipe, SMALL, module=compiled)
    assert isinstance(model.optimizer, tf_keras.optimizers.SGD)


@pytest.mark.parametrize(
    "source, message",
    [
        ("x = 1\n", "defines no build_model(spec) function"),
        (
            "def build_model(spec):\n    return 42\n",
            "returned a builtins.int, not a tf_keras Model",
        ),
        ("def build_model(spec)\n", "SyntaxError"),
        (
            "def build_model(spec):\n    raise ValueError('needs an image')\n",
            "build_model(spec) failed: ValueError: needs an image",
        ),
        (
            "def build_model(spec):\n"
            "    k = spec.keras\n"
            "    x = k.Input(shape=(), name='nope')\n"
            "    return k.Model({'nope': x}, k.layers.Reshape((1,))(x))\n",
            "the model takes input(s) nope that are not model inputs",
        ),
    ],
)
def test_a_bad_model_module_is_a_usage_error_naming_it(dataset, tmp_path, source, message):
    inputs = data.inputs(str(dataset.root), model=SMALL)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        module = _module(tmp_path, source)
        build_model(inputs.recipe, SMALL, module=module)
    with pytest.raises(UsageError, match="--model-module: no file"):
        load_module(str(tmp_path / "missing.py"))


@pytest.mark.slow
def test_the_tabular_example_trains_exports_and_serves_raw_examples(dataset, tmp_path):
    model_dir = tmp_path / "model"
    proc = run_python(
        "-m", "trainer.task", "--data", str(dataset.root), "--model-dir", str(model_dir),
        "--epochs", "2", "--batch-size", "32", "--model-module", str(TABULAR),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["model"] == str(TABULAR)
    assert np.isfinite(metrics["train"]["loss"])
    serve = tf.saved_model.load(str(model_dir / "export")).signatures["serving_default"]
    without_label = {k: v for k, v in FEATURES.items() if k != "species"}
    examples = [to_example(r, without_label).SerializeToString() for r in make_rows(5, seed=4)]
    out = serve(examples=tf.constant(examples))
    assert out["probabilities"].shape == (5, 3)
    np.testing.assert_allclose(out["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5)
    assert set(out["classes"].numpy().tolist()) <= {b"Adelie", b"Chinstrap", b"Gentoo"}


def test_a_bad_model_module_exits_2_with_one_line(dataset, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    proc = run_python(
        "-m", "trainer.task", "--data", str(dataset.root), "--model-dir", str(tmp_path / "m"),
        "--epochs", "1", "--model-module", str(bad),
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"shardflow train: --model-module {bad}: defines no build_model(spec) function"
    )


def test_the_custom_loop_example_learns_on_the_tuned_pipeline(dataset):
    example = runpy.run_path(str(REPO_ROOT / "examples" / "custom_loop" / "train.py"))
    result = example["main"](str(dataset.root), 150)
    assert result["steps"] == 150
    assert result["eval_accuracy"] > 0.6  # 3 classes: chance is about a third
