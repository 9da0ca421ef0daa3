"""End to end with tf.Transform, through the CLI: `shardflow etl` on a keyed JSONL source with a
`transform:` section, raw then transformed shards.

The expected statistics are computed here from the train shards, read back with TensorFlow's
TFRecord reader and `tf.train.Example`; the written transform is loaded with
`tft.TFTransformOutput` and applied to the raw eval shards the way a serving model does.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

CITIES = ["paris"] * 5 + ["rome"] * 3 + ["oslo", "lima"]
TAGS = [[], ["red"], ["blue", "red"], ["green"], ["red", "red", "blue"]]
DUPLICATES = [3, 10, 20, 30, 40]  # later records of these ids: dropped, never analyzed

CONFIG = """
name: shop
sources: [{name: orders, format: jsonl, path: orders.jsonl}]
key: id
features:
  id:    {type: int}
  price: {type: float, min: 0}
  qty:   {type: int, required: false}
  city:  {type: string}
  tags:  {type: string, shape: [null]}
  kind:  {type: string, values: [a, b]}
label: kind
splits: {train: 0.6, eval: 0.2, test: 0.2}
output: {path: %(out)s}
transform:
  materialize: %(materialize)s
"""
OPS = """
  features:
    price: z_score
    qty: [{fill_missing: 1}, {bucketize: {num_buckets: 3}}]
    city: vocabulary
    tags: {hash: {buckets: 8}}
"""


def shardflow(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def write_orders(folder: Path) -> None:
    lines = []
    for i in range(150):
        lines.append(
            {
                "id": i,
                "price": (i * 7 % 23) * 1.25 + 2,
                "qty": None if i % 5 == 0 else i % 9,
                "city": CITIES[i * 3 % 10],
                "tags": TAGS[i % 5],
                "kind": "a" if i % 3 else "b",
            }
        )
    for i in DUPLICATES:
        lines.append({"id": i, "price": 1e6, "qty": 1000, "city": "zzz", "tags": [], "kind": "a"})
    lines.append({"id": 999, "price": "abc", "qty": 1, "city": "rome", "tags": [], "kind": "a"})
    (folder / "orders.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def run_etl(folder: Path, materialize: str, out: str) -> Path:
    config = folder / f"{out}.yaml"
    config.write_text(CONFIG % {"out": out, "materialize": materialize} + OPS)
    result = shardflow("etl", "--config", str(config))
    assert result.returncode == 0, result.stderr  # also: no crash at exit after the analysis
    assert f"the shards hold {materialize} examples" in result.stdout
    return folder / out


def read_split(dataset: Path, manifest: dict, split: str) -> list[dict]:
    import tensorflow as tf

    out = []
    for f in manifest["splits"][split]["files"]:
        for record in tf.data.TFRecordDataset(str(dataset / f["path"]), compression_type="GZIP"):
            features = tf.train.Example.FromString(record.numpy()).features.feature
            out.append(
                {k: list(getattr(v, v.WhichOneof("kind")).value) for k, v in features.items()}
            )
    return out


def serialized(dataset: Path, manifest: dict, split: str) -> list[bytes]:
    import tensorflow as tf

    return [
        r.numpy()
        for f in manifest["splits"][split]["files"]
        for r in tf.data.TFRecordDataset(str(dataset / f["path"]), compression_type="GZIP")
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tft")
    write_orders(folder)
    return {
        "raw": run_etl(folder, "raw", "raw"),
        "transformed": run_etl(folder, "transformed", "transformed"),
        "again": run_etl(folder, "transformed", "again"),
    }


def manifest(dataset: Path) -> dict:
    return json.loads((dataset / "manifest.json").read_text())


def expected(train: list[dict], rows: list[dict]) -> dict[str, list]:
    """What the transform must give for `rows`, from the train split's statistics."""
    import tensorflow as tf

    prices = np.array([r["price"][0] for r in train], np.float64)
    counts = Counter(r["city"][0] for r in train)
    vocab = [c for c, _ in sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]
    return {
        "price": [(r["price"][0] - prices.mean()) / prices.std() for r in rows],
        "city": [vocab.index(r["city"][0]) if r["city"][0] in vocab else len(vocab) for r in rows],
        "tags": [
            [int(h) for h in tf.strings.to_hash_bucket_fast([t.decode() for t in r["tags"]], 8)]
            if r["tags"]
            else []
            for r in rows
        ],
        "vocab": vocab,
    }


