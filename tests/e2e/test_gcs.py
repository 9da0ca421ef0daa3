"""End to end on gs://: sources read from and a dataset published to a GCS emulator on 127.0.0.1.

`shardflow etl` runs as a subprocess (the emulator settings reach it through the environment),
reads a gzip-compressed CSV and a JSON Lines file from `gs://BUCKET/in/` (a union keyed on `id`,
with bad records and a duplicate), and publishes to `gs://BUCKET/out/people` in several shards.
The objects are downloaded with google-cloud-storage and the shards read with TensorFlow's own
TFRecord reader; the expected values come from the Python rows the inputs are written from.

Object generations (GCS's per-write version numbers, increasing in time) show the order in which
objects were written: the manifest must be newer than every other object of its dataset.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests import readback

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "shardflow-test"
OUTPUT = f"gs://{BUCKET}/out/people"
PREFIX = "out/people/"
CSV_URI = f"gs://{BUCKET}/in/people.csv.gz"
JSONL_URI = f"gs://{BUCKET}/in/more.jsonl"

# id, name, score (None: missing), tags
CSV_ROWS = [
    (
        i,
        f'person {i}, "quoted"' if i % 7 == 0 else f"person {i}",
        None if i % 5 == 0 else i / 8,
        [f"t{j}" for j in range(i % 3)],
    )
    for i in range(1, 151)
]
JSON_ROWS = [
    {"id": 1000 + i, "name": f"json {i}", "score": i * 1.5, "tags": ["x", f"y{i}"]}
    for i in range(40)
]
CONFIG = f"""
name: people
sources:
  - {{name: table, format: csv, path: "{CSV_URI}"}}
  - {{name: more, format: jsonl, path: "gs://{BUCKET}/in/*.jsonl"}}
key: id
features:
  id:    {{type: int}}
  name:  {{type: string}}
  score: {{type: float, required: false, default: -1.0}}
  tags:  {{type: string, shape: [null], required: false}}
splits: {{train: 0.7, eval: 0.3}}
output: {{path: "{OUTPUT}", shard_size_mb: 0.002}}
"""


def csv_bytes() -> bytes:
    """The CSV input: CSV_ROWS, then a bad id (line 152) and a short row (line 153)."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["id", "name", "score", "tags"])
    for i, name, score, tags in CSV_ROWS:
        writer.writerow([i, name, "" if score is None else repr(score), "|".join(tags)])
    writer.writerow(["x9", "bad id", "1.0", ""])
    writer.writerow(["151", "short"])
    return gzip.compress(text.getvalue().encode(), mtime=0)


def jsonl_bytes() -> bytes:
    """The JSONL input: JSON_ROWS, a duplicate of CSV id 3 (line 41), a broken line (line 42)."""
    lines = [json.dumps(row) for row in JSON_ROWS]
    lines += [json.dumps({"id": 3, "name": "duplicate of the CSV's 3"}), '{"id": 77, "name":']
    return ("\n".join(lines) + "\n").encode()


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def expected_examples() -> list[tuple]:
    """(id, name, score, tags) of every example, as TensorFlow reads them back."""
    rows = [
        (i, n.encode(), _f32(-1.0 if s is None else s), tuple(t.encode() for t in tags))
        for i, n, s, tags in CSV_ROWS
    ]
    rows += [
        (r["id"], r["name"].encode(), _f32(r["score"]), tuple(t.encode() for t in r["tags"]))
        for r in JSON_ROWS
    ]
    return sorted(rows)


def read_examples(folder: Path, manifest: dict) -> list[tuple]:
    rows = []
    for feature in readback.features(folder, manifest):
        assert sorted(feature) == ["id", "name", "score", "tags"]
        (i,) = feature["id"].int64_list.value
        (name,) = feature["name"].bytes_list.value
        (score,) = feature["score"].float_list.value
        assert feature["tags"].WhichOneof("kind") == "bytes_list"
        rows.append((i, name, score, tuple(feature["tags"].bytes_list.value)))
    return sorted(rows)


def shardflow(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=ROOT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True,
        text=True,
        timeout=600,
    )


def gcs_config(folder: Path, csv_uri: str = CSV_URI) -> str:
    """The dataset config, with the CSV source at `csv_uri`; returns its path."""
    path = folder / "people.yaml"
    path.write_text(CONFIG.replace(CSV_URI, csv_uri))
    return str(path)


def objects(client, prefix: str = "") -> dict[str, int]:
    """Object name → generation, for every object of the bucket under `prefix`."""
    return {b.name: b.generation for b in client.list_blobs(BUCKET, prefix=prefix)}


def download(client, prefix: str, folder: Path) -> dict[str, bytes]:
    """Downloads every object under `prefix` into `folder`; returns relative path → bytes."""
    out = {}
    for blob in client.list_blobs(BUCKET, prefix=prefix):
        rel = blob.name[len(prefix) :]
        data = blob.download_as_bytes()
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
        out[rel] = data
    return out


def without_created(manifest_bytes: bytes) -> dict:
    manifest = json.loads(manifest_bytes)
    manifest.pop("created")
    return manifest


@pytest.fixture(scope="module")
def client(gcs_emulator):
    client = gcs_emulator.client()
    bucket = client.bucket(BUCKET)
    bucket.blob("in/people.csv.gz").upload_from_string(csv_bytes())
    bucket.blob("in/more.jsonl").upload_from_string(jsonl_bytes())
    return client


