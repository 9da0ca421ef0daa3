"""tf.Transform preprocessing: exact outputs of every declarative op on a few rows, the raw
feature spec, a user module, and the label's pass-through.

The raw examples are built with `tf.train.Example` here; the expected values are computed with
numpy (statistics, buckets) or written out by hand (vocabulary ids, image pixels). The transform
written by `AnalyzeTransform` is applied to raw examples the way a serving model applies it
(parse with the raw spec, then the transform layer), and the serialized outputs are read back
with `tf.train.Example`.
"""

from __future__ import annotations

import io
import json

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from PIL import Image

from pipelines.config.loader import parse_config

pytestmark = pytest.mark.slow  # each tf.Transform analysis traces and runs a TensorFlow graph
tf = pytest.importorskip("tensorflow")
tft = pytest.importorskip("tensorflow_transform")

from transforms.tf_transform import (  # noqa: E402  (after the importorskip of TensorFlow)
    AnalyzeTransform,
    TransformError,
    TransformExamples,
    raw_feature_spec,
)


def png(pixels, mode: str) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.asarray(pixels, np.uint8), mode).save(out, "PNG")
    return out.getvalue()


# A 2x2 RGB image (red, green / blue, white) and a 2x2 grayscale one (all 51 = 0.2 * 255).
RGB = png([[[255, 0, 0], [0, 255, 0]], [[0, 0, 255], [255, 255, 255]]], "RGB")
GRAY = png([[51, 51], [51, 51]], "L")
RGB_PIXELS = [[[1, 0, 0], [0, 1, 0]], [[0, 0, 1], [1, 1, 1]]]

FEATURES = {
    "x": {"type": "float"},
    "y": {"type": "float"},
    "n": {"type": "int"},
    "c": {"type": "string"},
    "ctop": {"type": "string"},
    "cthr": {"type": "string"},
    "t": {"type": "string"},
    "k": {"type": "int"},
    "iv": {"type": "int"},
    "m": {"type": "float"},
    "lz": {"type": "float"},
    "o": {"type": "float", "required": False},
    "o2": {"type": "float", "required": False},
    "os": {"type": "string", "required": False},
    "d": {"type": "float", "required": False, "default": -1.0},
    "tags": {"type": "string", "shape": [None]},
    "v": {"type": "float", "shape": [2]},
    "p": {"type": "float"},
    "q": {"type": "float", "required": False},
    "img": {"type": "image"},
    "small": {"type": "image"},
    "oimg": {"type": "image", "required": False},
    "lab": {"type": "int", "values": [0, 1]},
}
OPS = {
    "x": "z_score",
    "y": "scale_to_0_1",
    "n": {"bucketize": {"num_buckets": 4}},
    "c": "vocabulary",
    "ctop": {"vocabulary": {"top_k": 2, "num_oov_buckets": 2}},
    "cthr": {"vocabulary": {"frequency_threshold": 2}},
    "t": {"hash": {"buckets": 10}},
    "k": {"hash": {"buckets": 7}},
    "iv": {"vocabulary": {}},
    "m": "log1p",
    "lz": ["log1p", "z_score"],
    "o": [{"fill_missing": 10}, "z_score"],
    "o2": "z_score",
    "os": "vocabulary",
    "d": "scale_to_0_1",
    "tags": "vocabulary",
    "v": "z_score",
    "img": {"decode_resize": [2, 2]},
    "small": {"decode_resize": [1, 1]},
    "oimg": {"decode_resize": [2, 2]},
}

