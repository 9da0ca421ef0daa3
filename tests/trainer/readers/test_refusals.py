"""What the readers refuse before reading a record: one dataset given twice, one shard listed
twice (in a split, in two splits, by two datasets), a resume position past the end of the data,
sizes beyond the flags' bounds, and small files that are no regular files or are too large."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from trainer.config import MAX_BATCH_SIZE, MAX_EPOCHS
from trainer.dataset.facts import dataset_facts
from trainer.dataset.manifest import load_statistics
from trainer.dataset.union import load_datasets
from trainer.readers.deal import Layout
from trainer.readers.stream import Reader
from transforms.contract.manifest import FileEntry, ManifestError


@pytest.fixture(autouse=True)
def _damaged_copies_removed(tmp_path):
    """A damaged manifest is not left for the session's check that every one parses."""
    yield
    for path in tmp_path.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)


def _copy(dataset, tmp_path: Path, name: str = "d") -> Path:
    root = tmp_path / name
    shutil.copytree(dataset.root, root)
    return root


def _edit(root: Path, edit) -> Path:
    path = root / "manifest.json"
    raw = json.loads(path.read_text())
    edit(raw)
    path.write_text(json.dumps(raw))
    return root


@pytest.mark.parametrize(
    "twice", [lambda r: [r, r], lambda r: [r, r + "/"], lambda r: [r, r + "/../d"]]
)
def test_one_dataset_given_twice_is_refused(dataset, tmp_path, twice):
    root = str(_copy(dataset, tmp_path))
    with pytest.raises(ManifestError, match="given twice: its records would be read"):
        load_datasets(twice(root))


def test_a_link_to_a_dataset_beside_it_is_the_same_dataset(dataset, tmp_path):
    root = _copy(dataset, tmp_path)
    (tmp_path / "link").symlink_to(root)
    with pytest.raises(ManifestError, match=f"link is {root}, given twice"):
        load_datasets([str(root), str(tmp_path / "link")])


def test_a_shard_listed_twice_in_a_split_is_refused(dataset, tmp_path):
    root = _edit(_copy(dataset, tmp_path), lambda raw: raw["splits"]["train"]["files"].append(
        raw["splits"]["train"]["files"][0]))  # fmt: skip
    with pytest.raises(ManifestError, match=r"splits.train.files\[2\].path: .* is also splits"
                       r".train.files\[0\]: a shard listed twice would be read twice"):  # fmt: skip
        load_datasets(str(root))


def test_a_train_shard_also_listed_under_eval_is_refused(dataset, tmp_path):
    def leak(raw):
        raw["splits"]["eval"]["files"].append(dict(raw["splits"]["train"]["files"][1]))

    root = _edit(_copy(dataset, tmp_path), leak)
    with pytest.raises(ManifestError, match="is also splits.train.files.1.: .* in two splits"):
        Reader(str(root), "eval", 8)


def test_a_shard_linked_into_another_split_is_refused(dataset, tmp_path):
    root = _copy(dataset, tmp_path)
    eval_shard = root / "eval/eval-00000-of-00001.tfrecord.gz"
    eval_shard.unlink()
    eval_shard.symlink_to(root / "train/train-00000-of-00002.tfrecord.gz")
    with pytest.raises(ManifestError, match="one shard listed twice .splits 'train' and 'eval'"):
        load_datasets(str(root))


def test_two_datasets_whose_shards_are_the_same_files_are_refused(dataset, tmp_path):
    first = _copy(dataset, tmp_path, "a")
    second = tmp_path / "b"
    second.mkdir()
    shutil.copy(first / "manifest.json", second)
    for split in ("train", "eval"):  # hard links: other names, the same files
        (second / split).mkdir()
        for shard in (first / split).iterdir():
            os.link(shard, second / split / shard.name)
    either = "(train|eval)"  # the splits are checked in name order
    with pytest.raises(ManifestError, match=f"{second}/{either}/.* is {first}/{either}/.*: one"):
        load_datasets([str(first), str(second)])


def test_a_resume_position_past_the_end_is_refused_at_once():
    shards = tuple(FileEntry(f"s{i}", 100 + i) for i in range(6))  # 615 records
    alike = Layout(shards, 32)  # 20 steps in every epoch
    assert alike.start(20 * MAX_EPOCHS) == (MAX_EPOCHS, 0)  # the end: nothing left
    with pytest.raises(ValueError, match=f"start_step {20 * MAX_EPOCHS + 1:,} is past the end "
                       "of the data: the split gives 20 steps in an epoch .batch size 32, 1 "
                       f"rank.s.., {20 * MAX_EPOCHS:,} in {MAX_EPOCHS:,} epochs"):  # fmt: skip
        alike.start(20 * MAX_EPOCHS + 1)
    varying = Layout(shards, 32, world_size=2, workers=2)  # the order decides each epoch's steps
    steps = sum(varying.steps(e) for e in range(50))
    assert varying.start(steps, epochs=50) == (50, 0)
    for past in (steps + 1, 10**15):
        with pytest.raises(ValueError, match=f"start_step {past:,} is past the end"):
            varying.start(past, epochs=50)
    one_pass = Layout(shards, 32, shuffle=False)
    assert one_pass.start(20, epochs=1) == (1, 0)
    with pytest.raises(ValueError, match="start_step 21 is past .* 20 in its one pass"):
        one_pass.start(21, epochs=1)


