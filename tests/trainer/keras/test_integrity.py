"""Corrupt shards: the scan of trainer/keras/integrity.py and the skipping reader of
trainer/keras/input.py."""

import shutil
import struct

import pytest
import tensorflow as tf

from tests.trainer.datasets import make_rows, write_dataset
from trainer.dataset.manifest import load_manifest
from trainer.keras.features import parse_spec
from trainer.keras.input import input_batches
from trainer.keras.integrity import CorruptShard, find_corrupt

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
    ds = input_batches(m.split_files("train"), parse_spec(m, only=["id"]), "", 8, shuffle=False)

    with pytest.raises(tf.errors.DataLossError, match="corrupted record"):
        list(ds)


def test_skip_corrupt_reader_keeps_every_record_before_the_bad_one(corrupt):
    m, _ = corrupt
    ds = input_batches(
        m.split_files("train"), parse_spec(m, only=["id"]), "", 8, shuffle=False,
        deterministic=True, skip_corrupt=True,
    )  # fmt: skip

    ids = [int(i) for batch in ds for i in batch["id"].numpy()]

    assert sorted(ids) == list(range(20)) + list(range(20, 20 + BROKEN))


def test_a_shard_replaced_after_publishing_is_refused_naming_it(tmp_path, capsys):
    from trainer.task import main

    written = write_dataset(tmp_path / "d", make_rows(300))
    train0 = written.root / "train/train-00000-of-00002.tfrecord.gz"
    shutil.copyfile(written.root / "eval/eval-00000-of-00001.tfrecord.gz", train0)  # eval's
    code = main(["--data", str(written.root), "--model-dir", str(tmp_path / "m"), "--epochs", "1"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and not (tmp_path / "m" / "export").exists()
    size = train0.stat().st_size
    listed = written.manifest["splits"]["train"]["files"][0]
    assert err == [
        f"shardflow train: {train0}: holds 60 records in {size:,} bytes where the manifest lists "
        f"{listed['records']} in {listed['bytes']:,} (size differs): the dataset changed after "
        "it was written (a shard replaced or rewritten, or the manifest edited); rerun the ETL"
    ]


def test_a_dataset_replaced_during_training_stops_the_run(tmp_path):
    from trainer.keras.integrity import DatasetChanged, DatasetWatch

    written = write_dataset(tmp_path / "d", make_rows(40), splits={"train": 1})
    watch = DatasetWatch([str(written.root)])
    watch.on_epoch_end(0)  # unchanged: nothing happens
    manifest = written.root / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"penguins"', '"penguins2"'))
    with pytest.raises(DatasetChanged) as e:
        watch.on_epoch_end(1)
    assert str(e.value) == (
        f"{written.root}: the dataset was replaced while training read it (its manifest changed "
        "during epoch 2); training stopped, nothing exported: rerun on the new dataset"
    )


def test_an_image_tensorflow_cannot_decode_is_named_with_its_shard_and_record(tmp_path, capsys):
    """A PNG whose IDAT chunk fails its CRC (Pillow reads it, TensorFlow does not), put in a
    shard by hand: the run stops naming the shard, the record and the feature, not with
    "Invalid PNG data" alone."""
    import io

    from PIL import Image

    from trainer.task import main

    def png(i: int) -> bytes:
        out = io.BytesIO()
        Image.new("RGB", (8, 8), (i % 255, 100, 50)).save(out, "PNG")
        return out.getvalue()

    rows = make_rows(120)
    for i, row in enumerate(rows):
        row["photo"] = png(i)
    data = bytearray(rows[37]["photo"])
    at = 8
    while at < len(data):  # flip the IDAT chunk's CRC
        (length,) = struct.unpack_from(">I", data, at)
        if data[at + 4 : at + 8] == b"IDAT":
            data[at + 8 + length] ^= 0xFF
        at += 12 + length
    rows[37]["photo"] = bytes(data)
    written = write_dataset(tmp_path / "d", rows, splits={"train": 2})
    code = main(["--data", str(written.root), "--model-dir", str(tmp_path / "m"), "--epochs", "1"])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("INFO")]
    assert code == 1 and not (tmp_path / "m" / "export").exists()
    shard = written.root / "train/train-00000-of-00002.tfrecord.gz"
    assert err == [
        f"shardflow train: {shard}: record 38: feature 'photo': TensorFlow cannot decode its "
        "image (Invalid PNG data, size 77); rerun the ETL, which rejects such images, or leave "
        "the feature out (--exclude-features photo)"
    ]


def test_a_manifest_replaced_by_a_link_to_dev_zero_stops_the_run_unread(tmp_path):
    from trainer.keras.integrity import DatasetChanged, DatasetWatch

    written = write_dataset(tmp_path / "d", make_rows(40), splits={"train": 1})
    watch = DatasetWatch([str(written.root)])
    manifest = written.root / "manifest.json"
    manifest.rename(written.root / "kept.json")
    manifest.symlink_to("/dev/zero")
    with pytest.raises(DatasetChanged, match="its manifest changed during epoch 1"):
        watch.on_epoch_end(0)