# The train split: 8 rows, one list per feature (None: missing).
X = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
TRAIN = {
    "x": X,
    "y": [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0],
    "n": [1, 2, 3, 4, 5, 6, 7, 8],
    "c": ["b", "a", "b", "c", "a", "b", "a", "b"],  # b: 4, a: 3, c: 1
    "ctop": ["b", "a", "b", "c", "a", "b", "a", "b"],
    "cthr": ["b", "a", "b", "c", "a", "b", "a", "b"],
    "t": ["red", "green", "blue", "red", "green", "blue", "red", "x"],
    "k": [1, 2, 3, 4, 5, 6, 7, 8],
    "iv": [5, 5, 5, 7, 7, 9, 9, 9],  # 5 and 9 three times each, 7 twice
    "m": [0.0, 1.0, 2.0, 3.0, 9.0, 99.0, 0.5, 1e6],
    "lz": [0.0, 1.0, 2.0, 3.0, 9.0, 99.0, 0.5, 1e6],
    "o": [1.0, None, 3.0, None, 5.0, None, 7.0, None],
    "o2": [1.0, None, 3.0, None, 5.0, None, 7.0, None],
    "os": ["x", None, "x", None, None, "y", None, "x"],
    # d: the ETL wrote the default -1 for a missing value.
    "d": [0.0, 2.0, 4.0, 8.0, -1.0, 0.0, 2.0, 4.0],
    "tags": [["a", "b"], [], ["b"], ["b", "c"], ["b"], ["a"], [], ["c", "b", "b"]],
    "v": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]] * 2,
    "p": [0.5] * 8,
    "q": [None, 1.5] * 4,
    "img": [RGB] * 7 + [GRAY],
    "small": [RGB] * 7 + [GRAY],
    "oimg": [RGB, None] * 4,
    "lab": [0, 1] * 4,
}
# Two rows the analysis never saw (as eval rows would be).
EVAL = {
    "x": [4.5, 100.0],
    "y": [0.0, 45.0],
    "n": [0, 100],
    "c": ["zzz", "a"],
    "ctop": ["c", "b"],
    "cthr": ["c", "a"],
    "t": ["red", "new"],
    "k": [3, 1000],
    "iv": [7, 8],
    "m": [4.0, 0.0],
    "lz": [1.0, 0.0],
    "o": [None, 2.0],
    "o2": [None, 2.0],
    "os": ["x", None],
    "d": [8.0, -1.0],
    "tags": [["c", "zzz"], []],
    "v": [[1.0, 8.0], [0.0, 0.0]],
    "p": [1.0, 2.0],
    "q": [3.0, None],
    "img": [GRAY, RGB],
    "small": [RGB, RGB],
    "oimg": [None, GRAY],
    "lab": [1, 0],
}


def example(row: dict, omit_missing: tuple[str, ...] = ("o2",)) -> bytes:
    """A raw tf.train.Example; a missing value is an empty list of the feature's kind (as the
    ETL writes it), or no feature at all for the names in `omit_missing` (as a client may)."""
    ex = tf.train.Example()
    for name, value in row.items():
        kind = FEATURES[name]["type"]
        if value is None and name in omit_missing:
            continue
        values = [] if value is None else value if isinstance(value, list) else [value]
        feature = ex.features.feature[name]
        if kind == "int":
            feature.int64_list.value.extend(values)
        elif kind == "float":
            feature.float_list.value.extend(values)
        else:
            feature.bytes_list.SetInParent()
            feature.bytes_list.value.extend(v.encode() if isinstance(v, str) else v for v in values)
    return ex.SerializeToString()


def rows(columns: dict) -> list[dict]:
    n = len(next(iter(columns.values())))
    return [{name: values[i] for name, values in columns.items()} for i in range(n)]


def dataset(tmp_path, transform: dict, features=None, label="lab"):
    cfg = {
        "name": "t",
        "sources": [{"name": "a", "format": "csv", "path": "a.csv"}],
        "features": features or FEATURES,
        "label": label,
        "splits": {"train": 0.5, "eval": 0.5},
        "transform": transform,
        "output": {"path": "out"},
    }
    return parse_config(cfg, base_dir=str(tmp_path))


