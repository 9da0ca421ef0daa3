"""manifest.json as `transforms.contract.manifest.Manifest`: what the ETL writes reads back."""

import copy
import dataclasses
import json
import tempfile
from pathlib import Path

import apache_beam as beam
import pytest

from pipelines.config.loader import parse_config
from pipelines.etl import build_etl
from tests.transforms.contract.written import unreadable_manifests
from transforms.contract.layout import MANIFEST, STATISTICS
from transforms.contract.manifest import (
    FileEntry,
    Manifest,
    ManifestError,
    ManifestFeature,
    SplitEntry,
    TransformEntry,
)
from transforms.records import ShardFile
from transforms.sink.manifest import build_manifest
from transforms.sink.rejected import RejectedFiles
from transforms.sink.storage import staging_path

CSV = "id,name,score,size\n1,ann,1.5,3\n2,bo,x,4\n3,cy,2,5\n4,di,,6\n"
JSONL = '{"id": 3, "note": "hello"}\n{"id": 9, "note": "orphan"}\n'
TRANSFORM = {
    "path": "transform",
    "materialize": "transformed",
    "preprocessing": "features",
    "analyzed_split": "train",
    "analyzed_records": 2,
    "features": {"score": {"type": "float", "shape": [], "required": True}},
}


def _dataset(tmp_path, **extra):
    (tmp_path / "a.csv").write_text(CSV)
    (tmp_path / "b.jsonl").write_text(JSONL)
    raw = {
        "name": "t",
        "sources": [
            {"name": "a", "format": "csv", "path": "a.csv"},
            {"name": "b", "format": "jsonl", "path": "b.jsonl"},
        ],
        "combine": "join",
        "key": "id",
        "features": {
            "id": {"type": "int"},
            "name": {"type": "string", "values": ["ann", "bo", "cy", "di"]},
            "score": {"type": "float", "required": False, "default": 0.0, "min": 0},
            "size": {"type": "int", "shape": [1], "required": False, "default": [0], "max": 100},
            "tags": {"type": "bytes", "shape": [None], "required": False},
        },
        "label": "name",
        "splits": {"train": 0.5, "eval": 0.5},
        "output": {"path": "out", "shard_size_mb": 1, "compression": "zlib"},
    }
    raw.update(extra)
    return parse_config(raw, base_dir=str(tmp_path))


def _built(tmp_path, date: str | None = None) -> Manifest:
    """A manifest as the ETL builds it, every optional section set."""
    dataset = dataclasses.replace(_dataset(tmp_path), date=date)
    shards = [
        ShardFile("train", "train/train-00000-of-00001.tfrecord.zz", 2, 0, 10, "a" * 64),
        ShardFile("eval", "eval/eval-00000-of-00001.tfrecord.zz", 1, 0, 7, "b" * 64),
    ]
    rejected = RejectedFiles(
        (
            {
                "path": "rejected/rejected-00000-of-00001.jsonl",
                "records": 1,
                "bytes": 3,
                "sha256": "c" * 64,
            },
        ),
        {("a", "score: not a number"): 1},
    )
    counts = {"read/a": 4, "read/b": 0, "ignored/a/extra": 2}
    manifest = build_manifest(dataset, shards, rejected, counts, TRANSFORM)
    return manifest.with_statistics(FileEntry(STATISTICS, bytes=99, sha256="d" * 64))


def test_a_built_manifest_reads_back_equal(tmp_path):
    m = _built(tmp_path)
    assert Manifest.from_json(m.to_json()) == m
    assert json.loads(m.to_json()) == m.to_dict()
    assert m.to_json() == json.dumps(m.to_dict(), indent=2, sort_keys=False) + "\n"


def test_the_json_keys_are_in_the_published_order(tmp_path):
    m = _built(tmp_path).to_dict()
    assert list(m) == [
        "format_version",
        "name",
        "created",
        "config_sha256",
        "compression",
        "compression_level",
        "features",
        "label",
        "key",
        "combine",
        "sources",
        "splits",
        "rejected",
        "duplicates",
        "transform",
        "joined",
        "statistics",
    ]
    assert m["features"]["score"] == {
        "type": "float",
        "shape": [],
        "required": False,
        "default": 0.0,
        "min": 0,
    }
    assert m["features"]["size"] == {
        "type": "int",
        "shape": [1],
        "required": False,
        "default": [0],
        "max": 100,
    }
    assert m["features"]["name"]["values"] == ["ann", "bo", "cy", "di"]
    assert m["sources"]["a"] == {"format": "csv", "records": 4, "ignored_fields": {"extra": 2}}
    assert m["splits"]["train"]["files"] == [
        {
            "path": "train/train-00000-of-00001.tfrecord.zz",
            "records": 2,
            "bytes": 10,
            "sha256": "a" * 64,
        }
    ]
    assert m["rejected"]["files"][0]["path"] == "rejected/rejected-00000-of-00001.jsonl"
    assert m["transform"] == TRANSFORM
    assert m["statistics"] == {"path": STATISTICS, "bytes": 99, "sha256": "d" * 64}
    assert (m["compression"], m["compression_level"], m["combine"]) == ("zlib", 6, "join")


def test_the_date_of_a_dated_config_is_written_after_the_transform(tmp_path):
    m = _built(tmp_path, date="2026-11-26")
    assert list(m.to_dict())[-3:] == ["joined", "date", "statistics"]
    assert Manifest.from_json(m.to_json()) == m


