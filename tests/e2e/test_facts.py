"""End to end for the dataset's facts: one ETL of a generated CSV (a 5,000-value string, a
number, a 0/1 label, half of its rows repeated, no key), then

- facts.json as the manifest lists it, its vocabulary equal to a count of the train shards'
  records read back with TensorFlow, and the repeated rows counted from the CSV itself;
- splits without a key by identity: the copies of a row land in different splits, and the same
  files read from another folder, or by two worker processes, give the same bytes;
- the same record gets the same ids and normalized values through the Keras input pipeline,
  torch_loader and jax_batches (a child process), and no train value an unknown id;
- `train` warns that a 0/1 int label is trained as a regression.
"""

from __future__ import annotations

import collections
import csv
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.trainer.datasets import run_python
from tests.trainer.readers.conftest import run_code
from trainer.dataset.manifest import load_manifest
from trainer.keras.inputs import Inputs

pytestmark = pytest.mark.slow
ROWS = 12_000
CODES = 5_000


def _rows() -> list[dict]:
    rng = np.random.default_rng(3)
    unique = [
        {
            "code": f"k{i % CODES:05d}",
            "x": f"{rng.normal(10, 3):.4f}",
            "y": str(int(i % CODES < 2_000)),
        }
        for i in range(ROWS // 2)
    ]
    copies = [dict(unique[int(i)]) for i in rng.integers(0, 50, ROWS // 2)]  # 50 rows, repeated
    return unique + copies


CONFIG = """\
name: repeated
sources:
  - {name: rows, format: csv, path: data/rows.csv}
features:
  code: {type: string}
  x: {type: float}
  y: {type: int}
label: y
splits: {train: 0.8, eval: 0.2}
output: {path: out}
"""


def _etl(base: Path, out: Path, *flags: str) -> dict:
    proc = run_python(
        "-m", "pipelines.etl", "--config", str(base / "c.yaml"), "--output", str(out), *flags,
        timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (out.parent / f"{out.name}.etl.out").write_text(proc.stdout)
    return json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    base = tmp_path_factory.mktemp("facts")
    (base / "data").mkdir()
    rows = _rows()
    with open(base / "data" / "rows.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["code", "x", "y"])
        writer.writeheader()
        writer.writerows(rows)
    (base / "c.yaml").write_text(CONFIG)
    manifest = _etl(base, base / "out")
    return base, rows, manifest


def _records(root: Path, split: str) -> list[tf.train.Example]:
    files = sorted(str(p) for p in (root / split).glob("*.tfrecord.gz"))
    return [
        tf.train.Example.FromString(r.numpy())
        for r in tf.data.TFRecordDataset(files, compression_type="GZIP")
    ]


def test_the_manifest_lists_facts_json_with_its_sha256(made):
    base, _, manifest = made
    data = (base / "out" / "facts.json").read_bytes()
    assert manifest["facts"] == {
        "path": "facts.json",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def test_the_vocabulary_is_an_exact_count_of_the_train_records(made):
    base, _, _ = made
    facts = json.loads((base / "out" / "facts.json").read_text())
    code = facts["splits"]["train"]["features"]["code"]
    counted = collections.Counter(
        e.features.feature["code"].bytes_list.value[0].decode()
        for e in _records(base / "out", "train")
    )
    ranked = sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))
    assert list(zip(code["vocabulary"], code["counts"])) == ranked
    assert code["distinct"] == len(counted) and code["outside"] == 0
    assert facts["label"]["suggested"] == "classification"


def test_repeated_rows_are_counted_and_spread_over_the_splits(made):
    base, rows, manifest = made
    facts = json.loads((base / "out" / "facts.json").read_text())
    seen = collections.Counter((r["code"], r["x"], r["y"]) for r in rows)
    assert facts["rows"]["records"] == ROWS
    assert facts["rows"]["repeated"] == ROWS - len(seen)
    assert facts["rows"]["repeated_rows"] == sum(1 for c in seen.values() if c > 1)
    assert facts["rows"]["conflicting"] == 0
    # by identity, a row's copies fall in train and eval as any other records do
    assert facts["rows"]["across_splits"] > 0
    eval_rows = {
        tuple(e.features.feature["code"].bytes_list.value) for e in _records(base / "out", "eval")
    }
    most = max(seen, key=lambda r: seen[r])
    assert (most[0].encode(),) in eval_rows
    assert 0.15 < manifest["splits"]["eval"]["records"] / ROWS < 0.25
    # the run's summary and report say so, and suggest a key
    said = (base / "out.etl.out").read_text()
    assert f"{'repeated':<10} {ROWS - len(seen):>9} records repeat another's" in said
    assert "give the config a `key`" in said
    report = (base / "out" / "report.html").read_text()
    assert f'id="repeated-rows" data-value="{ROWS - len(seen)}"' in report


def test_the_same_files_elsewhere_and_two_workers_give_the_same_bytes(made, tmp_path):
    base, _, manifest = made
    moved = tmp_path / "moved"
    shutil.copytree(base / "data", moved / "data")
    shutil.copy(base / "c.yaml", moved / "c.yaml")
    again = _etl(moved, tmp_path / "out", "--direct_num_workers=2",
                 "--direct_running_mode=multi_processing")  # fmt: skip
    assert again["splits"] == manifest["splits"] and again["facts"] == manifest["facts"]


def test_keras_torch_and_jax_give_a_record_the_same_ids_and_normalized_values(made, tmp_path):
    base, _, _ = made
    root = str(base / "out")
    inputs = Inputs.of(load_manifest(root), include=("code",))
    (code,) = [i for i in inputs.recipe.inputs if i.name == "code"]
    (x,) = [i for i in inputs.recipe.inputs if i.name == "x"]
    ds = inputs.dataset("train", 256, shuffle=False, deterministic=True, cycle_length=1)
    keras_ids, keras_x = [], []
    for features, _ in ds:
        keras_ids += features["code"].numpy().reshape(-1).tolist()
        moments = x.moments
        keras_x += (
            (features["x"].numpy().reshape(-1) - moments.mean) / np.sqrt(moments.variance)
        ).tolist()
    out = tmp_path / "readers.json"
    run_code(
        """
        import json, sys
        import numpy as np
        from trainer.readers import dataset_facts, jax_batches, torch_loader
        root, out = sys.argv[1:]
        facts = dataset_facts(root)
        mean, std = facts.moments("x")
        got = {}
        loader = torch_loader(root, "train", 256, shuffle=False, deterministic=True)
        got["torch"] = [b["code"].tolist() for b in loader]
        got["torch_x"] = [((b["x"].numpy() - mean) / std).tolist() for b in loader]
        batches = jax_batches(root, "train", 256, shuffle=False, deterministic=True)
        got["jax"] = [np.asarray(b["code"]).tolist() for b in batches]
        got["vocabulary"] = len(facts.vocabulary("code"))
        json.dump(got, open(out, "w"))
        """,
        root,
        str(out),
    )
    got = json.loads(out.read_text())
    flat = [i for b in got["torch"] for i in b]
    assert flat == keras_ids == [i for b in got["jax"] for i in b]
    assert 0 not in flat and len(set(flat)) > 4_000  # every value known, none cut
    assert got["vocabulary"] == code.vocabulary_size - 1 == len(code.vocabulary)
    assert np.allclose([v for b in got["torch_x"] for v in b], keras_x, rtol=1e-5, atol=1e-5)


def test_train_warns_that_a_0_1_int_label_is_trained_as_a_regression(made, tmp_path):
    base, _, _ = made
    proc = run_python(
        "-m", "trainer.task", "--data", str(base / "out"), "--model-dir", str(tmp_path / "m"),
        "--epochs", "1", timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "label 'y' is an int with 2 distinct train values" in proc.stderr
    assert "values: [0, 1]" in proc.stderr
    assert "repeat another" in proc.stdout + proc.stderr