def analyze(spec, train_rows: list[dict], tmp_path) -> tuple[str, list[dict]]:
    """Runs AnalyzeTransform on the rows; returns the transform folder and the manifest section."""
    out = str(tmp_path / "transform")
    facts = tmp_path / "facts.json"
    payloads = pa.array([example(r) for r in train_rows], pa.binary())
    with TestPipeline(runner="FnApiRunner") as p:
        section = (
            p
            | beam.Create([payloads.slice(0, 3), payloads.slice(3)])
            | AnalyzeTransform(spec, out, str(tmp_path / "tmp"))
        )
        _ = (
            section
            | beam.combiners.ToList()
            | beam.Map(lambda got: facts.write_text(json.dumps(got)))
        )
    assert not (tmp_path / "tmp").exists()  # the analysis' temporary files are gone
    return out, json.loads(facts.read_text())


def transformed(transform_dir: str, raw_rows: list[dict]) -> list[dict]:
    """The transformed examples of raw rows, as {name: [values]}."""
    payloads = pa.array([example(r) for r in raw_rows], pa.binary())
    out = []
    for data in TransformExamples(transform_dir)(payloads).to_pylist():
        features = tf.train.Example.FromString(data).features.feature
        out.append({k: list(getattr(v, v.WhichOneof("kind")).value) for k, v in features.items()})
    return out


def column(outputs: list[dict], name: str) -> list:
    return [row[name] for row in outputs]


def f32(values) -> list[float]:
    return [float(v) for v in np.asarray(values, np.float32)]


def z(values, train) -> list[list[float]]:
    train = np.asarray(train, np.float64)
    return [[v] for v in f32((np.asarray(values) - train.mean()) / train.std())]


def close(got, expected, rel=1e-6) -> bool:
    """Equal to float32 precision (values computed in float64 here, float32 in the graph)."""
    np.testing.assert_allclose(
        np.asarray(got, np.float64), np.asarray(expected), rtol=rel, atol=1e-6
    )
    return True


def hashed(values, buckets: int) -> list[list[int]]:
    return [[int(h)] for h in tf.strings.to_hash_bucket_fast([str(v) for v in values], buckets)]


@pytest.fixture(scope="module")
def declarative(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("declarative")
    spec = dataset(tmp_path, {"features": OPS})
    out, facts = analyze(spec, rows(TRAIN), tmp_path)
    return spec, out, facts, transformed(out, rows(TRAIN)), transformed(out, rows(EVAL))


def test_z_score_uses_the_train_mean_and_population_std(declarative):
    _, _, _, train, evals = declarative
    assert close(column(train, "x"), z(X, X), rel=1e-6)  # mean 4.5, std sqrt(5.25)
    assert close(column(evals, "x"), z([4.5, 100.0], X), rel=1e-6)
    # A fixed-shape feature: one mean and std over all its values.
    v = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]] * 2
    expected = [[a[0], b[0]] for a, b in zip(z([r[0] for r in v], X), z([r[1] for r in v], X))]
    assert close(column(train, "v"), expected, rel=1e-6)


def test_scale_to_0_1_uses_the_train_min_and_max(declarative):
    _, _, _, train, evals = declarative
    assert column(train, "y") == [
        [v] for v in f32([0, 1 / 7, 2 / 7, 3 / 7, 4 / 7, 5 / 7, 6 / 7, 1])
    ]
    assert column(evals, "y") == [[v] for v in f32([-1 / 7, 0.5])]  # not clipped
    # d: optional with a default; the ETL wrote -1 for a missing one, so -1 is the minimum.
    assert column(train, "d") == [
        [v] for v in f32([1 / 9, 3 / 9, 5 / 9, 1, 0, 1 / 9, 3 / 9, 5 / 9])
    ]


def test_bucketize_splits_the_train_values_into_quantile_buckets(declarative):
    _, out, _, train, evals = declarative
    assert column(train, "n") == [[0], [0], [1], [1], [2], [2], [3], [3]]
    assert column(evals, "n") == [[0], [3]]  # below and above every train value
    assert tft.TFTransformOutput(out).num_buckets_for_transformed_feature("n") == 4


