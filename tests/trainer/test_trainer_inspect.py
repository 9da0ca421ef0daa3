"""`shardflow inspect` (trainer/inspect.py)."""

import json

import tensorflow as tf

from tests.trainer.trainer_testdata import make_rows, to_example, write_dataset
from trainer.inspect import main


def _expected(row: dict) -> dict:
    shown = dict(row)
    shown["photo"] = None if row["photo"] is None else f"<{len(row['photo'])} bytes>"
    return shown


def test_inspect_prints_the_summary_and_the_first_examples(dataset, capsys):
    assert main([str(dataset.root), "--take", "3"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [
        f"dataset: penguins at {dataset.root}",
        "created: 2026-11-26T10:00:00Z  format: 1  compression: gzip",
        "label: species",
    ]
    assert lines[3:15] == [
        "features:",
        "  id: int [] required",
        "  bill_length_mm: float [] optional, default=0.0",
        "  flipper_mm: float [] required",
        "  body_mass_g: float [] optional",
        "  year: int [] required, 3 values",
        "  island: string [] required, 3 values",
        "  sex: string [] optional",
        "  tags: string [null] optional",
        "  embedding: float [4] required",
        "  photo: image [] optional",
        "  species: string [] required, 3 values",
    ]
    assert lines[15:-4] == [
        "splits:",
        "  train: 240 records in 2 files",
        "  eval: 60 records in 1 files",
        "rejected: 2",
        "  bill_length_mm: not a number: 2",
        "duplicates: 1",
    ]
    assert lines[-4] == "first 3 examples of split 'train':"
    assert [json.loads(line) for line in lines[-3:]] == [
        _expected(r) for r in dataset.rows["train"][:3]
    ]


def test_inspect_other_split_and_take_more_than_it_holds(dataset, capsys):
    assert main([str(dataset.root), "--split", "eval", "--take", "100"]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index("first 100 examples of split 'eval':") + 1
    shown = [json.loads(line) for line in out[start:]]
    assert shown == [_expected(r) for r in dataset.rows["eval"]]


def test_inspect_without_manifest_exits_2_with_one_line(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"shardflow inspect: {tmp_path}: no manifest.json at {tmp_path}/manifest.json, "
        "the run is incomplete or this is not a shardflow dataset\n"
    )


def test_inspect_unknown_split_exits_2(dataset, capsys):
    assert main([str(dataset.root), "--split", "test"]) == 2
    assert capsys.readouterr().err == (
        f"shardflow inspect: {dataset.root}: "
        "no split 'test' in the manifest (splits: eval, train)\n"
    )


def test_inspect_shows_transformed_shards_as_value_lists(tmp_path, capsys):
    transformed = {
        "flipper_mm": {"type": "float", "shape": []},
        "island": {"type": "int", "shape": []},
        "tags": {"type": "int", "shape": [None]},
        "photo": {"type": "image", "shape": []},
        "species": {"type": "string", "shape": []},
    }
    rows = [
        {"flipper_mm": 0.25, "island": 2, "tags": [1, 0], "photo": b"\x89PNG", "species": "Adelie"},
        {"flipper_mm": -1.5, "island": 0, "tags": [], "photo": None, "species": "Gentoo"},
    ]
    written = write_dataset(tmp_path, make_rows(10), splits={"train": 1})
    shard = tmp_path / written.manifest["splits"]["train"]["files"][0]["path"]
    with tf.io.TFRecordWriter(str(shard), options="GZIP") as writer:
        for row in rows:
            writer.write(to_example(row, transformed).SerializeToString())
    manifest = dict(written.manifest, transform={"path": "tft", "materialize": "transformed"})
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))

    assert main([str(tmp_path), "--take", "2"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[-4] == f"transform: {tmp_path}/tft (shards hold transformed examples)"
    assert [json.loads(line) for line in lines[-2:]] == [
        {"flipper_mm": [0.25], "island": [2], "photo": ["<4 bytes>"], "species": ["Adelie"],
         "tags": [1, 0]},
        {"flipper_mm": [-1.5], "island": [0], "photo": [], "species": ["Gentoo"], "tags": []},
    ]  # fmt: skip
