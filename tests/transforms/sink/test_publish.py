"""Atomic publication: local folders and gs:// (on the GCS emulator), called directly.

The end-to-end runs are in tests/e2e/test_demo.py (local) and tests/e2e/test_gcs.py (gs://); here
the publish steps are checked one by one on staged files written by the test.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from apache_beam.io.filesystems import FileSystems

from transforms.contract.layout import MANIFEST
from transforms.sink.output import PUBLISHING, Expected, OutputError, check_output, expect
from transforms.sink.publish import exchange, publish
from transforms.sink.storage import discard, staging_path

BUCKET = "shardflow-test"
# The least a manifest.json holds to make its folder a dataset that may be replaced.
DATASET = {
    "format_version": 1,
    "name": "ds",
    "features": {"v": {"type": "int"}},
    "sources": {},
    "splits": {},
}
DATASET_BYTES = json.dumps(DATASET).encode()


def write(path: str, data: bytes) -> None:
    with FileSystems.create(path) as f:
        f.write(data)


def stage(staging: str, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        write(f"{staging}/{name}", data)


@pytest.fixture
def bucket(gcs_emulator, request):
    """A fresh folder of the emulator's bucket for one test: (gs:// URI, object lister)."""
    client = gcs_emulator.client()
    prefix = f"publish/{request.node.name}"

    def names() -> dict[str, int]:
        """Object name (relative to the test's folder) → generation."""
        return {
            b.name[len(prefix) + 1 :]: b.generation
            for b in client.list_blobs(BUCKET, prefix=prefix + "/")
        }

    return f"gs://{BUCKET}/{prefix}", names


def test_staging_path_is_a_hidden_sibling():
    assert staging_path("gs://b/data/penguins", "r1") == "gs://b/data/.penguins.incomplete-r1"
    assert staging_path("/data/penguins/", "r1") == "/data/.penguins.incomplete-r1"


def test_remote_publish_replaces_the_old_dataset_and_writes_the_manifest_last(bucket):
    root, names = bucket
    output, staging = f"{root}/ds", staging_path(f"{root}/ds", "new")
    stage(
        output,
        {
            MANIFEST: DATASET_BYTES,
            "train/train-00000-of-00002.tfrecord": b"old0",
            "train/train-00001-of-00002.tfrecord": b"old1",
        },
    )
    stage(staging, {"train/train-00000-of-00001.tfrecord": b"new0", "rejected/r.jsonl": b""})

    publish(staging, output, {"name": "ds"}, expect(output, overwrite=True))

    after = names()
    assert sorted(after) == [
        f"ds/{MANIFEST}",
        "ds/rejected/r.jsonl",
        "ds/train/train-00000-of-00001.tfrecord",
    ]
    assert all(g < after[f"ds/{MANIFEST}"] for g in after.values() if g != after[f"ds/{MANIFEST}"])
    with FileSystems.open(f"{output}/{MANIFEST}") as f:
        assert json.loads(f.read()) == {"name": "ds"}
    with FileSystems.open(f"{output}/train/train-00000-of-00001.tfrecord") as f:
        assert f.read() == b"new0"


def test_remote_publish_into_a_new_output(bucket):
    root, names = bucket
    output, staging = f"{root}/fresh", staging_path(f"{root}/fresh", "r")
    stage(staging, {"eval/eval-00000-of-00001.tfrecord": b"e"})
    publish(staging, output, {"name": "fresh"}, expect(output, overwrite=False))
    assert sorted(names()) == ["fresh/eval/eval-00000-of-00001.tfrecord", f"fresh/{MANIFEST}"]


def test_remote_publish_takes_over_an_output_left_by_a_killed_publication(bucket):
    root, names = bucket
    output, staging = f"{root}/ds", staging_path(f"{root}/ds", "next")
    # killed after deleting the old manifest and copying part of the new dataset
    stage(output, {PUBLISHING: b"gs://.../.ds.incomplete-killed", "train/part.tfrecord": b"p"})
    check_output(output)  # no manifest, but the marker says the objects are ours
    stage(staging, {"train/train-00000-of-00001.tfrecord": b"new"})
    publish(staging, output, {"name": "ds"}, expect(output, overwrite=False))
    assert sorted(names()) == [f"ds/{MANIFEST}", "ds/train/train-00000-of-00001.tfrecord"]


def test_remote_check_output_refuses_foreign_objects_at_any_depth_and_bucket_roots(bucket):
    root, _ = bucket
    check_output(f"{root}/nothing-here")  # an empty prefix is a fine output
    write(f"{root}/foreign/deep/notes.txt", b"keep")
    with pytest.raises(OutputError, match="holds files but no manifest.json"):
        check_output(f"{root}/foreign")
    with pytest.raises(OutputError, match="holds files but no manifest.json"):
        publish(staging_path(f"{root}/foreign", "r"), f"{root}/foreign", {}, Expected())
    write(f"{root}/dataset/{MANIFEST}", DATASET_BYTES)
    write(f"{root}/dataset/train/x.tfrecord", b"")
    check_output(f"{root}/dataset")
    for root_uri in (f"gs://{BUCKET}", f"gs://{BUCKET}/"):
        with pytest.raises(OutputError, match="bucket root"):
            check_output(root_uri)


