"""Shards read without TensorFlow: the records in file order, checksums checked, a corrupt
shard named (or its rest skipped, as --skip-corrupt does), a replaced shard refused."""

from __future__ import annotations

import gzip
import hashlib
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from tfx_bsl.coders.example_coder import ExampleToNumpyDict

from tests.trainer.datasets import make_rows, write_dataset
from trainer.dataset.framing import CorruptShardError, ShardChangedError, read_shard
from trainer.dataset.union import load_datasets
from transforms.contract.manifest import ManifestError


def _ids(records: list[bytes]) -> list[int]:
    return [int(ExampleToNumpyDict(r)["id"][0]) for r in records]


def _read(shard, wbits, **options) -> list[bytes]:
    return [r for run in read_shard(shard, wbits, **options) for r in run]


@pytest.fixture
def plain(tmp_path) -> Path:
    """20 rows, train in one uncompressed shard."""
    return write_dataset(
        tmp_path / "plain", make_rows(20), splits={"train": 1}, compression="none"
    ).root


def test_a_shard_yields_its_records_in_file_order(dataset):
    data = load_datasets(str(dataset.root))
    shards = data.shards("train")
    ids = [i for s in shards for i in _ids(_read(s, data.wbits))]
    assert ids == [row["id"] for row in dataset.rows["train"]]


@pytest.mark.parametrize("compression", ["zlib", "none"])
def test_every_compression_reads(tmp_path, compression):
    rows = make_rows(30)
    root = write_dataset(
        tmp_path / compression, rows, splits={"train": 2}, compression=compression
    ).root
    data = load_datasets(str(root))
    ids = [i for s in data.shards("train") for i in _ids(_read(s, data.wbits))]
    assert ids == list(range(30))


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


def test_a_flipped_byte_names_the_corrupt_shard_and_record(plain):
    data = load_datasets(str(plain))
    shard = data.shards("train")[0]
    records = _read(shard, None)
    third = sum(len(r) + 16 for r in records[:2]) + 12 + 3  # in the third record's payload
    _flip(Path(shard.path), third)
    with pytest.raises(CorruptShardError) as e:
        _read(shard, None)
    assert str(e.value).startswith(f"corrupt shard {shard.path}: record 3 fails its checksum")
    assert "only 2 of its 20 records can be read" in str(e.value)


def test_skip_corrupt_keeps_the_records_before_the_error_and_warns(plain, caplog):
    data = load_datasets(str(plain))
    shard = data.shards("train")[0]
    records = _read(shard, None)
    _flip(Path(shard.path), sum(len(r) + 16 for r in records[:5]) + 2)  # the 6th length
    kept = _read(shard, None, skip_corrupt=True)
    assert _ids(kept) == [0, 1, 2, 3, 4]
    assert "skipping 15 of its 20 records" in caplog.text


def test_a_truncated_gzip_shard_is_corrupt(dataset, tmp_path):
    data = load_datasets(str(dataset.root))
    shard = data.shards("eval")[0]
    cut = tmp_path / "cut.tfrecord.gz"
    cut.write_bytes(Path(shard.path).read_bytes()[:-40])
    with pytest.raises(CorruptShardError, match="truncated"):
        _read(replace(shard, path=str(cut)), data.wbits)
    assert len(_read(replace(shard, path=str(cut)), data.wbits, skip_corrupt=True)) < 60


def test_a_shard_replaced_by_another_readable_one_is_refused(dataset, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(dataset.root, root)
    data = load_datasets(str(root))
    first, second = data.shards("train")
    Path(first.path).write_bytes(Path(second.path).read_bytes())
    with pytest.raises(ShardChangedError, match=f"{first.path}: holds .* differs"):
        _read(first, data.wbits)


def test_a_rewritten_shard_of_the_same_size_fails_its_sha256(dataset, tmp_path):
    shard = load_datasets(str(dataset.root)).shards("eval")[0]
    records = gzip.decompress(Path(shard.path).read_bytes())
    again = tmp_path / "again.tfrecord.gz"
    again.write_bytes(gzip.compress(records, mtime=1))
    size = again.stat().st_size
    listed = replace(shard, path=str(again), bytes=size, sha256=hashlib.sha256(b"x").hexdigest())
    with pytest.raises(ShardChangedError, match="sha256 differs"):
        _read(listed, 31)


def _frames_checked(shard, wbits, monkeypatch) -> int:
    """How many frames the CRC-checking path unframes while `shard` is read."""
    from trainer.dataset import framing

    counted = []
    checked = framing._Unframer.feed

    def feed(self, data):
        out = checked(self, data)
        if self.check:
            counted.extend(out)
        return out

    monkeypatch.setattr(framing._Unframer, "feed", feed)
    _read(shard, wbits)
    return len(counted)


@pytest.mark.parametrize("compression", ["gzip", "zlib", "none"])
def test_an_intact_shard_is_cut_by_lengths_with_the_same_records(
    tmp_path, compression, monkeypatch
):
    root = write_dataset(
        tmp_path / compression, make_rows(40), splits={"train": 2}, compression=compression
    ).root
    data = load_datasets(str(root))
    for shard in data.shards("train"):
        trusted = _read(shard, data.wbits)
        assert trusted == _read(shard, data.wbits, check_sha256=False)  # frame by frame
        assert _frames_checked(shard, data.wbits, monkeypatch) == 0  # no CRC computed
    ids = [i for s in data.shards("train") for i in _ids(_read(s, data.wbits))]
    assert ids == list(range(40))


def test_a_shard_that_fails_its_sha256_is_read_frame_by_frame(plain, monkeypatch):
    shard = load_datasets(str(plain)).shards("train")[0]
    listed = replace(shard, sha256=hashlib.sha256(b"other").hexdigest())
    with pytest.raises(ShardChangedError, match="sha256 differs"):
        _read(listed, None)
    assert _frames_checked(shard, None, monkeypatch) == 0
    with pytest.raises(ShardChangedError):
        _frames_checked(listed, None, monkeypatch)


def test_an_intact_shard_with_an_edited_record_count_is_refused(plain):
    shard = load_datasets(str(plain)).shards("train")[0]
    with pytest.raises(
        ShardChangedError, match=r"holds 20 records .* lists 21 .*\(record count differs\)"
    ):
        _read(replace(shard, records=21), None)


def test_a_date_range_reads_one_dataset_a_day_as_one(tmp_path):
    rows = make_rows(30)
    for day, part in (("2026-11-01", rows[:10]), ("2026-11-02", rows[10:])):
        write_dataset(tmp_path / "daily" / day, part, splits={"train": 1}, compression="none")
    data = load_datasets(str(tmp_path / "daily" / "{2026-11-01..2026-11-02}"))
    assert data.roots == tuple(str(tmp_path / "daily" / d) for d in ("2026-11-01", "2026-11-02"))
    ids = [i for s in data.shards("train") for i in _ids(_read(s, data.wbits))]
    assert ids == list(range(30))
    with pytest.raises(ManifestError, match="2026-11-03"):
        load_datasets(str(tmp_path / "daily" / "{2026-11-01..2026-11-03}"))
