"""The parse spec and dense inputs derived from the manifest (trainer/keras/features.py)."""

import copy

import numpy as np
import pytest
import tensorflow as tf

from tests.trainer.datasets import FEATURES, make_rows, to_example
from trainer.dataset.manifest import ManifestError, load_manifest, parse_manifest
from trainer.keras.features import dense_inputs, label_encoder, parse_spec
from trainer.recipe.words import CLASSIFICATION, REGRESSION, label_task

RAGGED_FLOAT = tf.io.RaggedFeature(dtype=tf.float32, row_splits_dtype=tf.int64)
RAGGED_STRING = tf.io.RaggedFeature(dtype=tf.string, row_splits_dtype=tf.int64)


def test_parse_spec_is_derived_from_the_manifest(dataset):
    spec = parse_spec(load_manifest(str(dataset.root)))

    assert spec == {
        "id": tf.io.FixedLenFeature([], tf.int64),
        "bill_length_mm": tf.io.FixedLenFeature([], tf.float32),  # optional with a default
        "flipper_mm": tf.io.FixedLenFeature([], tf.float32),
        "body_mass_g": RAGGED_FLOAT,  # optional, no default: may be an empty list
        "year": tf.io.FixedLenFeature([], tf.int64),
        "island": tf.io.FixedLenFeature([], tf.string),
        "sex": RAGGED_STRING,
        "tags": RAGGED_STRING,  # [null]
        "embedding": tf.io.FixedLenFeature([4], tf.float32),
        "photo": RAGGED_STRING,
        "species": tf.io.FixedLenFeature([], tf.string),
    }


def test_parse_spec_can_leave_out_the_label_and_unused_features(dataset):
    m = load_manifest(str(dataset.root))

    assert list(parse_spec(m, include_label=False, only=["year", "tags", "species"])) == [
        "year",
        "tags",
    ]
    assert list(parse_spec(m, only=["year"])) == ["year", "species"]


def _rows_with_gaps() -> list[dict]:
    a, b, c = make_rows(3)
    a.update(body_mass_g=4000.0, sex="male", tags=["calm", "loud"], photo=b"img")
    b.update(body_mass_g=None, sex=None, tags=[], photo=None)
    c.update(body_mass_g=3500.0, sex=None, tags=["young"], photo=None)
    return [a, b, c]


def test_dense_inputs_fill_missing_values_and_mark_numeric_presence(dataset):
    m = load_manifest(str(dataset.root))
    rows = _rows_with_gaps()
    serialized = tf.constant([to_example(r).SerializeToString() for r in rows])

    dense = dense_inputs(tf.io.parse_example(serialized, parse_spec(m)), m.features)

    assert sorted(dense) == sorted([*FEATURES, "body_mass_g__present"])
    np.testing.assert_array_equal(dense["body_mass_g"], [4000.0, 0.0, 3500.0])
    np.testing.assert_array_equal(dense["body_mass_g__present"], [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(dense["sex"], [b"male", b"", b""])
    np.testing.assert_array_equal(dense["photo"], [b"img", b"", b""])
    np.testing.assert_array_equal(dense["tags"], [[b"calm", b"loud"], [b"", b""], [b"young", b""]])
    np.testing.assert_array_equal(dense["id"], [0, 1, 2])
    np.testing.assert_allclose(dense["embedding"], [r["embedding"] for r in rows], rtol=1e-6)
    assert {k: (v.dtype, v.shape.as_list()) for k, v in dense.items()} == {
        "id": (tf.int64, [3]),
        "bill_length_mm": (tf.float32, [3]),
        "flipper_mm": (tf.float32, [3]),
        "body_mass_g": (tf.float32, [3]),
        "body_mass_g__present": (tf.float32, [3]),
        "year": (tf.int64, [3]),
        "island": (tf.string, [3]),
        "sex": (tf.string, [3]),
        "tags": (tf.string, [3, 2]),
        "embedding": (tf.float32, [3, 4]),
        "photo": (tf.string, [3]),
        "species": (tf.string, [3]),
    }


def test_optional_fixed_length_feature_densifies_to_its_shape(dataset):
    raw = copy.deepcopy(dataset.manifest)
    raw["features"]["embedding"]["required"] = False
    m = parse_manifest(raw, str(dataset.root))
    rows = make_rows(2)
    rows[1]["embedding"] = None
    serialized = tf.constant([to_example(r).SerializeToString() for r in rows])

    dense = dense_inputs(tf.io.parse_example(serialized, parse_spec(m)), m.features)

    np.testing.assert_allclose(dense["embedding"], [rows[0]["embedding"], [0, 0, 0, 0]], rtol=1e-6)
    np.testing.assert_array_equal(dense["embedding__present"], [1.0, 0.0])


def test_label_encoder_maps_values_to_class_indices(dataset):
    m = load_manifest(str(dataset.root))
    encode = label_encoder(m.features["species"])

    y = encode(tf.constant([b"Gentoo", b"Adelie", b"Chinstrap", b"Gentoo"]))

    assert y.dtype == tf.int32
    np.testing.assert_array_equal(y, [2, 0, 1, 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="label species: a value is not one"):
        encode(tf.constant([b"Adelie", b"Emperor"]))


def test_regression_label_encodes_to_float(dataset):
    m = load_manifest(str(dataset.root))
    y = label_encoder(m.features["id"])(tf.constant([7, 300], tf.int64))
    assert y.dtype == tf.float32
    np.testing.assert_array_equal(y, [7.0, 300.0])


def test_int_label_with_values_encodes_to_class_indices(dataset):
    m = load_manifest(str(dataset.root))
    y = label_encoder(m.features["year"])(tf.constant([2009, 2007], tf.int64))
    np.testing.assert_array_equal(y, [2, 0])


@pytest.mark.parametrize(
    ("feature", "expected"),
    [
        ("species", CLASSIFICATION),
        ("island", CLASSIFICATION),
        ("flipper_mm", REGRESSION),
        ("bill_length_mm", REGRESSION),
        ("year", CLASSIFICATION),
        ("id", REGRESSION),
        ("body_mass_g", REGRESSION),  # optional: the records without it are left out
    ],
)
def test_label_task_follows_type_and_values(dataset, feature, expected):
    assert label_task(load_manifest(str(dataset.root)).features[feature]) == expected


@pytest.mark.parametrize(
    ("feature", "message"),
    [
        ("embedding", "label 'embedding': must be a scalar"),
        ("tags", "label 'tags': must be a scalar"),
    ],
)
def test_label_that_cannot_be_learned_is_rejected(dataset, feature, message):
    with pytest.raises(ManifestError, match=message):
        label_task(load_manifest(str(dataset.root)).features[feature])


def test_string_label_without_values_is_rejected(dataset):
    raw = copy.deepcopy(dataset.manifest)
    raw["features"]["sex"]["required"] = True
    feature = parse_manifest(raw, "/data").features["sex"]
    with pytest.raises(ManifestError, match="a string label needs `values`"):
        label_task(feature)
