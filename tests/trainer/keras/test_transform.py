"""Training and serving through a tf.Transform output (trainer/keras/transform.py and its users).

The transform of the fixtures is analyzed by tft_beam on the train split (tests/trainer/datasets.py:
z-score of flipper_mm, vocabularies with one OOV bucket of island and tags, the rest passed
through). The expected values are computed here from the rows with numpy, independently of the
transform graph; skew is checked by comparing what the trainer's input pipeline yields with what
the exported model computes from the same raw serialized records.
"""

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.trainer.datasets import (
    FEATURES,
    ISLAND_VOCABULARY,
    TAGS_VOCABULARY,
    raw_feature_spec,
    run_python,
    to_example,
)
from trainer import predict
from trainer.dataset.manifest import InputFeature, ManifestError, load_manifest, parse_manifest
from trainer.keras.features import dense_inputs
from trainer.keras.inputs import Inputs
from trainer.keras.layers import IdEmbedding, OneHotIds
from trainer.keras.model import ModelConfig, build_model
from trainer.keras.served import TRANSFORM_SIGNATURE
from trainer.keras.transform import load_transform, output_features
from trainer.run.export import export_model
from trainer.task import main

SMALL = ModelConfig(hidden_units=(8,), embedding_dim=2, hash_bins=16)
MODEL_INPUTS = [
    "bill_length_mm",
    "body_mass_g",
    "body_mass_g__present",
    "embedding",
    "flipper_mm",
    "id",
    "island",
    "sex",
    "tags",
    "year",
]
WITHOUT_LABEL = {k: v for k, v in FEATURES.items() if k != "species"}


def _fail(proc) -> str:
    return f"rc={proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


def _vocabulary(root, name: str) -> list[str]:
    return (root / "transform/transform_fn/assets" / name).read_text().splitlines()


def _raw_records(dataset, split: str) -> dict[int, bytes]:
    """id -> the serialized raw record, as stored in the split's shards."""
    files = [str(dataset.root / f["path"]) for f in dataset.manifest["splits"][split]["files"]]
    records = tf.data.TFRecordDataset(files, compression_type="GZIP")
    out = {}
    for record in records:
        example = tf.train.Example.FromString(record.numpy())
        out[example.features.feature["id"].int64_list.value[0]] = record.numpy()
    return out


def _built(inputs: Inputs, cfg: ModelConfig = SMALL):
    return build_model(inputs.recipe, cfg)


# --- describing transform outputs (no transform needed) ---------------------------------------


def test_each_transform_output_becomes_a_model_feature(dataset):
    m = load_manifest(str(dataset.root))
    spec = {
        "flipper_mm": tf.io.FixedLenFeature([], tf.float32),  # scaled
        "island": tf.io.FixedLenFeature([], tf.int64),  # vocabulary ids
        "tags": tf.io.VarLenFeature(tf.int64),  # vocabulary ids of a list
        "year": tf.io.FixedLenFeature([], tf.int64),  # passed through
        "body_mass_g": tf.io.VarLenFeature(tf.float32),  # optional, passed through
        "sex": tf.io.VarLenFeature(tf.string),
        "photo": tf.io.VarLenFeature(tf.string),
        "embedding": tf.io.FixedLenFeature([4], tf.float32),
        "species": tf.io.FixedLenFeature([], tf.int64),  # an output named as the label
        "ratio": tf.io.FixedLenFeature([], tf.float32),  # new outputs
        "words": tf.io.VarLenFeature(tf.string),
        "bucket": tf.io.FixedLenFeature([], tf.int64),
        "count": tf.io.FixedLenFeature([], tf.int64),
    }
    buckets = {"island": 4, "tags": 6, "bucket": 10}

    features = output_features(spec, m.features, "species", buckets.get)

    assert features == {
        "flipper_mm": InputFeature(name="flipper_mm", type="float"),
        "island": InputFeature(name="island", type="int", buckets=4),
        "tags": InputFeature(name="tags", type="int", shape=(None,), required=False, buckets=6),
        "year": InputFeature(name="year", type="int", values=(2007, 2008, 2009)),
        "body_mass_g": InputFeature(name="body_mass_g", type="float", required=False),
        "sex": InputFeature(name="sex", type="string", required=False),
        "photo": InputFeature(name="photo", type="image", required=False),
        "embedding": InputFeature(name="embedding", type="float", shape=(4,)),
        "ratio": InputFeature(name="ratio", type="float"),
        "words": InputFeature(name="words", type="string", shape=(None,), required=False),
        "bucket": InputFeature(name="bucket", type="int", buckets=10),
        "count": InputFeature(name="count", type="int"),
        "species": m.features["species"],  # the label is never transformed
    }