def test_a_minimal_manifest_reads_with_the_documented_defaults():
    m = Manifest.from_dict(
        {
            "format_version": 1,
            "name": "d",
            "features": {"x": {"type": "int"}},
            "splits": {"train": {"records": 1, "files": [{"path": "train/t-0", "records": 1}]}},
        }
    )
    assert m.compression == "gzip" and m.label is None and m.transform is None
    assert m.features["x"] == ManifestFeature(type="int")
    assert m.splits["train"] == SplitEntry(1, (FileEntry("train/t-0", 1),))
    assert m.rejected.records == 0 and m.duplicates == 0


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["statistics"], {"path": "/abs/statistics.json"}, "statistics.path: '/abs/statis"),
        (["rejected", "files", 0, "path"], "../r.jsonl", "rejected.files[0].path: '../r"),
        (["sources", "a", "records"], -1, "sources.a.records: -1 is not a non-negative"),
        (["transform", "analyzed_records"], "2", "transform.analyzed_records: '2' is not"),
        (["joined"], True, "joined: True is not a non-negative integer"),
    ],
)
def test_a_broken_manifest_error_names_the_field(tmp_path, path, value, message):
    raw = _built(tmp_path).to_dict()
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ManifestError) as e:
        Manifest.from_dict(copy.deepcopy(raw), "m.json")
    assert str(e.value).startswith(f"m.json: {message}")


def test_text_that_is_not_json_is_a_manifest_error():
    with pytest.raises(ManifestError, match=r"^x.json: not valid JSON"):
        Manifest.from_json(b"{no", "x.json")


def test_the_manifest_an_etl_run_publishes_reads_back_byte_for_byte(tmp_path):
    dataset = _dataset(
        tmp_path,
        features={
            "id": {"type": "int"},
            "name": {"type": "string"},
            "note": {"type": "string", "required": False},
            "size": {"type": "int", "shape": [1], "required": False, "default": [0]},
        },
        label=None,
    )
    with beam.Pipeline(runner="FnApiRunner") as p:
        build_etl(p, dataset, staging_path(dataset.output.path, "test"))
    text = (tmp_path / "out" / MANIFEST).read_text()

    m = Manifest.from_json(text)

    assert m.to_json() == text
    assert m.joined == 1 and m.statistics is not None and m.transform is None
    assert sum(s.records for s in m.splits.values()) == 4  # ids 1 to 4, 3 joined with b's
    assert all(f.path.endswith(".tfrecord.zz") for s in m.splits.values() for f in s.files)
    assert m.rejected.reasons == {"name: missing required value": 1}  # b's id 9, alone


def test_the_transform_entry_keeps_what_the_etl_wrote():
    entry = TransformEntry(**TRANSFORM)
    assert entry.to_dict() == TRANSFORM
    minimal = TransformEntry.from_dict({"path": "t"}, "m")
    assert minimal.to_dict() == {"path": "t", "materialize": "raw"}


def test_the_session_check_reads_every_manifest_that_claims_to_be_ours():
    # Outside the session's temporary folder: the broken manifest must not fail the check itself.
    good = {"format_version": 1, "name": "ds", "features": {"v": {"type": "int"}}}
    good.update(sources={}, splits={})
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for name, body in [("good", good), ("broken", {**good, "features": {}}),
                           ("other-tool", {"name": "x", "version": 3})]:  # fmt: skip
            (root / name).mkdir()
            (root / name / MANIFEST).write_text(json.dumps(body))
        (root / "link").mkdir()
        (root / "link" / MANIFEST).symlink_to(root / "broken" / MANIFEST)
        read, problems = unreadable_manifests(root)
    assert read == 2
    assert problems == ["broken/manifest.json: manifest.json: features: must be a non-empty object"]


def test_an_image_size_reads_back_and_a_bad_one_names_the_field():
    from transforms.contract.manifest import ManifestError, ManifestFeature

    raw = {"type": "image", "shape": [], "required": True, "image_size": [16, 12, 1]}
    feature = ManifestFeature.from_dict(raw, "m.json", "photo")
    assert feature.image_size == (16, 12, 1) and feature.to_dict() == raw
    for bad in ([16, 12], [16, 12, 2], [0, 12, 3]):
        with pytest.raises(ManifestError, match=r"features\.photo\.image_size"):
            ManifestFeature.from_dict({**raw, "image_size": bad}, "m.json", "photo")
    with pytest.raises(ManifestError, match=r"features\.name\.image_size"):
        ManifestFeature.from_dict({"type": "string", "image_size": [1, 1, 3]}, "m.json", "name")


def _with_files(**splits) -> dict:
    """A minimal manifest whose splits list these shard paths."""
    return {
        "format_version": 1,
        "name": "t",
        "features": {"x": {"type": "int"}},
        "splits": {
            name: {"records": len(paths), "files": [{"path": p, "records": 1} for p in paths]}
            for name, paths in splits.items()
        },
    }


@pytest.mark.parametrize(
    "splits, message",
    [
        (
            {"train": ["train/a", "train/b", "train/a"]},
            r"splits.train.files\[2\].path: 'train/a' is also splits.train.files\[0\]: a shard "
            "listed twice would be read twice in an epoch; the manifest was edited",
        ),
        (
            {"train": ["train/a", "test/b"], "test": ["test/b"]},
            r"splits.test.files\[0\].path: 'test/b' is also splits.train.files\[1\]: a shard "
            r"listed twice would be in two splits \(a model scored on records it trained on\)",
        ),
        (
            {"train": ["train/a"], "eval": ["train/./a"]},
            r"splits.eval.files\[0\].path: 'train/./a' is also splits.train.files\[0\]",
        ),
    ],
)
def test_a_shard_listed_twice_is_refused_naming_both_places(splits, message):
    with pytest.raises(ManifestError, match=message):
        Manifest.from_dict(_with_files(**splits))


def test_shards_listed_once_each_read_back():
    raw = _with_files(train=["train/a", "train/b"], eval=["eval/a"], test=["test/a"])
    assert [f.path for f in Manifest.from_dict(raw).splits["eval"].files] == ["eval/a"]