def test_vocabulary_ids_follow_frequency_with_oov_buckets(declarative):
    _, out, _, train, evals = declarative
    output = tft.TFTransformOutput(out)
    # b (4 times) 0, a (3) 1, c (1) 2; the one OOV bucket is 3.
    assert column(train, "c") == [[0], [1], [0], [2], [1], [0], [1], [0]]
    assert column(evals, "c") == [[3], [1]]
    assert output.vocabulary_by_name("vocabulary_c") == [b"b", b"a", b"c"]
    assert output.num_buckets_for_transformed_feature("c") == 4
    # top_k 2: c is out of vocabulary, in one of the 2 OOV buckets (2 + its FarmHash mod 2).
    oov_c = 2 + hashed(["c"], 2)[0][0]
    assert column(train, "ctop") == [[0], [1], [0], [oov_c], [1], [0], [1], [0]]
    assert column(evals, "ctop") == [[oov_c], [0]]
    assert output.num_buckets_for_transformed_feature("ctop") == 4
    # frequency_threshold 2: c (once) is dropped.
    assert column(train, "cthr") == [[0], [1], [0], [2], [1], [0], [1], [0]]
    assert output.vocabulary_by_name("vocabulary_cthr") == [b"b", b"a"]
    # Ints: equal counts are ordered by value, descending (as bytes): 9 before 5.
    assert output.vocabulary_by_name("vocabulary_iv") == [b"9", b"5", b"7"]
    assert column(train, "iv") == [[1], [1], [1], [2], [2], [0], [0], [0]]
    assert column(evals, "iv") == [[2], [3]]


def test_vocabulary_of_a_list_feature_keeps_the_lists(declarative):
    _, out, _, train, evals = declarative
    # b 6 times; a and c twice each: equal counts descending by value, so c before a.
    vocab = tft.TFTransformOutput(out).vocabulary_by_name("vocabulary_tags")
    assert vocab == [b"b", b"c", b"a"]
    ids = {"b": 0, "c": 1, "a": 2}
    assert column(train, "tags") == [[ids[t] for t in r] for r in TRAIN["tags"]]
    assert column(evals, "tags") == [[1, 3], []]  # zzz: the OOV id


def test_hash_is_farmhash_modulo_buckets_with_its_range_annotated(declarative):
    _, out, _, train, evals = declarative
    assert column(train, "t") == hashed(TRAIN["t"], 10)
    assert column(evals, "t") == hashed(EVAL["t"], 10)
    assert column(train, "k") == hashed(TRAIN["k"], 7)  # ints hash as their decimal text
    assert all(0 <= v[0] < 7 for v in column(train, "k") + column(evals, "k"))
    output = tft.TFTransformOutput(out)
    assert output.num_buckets_for_transformed_feature("t") == 10
    assert output.num_buckets_for_transformed_feature("k") == 7


def test_log1p_alone_and_before_z_score(declarative):
    _, _, _, train, evals = declarative
    # float32 log1p in the graph (Eigen, vectorized by the CPU's instruction set) and in numpy
    # may differ in the last bit
    assert close(column(train, "m"), [[v] for v in f32(np.log1p(np.float32(TRAIN["m"])))])
    assert close(column(evals, "m"), [[v] for v in f32(np.log1p(np.float32([4.0, 0.0])))])
    logs = np.log1p(np.float32(TRAIN["lz"])).astype(np.float64)
    assert close(column(train, "lz"), z(logs, logs), rel=1e-5)


