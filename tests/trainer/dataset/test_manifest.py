"""Loading and validating manifest.json (trainer/dataset/manifest.py)."""

import copy

import pytest

from trainer.dataset.manifest import (
    InputFeature,
    ManifestError,
    load_manifest,
    missing_files,
    parse_manifest,
)


def test_load_manifest_reads_features_splits_and_absolute_shard_paths(dataset):
    m = load_manifest(str(dataset.root) + "/")

    assert (m.root, m.name, m.compression, m.compression_type) == (
        str(dataset.root),
        "penguins",
        "gzip",
        "GZIP",
    )
    assert m.label == "species"
    assert list(m.features) == list(dataset.manifest["features"])
    assert m.features["bill_length_mm"] == InputFeature(
        name="bill_length_mm", type="float", shape=(), required=False, default=0.0, min=0
    )
    assert m.features["tags"].variable_length and not m.features["tags"].always_full
    assert m.features["embedding"].size == 4
    assert m.split_files("train") == [
        str(dataset.root / "train/train-00000-of-00002.tfrecord.gz"),
        str(dataset.root / "train/train-00001-of-00002.tfrecord.gz"),
    ]
    assert (m.split_records("train"), m.split_records("eval")) == (240, 60)
    assert (m.rejected.records, dict(m.rejected.reasons), m.duplicates) == (
        2,
        {"bill_length_mm: not a number": 2},
        1,
    )


def test_relative_dataset_path_becomes_absolute(dataset, monkeypatch):
    monkeypatch.chdir(dataset.root.parent)
    m = load_manifest(dataset.root.name)
    assert m.root == str(dataset.root)


def test_missing_manifest_error_names_the_path(tmp_path):
    with pytest.raises(ManifestError) as e:
        load_manifest(str(tmp_path))
    assert str(e.value) == (
        f"{tmp_path}: no manifest.json at {tmp_path}/manifest.json, "
        "the run is incomplete or this is not a shardflow dataset"
    )


def test_manifest_that_is_not_json_is_an_error(tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match=r"manifest.json: not valid JSON"):
        load_manifest(str(tmp_path))


def test_requested_split_without_files_is_an_error(dataset):
    raw = copy.deepcopy(dataset.manifest)
    raw["splits"]["test"] = {"records": 0, "files": []}
    m = parse_manifest(raw, "/data")

    with pytest.raises(ManifestError) as no_files:
        m.split_files("test")
    with pytest.raises(ManifestError) as unknown:
        m.split_records("validation")

    assert str(no_files.value) == "/data: split 'test' has no files"
    assert str(unknown.value) == (
        "/data: no split 'validation' in the manifest (splits: eval, test, train)"
    )
    assert (m.has_split("train"), m.has_split("test"), m.has_split("validation")) == (
        True,
        False,
        False,
    )


def _with(raw: dict, path: list, value) -> dict:
    raw = copy.deepcopy(raw)
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return raw


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["format_version"], 2, "format_version: 2 is not supported (this trainer reads 1)"),
        (["compression"], "lz4", "compression: 'lz4' is not one of gzip, zlib, none"),
        (["label"], "weight", "label: 'weight' is not one of the features"),
        (["features", "year", "type"], "integer", "features.year.type: 'integer' is not one of"),
        (["features", "tags", "shape"], [None, 2], "features.tags.shape: [None, 2] is not"),
        (["features", "year", "required"], "yes", "features.year.required: must be true or"),
        (["features", "flipper_mm", "values"], [1.5], "features.flipper_mm.values: must be"),
        (["features", "year", "default"], "2007", "features.year.default: '2007' is not a value"),
        (
            ["splits", "train", "files", 0, "path"],
            "/abs/train-00000-of-00002.tfrecord.gz",
            "splits.train.files[0].path: '/abs/train-00000-of-00002.tfrecord.gz' is not a path",
        ),
        (["splits", "eval", "records"], -1, "splits.eval.records: -1 is not a non-negative"),
        (["transform"], "transform", "transform: must be an object or null"),
        (["transform"], {"materialize": "raw"}, "transform.path: None is not a path relative"),
        (["transform"], {"path": "/abs/transform"}, "transform.path: '/abs/transform' is not"),
        (["transform"], {"path": "gs://b/t"}, "transform.path: 'gs://b/t' is not a path"),
        (["transform"], {"path": "../t"}, "transform.path: '../t' is not a path relative"),
        (
            ["transform"],
            {"path": "transform", "materialize": "both"},
            "transform.materialize: 'both' is not one of raw, transformed",
        ),
    ],
)
def test_invalid_manifest_error_names_the_field(dataset, path, value, message):
    with pytest.raises(ManifestError) as e:
        parse_manifest(_with(dataset.manifest, path, value), "/data", where="m.json")
    assert str(e.value).startswith(f"m.json: {message}")


