"""Corrupt shards: the scan of trainer/integrity.py and the skipping reader of trainer/input.py."""

import struct

import pytest
import tensorflow as tf

from tests.trainer.datasets import make_rows, write_dataset
from trainer.features import parse_spec
from trainer.input import make_dataset
from trainer.integrity import CorruptShard, find_corrupt
from trainer.manifest import load_manifest

BROKEN = 7  # 0-based record whose payload gets a flipped byte


@pytest.fixture
def corrupt(tmp_path):
    """40 uncompressed rows in 2 train shards of 20; shard 1 has record BROKEN corrupt."""
    written = write_dataset(tmp_path, make_rows(40), splits={"train": 2}, compression="none")
    shard = written.root / "train/train-00001-of-00002.tfrecord"
    data = bytearray(shard.read_bytes())
    at = 0
    for _ in range(BROKEN):
        at += 8 + 4 + struct.unpack_from("<Q", data, at)[0] + 4
    data[at + 8 + 4 + 3] ^= 0x01
    shard.write_bytes(bytes(data))
    return load_manifest(str(written.root)), str(shard)


def test_find_corrupt_names_the_shard_and_its_readable_records(corrupt):
    m, shard = corrupt

    found = find_corrupt(m.splits["train"].files, m.compression_type)

    assert found == [CorruptShard(path=shard, listed=20, readable=BROKEN)]
    assert found[0].skipped == 20 - BROKEN


def test_find_corrupt_finds_nothing_in_clean_shards(dataset):
    m = load_manifest(str(dataset.root))
    assert find_corrupt(m.splits["train"].files, m.compression_type) == []


def test_reader_fails_on_a_corrupt_shard_without_skip_corrupt(corrupt):
    m, _ = corrupt
    ds = make_dataset(m.split_files("train"), parse_spec(m, only=["id"]), "", 8, shuffle=False)

    with pytest.raises(tf.errors.DataLossError, match="corrupted record"):
        list(ds)


def test_skip_corrupt_reader_keeps_every_record_before_the_bad_one(corrupt):
    m, _ = corrupt
    ds = make_dataset(
        m.split_files("train"), parse_spec(m, only=["id"]), "", 8, shuffle=False,
        deterministic=True, skip_corrupt=True,
    )  # fmt: skip

    ids = [int(i) for batch in ds for i in batch["id"].numpy()]

    assert sorted(ids) == list(range(20)) + list(range(20, 20 + BROKEN))