def test_sparse_feature_outputs_are_refused(dataset):
    m = load_manifest(str(dataset.root))
    spec = {"pair": tf.io.SparseFeature("i", "v", tf.float32, 3)}
    with pytest.raises(ManifestError, match="transform output 'pair': SparseFeature outputs"):
        output_features(spec, m.features, "species", lambda name: None)


def test_sparse_outputs_densify_with_minus_one_for_missing_ids():
    features = {
        "tags": InputFeature(name="tags", type="int", shape=(None,), required=False, buckets=6),
        "mass": InputFeature(name="mass", type="float", required=False),
        "code": InputFeature(name="code", type="int", required=False, buckets=3),
    }
    parsed = {
        "tags": tf.sparse.from_dense(tf.constant([[2, 0], [0, 0], [4, 1]], tf.int64)),
        "mass": tf.SparseTensor([[0, 0], [2, 0]], tf.constant([3.5, 4.0]), [3, 1]),
        "code": tf.SparseTensor([[1, 0]], tf.constant([2], tf.int64), [3, 1]),
    }

    dense = dense_inputs(parsed, features)

    np.testing.assert_array_equal(dense["tags"], [[2, -1], [-1, -1], [4, 1]])
    np.testing.assert_array_equal(dense["mass"], [3.5, 0.0, 4.0])
    np.testing.assert_array_equal(dense["mass__present"], [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(dense["code"], [-1, 2, -1])
    assert "code__present" not in dense


def test_ids_outside_the_buckets_encode_as_zeros():
    embed = IdEmbedding(3, 2)
    mean = IdEmbedding(3, 2, mean=True)
    ids = tf.constant([[0, 2, -1], [5, -1, -1]], tf.int64)
    table = embed(tf.constant([[0, 1, 2]])).numpy()[0]  # builds the layer: rows 0..2
    mean.build(ids.shape)
    mean.set_weights(embed.get_weights())

    np.testing.assert_array_equal(embed(ids), [[table[0], table[2], [0, 0]], [[0, 0]] * 3])
    np.testing.assert_allclose(mean(ids), [(table[0] + table[2]) / 2, [0, 0]], rtol=1e-6)
    assert embed.input_dim == 3
    np.testing.assert_array_equal(
        OneHotIds(3)(tf.constant([[1], [-1], [3]], tf.int64)), [[0, 1, 0], [0, 0, 0], [0, 0, 0]]
    )


def test_missing_transform_output_exits_2(dataset, tmp_path, capsys):
    shutil.copytree(dataset.root, tmp_path / "data")
    raw = dict(dataset.manifest, transform={"path": "transform", "materialize": "raw"})
    (tmp_path / "data/manifest.json").write_text(json.dumps(raw))

    status = main(["--data", str(tmp_path / "data"), "--model-dir", str(tmp_path / "m")])

    assert status == 2
    assert capsys.readouterr().err == (
        f"shardflow train: {tmp_path}/data/transform: not a complete tf.Transform output "
        "(no transform_fn/)\n"
    )


# --- with a real transform output ----------------------------------------------------------


@pytest.mark.slow
def test_trainer_reads_raw_shards_through_the_transform(tft_datasets):
    raw, _ = tft_datasets
    m = load_manifest(str(raw.root))
    rows = raw.rows["train"]
    inputs = Inputs.of(m)
    islands = _vocabulary(raw.root, ISLAND_VOCABULARY)
    tags = _vocabulary(raw.root, TAGS_VOCABULARY)

    batch, label = next(
        iter(inputs.dataset("train", 240, shuffle=False, deterministic=True, encode_label=False))
    )

    assert inputs.spec == raw_feature_spec()  # the transform's raw input spec, label included
    assert sorted(batch) == MODEL_INPUTS
    by_id = {r["id"]: r for r in rows}
    ordered = [by_id[i] for i in batch["id"].numpy()]
    assert sorted(r["id"] for r in ordered) == [r["id"] for r in rows]
    flipper = np.array([r["flipper_mm"] for r in rows], dtype=np.float32).astype(np.float64)
    z = (np.array([r["flipper_mm"] for r in ordered], np.float32) - flipper.mean()) / flipper.std()
    np.testing.assert_allclose(batch["flipper_mm"], z, rtol=1e-4, atol=1e-5)
    assert sorted(islands) == sorted({r["island"] for r in rows})
    assert sorted(tags) == sorted({t for r in rows for t in r["tags"]})
    # a category id is a [batch, 1] model input (trainer.keras.preprocess), its id as the
    # vocabulary's
    np.testing.assert_array_equal(batch["island"], [[islands.index(r["island"])] for r in ordered])
    width = max(len(r["tags"]) for r in rows)
    np.testing.assert_array_equal(
        batch["tags"],
        [[tags.index(t) for t in r["tags"]] + [-1] * (width - len(r["tags"])) for r in ordered],
    )
    np.testing.assert_array_equal(
        batch["body_mass_g__present"], [r["body_mass_g"] is not None for r in ordered]
    )
    assert [s.decode() for s in label.numpy()] == [r["species"] for r in ordered]  # raw label


@pytest.mark.slow
def test_embedding_sizes_are_the_vocabulary_sizes_plus_oov_buckets(tft_datasets):
    raw, _ = tft_datasets
    few = ModelConfig(hidden_units=(8,), one_hot_max=2)
    inputs = Inputs.of(load_manifest(str(raw.root)), model=few)
    islands = len(_vocabulary(raw.root, ISLAND_VOCABULARY))
    tags = len(_vocabulary(raw.root, TAGS_VOCABULARY))

    embedded = _built(inputs, few)
    many = ModelConfig(hidden_units=(8,))  # up to 16 slots: one-hot
    one_hot = _built(Inputs.of(load_manifest(str(raw.root)), model=many), many)

    assert (inputs.features["island"].buckets, inputs.features["tags"].buckets) == (4, 6)
    assert embedded.get_layer("island_embed").input_dim == islands + 1 == 4
    assert embedded.get_layer("tags_embed").input_dim == tags + 1 == 6
    assert one_hot.get_layer("island_one_hot").depth == islands + 1
    assert one_hot.get_layer("tags_embed").input_dim == tags + 1  # a list is always embedded


@pytest.fixture(scope="module")
def exports(tft_datasets, tmp_path_factory) -> dict[str, tuple[str, dict[int, np.ndarray]]]:
    """materialize -> (export dir, in-training probabilities of the eval rows by id).

    For each fixture dataset (raw shards, transformed shards): a copy is trained for one epoch
    through the trainer's input pipeline, exported, and then its transform/ is deleted.
    """
    out = {}
    for source in tft_datasets:
        materialize = source.manifest["transform"]["materialize"]
        base = tmp_path_factory.mktemp(f"export_{materialize}")
        shutil.copytree(source.root, base / "data")
        m = load_manifest(str(base / "data"))
        inputs = Inputs.of(m)
        model = _built(inputs)
        model.fit(inputs.dataset("train", 32, repeat=True, seed=1), steps_per_epoch=8, verbose=0)
        export = export_model(model, inputs, str(base / "export"))
        trained = {}
        for features, _ in inputs.dataset("eval", 32, shuffle=False, encode_label=False):
            for key, p in zip(features["id"].numpy(), model(features, training=False).numpy()):
                trained[int(key)] = p
        shutil.rmtree(base / "data/transform")
        out[materialize] = (export, trained)
    return out


SERVE_AFTER_DELETE = """
import json, sys
import numpy as np
import tensorflow as tf
exports, examples, out = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
serialized = [r.numpy() for r in tf.data.TFRecordDataset(examples)]
results = {}
for i, path in enumerate(exports):
    outputs = tf.saved_model.load(path).signatures["serving_default"](
        examples=tf.constant(serialized))
    results[f"probabilities_{i}"] = outputs["probabilities"].numpy()
    results[f"classes_{i}"] = [c.decode() for c in outputs["classes"].numpy()]
np.savez(out, **results)
"""


@pytest.mark.slow
def test_export_serves_raw_examples_like_training_after_transform_is_deleted(
    exports, tft_datasets, tmp_path
):
    raw, _ = tft_datasets
    classes = FEATURES["species"]["values"]
    rows = raw.rows["eval"]
    with tf.io.TFRecordWriter(str(tmp_path / "examples.tfrecord")) as writer:
        for row in rows:  # raw examples without the label
            writer.write(to_example(row, WITHOUT_LABEL).SerializeToString())
    materializations = sorted(exports)  # raw shards, transformed shards

    # A fresh process: nothing of the training process (or of transform/) is left to lean on.
    proc = run_python(
        "-c", SERVE_AFTER_DELETE, ",".join(exports[k][0] for k in materializations),
        str(tmp_path / "examples.tfrecord"), str(tmp_path / "served.npz"),
    )  # fmt: skip

    assert proc.returncode == 0, _fail(proc)
    served = np.load(tmp_path / "served.npz")
    for i, materialize in enumerate(materializations):
        export, trained = exports[materialize]
        assert sorted(p.name for p in (Path(export) / "assets").iterdir()) == [
            ISLAND_VOCABULARY,
            TAGS_VOCABULARY,
        ]
        want = np.array([trained[r["id"]] for r in rows])
        np.testing.assert_allclose(served[f"probabilities_{i}"], want, rtol=1e-5, atol=1e-6)
        assert served[f"classes_{i}"].tolist() == [classes[j] for j in want.argmax(axis=1)]


@pytest.mark.slow
@pytest.mark.parametrize("materialize", ["raw", "transformed"])
def test_served_transform_equals_what_the_trainer_sees(exports, tft_datasets, materialize):
    raw, materialized = tft_datasets
    dataset = raw if materialize == "raw" else materialized
    inputs = Inputs.of(load_manifest(str(dataset.root)))
    export, _ = exports[materialize]  # its dataset's transform/ is deleted
    served = tf.saved_model.load(export).signatures[TRANSFORM_SIGNATURE]
    records = _raw_records(raw, "eval")  # serving always takes raw records
    batches = inputs.dataset("eval", 16, shuffle=False, deterministic=True, encode_label=False)

    compared = []
    for features, _ in batches:
        ids = features["id"].numpy().tolist()
        answer = served(examples=tf.constant([records[i] for i in ids]))
        assert sorted(answer) == sorted(features) == MODEL_INPUTS
        for name, value in features.items():
            np.testing.assert_array_equal(answer[name], value, err_msg=name)
        compared += ids

    assert sorted(compared) == sorted(records) and len(compared) == 60
    # transformed shards are parsed with the transformed spec: no transform in training
    assert (inputs.spec["island"].dtype == tf.int64) is (materialize == "transformed")


@pytest.mark.slow
def test_cli_trains_exports_and_predicts_with_a_transform_without_apache_beam(
    tft_datasets, tmp_path, capsys
):
    raw, materialized = tft_datasets
    script = (
        "import sys, trainer.task; status = trainer.task.main(sys.argv[1:]); "
        "assert 'apache_beam' not in sys.modules, 'apache_beam was imported'; sys.exit(status)"
    )
    proc = run_python(
        "-c", script, "--data", str(raw.root), "--model-dir", str(tmp_path / "m"),
        "--epochs", "1", "--batch-size", "32",
    )  # fmt: skip
    assert proc.returncode == 0, _fail(proc)
    metrics = json.loads((tmp_path / "m/metrics.json").read_text())
    assert (metrics["task"], metrics["steps_per_epoch"]) == ("classification", 8)
    assert (tmp_path / "m/export/assets" / ISLAND_VOCABULARY).is_file()

    capsys.readouterr()
    assert predict.main(
        ["--model-dir", str(tmp_path / "m"), "--data", str(raw.root), "--split", "eval",
         "--take", "3"]
    ) == 0  # fmt: skip
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [a["label"] for a in answers] == [r["species"] for r in raw.rows["eval"][:3]]
    assert all(a["class"] in FEATURES["species"]["values"] for a in answers)

    assert predict.main(
        ["--model-dir", str(tmp_path / "m"), "--data", str(materialized.root), "--split",
         "eval"]
    ) == 2  # fmt: skip
    assert capsys.readouterr().err == (
        f"shardflow predict: {materialized.root}: the shards hold transformed examples; "
        "the model serves raw ones\n"
    )


@pytest.mark.slow
def test_label_missing_from_the_transformed_spec_is_a_manifest_error(tft_datasets, tmp_path):
    _, materialized = tft_datasets
    manifest = copy.deepcopy(materialized.manifest)
    manifest["features"]["kind"] = {"type": "string", "values": ["a", "b"]}
    manifest["label"] = "kind"
    m = parse_manifest(manifest, str(materialized.root))

    with pytest.raises(ManifestError, match="the transformed feature spec has no label 'kind'"):
        load_transform(m)