@pytest.fixture(scope="module")
def published(client, tmp_path_factory):
    """The first run's dataset: (local copy, relative path → bytes, object → generation)."""
    folder = tmp_path_factory.mktemp("gcs")
    result = shardflow("etl", "--config", gcs_config(folder))
    assert result.returncode == 0, result.stderr
    assert f"dataset: {OUTPUT}" in result.stdout
    local = folder / "people"
    local.mkdir()
    return local, download(client, PREFIX, local), objects(client, PREFIX)


def test_every_value_read_from_and_written_to_gcs_matches_the_source(published):
    local, _, _ = published
    manifest = json.loads((local / "manifest.json").read_text())
    assert read_examples(local, manifest) == expected_examples()


def test_manifest_on_gcs_lists_every_object_with_its_checksum(published):
    _, files, _ = published
    manifest = json.loads(files["manifest.json"])
    listed = [f for split in manifest["splits"].values() for f in split["files"]]
    assert len(listed) > 2  # several shards: the publish copies many objects
    listed += manifest["rejected"]["files"] + [manifest["statistics"], manifest["facts"]]
    listed += [manifest["validation"]["schema"], manifest["validation"]["statistics"]]
    unlisted = {"manifest.json", "report.html"}  # the report is written after publication
    assert sorted(f["path"] for f in listed) == sorted(set(files) - unlisted)
    for f in listed:
        data = files[f["path"]]
        assert (len(data), hashlib.sha256(data).hexdigest()) == (f["bytes"], f["sha256"])
    assert manifest["sources"] == {
        "table": {"format": "csv", "records": 152, "ignored_fields": {}},
        "more": {"format": "jsonl", "records": 42, "ignored_fields": {}},
    }
    assert sum(s["records"] for s in manifest["splits"].values()) == 190
    assert (manifest["rejected"]["records"], manifest["duplicates"]) == (3, 1)
    rejected = [
        json.loads(line) for line in files["rejected/rejected-00000-of-00001.jsonl"].splitlines()
    ]
    assert [(r["location"], r["reason"]) for r in rejected] == [
        (f"{JSONL_URI}:42", "json: invalid JSON"),
        (f"{CSV_URI}:152", "id: not an integer"),
        (f"{CSV_URI}:153", "csv: expected 4 fields, got 2"),
    ]
    assert manifest["rejected"]["reasons"] == {
        "csv: expected 4 fields, got 2": 1,
        "id: not an integer": 1,
        "json: invalid JSON": 1,
    }


def test_publish_writes_the_manifest_last_and_leaves_no_staging_objects(client, published):
    _, _, generations = published
    manifest = generations[PREFIX + "manifest.json"]
    last = {PREFIX + "manifest.json", PREFIX + "report.html"}  # the report follows publication
    assert all(g < manifest for name, g in generations.items() if name not in last)
    assert generations[PREFIX + "report.html"] > manifest
    assert sorted(objects(client, "out/")) == sorted(objects(client, PREFIX))


def test_rerun_replaces_the_dataset_with_identical_bytes_and_no_stale_objects(
    client, published, tmp_path
):
    _, first, first_generations = published
    stale = PREFIX + "train/train-00000-of-00099.tfrecord.gz"  # as if from a larger dataset
    client.bucket(BUCKET).blob(stale).upload_from_string(b"old")
    before = objects(client, "out/")

    result = shardflow("etl", "--config", gcs_config(tmp_path))
    assert result.returncode == 2  # a complete dataset is there: refused before any work
    assert "already holds a dataset (manifest.json); give --overwrite" in result.stderr
    assert objects(client, "out/") == before
    result = shardflow("etl", "--config", gcs_config(tmp_path), "--overwrite")
    assert result.returncode == 0, result.stderr
    again = download(client, PREFIX, tmp_path / "again")
    assert sorted(again) == sorted(first)  # the stale shard is gone
    for name in first:
        if name not in ("manifest.json", "report.html"):  # the report holds the run's times
            assert again[name] == first[name], name
    assert without_created(again["manifest.json"]) == without_created(first["manifest.json"])
    generations = objects(client, PREFIX)
    assert min(generations.values()) > max(first_generations.values())  # all written anew
    dataset = {n: g for n, g in generations.items() if n != PREFIX + "report.html"}
    assert max(dataset, key=dataset.get) == PREFIX + "manifest.json"
    assert sorted(objects(client, "out/")) == sorted(generations)


def test_failed_run_leaves_the_previous_dataset_intact(client, published, tmp_path):
    before = objects(client, PREFIX)
    assert PREFIX + "manifest.json" in before
    # A header with a duplicate column name fails the job while reading.
    client.bucket(BUCKET).blob("bad/people.csv").upload_from_string(b"id,id,species\n1,2,Adelie\n")
    result = shardflow(
        "etl", "--config", gcs_config(tmp_path, f"gs://{BUCKET}/bad/people.csv"), "--overwrite"
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "job failed" in result.stderr and "duplicate column names" in result.stderr
    assert objects(client, PREFIX) == before
    assert sorted(objects(client, "out/")) == sorted(before)  # the staging objects are gone


def test_an_output_holding_foreign_objects_is_never_replaced(client, tmp_path):
    client.bucket(BUCKET).blob("foreign/deep/notes.txt").upload_from_string(b"keep me")
    foreign = f"gs://{BUCKET}/foreign"
    result = shardflow("etl", "--config", gcs_config(tmp_path), "--output", foreign)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"shardflow etl: error: output.path: 'gs://{BUCKET}/foreign' holds files but no "
        "manifest.json; refusing to replace it"
    ]
    assert sorted(objects(client, "foreign/")) == ["foreign/deep/notes.txt"]
