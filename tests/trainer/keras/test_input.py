"""The tf.data input pipeline (trainer/keras/input.py)."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from tests.trainer.datasets import make_rows, write_dataset
from trainer.dataset.manifest import load_manifest
from trainer.keras.features import dense_inputs, label_encoder, parse_spec
from trainer.keras.input import input_batches


def _ids(ds: tf.data.Dataset) -> list[int]:
    return [int(i) for batch in ds for i in batch["id"].numpy()]


def _read(m, split="train", **options) -> tf.data.Dataset:
    spec = parse_spec(m, include_label=False, only=["id"])
    return input_batches(m.split_files(split), spec, m.compression_type, 32, split=split, **options)


def test_batches_are_dense_features_and_class_indices(dataset):
    m = load_manifest(str(dataset.root))
    ds = input_batches(
        m.split_files("train"),
        parse_spec(m),
        m.compression_type,
        32,
        shuffle=False,
        label="species",
        preprocess=functools.partial(dense_inputs, features=m.features),
        label_fn=label_encoder(m.features["species"]),
    )

    features, label = next(iter(ds))

    assert {k: (v.dtype, v.shape[1:].as_list()) for k, v in features.items()} == {
        "id": (tf.int64, []),
        "bill_length_mm": (tf.float32, []),
        "flipper_mm": (tf.float32, []),
        "body_mass_g": (tf.float32, []),
        "body_mass_g__present": (tf.float32, []),
        "year": (tf.int64, []),
        "island": (tf.string, []),
        "sex": (tf.string, []),
        "tags": (tf.string, [2]),  # the longest list of this batch
        "embedding": (tf.float32, [4]),
        "photo": (tf.string, []),
    }
    assert {v.shape[0] for v in features.values()} == {32}
    assert (label.dtype, label.shape.as_list()) == (tf.int32, [32])
    by_id = {r["id"]: r for r in dataset.rows["train"]}
    classes = ["Adelie", "Chinstrap", "Gentoo"]
    expected = [classes.index(by_id[int(i)]["species"]) for i in features["id"].numpy()]
    np.testing.assert_array_equal(label, expected)


def test_deterministic_order_is_identical_on_two_runs(dataset):
    m = load_manifest(str(dataset.root))

    first = _ids(_read(m, seed=5, deterministic=True, shuffle_buffer=64))
    second = _ids(_read(m, seed=5, deterministic=True, shuffle_buffer=64))

    assert first == second
    assert sorted(first) == list(range(240))
    assert first != sorted(first)  # shuffled, not file order


def test_other_seed_gives_another_order(dataset):
    m = load_manifest(str(dataset.root))
    one = _ids(_read(m, seed=5, deterministic=True, shuffle_buffer=64))
    other = _ids(_read(m, seed=6, deterministic=True, shuffle_buffer=64))
    assert sorted(one) == sorted(other) and one != other


def test_unshuffled_cached_repeated_reading_yields_every_record_once_per_epoch(dataset):
    m = load_manifest(str(dataset.root))
    # deterministic: otherwise the parallel parsing may finish a batch of the third epoch
    # before the last of the second, and 15 batches are not the first two epochs
    ds = _read(m, shuffle=False, cache=True, repeat=True, drop_remainder=True, deterministic=True)

    ids = _ids(ds.take(15))  # 15 batches of 32 = two epochs of 240

    assert sorted(ids) == sorted(list(range(240)) * 2)


def test_empty_file_list_raises_naming_the_split(dataset):
    m = load_manifest(str(dataset.root))
    with pytest.raises(ValueError, match=r"^split 'eval': no files to read$"):
        input_batches([], parse_spec(m), m.compression_type, 32, split="eval")


@pytest.mark.parametrize("split", ["train", "eval"])  # 2 files, and 1 file for 2 workers
def test_each_worker_reads_a_disjoint_part(dataset, split):
    m = load_manifest(str(dataset.root))
    parts = [
        _ids(_read(m, split, seed=1, input_context=tf.distribute.InputContext(2, i, 2)))
        for i in range(2)
    ]

    assert set(parts[0]).isdisjoint(parts[1])
    assert sorted(parts[0] + parts[1]) == [r["id"] for r in dataset.rows[split]]
    assert min(len(p) for p in parts) > 0


@pytest.mark.parametrize("compression", ["zlib", "none"])
def test_reads_every_compression(tmp_path, compression):
    written = write_dataset(tmp_path, make_rows(40), compression=compression)
    m = load_manifest(str(written.root))
    assert sorted(_ids(_read(m, shuffle=False))) == list(range(32))


def test_records_travel_in_runs_of_read_batch_and_every_one_arrives(dataset):
    """Shuffling moves runs of `read_batch` consecutive records of a file (see
    trainer.keras.input)."""
    m = load_manifest(str(dataset.root))
    file_order = [r["id"] for r in dataset.rows["train"]]  # 2 shards of 120
    ids = _ids(_read(m, seed=3, deterministic=True, read_batch=8, shuffle_buffer=240))
    assert sorted(ids) == sorted(file_order)
    runs = [ids[i : i + 8] for i in range(0, len(ids), 8)]
    for run in runs:
        start = file_order.index(run[0])
        assert start % 8 == 0 and run == file_order[start : start + 8]
    assert ids != file_order


def test_read_batch_1_shuffles_record_by_record(dataset):
    m = load_manifest(str(dataset.root))
    ids = _ids(_read(m, seed=3, deterministic=True, read_batch=1, shuffle_buffer=240))
    assert sorted(ids) == list(range(240))
    consecutive = sum(b == a + 1 for a, b in zip(ids, ids[1:]))
    assert consecutive < 24  # runs are gone: about 1 in 120 neighbours by chance


def test_repeated_training_batches_are_all_full(dataset):
    m = load_manifest(str(dataset.root))
    ds = _read(m, seed=1, repeat=True, drop_remainder=True, read_batch=7)
    assert {int(b["id"].shape[0]) for b in ds.take(40)} == {32}


def test_file_cache_is_written_and_yields_every_record_once_per_epoch(dataset, tmp_path):
    m = load_manifest(str(dataset.root))
    cache = str(tmp_path / "train.cache")
    ds = _read(m, seed=2, cache=cache, repeat=True, drop_remainder=True)
    ids = _ids(ds.take(15))  # two epochs of 240, the second from the cache file
    assert sorted(set(ids)) == list(range(240)) and len(ids) == 480
    assert any(p.name.startswith("train.cache") for p in tmp_path.iterdir())


def test_skipping_batches_starts_the_same_stream_later(dataset):
    from trainer.dataset.manifest import load_manifest
    from trainer.keras.inputs import Inputs

    inputs = Inputs.of(load_manifest(str(dataset.root)))
    options = dict(shuffle=True, seed=3, deterministic=True, repeat=True, drop_remainder=True)
    whole = [f["id"].numpy().tolist() for f, _ in inputs.dataset("train", 16, **options).take(20)]
    later = inputs.dataset("train", 16, skip_batches=13, **options).take(7)
    assert [f["id"].numpy().tolist() for f, _ in later] == whole[13:]  # across the epoch's end
