"""transforms.ui.locations: which named locations are one, or hold one another."""

from __future__ import annotations

import os

from transforms.ui.locations import CONTAINS, INSIDE, SAME, clash, relation


def test_same_inside_and_containing_local_paths(tmp_path):
    (tmp_path / "m" / "export").mkdir(parents=True)
    assert relation(str(tmp_path / "m"), str(tmp_path / "m" / ".")) == SAME
    assert relation(str(tmp_path / "m" / "export" / "a.json"), str(tmp_path / "m")) == INSIDE
    assert relation(str(tmp_path / "m"), str(tmp_path / "m" / "export")) == CONTAINS
    assert relation(str(tmp_path / "m"), str(tmp_path / "mm")) is None
    assert relation(str(tmp_path / "m"), "gs://b" + str(tmp_path / "m")) is None


def test_links_do_not_hide_a_clash(tmp_path):
    (tmp_path / "data.csv").write_text("a\n1\n")
    os.symlink(tmp_path / "data.csv", tmp_path / "link.csv")
    os.link(tmp_path / "data.csv", tmp_path / "hard.csv")
    os.symlink(tmp_path, tmp_path / "up")
    assert relation(str(tmp_path / "link.csv"), str(tmp_path / "data.csv")) == SAME
    assert relation(str(tmp_path / "hard.csv"), str(tmp_path / "data.csv")) == SAME
    assert relation(str(tmp_path / "up" / "x"), str(tmp_path)) == INSIDE


def test_uris_compare_by_their_text():
    assert relation("gs://b/m/", "gs://b/m") == SAME
    assert relation("gs://b/m/export/x", "gs://b/m") == INSIDE
    assert relation("gs://b/m", "gs://b/mm") is None


def test_clash_names_both_and_checks_outputs_against_each_other(tmp_path):
    new = str(tmp_path / "new.csv")
    said = clash([("--output", new)], [("--input", new)])
    assert said == f"--output {new!r} is --input {new!r}"
    said = clash([("--output", "a"), ("--rejected", "a")], [])
    assert said is not None and said.startswith("--output 'a' is --rejected 'a'")
    assert clash([("--output", str(tmp_path / "o")), ("--rejected", None or "")], []) is None
    model = str(tmp_path / "m")
    said = clash([("--output", f"{model}/export/x.jsonl")], [("--model-dir", model)])
    assert said == f"--output '{model}/export/x.jsonl' is inside --model-dir '{model}'"