def test_missing_values_are_filled_before_the_op(declarative):
    _, _, _, train, evals = declarative
    # fill_missing: 10 → the statistics and outputs see 10 for a missing value.
    filled = [1.0, 10.0, 3.0, 10.0, 5.0, 10.0, 7.0, 10.0]
    assert close(column(train, "o"), z(filled, filled), rel=1e-6)
    assert close(column(evals, "o"), z([10.0, 2.0], filled), rel=1e-6)
    # No fill_missing: 0 for numbers (also when the client left the feature out)...
    zeros = [1.0, 0.0, 3.0, 0.0, 5.0, 0.0, 7.0, 0.0]
    assert close(column(train, "o2"), z(zeros, zeros), rel=1e-6)
    # ... and "" for strings, which a vocabulary never holds: a missing string gets the OOV id.
    assert column(train, "os") == [[0], [2], [0], [2], [2], [1], [2], [0]]  # x 0, y 1, OOV 2
    assert column(evals, "os") == [[0], [2]]


def test_decode_resize_gives_rgb_floats_in_0_1(declarative):
    _, _, _, train, evals = declarative
    flat = [float(v) for v in np.asarray(RGB_PIXELS, np.float32).reshape(-1)]
    gray = [0.2] * 12
    assert column(train, "img") == [flat] * 7 + [pytest.approx(gray, rel=1e-6)]
    assert column(evals, "img") == [pytest.approx(gray, rel=1e-6), flat]
    # 2x2 → 1x1, bilinear: the mean of the four pixels.
    assert column(train, "small") == [[0.5, 0.5, 0.5]] * 7 + [pytest.approx([0.2] * 3, rel=1e-6)]
    # A missing optional image is black.
    assert column(train, "oimg") == [flat, [0.0] * 12] * 4


def test_features_without_op_and_the_label_pass_through(declarative):
    _, _, _, train, evals = declarative
    assert column(train, "p") == [[0.5]] * 8
    assert column(evals, "q") == [[3.0], []]  # optional: still a list, empty when missing
    assert column(train, "lab") == [[0], [1]] * 4
    assert column(evals, "lab") == [[1], [0]]


def test_manifest_section_describes_the_transformed_features(declarative):
    _, _, facts, train, _ = declarative
    assert len(facts) == 1
    section = facts[0]
    assert {k: v for k, v in section.items() if k != "features"} == {
        "path": "transform",
        "materialize": "raw",
        "preprocessing": "features",
        "analyzed_split": "train",
        "analyzed_records": 8,
    }
    features = section["features"]
    assert sorted(features) == sorted(FEATURES) == sorted(train[0])
    assert features["x"] == {"type": "float", "shape": [], "required": True}
    assert features["c"] == {"type": "int", "shape": [], "required": True}
    assert features["o2"] == {"type": "float", "shape": [], "required": True}  # filled: dense
    assert features["q"] == {"type": "float", "shape": [None], "required": False}
    assert features["tags"] == {"type": "int", "shape": [None], "required": False}
    assert features["img"] == {"type": "float", "shape": [2, 2, 3], "required": True}
    assert features["lab"] == {"type": "int", "shape": [], "required": True}


def test_raw_metadata_is_the_serving_input_spec(declarative):
    spec, out, _, _, _ = declarative
    raw = tft.TFTransformOutput(out).raw_feature_spec()
    assert raw == raw_feature_spec(spec.features)
    assert raw["x"] == tf.io.FixedLenFeature([], tf.float32)
    assert raw["d"] == tf.io.FixedLenFeature([], tf.float32)  # defaulted: always in an example
    assert raw["v"] == tf.io.FixedLenFeature([2], tf.float32)
    assert raw["o"] == tf.io.VarLenFeature(tf.float32)
    assert raw["tags"] == tf.io.VarLenFeature(tf.string)
    assert raw["img"] == tf.io.FixedLenFeature([], tf.string)
    assert raw["lab"] == tf.io.FixedLenFeature([], tf.int64)  # the label is kept