def test_discard_deletes_every_remote_staging_object(bucket):
    root, names = bucket
    staging = staging_path(f"{root}/ds", "failed")
    stage(staging, {"train/a.tfrecord": b"a", "rejected/r.jsonl": b"r"})
    write(f"{root}/ds/{MANIFEST}", b"{}")
    discard(staging)
    assert sorted(names()) == [f"ds/{MANIFEST}"]
    discard(staging)  # nothing left: still fine


def test_local_publish_replaces_the_old_dataset(tmp_path):
    output = str(tmp_path / "ds")
    stage(output, {MANIFEST: DATASET_BYTES, "train/old.tfrecord": b"old"})
    staging = staging_path(output, "r")
    stage(staging, {"train/new.tfrecord": b"new"})
    publish(staging, output, {"name": "ds"}, expect(output, overwrite=True))
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert files == [f"ds/{MANIFEST}", "ds/train/new.tfrecord"]
    assert json.loads((tmp_path / "ds" / MANIFEST).read_text()) == {"name": "ds"}


def test_exchange_swaps_two_folders(tmp_path):
    stage(str(tmp_path / "a"), {"x": b"a"})
    stage(str(tmp_path / "b"), {"y": b"b"})
    if not exchange(str(tmp_path / "a"), str(tmp_path / "b")):
        pytest.skip("no renameat2(RENAME_EXCHANGE) here")
    assert (tmp_path / "a" / "y").read_bytes() == b"b"
    assert (tmp_path / "b" / "x").read_bytes() == b"a"


_WATCH = """
import json, os, sys
manifest, stop = sys.argv[1], sys.argv[2]
seen, missing = set(), 0
while not os.path.exists(stop):
    try:
        with open(manifest) as f:
            seen.add(json.load(f)["run"])
    except FileNotFoundError:
        missing += 1
print(json.dumps({"seen": len(seen), "missing": missing}))
"""


def test_local_replacement_never_leaves_output_without_a_dataset(tmp_path):
    """Another process reads OUTPUT's manifest in a loop while the dataset is replaced 150 times:
    it always finds one, complete (the old or the new)."""
    output = str(tmp_path / "ds")
    stage(output, {MANIFEST: json.dumps({**DATASET, "run": -1}).encode(), "train/a.tfrecord": b"0"})
    if not exchange(output, output):
        pytest.skip("no renameat2(RENAME_EXCHANGE) here")
    stop = tmp_path / "stop"
    watcher = subprocess.Popen(
        [sys.executable, "-c", _WATCH, f"{output}/{MANIFEST}", str(stop)], stdout=subprocess.PIPE
    )
    try:
        for run in range(150):
            staging = staging_path(output, f"r{run}")
            stage(staging, {f"train/{i}.tfrecord": bytes([i]) for i in range(5)})
            publish(staging, output, {**DATASET, "run": run}, expect(output, overwrite=True))
    finally:
        stop.touch()
        report = json.loads(watcher.communicate(timeout=30)[0])
    assert report["missing"] == 0
    assert report["seen"] > 1  # it did watch replacements happen
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "stop"]


def test_local_check_output_and_discard(tmp_path):
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match="without manifest.json"):
        check_output(str(tmp_path / "foreign"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        check_output(str(tmp_path / "file"))
    staging = staging_path(str(tmp_path / "ds"), "failed")
    stage(staging, {"train/a.tfrecord": b"a"})
    discard(staging)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "foreign"]


def _manifest(transform):
    from pipelines.config.loader import parse_config
    from transforms.records import ShardFile
    from transforms.sink.manifest import build_manifest
    from transforms.sink.rejected import RejectedFiles

    dataset = parse_config(
        {
            "name": "t",
            "sources": [{"name": "a", "format": "csv", "path": "a.csv"}],
            "features": {"v": {"type": "float"}},
            "transform": {"features": {"v": "z_score"}},
            "output": {"path": "out"},
        },
        base_dir="/cfg",
    )
    shards = [
        ShardFile("train", "train/train-00000-of-00001.tfrecord.gz", 3, 0, 1, "x"),
        ShardFile("eval", "eval/eval-00000-of-00001.tfrecord.gz", 1, 0, 1, "y"),
    ]
    entry = {"path": "rejected/r.jsonl", "records": 0, "bytes": 0, "sha256": "z"}
    rejected = RejectedFiles((entry,), {})
    return build_manifest(dataset, shards, rejected, {"read/a": 4}, transform)


def test_manifest_transform_section_and_its_train_count_invariant():
    section = {
        "path": "transform",
        "materialize": "raw",
        "analyzed_split": "train",
        "analyzed_records": 3,
        "features": {},
    }
    assert _manifest(section).to_dict()["transform"] == section
    assert _manifest(None).to_dict()["transform"] is None
    with pytest.raises(RuntimeError, match="analyzed 2 records, but the train split holds 3"):
        _manifest({**section, "analyzed_records": 2})
