"""`shardflow inspect` (trainer/inspect.py)."""

import dataclasses
import json
from pathlib import Path

import pytest
import tensorflow as tf

from tests.trainer.datasets import make_rows, run_python, to_example, write_dataset
from trainer.inspect import main
from transforms.contract.statistics import Statistics


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


@pytest.mark.parametrize("take", ["0", "3"])
def test_inspecting_a_local_dataset_loads_no_tensorflow(dataset, take):
    """`inspect` reads manifest.json and facts.json with Python's file calls and the examples
    with the readers' framing and tfx-bsl's decoder: TensorFlow (about 5 s to import) is
    loaded only for a gs:// dataset's manifest."""
    done = run_python(
        "-c",
        "import sys; from trainer.inspect import main; "
        f"code = main([{str(dataset.root)!r}, '--take', {take!r}]); "
        "print('tensorflow' in sys.modules, 'apache_beam' in sys.modules); sys.exit(code)",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("dataset: ")
    assert done.stdout.count('"flipper_mm": ') == int(take)
    assert done.stdout.rstrip().endswith("False False"), done.stdout[-500:]


def test_a_record_without_a_required_value_is_named_exit_2(tmp_path, capsys):
    """A record that lacks a value the manifest declares always present (the manifest edited
    to call an optional feature required) stops `--take` with one line naming the feature."""
    written = write_dataset(tmp_path, make_rows(4), splits={"train": 1})  # record 1 lacks it
    manifest = json.loads(json.dumps(written.manifest))
    manifest["features"]["body_mass_g"]["required"] = True
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))

    assert main([str(tmp_path), "--take", "3"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"shardflow inspect: {tmp_path}: feature 'body_mass_g': record 1 of the split holds 0 "
        "values where the manifest declares shape [] (always present): the manifest was edited "
        "after the ETL wrote it, or is not these shards' manifest; rerun the ETL\n"
    )
    assert len([line for line in captured.out.splitlines() if line.startswith("{")]) == 0


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


def _number(missing: int, lo, hi, mean, std, kind: str = "float") -> dict:
    bins = [] if lo is None else [{"low": lo, "high": hi, "count": 16 - missing}]
    return {"type": kind, "records": 16, "missing": missing, "missing_rate": missing / 16,
            "values": 16 - missing, "min": lo, "max": hi, "mean": mean, "std": std,
            "histogram": bins}  # fmt: skip


def _string(missing: int, top: list[tuple[str, int]], distinct: int, exact: bool = True) -> dict:
    return {"type": "string", "records": 16, "missing": missing, "missing_rate": missing / 16,
            "values": 16 - missing, "distinct": distinct, "distinct_exact": exact,
            "top": [{"value": v, "count": c} for v, c in top],
            "length": {"min": 4, "max": 9, "mean": 5.5}}  # fmt: skip


STATISTICS = Statistics.from_json({
    "format_version": 1,
    "splits": {
        "train": {
            "records": 16,
            "features": {
                "species": _string(0, [("Adelie", 9), ("Gentoo", 5), ("Chinstrap", 2)], 3),
                "id": _number(0, 0, 15, 7.5, 4.60977, kind="int"),
                "bill_length_mm": _number(1, 32.1, 59.6, 45.92, 7.98123),
                "body_mass_g": _number(16, None, None, None, None),
                "island": _string(0, [("Biscoe", 7), ("Dream", 5), ("Torgersen", 4)], 3),
                "tags": _string(6, [("calm", 6), ("a much longer tag than anyone writes", 5),
                                    ("loud", 4), ("young", 1)], 40, exact=False),
                "photo": {"type": "image", "records": 16, "missing": 8, "missing_rate": 0.5,
                          "values": 8, "size": {"min": 11, "max": 12, "mean": 11.5}},
            },
        },
        "eval": {
            "records": 4,
            "features": {"year": _number(0, 2007, 2009, 2008.25, 0.829156, kind="int")},
        },
    },
})  # fmt: skip
TRAIN_TABLE = [
    "statistics of split 'train' (16 records validated):",
    "  feature         type   missing   min   max   mean      std",
    "  id              int       0.0%     0    15    7.5  4.60977",
    "  bill_length_mm  float     6.2%  32.1  59.6  45.92  7.98123",
    "  body_mass_g     float   100.0%     -     -      -        -",
    "  feature  type    missing  distinct  top values",
    '  island   string     0.0%         3  "Biscoe" 7, "Dream" 5, "Torgersen" 4',
    '  tags     string    37.5%       ~40  "calm" 6, "a much longer tag than …" 5, "loud" 4',
    '  species  string     0.0%         3  "Adelie" 9, "Gentoo" 5, "Chinstrap" 2',
    "  feature  type   missing  size min  size mean  size max",
    "  photo    image    50.0%        11       11.5        12",
]


@pytest.fixture
def with_statistics(tmp_path) -> Path:
    """A 20-row dataset (train 16, eval 4) with a statistics.json."""
    write_dataset(tmp_path, make_rows(20), splits={"train": 1, "eval": 1})
    (tmp_path / "statistics.json").write_text(STATISTICS.dumps())
    return tmp_path


def test_inspect_stats_prints_the_split_statistics_after_the_summary(with_statistics, capsys):
    assert main([str(with_statistics), "--stats", "--take", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[lines.index("duplicates: 1") + 1 :] == TRAIN_TABLE


def test_inspect_stats_of_every_split_then_examples(with_statistics, capsys):
    assert main([str(with_statistics), "--stats", "--split", "all", "--take", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("duplicates: 1") + 1
    assert lines[start : start + len(TRAIN_TABLE)] == TRAIN_TABLE
    assert lines[start + len(TRAIN_TABLE) :] == [
        "statistics of split 'eval' (4 records validated):",
        "  feature  type  missing   min   max     mean       std",
        "  year     int      0.0%  2007  2009  2008.25  0.829156",
        "first 1 examples of split 'train':",
        lines[-3],
        "first 1 examples of split 'eval':",
        lines[-1],
    ]
    assert json.loads(lines[-3])["id"] == 0
    assert json.loads(lines[-1])["id"] == 16


def test_inspect_stats_of_a_dataset_without_statistics_is_one_line(tmp_path, capsys):
    write_dataset(tmp_path, make_rows(10), splits={"train": 1})
    assert main([str(tmp_path), "--stats", "--take", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[lines.index("duplicates: 1") + 1 :] == [
        f"statistics: none, {tmp_path} has no statistics.json (an older dataset)"
    ]


def test_inspect_stats_with_an_unknown_split_or_a_bad_file_exits_2(with_statistics, capsys):
    assert main([str(with_statistics), "--stats", "--take", "0", "--split", "test"]) == 2
    assert "no split 'test' in the manifest (splits: eval, train)" in capsys.readouterr().err
    path = with_statistics / "statistics.json"
    path.write_text(dataclasses.replace(STATISTICS, format_version=2).dumps())
    assert main([str(with_statistics), "--stats"]) == 2
    assert capsys.readouterr().err == f"shardflow inspect: {path}: format_version: 2, not 1\n"
    raw = STATISTICS.to_json()
    raw["splits"]["train"]["features"]["id"]["min"] = "zero"
    path.write_text(json.dumps(raw))
    assert main([str(with_statistics), "--stats"]) == 2
    assert capsys.readouterr().err == (
        f"shardflow inspect: {path}: splits.train.features.id.min: 'zero' is not a number\n"
    )


def test_inspect_escapes_what_data_would_do_to_a_terminal(tmp_path, capsys):
    """Values and reasons from data reach the terminal escaped (`transforms.ui.safe`): an
    escape sequence, a bidi override, a C1 control, a bell are shown, not obeyed; an example
    line stays JSON that reads back the value."""
    hostile = "m\x1b[31male\u202e\x85\x07\x7f"
    rows = make_rows(4)
    rows[0]["sex"], rows[1]["tags"] = hostile, [hostile]
    write_dataset(tmp_path, rows, splits={"train": 1})
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["rejected"]["reasons"] = {f"sex: not one of {hostile}": 2}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))

    assert main([str(tmp_path), "--take", "2"]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\u202e\x85\x07\x7f\r")
    lines = out.splitlines()
    assert "  sex: not one of m\\x1b[31male\\u202e\\x85\\x07\\x7f: 2" in lines
    first, second = (json.loads(line) for line in lines[-2:])
    assert first["sex"] == hostile and second["tags"] == [hostile]
    assert '"sex": "m\\u001b[31male\\u202e\\u0085\\u0007\\u007f"' in lines[-2]


def test_inspect_never_prints_a_password_of_the_dataset_uri(tmp_path, capsys):
    secret = "s3cr3t-Pw0rd"
    for uri in (f"s3://AKIA:{secret}@bucket/ds", f"{tmp_path}/ds?token={secret}"):
        assert main([uri]) == 2
        captured = capsys.readouterr()
        assert secret not in captured.out + captured.err
        assert "***" in captured.err and len(captured.err.splitlines()) == 1