def test_raw_feature_spec_of_optional_fixed_shapes():
    spec = dataset(
        "/x",
        {"features": {"a": "z_score"}},
        features={
            "a": {"type": "float", "shape": [3], "required": False},
            "b": {"type": "int", "shape": [3], "required": False, "default": [1, 2, 3]},
            "s": {"type": "bytes"},
        },
        label=None,
    )
    assert raw_feature_spec(spec.features) == {
        "a": tf.io.VarLenFeature(tf.float32),  # may be an empty list
        "b": tf.io.FixedLenFeature([3], tf.int64),
        "s": tf.io.FixedLenFeature([], tf.string),
    }


MODULE = """
import tensorflow as tf
import tensorflow_transform as tft


def preprocessing_fn(inputs):
    x = inputs["x"]
    return {
        "x_centered": x - tft.mean(x),
        "x_max": tf.fill(tf.shape(x), tft.max(x)),
        "word": tft.compute_and_apply_vocabulary(inputs["c"], vocab_filename="words"),
    }
"""


def test_user_module_outputs_and_the_label_added(tmp_path):
    (tmp_path / "prep.py").write_text(MODULE)
    features = {"x": {"type": "float"}, "c": {"type": "string"}, "lab": {"type": "int"}}
    spec = dataset(tmp_path, {"module": "prep.py", "materialize": "transformed"}, features)
    assert spec.transform.module == str(tmp_path / "prep.py")
    train = [{"x": x, "c": c, "lab": i} for i, (x, c) in enumerate(zip(X, TRAIN["c"]))]
    out, facts = analyze(spec, train, tmp_path)
    got = transformed(out, train + [{"x": 10.0, "c": "new", "lab": 9}])
    assert column(got, "x_centered") == [[v] for v in f32(np.array(X + [10.0]) - 4.5)]
    assert column(got, "x_max") == [[8.0]] * 9
    assert column(got, "word") == [[0], [1], [0], [2], [1], [0], [1], [0], [-1]]
    assert column(got, "lab") == [[i] for i in range(8)] + [[9]]
    assert sorted(got[0]) == ["lab", "word", "x_centered", "x_max"]
    assert facts[0]["preprocessing"] == "module" and facts[0]["materialize"] == "transformed"


def test_a_module_that_transforms_the_label_is_refused(tmp_path):
    (tmp_path / "prep.py").write_text(
        "def preprocessing_fn(inputs):\n    return {'lab': inputs['lab'] + 1}\n"
    )
    spec = dataset(
        tmp_path, {"module": "prep.py"}, {"x": {"type": "float"}, "lab": {"type": "int"}}
    )
    with pytest.raises(TransformError, match="outputs 'lab', the label"):
        analyze(spec, [{"x": 1.0, "lab": 0}], tmp_path)


def test_a_failing_module_names_the_module(tmp_path):
    (tmp_path / "prep.py").write_text(
        "def preprocessing_fn(inputs):\n    return {'y': inputs['nope']}\n"
    )
    spec = dataset(tmp_path, {"module": "prep.py"}, {"x": {"type": "float"}}, label=None)
    with pytest.raises(TransformError, match="transform.module: preprocessing_fn failed: KeyError"):
        analyze(spec, [{"x": 1.0}], tmp_path)


def test_temporary_files_are_removed_from_object_stores(gcs_emulator):
    from apache_beam.io.filesystems import FileSystems

    from transforms.tf_transform import _remove_folder

    root = "gs://shardflow-test/tft/.ds.incomplete-x"
    for name in (".transform-tmp/a/b.pb", ".transform-tmp/c", "transform/keep.pb"):
        with FileSystems.create(f"{root}/{name}") as f:
            f.write(b"x")
    _remove_folder(f"{root}/.transform-tmp")
    _remove_folder(f"{root}/.transform-tmp")  # nothing left: still fine
    left = FileSystems.match([root + "/**"])[0].metadata_list
    assert [m.path for m in left] == [f"{root}/transform/keep.pb"]