def test_missing_files_lists_only_the_absent_shards(dataset):
    present = str(dataset.root / "train/train-00000-of-00002.tfrecord.gz")
    absent = str(dataset.root / "train/train-00009-of-00010.tfrecord.gz")
    elsewhere = str(dataset.root / "nowhere/x.tfrecord.gz")
    assert missing_files([present, absent, elsewhere]) == [absent, elsewhere]


@pytest.mark.parametrize("value", [None, "absent"])
def test_dataset_without_transform_has_none(dataset, value):
    raw = copy.deepcopy(dataset.manifest)
    if value == "absent":
        del raw["transform"]
    assert parse_manifest(raw, "/data").transform is None


@pytest.mark.parametrize(
    ("root", "entry", "expected"),
    [
        (
            "/data",
            {"path": "transform", "materialize": "raw", "features": {"x": "z_score"}},
            ("/data/transform", "raw"),
        ),
        (
            "gs://bucket/penguins",
            {"path": "transform/", "materialize": "transformed"},
            ("gs://bucket/penguins/transform", "transformed"),
        ),
        ("/data", {"path": "tft/out"}, ("/data/tft/out", "raw")),
    ],
)
def test_transform_path_is_anchored_at_the_dataset_root(dataset, root, entry, expected):
    raw = _with(dataset.manifest, ["transform"], entry)
    transform = parse_manifest(raw, root).transform
    assert transform is not None and (transform.path, transform.materialize) == expected


def _copy(dataset, tmp_path):
    import shutil

    root = tmp_path / "d"
    shutil.copytree(dataset.root, root)
    return root


def test_a_manifest_that_is_no_regular_file_is_refused_unread(dataset, tmp_path):
    import os

    root = _copy(dataset, tmp_path)
    (root / "manifest.json").unlink()
    (root / "manifest.json").symlink_to("/dev/zero")
    with pytest.raises(ManifestError, match="manifest.json: a character device, not a regular"):
        load_manifest(str(root))
    (root / "manifest.json").unlink()
    os.mkfifo(root / "manifest.json")
    with pytest.raises(ManifestError, match=r"manifest.json: a FIFO \(named pipe\)"):
        load_manifest(str(root))
    (root / "manifest.json").unlink()  # no FIFO left for the session's check of manifests


def test_a_manifest_over_its_size_limit_is_refused_unread(dataset, tmp_path):
    from transforms.contract.manifest import MANIFEST_MAX_BYTES

    root = _copy(dataset, tmp_path)
    with open(root / "manifest.json", "r+b") as f:
        f.truncate(MANIFEST_MAX_BYTES + 1)  # sparse
    with pytest.raises(ManifestError, match="67,108,865 bytes, more than the 67,108,864"):
        load_manifest(str(root))


def test_statistics_and_facts_are_read_only_within_their_limits(dataset, tmp_path):
    import json
    import os

    from trainer.dataset.manifest import load_facts, load_statistics

    root = _copy(dataset, tmp_path)
    os.mkfifo(root / "statistics.json")
    with pytest.raises(ManifestError, match="statistics.json: a FIFO"):
        load_statistics(str(root))
    (root / "statistics.json").unlink()
    raw = json.loads((root / "manifest.json").read_text())
    raw["facts"] = {"path": "facts.json", "bytes": 10, "sha256": "0" * 64}
    (root / "manifest.json").write_text(json.dumps(raw))
    (root / "facts.json").write_bytes(b"{}" * 50)
    with pytest.raises(ManifestError, match="facts.json: 100 bytes where the manifest lists 10"):
        load_facts(load_manifest(str(root)))
    (root / "manifest.json").write_text(json.dumps(dataset.manifest))  # for the session's check


def test_a_shard_that_is_no_regular_file_is_refused_unread(dataset, tmp_path):
    import os

    root = _copy(dataset, tmp_path)
    shard = root / "eval/eval-00000-of-00001.tfrecord.gz"
    shard.unlink()
    os.mkfifo(shard)
    m = load_manifest(str(root))
    assert len(m.split_files("train")) == 2
    with pytest.raises(ManifestError, match=f"{shard}: a FIFO .named pipe., not a regular file"):
        m.split_files("eval")