def test_steps_of_an_epoch_counted_at_once_are_those_of_the_streams():
    rng = np.random.default_rng(3)
    for _ in range(30):
        shards = tuple(FileEntry(f"s{i}", int(n)) for i, n in enumerate(rng.integers(0, 90, 12)))
        world, workers = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        layout = Layout(shards, int(rng.integers(1, 40)), world, workers, seed=int(rng.integers(9)))
        for epoch in range(4):
            assert layout._steps_of_order(epoch) == layout.steps(epoch)


def test_jax_and_torch_refuse_a_start_step_past_the_end(dataset):
    jaxfeed = pytest.importorskip("trainer.readers.jaxfeed")
    with pytest.raises(ValueError, match="start_step 9 is past the end .* 8 in its one pass"):
        jaxfeed.jax_batches(str(dataset.root), "train", 32, shuffle=False, start_step=9)
    assert list(jaxfeed.jax_batches(str(dataset.root), "train", 32, shuffle=False,
                                    start_step=8)) == []  # fmt: skip
    pytorch = pytest.importorskip("trainer.readers.pytorch")
    with pytest.raises(ValueError, match=f"start_step {10**15:,} is past the end of the data"):
        pytorch.torch_loader(str(dataset.root), "train", 32, start_step=10**15)


@pytest.mark.parametrize(
    "options, says",
    [
        ({"batch_size": 10**9}, f"batch_size 1,000,000,000 is not in 1..{MAX_BATCH_SIZE:,}"),
        ({"batch_size": 0}, "batch_size 0 is not in 1.."),
        ({"batch_size": 2.5}, "batch_size 2.5 is not a whole number"),
        ({"batch_size": 8, "shuffle_buffer": 10**12}, "shuffle_buffer 1,000,000,000,000 is not"),
    ],
)
def test_sizes_beyond_their_bounds_are_refused_before_reading(dataset, options, says):
    with pytest.raises(ValueError, match=says):
        Reader(str(dataset.root), "train", **options)


def test_the_loaders_take_one_set_of_read_options_checked_before_reading(dataset):
    from trainer.readers.stream import ReadOptions

    pytorch = pytest.importorskip("trainer.readers.pytorch")
    loader = pytorch.torch_loader(str(dataset.root), "eval", 8, skip_corrupt=True, seed=3)
    assert loader.dataset.reader.options == ReadOptions(skip_corrupt=True, seed=3)
    with pytest.raises(TypeError, match="shufle"):
        pytorch.torch_loader(str(dataset.root), "eval", 8, shufle=False)
    with pytest.raises(ValueError, match="shuffle_buffer 0 is not in 1.."):
        pytorch.torch_loader(str(dataset.root), "eval", 8, shuffle_buffer=0)
    with pytest.raises(TypeError, match="not both"):
        Reader(str(dataset.root), "eval", 8, ReadOptions(), seed=1)


def test_loader_sizes_beyond_their_bounds_are_refused(dataset):
    pytorch = pytest.importorskip("trainer.readers.pytorch")
    with pytest.raises(ValueError, match="num_workers 100000 is not in 0..1,024"):
        pytorch.torch_loader(str(dataset.root), "train", 8, num_workers=100_000)
    with pytest.raises(ValueError, match="world_size 0 is not in 1.."):
        pytorch.torch_loader(str(dataset.root), "train", 8, world_size=0)


def test_a_manifest_linked_to_dev_zero_is_refused_unread(dataset, tmp_path):
    root = _copy(dataset, tmp_path)
    (root / "manifest.json").unlink()
    (root / "manifest.json").symlink_to("/dev/zero")
    with pytest.raises(ManifestError, match="manifest.json: a character device, not a regular"):
        load_datasets(str(root))


def test_statistics_that_are_a_fifo_are_refused_unread(dataset, tmp_path):
    root = _copy(dataset, tmp_path)
    os.mkfifo(root / "statistics.json")
    with pytest.raises(ManifestError, match=r"statistics.json: a FIFO \(named pipe\), not a"):
        load_statistics(str(root))  # the one loader of statistics.json, the readers' too


def test_a_shard_that_is_a_fifo_is_refused_unread(dataset, tmp_path):
    root = _copy(dataset, tmp_path)
    shard = root / "train/train-00001-of-00002.tfrecord.gz"
    shard.unlink()
    os.mkfifo(shard)
    with pytest.raises(ManifestError, match="train-00001-of-00002.tfrecord.gz: a FIFO"):
        Reader(str(root), "train", 8)


def test_facts_of_another_size_than_listed_are_refused_unread(dataset, tmp_path):
    root = _edit(_copy(dataset, tmp_path), lambda raw: raw.update(
        facts={"path": "facts.json", "bytes": 10, "sha256": "0" * 64}))  # fmt: skip
    (root / "facts.json").write_bytes(b"{}" * 1000)
    with pytest.raises(ManifestError, match="facts.json: 2,000 bytes where the manifest lists 10"):
        dataset_facts(str(root))


def test_a_huge_manifest_is_refused_unread(dataset, tmp_path):
    root = _copy(dataset, tmp_path)
    with open(root / "manifest.json", "r+b") as f:
        f.truncate(65 << 20)  # sparse: no disk used
    with pytest.raises(ManifestError, match="68,157,440 bytes, more than the 67,108,864"):
        load_datasets(str(root))
