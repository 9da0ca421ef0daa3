"""The hostile corpus, part 2: damaged or hand-edited datasets given to `inspect`, `train`,
`validate` and `predict` (tests/reliability/hostile.py has the harness and its invariants).
Each case copies one small dataset written as the ETL writes it (tests/trainer/datasets.py),
damages it, and runs one command on it: a refusal in one line naming the file, never a
traceback, and nothing trained on data that is not what the manifest says."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.reliability.hostile import Case, run_case
from tests.trainer.datasets import make_rows, write_dataset

_SOURCE: dict[str, Path] = {}


@pytest.fixture(scope="module", autouse=True)
def source_dataset(tmp_path_factory):
    _SOURCE["gzip"] = write_dataset(
        tmp_path_factory.mktemp("hostile") / "d", make_rows(80), splits={"train": 2}
    ).root
    _SOURCE["none"] = write_dataset(
        tmp_path_factory.mktemp("hostile") / "d", make_rows(80), splits={"train": 2},
        compression="none",
    ).root  # fmt: skip


def _copy(d: Path, compression: str = "gzip") -> Path:
    root = d / "d"
    shutil.copytree(_SOURCE[compression], root)
    return root


def _edit_manifest(edit, compression: str = "gzip"):
    """A copy whose manifest.json `edit(raw)` changed (or replaced: a return value is written
    as the file's bytes)."""

    def damaged(d: Path) -> Path:
        root = _copy(d, compression)
        path = root / "manifest.json"
        raw = json.loads(path.read_text())
        replaced = edit(raw)
        path.write_bytes(replaced if replaced is not None else json.dumps(raw).encode())
        return root

    return damaged


def _inspect(damage, *flags: str):
    return lambda d: ("inspect", [str(damage(d)), *flags])


def _train(damage, *flags: str):
    return lambda d: ("train", ["--data", str(damage(d)), "--model-dir", str(d / "m"),
                                "--epochs", "1", *flags])  # fmt: skip


def _validate(damage):
    return lambda d: ("validate", [str(damage(d))])


def _set(path: list, value):
    def edit(raw):
        target = raw
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


def _bytes(data: bytes):
    return lambda raw: data


def _manifest_folder(d: Path) -> Path:
    root = _copy(d)
    (root / "manifest.json").unlink()
    (root / "manifest.json").mkdir()
    return root


def _special(name: str, kind: str):
    """A copy whose `name` is a link to /dev/zero (`zero`), a FIFO (`fifo`) or a folder."""

    def damaged(d: Path) -> Path:
        root = _copy(d)
        (root / name).unlink(missing_ok=True)
        if kind == "zero":
            (root / name).symlink_to("/dev/zero")
        elif kind == "fifo":
            os.mkfifo(root / name)
        else:
            (root / name).mkdir()
        return root

    return damaged


def _statistics(data: bytes):
    def damaged(d: Path) -> Path:
        root = _copy(d)
        (root / "statistics.json").write_bytes(data)
        return root

    return damaged


def _shard(change):
    def damaged(d: Path) -> Path:
        root = _copy(d, "none")
        change(root)
        return root

    return damaged


def _swap_train_shards(root: Path) -> None:
    first = root / "train/train-00000-of-00002.tfrecord"
    second = root / "train/train-00001-of-00002.tfrecord"
    data = first.read_bytes()
    first.write_bytes(second.read_bytes())
    second.write_bytes(data)


def _truncate_shard(root: Path) -> None:
    shard = root / "train/train-00001-of-00002.tfrecord"
    shard.write_bytes(shard.read_bytes()[:-7])


def _not_exported(d: Path) -> None:
    assert not (d / "m" / "export").exists()


def _type_edit(feature: str, to: str):
    def edit(raw):
        raw["features"][feature]["type"] = to
        for key in ("values", "min", "max", "default"):
            raw["features"][feature].pop(key, None)

    return edit


CASES = [
    Case("manifest-not-utf8", "trainer", _inspect(_edit_manifest(_bytes(b"\xff\xfe{}"))), 2,
         "not valid JSON: 'utf-8' codec can't decode"),
    Case("manifest-utf16", "trainer",
         _inspect(_edit_manifest(_bytes('{"a": 1}'.encode("utf-16")))), 2, "not valid JSON"),
    Case("manifest-a-folder", "trainer", _inspect(_manifest_folder), 2,
         "is a folder, not a file"),
    Case("manifest-truncated", "trainer", _inspect(_edit_manifest(_bytes(b'{"format_versi'))),
         2, "not valid JSON"),
    Case("manifest-a-list", "trainer", _inspect(_edit_manifest(_bytes(b"[1, 2]"))), 2,
         "must be a JSON object"),
    Case("manifest-version-99", "trainer", _inspect(_edit_manifest(_set(["format_version"], 99))),
         2, "format_version: 99 is not supported"),
    Case("manifest-feature-type-unknown", "trainer",
         _inspect(_edit_manifest(_set(["features", "flipper_mm", "type"], "floaty"))), 2,
         "'floaty' is not one of"),
    Case("manifest-float-edited-to-string", "trainer",
         _inspect(_edit_manifest(_type_edit("flipper_mm", "string")), "--take", "1"), 2,
         "feature 'flipper_mm': the shards hold float values where manifest.json declares string"),
    Case("manifest-string-edited-to-int-train", "trainer",
         _train(_edit_manifest(_type_edit("island", "int"))), 2,
         "feature 'island': the shards hold string or bytes values where manifest.json declares "
         "int", check=_not_exported),
    Case("statistics-not-json", "trainer", _inspect(_statistics(b"{oops"), "--stats"), 2,
         "statistics.json: not valid JSON"),
    Case("statistics-a-list", "trainer", _inspect(_statistics(b"[]"), "--stats"), 2,
         "statistics.json: must be a JSON object"),
    Case("statistics-not-json-validate", "trainer", _validate(_statistics(b"\x00\x01")), 2,
         "statistics.json: not valid JSON"),
    Case("manifest-garbage-validate", "trainer",
         _validate(_edit_manifest(_bytes(b"not json at all"))), 2, "not valid JSON"),
    Case("manifest-dev-zero-validate", "trainer", _validate(_special("manifest.json", "zero")), 2,
         "manifest.json: is a character device, not a regular file: refused unread"),
    Case("statistics-fifo-validate", "trainer", _validate(_special("statistics.json", "fifo")), 2,
         "statistics.json: is a named pipe (FIFO), not a regular file: refused unread"),
    Case("statistics-a-folder-validate", "trainer",
         _validate(_special("statistics.json", "folder")), 2,
         "statistics.json: is a folder, not a regular file: refused unread"),
    Case("split-count-edited-to-1e9", "trainer",
         _train(_edit_manifest(_set(["splits", "train", "records"], 10**9))), 2,
         "split 'train' lists 1,000,000,000 records but its shards", check=_not_exported),
    Case("shard-count-edited", "trainer",
         _train(_edit_manifest(lambda raw: _shift_count(raw), compression="none")), 2,
         "(record count differs)", check=_not_exported),
    Case("train-shards-swapped", "trainer", _train(_shard(_swap_train_shards)), 2,
         "the dataset changed after it was written", check=_not_exported),
    Case("train-shard-truncated", "trainer", _train(_shard(_truncate_shard)), 1,
         "corrupt shard", check=_not_exported),
    Case("label-edited-to-a-missing-feature", "trainer",
         _train(_edit_manifest(_set(["label"], "nothing"))), 2, "label"),
    Case("dataset-path-is-a-file", "trainer",
         lambda d: ("inspect", [str(_copy(d) / "manifest.json")]), 2, "manifest.json"),
]  # fmt: skip


def _shift_count(raw: dict) -> None:
    """Moves 5 records from one train shard's count to the other's: the split's sum holds."""
    files = raw["splits"]["train"]["files"]
    files[0]["records"] += 5
    files[1]["records"] -= 5


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_dataset(case: Case, tmp_path: Path, capfd):
    try:
        run_case(case, tmp_path, capfd)
    finally:  # a damaged manifest is not left for the session's check that every one parses
        shutil.rmtree(tmp_path / "d", ignore_errors=True)