def test_manifest_points_to_the_transform_analyzed_on_the_written_train_split(runs):
    import tensorflow as tf
    import tensorflow_transform as tft

    dataset = runs["raw"]
    m = manifest(dataset)
    section = m["transform"]
    assert {k: section[k] for k in ("path", "materialize", "analyzed_split")} == {
        "path": "transform",
        "materialize": "raw",
        "analyzed_split": "train",
    }
    assert section["analyzed_records"] == m["splits"]["train"]["records"]
    assert m["duplicates"] == len(DUPLICATES) and m["rejected"]["records"] == 1
    assert section["features"]["city"] == {"type": "int", "shape": [], "required": True}
    assert section["features"]["tags"] == {"type": "int", "shape": [None], "required": False}
    assert sorted(os.listdir(dataset)) == [
        "eval",
        "facts.json",
        "manifest.json",
        "rejected",
        "report.html",
        "schema.pbtxt",
        "statistics.json",
        "statistics.pb",
        "test",
        "train",
        "transform",
    ]
    assert sorted(os.listdir(dataset / "transform")) == [
        "metadata",
        "transform_fn",
        "transformed_metadata",
    ]
    assert not [p for p in os.listdir(dataset.parent) if p.startswith(".")]
    output = tft.TFTransformOutput(str(dataset / section["path"]))
    assert output.raw_feature_spec() == {
        "id": tf.io.FixedLenFeature([], tf.int64),
        "price": tf.io.FixedLenFeature([], tf.float32),
        "qty": tf.io.VarLenFeature(tf.int64),
        "city": tf.io.FixedLenFeature([], tf.string),
        "tags": tf.io.VarLenFeature(tf.string),
        "kind": tf.io.FixedLenFeature([], tf.string),
    }
    # The raw shards still hold raw examples under the config's names.
    train = read_split(dataset, m, "train")
    assert sorted(train[0]) == ["city", "id", "kind", "price", "qty", "tags"]
    assert max(r["price"][0] for r in train) < 1e6  # no duplicate of a key was kept


def test_the_transform_applied_to_raw_eval_shards_gives_the_train_statistics(runs):
    import tensorflow as tf
    import tensorflow_transform as tft

    dataset = runs["raw"]
    m = manifest(dataset)
    output = tft.TFTransformOutput(str(dataset / "transform"))
    train, evals = read_split(dataset, m, "train"), read_split(dataset, m, "eval")
    want = expected(train, evals)
    assert output.vocabulary_by_name("vocabulary_city") == want["vocab"]
    # As a serving model does: parse raw examples with the raw spec, apply the layer.
    parsed = tf.io.parse_example(serialized(dataset, m, "eval"), output.raw_feature_spec())
    got = output.transform_features_layer()(parsed)
    np.testing.assert_allclose(got["price"].numpy(), want["price"], rtol=1e-5, atol=1e-6)
    assert got["city"].numpy().tolist() == want["city"]
    assert tf.RaggedTensor.from_sparse(got["tags"]).to_list() == want["tags"]
    assert output.num_buckets_for_transformed_feature("tags") == 8  # a hashed list too
    qty = [r["qty"][0] if r["qty"] else 1 for r in evals]  # fill_missing: 1
    buckets = got["qty"].numpy().tolist()
    assert set(buckets) <= {0, 1, 2} and output.num_buckets_for_transformed_feature("qty") == 3
    assert [b for _, b in sorted(zip(qty, buckets))] == sorted(buckets)  # monotone in qty
    assert got["kind"].numpy().tolist() == [r["kind"][0] for r in evals]  # label passes through


