"""The model built from the recipe, its normalization moments, the label's scale and its export."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tests.trainer.datasets import FEATURES, make_rows, to_example, write_dataset
from trainer.dataset.manifest import load_manifest
from trainer.keras.features import dense_inputs, parse_spec
from trainer.keras.inputs import Inputs
from trainer.keras.model import ModelConfig, build_model, to_label_units
from trainer.recipe.kinds import NOT_AN_INPUT
from trainer.recipe.moments import over_batches
from trainer.recipe.words import NUMBER
from trainer.run.export import export_model

# one_hot_max=2: island and year (3 values each) take the embedding path here, the one-hot path
# in the end-to-end tests.
SMALL = ModelConfig(hidden_units=(8,), embedding_dim=2, hash_bins=16, one_hot_max=2)


def _inputs(m) -> Inputs:
    return Inputs.of(m, model=SMALL)


def _batches(m, split="train", batch_size=32, **options):
    """Batches of (model inputs, label), as training reads them: the host preprocessing done."""
    return _inputs(m).dataset(split, batch_size, shuffle=False, **options)


def _moments(m):
    batches = ({k: v.numpy() for k, v in x.items()} for x, _ in _batches(m, batch_size=64))
    return over_batches(batches, _inputs(m).recipe.inputs)


def test_an_image_that_cannot_be_decoded_is_not_a_model_input(dataset):
    recipe = _inputs(load_manifest(str(dataset.root))).recipe
    assert [f.name for f in recipe.skipped] == ["photo"]
    assert recipe.reasons == {"photo": NOT_AN_INPUT["image"]}
    assert [f.name for f in recipe.used] == [n for n in FEATURES if n not in ("photo", "species")]


def test_moments_are_over_present_values_only(dataset):
    m = load_manifest(str(dataset.root))
    rows = dataset.rows["train"]

    moments = _moments(m)

    assert sorted(moments) == [
        "bill_length_mm",
        "body_mass_g",
        "embedding",
        "flipper_mm",
        "id",
    ]
    mass = np.array([r["body_mass_g"] for r in rows if r["body_mass_g"] is not None])
    np.testing.assert_allclose(moments["body_mass_g"].mean, mass.mean(), rtol=1e-6)
    np.testing.assert_allclose(moments["body_mass_g"].variance, mass.var(), rtol=1e-5)
    embedding = np.array([r["embedding"] for r in rows], dtype=np.float32)
    assert moments["embedding"].mean.shape == (4,)
    np.testing.assert_allclose(moments["embedding"].mean, embedding.mean(axis=0), atol=1e-6)


def test_classifier_gives_a_distribution_over_the_label_values(dataset):
    m = load_manifest(str(dataset.root))
    model = build_model(_inputs(m).recipe, SMALL)
    features, _ = next(iter(_batches(m)))

    probabilities = model(features, training=False).numpy()

    assert sorted(model.input) == sorted(features)
    assert sorted(features) == sorted({*FEATURES, "body_mass_g__present"} - {"photo", "species"})
    assert probabilities.shape == (32, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), np.ones(32), rtol=1e-5)


def test_missing_moments_for_a_numeric_feature_is_an_error(dataset):
    m = load_manifest(str(dataset.root))
    recipe = _inputs(m).recipe
    without = dataclasses.replace(
        recipe,
        inputs=tuple(
            dataclasses.replace(i, moments=None) if i.name == "id" else i for i in recipe.inputs
        ),
    )
    with pytest.raises(ValueError, match="model input 'id': no normalization moments given"):
        build_model(without, SMALL)


def test_regression_model_trains_exports_and_serves_raw_examples(tmp_path):
    written = write_dataset(tmp_path / "data", make_rows(120), label="flipper_mm")
    m = load_manifest(str(written.root))
    inputs = _inputs(m)
    model = build_model(inputs.recipe, SMALL)
    history = model.fit(_batches(m).repeat(), steps_per_epoch=3, epochs=1, verbose=0)
    assert sorted(history.history) == ["loss", "mae", "rmse"]

    export_model(model, inputs, str(tmp_path / "export"))
    loaded = tf.saved_model.load(str(tmp_path / "export"))
    assert list(loaded.signatures) == ["serving_default"]  # no transform, no transform signature
    serve = loaded.signatures["serving_default"]
    rows = make_rows(4, seed=11)
    without_label = {k: v for k, v in FEATURES.items() if k != "flipper_mm"}
    examples = [to_example(r, without_label).SerializeToString() for r in rows]
    outputs = serve(examples=tf.constant(examples))

    assert list(outputs) == ["predictions"]
    assert (outputs["predictions"].dtype, outputs["predictions"].shape.as_list()) == (
        tf.float32,
        [4],
    )
    spec = parse_spec(m, include_label=False, only=[f.name for f in inputs.recipe.used])
    features = inputs.host(
        dense_inputs(tf.io.parse_example(tf.constant(examples), spec), m.features)
    )
    # the model predicts the standardized label; the export answers in the label's units (mm)
    expected = to_label_units(model(features, training=False), inputs.recipe.label.scale)
    # the served graph is optimized apart from the eager model: float sums may differ in order
    np.testing.assert_allclose(outputs["predictions"], expected, rtol=1e-4, atol=1e-3)
    flippers = [r["flipper_mm"] for r in written.rows["train"]]
    low, high = min(flippers), max(flippers)
    spread = high - low
    assert (outputs["predictions"].numpy() >= low - spread).all()
    assert (outputs["predictions"].numpy() <= high + spread).all()


def test_a_missing_numeric_value_enters_the_model_at_the_mean(dataset):
    import tf_keras

    m = load_manifest(str(dataset.root))
    moments = _moments(m)
    recipe = _inputs(m).recipe
    model = build_model(recipe, SMALL)
    # the normalized (and softly clipped) body mass, as the hidden layers see it: the numbers
    # layer's columns are the number inputs' values in the recipe's order
    numbers = [mi for mi in recipe.inputs if mi.kind == NUMBER]
    column = sum(
        int(np.prod(mi.shape)) for mi in numbers[: [mi.name for mi in numbers].index("body_mass_g")]
    )
    probe = tf_keras.Model(model.inputs, model.get_layer("numbers").output)
    inputs, _ = next(iter(_batches(m, batch_size=64)))
    seen = probe(inputs).numpy()[:, column]
    present = inputs["body_mass_g__present"].numpy() == 1.0
    assert (~present).any() and present.any()
    assert np.all(seen[~present] == 0.0)  # not (0 - mean) / std, thousands of stds away
    m_ = moments["body_mass_g"]
    z = (inputs["body_mass_g"].numpy()[present] - m_.mean) / np.sqrt(m_.variance)
    np.testing.assert_allclose(seen[present], z / np.sqrt(1 + (z / 3) ** 2), rtol=1e-4, atol=1e-5)
