"""The deterministic encoder writes exactly what TensorFlow's deterministic serializer writes."""

import random

import pytest

tf = pytest.importorskip("tensorflow")

import pyarrow as pa  # noqa: E402

from transforms.encode import ARROW_TYPES, encode_columns  # noqa: E402


def to_list_array(feature_type, rows):
    return pa.array(rows, pa.list_(ARROW_TYPES[feature_type]))


def _expected(names, types, rows_by_col, i):
    ex = tf.train.Example()
    for name, t, rows in zip(names, types, rows_by_col):
        feature = ex.features.feature[name]
        kind = {"int": feature.int64_list, "float": feature.float_list}.get(t, feature.bytes_list)
        kind.value.extend(rows[i])
    return ex.SerializeToString(deterministic=True)


def test_encoding_equals_deterministic_proto_serialization():
    rng = random.Random(7)
    n = 500
    names = ["zeta", "alpha", "mid", "büro", "list", "big"]
    types = ["float", "int", "string", "int", "string", "bytes"]
    cols = [
        [[rng.uniform(-1e6, 1e6)] for _ in range(n)],
        [[rng.randrange(-(2**63), 2**63)] if rng.random() > 0.2 else [] for _ in range(n)],
        [[("w%d" % rng.randrange(50)).encode()] for _ in range(n)],
        [[rng.randrange(300)] for _ in range(n)],
        [[b"t" * rng.randrange(0, 200)] * rng.randrange(0, 4) for _ in range(n)],
        [[bytes(rng.randrange(256) for _ in range(rng.choice([3, 200, 20000])))] for _ in range(n)],
    ]
    arrays = [to_list_array(t, c) for t, c in zip(types, cols)]
    out = encode_columns(names, arrays).to_pylist()
    assert len(out) == n
    for i in range(n):
        assert out[i] == _expected(names, types, cols, i), i


def test_missing_value_is_an_empty_list_of_the_features_kind():
    out = encode_columns(["x"], [to_list_array("float", [[]])]).to_pylist()
    ex = tf.train.Example.FromString(out[0])
    assert ex.features.feature["x"].WhichOneof("kind") == "float_list"
    assert list(ex.features.feature["x"].float_list.value) == []


def test_small_examples_use_the_fast_header_path_and_agree():
    names, types = ["a"], ["int"]
    cols = [[[i] for i in range(300)]]
    out = encode_columns(names, [to_list_array("int", cols[0])]).to_pylist()
    assert out == [_expected(names, types, cols, i) for i in range(300)]