def test_transformed_shards_hold_the_transformed_examples(runs):
    raw, done = runs["raw"], runs["transformed"]
    m_raw, m = manifest(raw), manifest(done)
    assert m["transform"]["materialize"] == "transformed"
    train = read_split(raw, m_raw, "train")
    for split in ("train", "eval", "test"):
        rows = read_split(raw, m_raw, split)
        shards = read_split(done, m, split)
        # The same records land in the same split; the shards hold the transform's outputs.
        assert sorted(r["id"] for r in shards) == sorted(r["id"] for r in rows)
        by_id = {r["id"][0]: r for r in shards}
        want = expected(train, rows)
        got = [by_id[r["id"][0]] for r in rows]
        np.testing.assert_allclose(
            [g["price"][0] for g in got], want["price"], rtol=1e-5, atol=1e-6
        )
        assert [g["city"][0] for g in got] == want["city"]
        assert [g["tags"] for g in got] == want["tags"]
        assert [g["kind"] for g in got] == [r["kind"] for r in rows]
        assert all(g["qty"][0] in (0, 1, 2) for g in got)
        assert all(sorted(g) == sorted(m["transform"]["features"]) for g in got)


def test_rerun_gives_identical_shards_and_transform_values(runs):
    first, again = runs["transformed"], runs["again"]
    m1, m2 = manifest(first), manifest(again)
    assert m1["splits"] == m2["splits"]  # paths, counts, sizes and sha256 of every shard
    for split in m1["splits"].values():
        for f in split["files"]:
            assert (first / f["path"]).read_bytes() == (again / f["path"]).read_bytes()
    assert m1["transform"] == m2["transform"]
    # The transform folder is identical but for the SavedModel's embedded temporary path and
    # its fingerprint's random id; the raw run's analysis is the same one.
    differ = set()
    for other in (again, runs["raw"]):
        files = sorted(
            p.relative_to(first) for p in (first / "transform").rglob("*") if p.is_file()
        )
        assert files == sorted(
            p.relative_to(other) for p in (other / "transform").rglob("*") if p.is_file()
        )
        for f in files:
            if (
                hashlib.sha256((first / f).read_bytes()).digest()
                != hashlib.sha256((other / f).read_bytes()).digest()
            ):
                differ.add(str(f))
    assert differ <= {
        "transform/transform_fn/saved_model.pb",
        "transform/transform_fn/fingerprint.pb",
    }


def test_a_config_without_transform_never_imports_tensorflow(tmp_path):
    (tmp_path / "a.csv").write_text("v\n1\n2\n")
    (tmp_path / "c.yaml").write_text(
        "name: x\nsources: [{name: a, format: csv, path: a.csv}]\n"
        "features: {v: {type: int}}\nsplits: {train: 1.0}\noutput: {path: out}\n"
    )
    code = (
        "import sys; from pipelines.etl import run; "
        f"assert run(['--config', {str(tmp_path / 'c.yaml')!r}]) == 0; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["transform"] is None


def test_a_failing_preprocessing_fn_exits_1_and_leaves_nothing_behind(tmp_path):
    write_orders(tmp_path)
    (tmp_path / "prep.py").write_text(
        "def preprocessing_fn(inputs):\n    return {'y': inputs['nope']}\n"
    )
    config = CONFIG % {"out": "out", "materialize": "raw"} + "  module: prep.py\n"
    (tmp_path / "c.yaml").write_text(config)
    result = shardflow("etl", "--config", str(tmp_path / "c.yaml"))
    assert result.returncode == 1
    line, _, details = result.stderr.strip().splitlines()[-1].partition(" (details: ")
    assert line == (
        "shardflow etl: job failed: transform.module: preprocessing_fn failed: KeyError: 'nope'"
    )
    log = details.removesuffix("; --verbose prints them)")
    assert "inputs['nope']" in Path(log).read_text()  # the module's own line, in the traceback
    assert sorted(os.listdir(tmp_path)) == ["c.yaml", "orders.jsonl", "prep.py"]
