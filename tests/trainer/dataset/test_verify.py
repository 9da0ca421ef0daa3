"""The shards checked against the manifest before a run reads them (trainer/dataset/verify.py):
replaced, rewritten or hand-edited shards refused naming them, sizes alone with --no-verify."""

from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf

from tests.trainer.datasets import make_rows, write_dataset
from trainer.dataset.manifest import ManifestError, load_manifest
from trainer.dataset.verify import verify_shards


def test_a_shard_of_the_same_size_is_compared_by_its_sha256_unless_told_not_to(tmp_path):
    written = write_dataset(tmp_path / "d", make_rows(300), compression="none")
    shard = written.root / "train/train-00000-of-00002.tfrecord"
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
    with tf.io.TFRecordWriter(str(shard)) as writer:  # the same records in reverse: same size
        for record in reversed(records):
            writer.write(record)
    m = load_manifest(str(written.root))
    with pytest.raises(ManifestError, match="sha256 differs"):
        verify_shards(m)
    verify_shards(m, hashes=False)  # --no-verify: the size alone matches


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_a_hand_edited_record_count_is_refused_before_a_step(tmp_path, compression):
    """A split's count that is not its shards' sum, and a shard's count that is not the frames it
    holds (counted while hashing), are both refused: steps per epoch come from them."""
    written = write_dataset(tmp_path / "d", make_rows(300), compression=compression)
    path = written.root / "manifest.json"
    raw = json.loads(path.read_text())
    train = raw["splits"]["train"]
    verify_shards(load_manifest(str(written.root)))  # as written: no complaint
    train["records"] = 10**9
    path.write_text(json.dumps(raw))
    with pytest.raises(ManifestError) as e:
        verify_shards(load_manifest(str(written.root)))
    assert str(e.value) == (
        f"{written.root}: split 'train' lists 1,000,000,000 records but its shards 240: the "
        "manifest was edited after the ETL wrote it; rerun the ETL"
    )
    held = train["files"][0]["records"]
    train["files"][0]["records"] = 10**9 - sum(f["records"] for f in train["files"][1:])
    path.write_text(json.dumps(raw))
    with pytest.raises(ManifestError, match=rf"holds {held} records .* \(record count differs\)"):
        verify_shards(load_manifest(str(written.root)))
    verify_shards(load_manifest(str(written.root)), hashes=False)  # --no-verify: sizes only


def test_a_shard_of_any_split_that_is_a_fifo_is_refused_before_a_read(tmp_path):
    written = write_dataset(tmp_path / "d", make_rows(40), splits={"train": 1})
    root = written.root
    os.mkfifo(root / "test.tfrecord.gz")
    raw = json.loads((root / "manifest.json").read_text())
    raw["splits"]["test"] = {"records": 1, "files": [{"path": "test.tfrecord.gz", "records": 1}]}
    (root / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(ManifestError, match="test.tfrecord.gz: a FIFO .named pipe., not a regular"):
        verify_shards(load_manifest(str(root)))
