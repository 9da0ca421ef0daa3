"""End to end through the CLI: ETL on the bundled penguins → read back independently → train →
serve raw examples; plus the exit statuses and the nothing-half-written promises.

The shards are read with TensorFlow's own TFRecord reader and `tf.train.Example`, and the
expected values are computed here from the source files with `csv` and `json`: no shardflow
reader code is involved in checking shardflow's output.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "penguins"
pytestmark = pytest.mark.slow


def shardflow(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=cwd or ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def expected_examples(extra_sources: bool = True) -> list[tuple]:
    """The examples the penguins config must produce, computed from the sources directly.

    `extra_sources=False`: for a config of the measurements and observations only.
    """
    measurements: dict[str, dict] = {}
    with open(SAMPLE / "measurements.csv", newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        for row in reader:
            if len(row) != len(header):
                continue
            rec = dict(zip(header, [None if v in ("", "NA") else v for v in row]))
            measurements.setdefault(str(int(rec["id"])), rec)
    observations: dict[str, dict] = {}
    with open(SAMPLE / "observations.jsonl") as f:
        for line in f:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            observations.setdefault(str(obj["id"]), obj)
    nests: dict[str, dict] = {}
    bands: dict[str, dict] = {}
    if extra_sources:
        import sqlite3

        import pyarrow.parquet as pq

        for row in pq.read_table(SAMPLE / "nests.parquet").to_pylist():
            nests.setdefault(str(row["id"]), row)
        with sqlite3.connect(SAMPLE / "bands.db") as db:
            for penguin_id, color, year in db.execute(
                "SELECT id, band_color, banded_year FROM bands"
            ):
                bands[str(penguin_id)] = {"band_color": color, "banded_year": year}

    out = []
    for key in set(measurements) | set(observations) | set(nests) | set(bands):
        m, o = measurements.get(key, {}), observations.get(key, {})
        n, b = nests.get(key, {}), bands.get(key, {})
        try:
            species, island, year = m.get("species"), m.get("island"), m.get("year")
            if species not in ("Adelie", "Chinstrap", "Gentoo"):
                continue
            if island not in ("Biscoe", "Dream", "Torgersen") or year is None:
                continue
            year = int(year)
            floats = []
            for name in ("bill_length_mm", "bill_depth_mm", "flipper_length_mm"):
                v = m.get(name)
                floats.append(() if v is None else (_f32(float(v)),))
                if v is not None and float(v) < 0:
                    raise ValueError(name)
            mass = int(m["body_mass_g"]) if m.get("body_mass_g") is not None else 0
            if mass < 0:
                continue
            tags = o.get("tags") or []
            if not isinstance(tags, list):
                continue
            if n.get("clutch_size") is not None and n["clutch_size"] < 0:
                continue
        except ValueError:
            continue
        text = lambda v: () if v is None else (v.encode(),)  # noqa: E731
        number = lambda v: () if v is None else (v,)  # noqa: E731
        row = (
            *floats,
            (mass,),
            (species.encode(),),
            (island.encode(),),
            text(m.get("sex")),
            (year,),
            text(o.get("observer")),
            tuple(t.encode() for t in tags),
            text(o.get("notes")),
        )
        if extra_sources:
            height = n.get("nest_height_m")
            row += (
                text(n.get("colony")),
                number(n.get("clutch_size")),
                () if height is None else (_f32(height),),
                text(b.get("band_color")),
                number(b.get("banded_year")),
            )
        out.append(row)
    return sorted(out)


FEATURES = [
    "bill_length_mm",
    "bill_depth_mm",
    "flipper_length_mm",
    "body_mass_g",
    "species",
    "island",
    "sex",
    "year",
    "observer",
    "tags",
    "notes",
    "colony",
    "clutch_size",
    "nest_height_m",
    "band_color",
    "banded_year",
]


def read_examples(
    dataset: Path, manifest: dict, features: list[str] = FEATURES
) -> tuple[list[tuple], Counter]:
    import tensorflow as tf

    rows, kinds = [], Counter()
    for split in manifest["splits"].values():
        for f in split["files"]:
            for record in tf.data.TFRecordDataset(
                str(dataset / f["path"]), compression_type="GZIP"
            ):
                example = tf.train.Example.FromString(record.numpy())
                assert sorted(example.features.feature) == sorted(features)
                row = []
                for name in features:
                    feature = example.features.feature[name]
                    kind = feature.WhichOneof("kind")
                    kinds[(name, kind)] += 1
                    row.append(tuple(getattr(feature, kind).value))
                rows.append(tuple(row))
    return sorted(rows), kinds


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("e2e") / "penguins"
    result = shardflow("etl", "--config", str(SAMPLE / "penguins.yaml"), "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert "records read" in result.stdout
    return out


def test_every_value_written_matches_the_source(dataset):
    manifest = json.loads((dataset / "manifest.json").read_text())
    rows, kinds = read_examples(dataset, manifest)
    assert rows == expected_examples()
    # Never a kind-less Feature(): missing values are empty lists of the feature's kind.
    assert {kind for (_, kind) in kinds} <= {"float_list", "int64_list", "bytes_list"}


def test_manifest_ledger_files_and_rejections(dataset):
    manifest = json.loads((dataset / "manifest.json").read_text())
    read = sum(s["records"] for s in manifest["sources"].values())
    written = sum(s["records"] for s in manifest["splits"].values())
    assert (
        read
        == written + manifest["rejected"]["records"] + manifest["duplicates"] + manifest["joined"]
    )
    assert manifest["sources"] == {
        "measurements": {"format": "csv", "records": 3000, "ignored_fields": {}},
        "observations": {"format": "jsonl", "records": 2696, "ignored_fields": {}},
        "nests": {"format": "parquet", "records": 2111, "ignored_fields": {}},
        "bands": {"format": "sql", "records": 1820, "ignored_fields": {}},
    }
    assert manifest["duplicates"] == 5 + 2
    assert manifest["rejected"]["reasons"] == {
        "bill_length_mm: not a number": 1,
        "body_mass_g: below min 0": 1,
        "clutch_size: below min 0": 2,
        "csv: expected 9 fields, got 10": 1,
        "csv: expected 9 fields, got 8": 1,
        "island: not one of the allowed values [Biscoe, Dream, Torgersen]": 1,
        "json: invalid JSON": 1,
        "species: missing required value": 2 + 3,
        "species: not one of the allowed values [Adelie, Chinstrap, Gentoo]": 1,
        "tags: expected a list": 1,
        "year: missing required value": 1,
        "year: not an integer": 1,
    }
    for split in manifest["splits"].values():
        for f in split["files"]:
            data = (dataset / f["path"]).read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (f["bytes"], f["sha256"])
    rejected = [
        json.loads(line) for line in (dataset / "rejected/rejected-00000-of-00001.jsonl").open()
    ]
    assert len(rejected) == manifest["rejected"]["records"]
    assert all(set(r) >= {"source", "location", "reason", "record"} for r in rejected)
    bad_bill = [r for r in rejected if r["reason"] == "bill_length_mm: not a number"][0]
    assert bad_bill["location"].startswith(str(SAMPLE / "measurements.csv") + ":138")
    assert "137,Adelie,Dream,abc" in bad_bill["record"]
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
    # TFDV's statistics hold the splits in the config's order, as the manifest does
    from tensorflow_metadata.proto.v0 import statistics_pb2

    proto = statistics_pb2.DatasetFeatureStatisticsList.FromString(
        (dataset / "statistics.pb").read_bytes()
    )
    assert [d.name for d in proto.datasets] == list(manifest["splits"]) == ["train", "eval", "test"]
    transform = manifest["transform"]
    assert (transform["path"], transform["materialize"]) == ("transform", "raw")
    assert transform["analyzed_records"] == manifest["splits"]["train"]["records"]
    assert not [p for p in os.listdir(dataset.parent) if ".incomplete-" in p]


def test_a_rerun_needs_overwrite_and_gives_the_same_bytes(dataset, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(dataset, out)
    (out / "train" / "stale-00000-of-00001.tfrecord.gz").write_bytes(b"old")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    result = shardflow("etl", "--config", str(SAMPLE / "penguins.yaml"), "--output", str(out))
    assert result.returncode == 2  # refused before any work: the dataset is untouched
    assert result.stderr.strip().splitlines() == [
        f"shardflow etl: error: output.path: {str(out)!r} already holds a dataset "
        "(manifest.json); give --overwrite to replace it"
    ]
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert not [p for p in os.listdir(tmp_path) if ".incomplete-" in p]
    result = shardflow(
        "etl", "--config", str(SAMPLE / "penguins.yaml"), "--output", str(out), "--overwrite"
    )
    assert result.returncode == 0, result.stderr
    assert not (out / "train" / "stale-00000-of-00001.tfrecord.gz").exists()
    # the rerun's dataset is byte for byte the first one
    first = json.loads((dataset / "manifest.json").read_text())
    second = json.loads((out / "manifest.json").read_text())
    assert first["splits"] == second["splits"]
    for split in first["splits"].values():
        for f in split["files"]:
            assert (dataset / f["path"]).read_bytes() == (out / f["path"]).read_bytes()
    assert (dataset / "statistics.json").read_bytes() == (out / "statistics.json").read_bytes()


@pytest.fixture(scope="module")
def model(dataset, tmp_path_factory) -> Path:
    """One epoch of `shardflow train` on the demo dataset: the model directory."""
    model_dir = tmp_path_factory.mktemp("demo") / "model"
    result = shardflow(
        "train", "--data", str(dataset), "--model-dir", str(model_dir), "--epochs", "1",
        "--batch-size", "64",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return model_dir


def test_train_export_and_serve_a_raw_example(dataset, model):
    import numpy as np
    import tensorflow as tf

    metrics = json.loads((model / "metrics.json").read_text())
    assert metrics["epochs"] == 1 and "eval" in metrics and metrics["examples_per_sec"] > 0

    # A raw example as a client would send it: the test split's example without its label.
    manifest = json.loads((dataset / "manifest.json").read_text())
    path = dataset / manifest["splits"]["test"]["files"][0]["path"]
    record = next(iter(tf.data.TFRecordDataset(str(path), compression_type="GZIP"))).numpy()
    example = tf.train.Example.FromString(record)
    del example.features.feature["species"]
    served = tf.saved_model.load(str(model / "export")).signatures["serving_default"]
    out = served(examples=tf.constant([example.SerializeToString()]))
    probabilities = out["probabilities"].numpy()
    assert probabilities.shape == (1, 3)
    assert np.isclose(probabilities.sum(), 1.0, atol=1e-5)
    assert out["classes"].numpy()[0] in (b"Adelie", b"Chinstrap", b"Gentoo")
    label = json.loads((model / "export/assets.extra/label.json").read_text())
    assert (label["name"], label["task"], label["classes"]) == (
        "species",
        "classification",
        CLASSES,
    )
    # the raw features the export parses, as `shardflow predict --config` checks them
    assert label["inputs"]["island"] == {"type": "string", "shape": []}
    assert "species" not in label["inputs"]


CLASSES = ["Adelie", "Chinstrap", "Gentoo"]


def test_predict_serves_a_split_with_labels_and_class_names(dataset, model):
    result = shardflow("predict", "--model-dir", str(model), "--data", str(dataset), "--take", "3")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 3
    for line in lines:  # the dataset's key (id) is not a feature: no key to show
        assert set(line) == {"label", "class", "probabilities"}
        assert line["label"] in CLASSES and list(line["probabilities"]) == CLASSES
        assert line["class"] == max(CLASSES, key=line["probabilities"].get)


NEW_RECORDS = (
    "id,species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,sex,year\n"
    "9001,,Biscoe,52.1,16.7,218,4950,male,2009\n"
    "9002,,Torgersen,38.7,19.0,185,3450,female,2008\n"
    "9003,,Dream,40,18,190,heavy,female,2008\n"  # body_mass_g: not an integer
    "9004,Gentoo,Dream,49.5,19.0,200,3800,male,2008\n"  # a label is neither needed nor used
    "9005,,Biscoe,45,15,215,5000,female,\n"  # year: missing required value
    "9006,,Dream,,,,,,2007\n"  # only the required fields
)


def test_predict_new_raw_records_with_the_config(model, tmp_path):
    import numpy as np
    import tensorflow as tf

    new = tmp_path / "new.csv"
    new.write_text(NEW_RECORDS)
    answers, rejected = tmp_path / "answers.jsonl", tmp_path / "rejected.jsonl"
    result = shardflow(
        "predict", "--model-dir", str(model), "--config", str(SAMPLE / "penguins.yaml"),
        "--input", str(new), "--output", str(answers), "--rejected", str(rejected),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        f"shardflow predict: 4 predicted, 2 rejected (in {rejected})"
    )
    lines = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [(a["key"], a["location"]) for a in lines] == [
        (key, f"{new}:{line}") for key, line in (("9001", 2), ("9002", 3), ("9004", 5), ("9006", 7))
    ]
    for a in lines:
        assert set(a) == {"key", "location", "class", "probabilities"}
        assert list(a["probabilities"]) == CLASSES
        assert abs(sum(a["probabilities"].values()) - 1) < 1e-4
        assert a["class"] == max(CLASSES, key=a["probabilities"].get)
    reasons = [json.loads(line) for line in rejected.read_text().splitlines()]
    assert [(r["location"], r["reason"]) for r in reasons] == [
        (f"{new}:4", "body_mass_g: not an integer"),
        (f"{new}:6", "year: missing required value"),
    ]
    assert reasons[0]["record"] == "9003,,Dream,40,18,190,heavy,female,2008\n"

    # The answers are the export's for the records as a client would build them by hand.
    def example(island, bill, depth, flipper, mass, sex, year):
        f = tf.train.Feature
        features = {
            "island": f(bytes_list=tf.train.BytesList(value=[island.encode()])),
            "bill_length_mm": f(float_list=tf.train.FloatList(value=[bill])),
            "bill_depth_mm": f(float_list=tf.train.FloatList(value=[depth])),
            "flipper_length_mm": f(float_list=tf.train.FloatList(value=[flipper])),
            "body_mass_g": f(int64_list=tf.train.Int64List(value=[mass])),
            "sex": f(bytes_list=tf.train.BytesList(value=[sex.encode()])),
            "year": f(int64_list=tf.train.Int64List(value=[year])),
        }
        return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()

    by_hand = [
        example("Biscoe", 52.1, 16.7, 218, 4950, "male", 2009),
        example("Torgersen", 38.7, 19.0, 185, 3450, "female", 2008),
        example("Dream", 49.5, 19.0, 200, 3800, "male", 2008),
    ]
    served = tf.saved_model.load(str(model / "export")).signatures["serving_default"]
    expected = served(examples=tf.constant(by_hand))["probabilities"].numpy()
    got = np.array([list(a["probabilities"].values()) for a in lines[:3]])
    np.testing.assert_allclose(got, expected, atol=2e-6)


def test_predict_without_output_flags_prints_answers_and_rejections(model, tmp_path):
    new = tmp_path / "new.jsonl"  # .jsonl: read as the config's JSON Lines source
    new.write_text(
        '{"id": 7001, "island": "Dream", "year": 2008, "bill_length_mm": 40.1, "tags": ["a"]}\n'
        '{"id": 7002, "island": "Dream", "year": 2008, "tags": 5}\n'
    )
    result = shardflow(
        "predict", "--model-dir", str(model), "--config", str(SAMPLE / "penguins.yaml"),
        "--input", str(new),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (answer,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert (answer["key"], answer["location"]) == ("7001", f"{new}:1")
    assert result.stderr.splitlines()[-2:] == [
        f"shardflow predict: rejected {new}:2: tags: expected a list",
        "shardflow predict: 1 predicted, 1 rejected",
    ]


def test_predict_takes_a_config_without_an_output_path(model, tmp_path, capsys):
    """predict writes no dataset: a config without output.path is enough to read --input."""
    import yaml

    from deploy.predict import main as predict

    raw = yaml.safe_load((SAMPLE / "penguins.yaml").read_text())
    raw.pop("output")
    config = tmp_path / "penguins.yaml"
    config.write_text(yaml.safe_dump(raw))
    new = tmp_path / "new.jsonl"
    new.write_text('{"id": 7001, "island": "Dream", "year": 2008, "bill_length_mm": 40.1}\n')
    argv = ["--model-dir", str(model), "--config", str(config), "--input", str(new)]
    assert predict(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["key"] == "7001"
    assert err.splitlines()[-1] == "shardflow predict: 1 predicted, 0 rejected"


def test_predict_with_the_config_of_another_model_names_the_features_that_differ(model, tmp_path):
    new = tmp_path / "other.csv"
    new.write_text("id,island,year,bill_length_mm\n1,Dream,2008.5,40.1\n")
    other = tmp_path / "other.yaml"
    other.write_text(
        "name: other\nsources: [{name: s, format: csv, path: other.csv}]\nkey: id\n"
        "features:\n  island: {type: string}\n  year: {type: float}\n"
        "  bill_length_mm: {type: float}\noutput: {path: out}\n"
    )
    result = shardflow(
        "predict", "--model-dir", str(model), "--config", str(other), "--input", str(new)
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"shardflow predict: --config {other} does not describe the records the model in "
        f"{model} was trained on: 'year' is float there, int in the model; it lacks "
        "'band_color', 'banded_year', 'bill_depth_mm', 'body_mass_g', 'clutch_size' and 7 more"
    ]


def test_predict_with_every_record_rejected_exits_1(model, tmp_path):
    new = tmp_path / "new.jsonl"
    new.write_text('{"id": 7002, "island": "Dream", "year": 2008, "tags": 5}\n')
    result = shardflow(
        "predict", "--model-dir", str(model), "--config", str(SAMPLE / "penguins.yaml"),
        "--input", str(new),
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines()[-3:] == [
        f"shardflow predict: rejected {new}:1: tags: expected a list",
        "shardflow predict: 0 predicted, 1 rejected",
        "shardflow predict: every record was rejected: none could be served (the reasons above; "
        "new records are read and checked as the config's source reads them)",
    ]


def test_bad_config_exits_2_with_one_line_naming_the_field(tmp_path):
    cfg = (
        (SAMPLE / "penguins.yaml")
        .read_text()
        .replace("year:              {type: int}", "year:              {type: integer}")
    )
    (tmp_path / "bad.yaml").write_text(cfg)
    result = shardflow("etl", "--config", str(tmp_path / "bad.yaml"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "shardflow etl: error: features.year.type: unknown type 'integer' "
        "(int, float, string, bytes, image); did you mean 'int'?"
    ]


def one_csv_config(folder: Path, csv_path: str) -> str:
    """A config of one CSV source with one int feature `v`; returns its path."""
    path = folder / "c.yaml"
    path.write_text(
        f"name: x\nsources: [{{name: a, format: csv, path: '{csv_path}'}}]\n"
        "features: {v: {type: int}}\noutput: {path: out}\n"
    )
    return str(path)


def test_no_matching_files_exits_2(tmp_path):
    result = shardflow("etl", "--config", one_csv_config(tmp_path, "nothing/*.csv"))
    assert result.returncode == 2
    assert "sources[0].path: no files match" in result.stderr


def test_a_failed_job_exits_1_and_leaves_nothing_behind(tmp_path):
    (tmp_path / "a.csv").write_text("v,v\n1,2\n")  # duplicate header: the file is unusable
    result = shardflow("etl", "--config", one_csv_config(tmp_path, "a.csv"))
    assert result.returncode == 1
    assert "duplicate column names" in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["a.csv", "c.yaml"]


def test_an_output_that_is_not_a_dataset_is_never_replaced(tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("do not delete")
    result = shardflow("etl", "--config", str(SAMPLE / "penguins.yaml"), "--output", str(out))
    assert result.returncode == 2
    assert "output.path" in result.stderr
    assert os.listdir(out) == ["thesis.tex"]


def test_trainer_never_imports_beam():
    code = (
        "import trainer.task, trainer.predict, trainer.inspect, sys; "
        "assert 'apache_beam' not in sys.modules"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
