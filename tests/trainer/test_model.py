"""The model built from the manifest, its normalization moments and its export."""

import numpy as np
import pytest
import tensorflow as tf

from tests.trainer.datasets import FEATURES, make_rows, to_example, write_dataset
from trainer.dataset import Inputs
from trainer.export import export_model
from trainer.features import dense_inputs, parse_spec
from trainer.manifest import load_manifest
from trainer.model import ModelConfig, build_model, compute_moments, model_features, model_spec

# one_hot_max=2: island and year (3 values each) take the embedding path here, the one-hot path
# in the end-to-end tests.
SMALL = ModelConfig(hidden_units=(8,), embedding_dim=2, hash_bins=16, one_hot_max=2)


def _batches(m, split="train", batch_size=32, **options):
    """Batches of (model inputs, label), as training reads them: the host preprocessing done."""
    return Inputs.of(m, model=SMALL).dataset(split, batch_size, shuffle=False, **options)


def _moments(m):
    used, _, _ = model_features(m.features, m.label)
    return compute_moments(_batches(m, batch_size=64), used, batches=100)


def test_image_bytes_and_numeric_lists_are_not_model_inputs(dataset):
    m = load_manifest(str(dataset.root))
    used, skipped, _ = model_features(m.features, "species")
    assert [f.name for f in skipped] == ["photo"]
    assert [f.name for f in used] == [n for n in FEATURES if n not in ("photo", "species")]


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
    model = build_model(model_spec(m.features, "species"), SMALL, _moments(m))
    features, _ = next(iter(_batches(m)))

    probabilities = model(features, training=False).numpy()

    assert sorted(model.input) == sorted(features)
    assert sorted(features) == sorted({*FEATURES, "body_mass_g__present"} - {"photo", "species"})
    assert probabilities.shape == (32, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), np.ones(32), rtol=1e-5)


def test_missing_moments_for_a_numeric_feature_is_an_error(dataset):
    m = load_manifest(str(dataset.root))
    moments = _moments(m)
    del moments["id"]
    with pytest.raises(ValueError, match="feature 'id': no normalization moments given"):
        build_model(model_spec(m.features, "species"), SMALL, moments)


def test_regression_model_trains_exports_and_serves_raw_examples(tmp_path):
    written = write_dataset(tmp_path / "data", make_rows(120), label="flipper_mm")
    m = load_manifest(str(written.root))
    model = build_model(model_spec(m.features, "flipper_mm"), SMALL, _moments(m))
    history = model.fit(_batches(m).repeat(), steps_per_epoch=3, epochs=1, verbose=0)
    assert sorted(history.history) == ["loss", "mae"]

    inputs = Inputs.of(m, model=SMALL)
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
    used, _, _ = model_features(m.features, m.label)
    spec = parse_spec(m, include_label=False, only=[f.name for f in used])
    features = inputs.host(
        dense_inputs(tf.io.parse_example(tf.constant(examples), spec), m.features)
    )
    # the served graph is optimized apart from the eager model: float sums may differ in order
    np.testing.assert_allclose(
        outputs["predictions"], model(features, training=False), rtol=1e-4, atol=1e-4
    )


def test_a_missing_numeric_value_enters_the_model_at_the_mean(dataset):
    import tf_keras

    m = load_manifest(str(dataset.root))
    moments = _moments(m)
    model = build_model(model_spec(m.features, m.label), SMALL, moments)
    # the normalized body mass, as the hidden layers see it
    probe = tf_keras.Model(model.inputs, model.get_layer("body_mass_g_if_present").output)
    inputs, _ = next(iter(_batches(m, batch_size=64)))
    seen = probe(inputs).numpy()[:, 0]
    present = inputs["body_mass_g__present"].numpy() == 1.0
    assert (~present).any() and present.any()
    assert np.all(seen[~present] == 0.0)  # not (0 - mean) / std, thousands of stds away
    m_ = moments["body_mass_g"]
    expected = (inputs["body_mass_g"].numpy()[present] - m_.mean) / np.sqrt(m_.variance)
    np.testing.assert_allclose(seen[present], expected, rtol=1e-4, atol=1e-5)
