"""The hostile corpus, part 3: configs that say one thing and meant another, and `--config`
files that are no config (tests/reliability/hostile.py has the harness and its invariants).

By class: YAML 1.1 words in text (`values: [yes, no]` must stay text), numbers that are not
finite (inf is rejected unless a feature allows it), the config file itself (a tab, a device,
a named pipe, 20 MB), and `text` regexes that backtrack (RE2, or Python's engine with a time
limit per line). Configs whose YAML words matter are written as text here: `yaml.safe_dump`
would quote them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.reliability.hostile import Case, csv_source, jsonl_source, run_case
from tests.reliability.test_hostile_etl import _etl, _rejected, _rows
from transforms.sources.text import NO_MATCH, TOO_SLOW

TOP = "name: hostile\nsplits: {train: 1.0}\noutput: {path: out}\n"


def _yaml(d: Path, text: str, *flags: str):
    """`etl` of the config `text` (sources and features; TOP added), written as it is."""
    (d / "c.yaml").write_text(TOP + text)
    return "etl", ["--config", str(d / "c.yaml"), *flags]


def _written(columns: list[str], expected: list[tuple]):
    def check(d: Path) -> None:
        assert _rows(d, columns) == expected
        assert _rejected(d) == {}

    return check


def _reasons(reasons: dict[str, int]):
    def check(d: Path) -> None:
        assert _rejected(d) == reasons

    return check


# --- YAML words in text -------------------------------------------------------------------------


def _answers(values: str, rows: str, more: str = "", options: str = ""):
    def setup(d: Path):
        (d / "a.csv").write_text(rows)
        return _yaml(
            d,
            f"sources: [{{name: s, format: csv, path: a.csv{options}}}]\n"
            f"features:\n  id: {{type: int}}\n  answer: {{type: string, values: {values}}}\n"
            + more,
        )

    return setup


def _default_no(d: Path):
    (d / "a.csv").write_text("id,say\n1,\n2,hi\n")
    return _yaml(
        d,
        "sources: [{name: s, format: csv, path: a.csv}]\n"
        "features:\n  id: {type: int}\n  say: {type: string, required: false, default: no}\n",
    )


YAML_WORDS = [
    Case("values-yes-no-maybe-stay-text", "yaml-words",
         _answers("[yes, no, maybe]", "id,answer\n1,yes\n2,maybe\n3,no\n"), 0,
         check=_written(["id", "answer"], [((1,), (b"yes",)), ((2,), (b"maybe",)),
                                           ((3,), (b"no",))])),
    Case("values-on-off-stay-text", "yaml-words",
         _answers("[on, off, y, n, true]", "id,answer\n1,on\n2,off\n3,y\n4,true\n"), 0,
         check=_written(["id", "answer"], [((1,), (b"on",)), ((2,), (b"off",)),
                                           ((3,), (b"y",)), ((4,), (b"true",))])),
    Case("values-that-look-like-numbers-stay-text", "yaml-words",
         _answers("[1.0, 010, 1_000, '12:30']", "id,answer\n1,010\n2,1.0\n3,1_000\n4,8\n"), 0,
         check=_reasons({"answer: not one of the allowed values [1.0, 010, 1_000, '12:30']": 1})),
    Case("default-no-writes-no", "yaml-words", _default_no, 0,
         check=_written(["id", "say"], [((1,), (b"no",)), ((2,), (b"hi",))])),
    Case("null-values-no-is-the-text-no", "yaml-words",
         _answers("[yes, maybe]", "id,answer\n1,yes\n2,no\n3,maybe\n", "",
                  ", options: {null_values: [no, '']}"), 0,
         check=_reasons({"answer: missing required value": 1})),
    Case("feature-named-yes", "yaml-words",
         lambda d: (
             (d / "a.csv").write_text("id,yes\n1,a\n"),
             _yaml(d, "sources: [{name: s, format: csv, path: a.csv}]\n"
                      "features:\n  id: {type: int}\n  yes: {type: string}\nlabel: yes\n"),
         )[1], 0, check=_written(["id", "yes"], [((1,), (b"a",))])),
    Case("validate-only-reads-values-as-text", "yaml-words",
         lambda d: (
             (d / "a.csv").write_text("id,answer\n1,yes\n"),
             _yaml(d, "sources: [{name: s, format: csv, path: a.csv}]\n"
                      "features:\n  id: {type: int}\n"
                      "  answer: {type: string, values: [yes, no, yes]}\n", "--validate-only"),
         )[1], 2, "features.answer.values: has duplicates"),
]  # fmt: skip


# --- numbers that are not finite ----------------------------------------------------------------

Y = {"id": {"type": "int"}, "y": {"type": "float"}}  # a regression label


def _label(rows: str, **feature):
    def setup(d: Path):
        features = {"id": {"type": "int"}, "y": {"type": "float", **feature}}
        return _etl(d, [csv_source(d, rows)], features, label="y")

    return setup


def _jsonl_inf(d: Path):
    lines = ['{"id": 1, "y": 0.5}', '{"id": 2, "y": -Infinity}', '{"id": 3, "y": 2}']
    return _etl(d, [jsonl_source(d, lines)], Y)


def _default_inf(d: Path):
    (d / "a.csv").write_text("id,y\n1,2\n")
    return _yaml(
        d,
        "sources: [{name: s, format: csv, path: a.csv}]\n"
        "features:\n  id: {type: int}\n  y: {type: float, required: false, default: .inf}\n",
        "--validate-only",
    )


def _kept_infinity(d: Path) -> None:
    assert _rejected(d) == {"y: not a number": 1}
    assert _rows(d, ["id", "y"]) == [((1,), (0.5,)), ((2,), (float("-inf"),))]


NOT_FINITE = [
    Case("inf-regression-label-is-rejected", "finite", _label("id,y\n1,0.5\n2,inf\n3,2\n"), 0,
         check=_reasons({"y: not a finite number (inf)": 1})),
    Case("minus-infinity-in-jsonl-is-rejected", "finite", _jsonl_inf, 0,
         check=_reasons({"y: not a finite number (-inf)": 1})),
    Case("1e39-is-beyond-float32", "finite", _label("id,y\n1,0.5\n2,1e39\n3,-1e39\n4,1\n"), 0,
         check=_reasons({"y: outside float32 range": 2})),
    Case("allow-infinity-keeps-inf", "finite",
         _label("id,y\n1,0.5\n2,-Infinity\n3,nan\n", allow=["infinity"]), 0,
         check=_kept_infinity),
    Case("allow-infinity-on-an-int-feature", "finite",
         lambda d: _etl(d, [csv_source(d, "id\n1\n")],
                        {"id": {"type": "int", "allow": ["infinity"]}}),
         2, "features.id.allow: applies to float features, not int"),
    Case("default-inf-is-refused-at-validate-only", "finite", _default_inf, 2,
         "features.y.default: not a finite number (inf)"),
]  # fmt: skip


# --- the config file itself -----------------------------------------------------------------------


def _tab(d: Path):
    (d / "a.csv").write_text("id\n1\n")
    text = "sources: [{name: s, format: csv, path: a.csv}]\nfeatures:\n\tid: {type: int}\n"
    return _yaml(d, text)


def _config_file(make):
    def setup(d: Path):
        make(d / "c.yaml")
        return "etl", ["--config", str(d / "c.yaml"), "--validate-only"]

    return setup


def _big(path: Path):
    with open(path, "wb") as f:
        f.write(TOP.encode() + b"#" * (20 << 20))


CONFIG_FILES = [
    Case("tab-in-the-config", "config-file", _tab, 2,
         "line 6, column 1: a tab; YAML forbids tabs for indentation: indent with spaces"),
    Case("config-link-to-dev-zero", "config-file",
         _config_file(lambda p: os.symlink("/dev/zero", p)), 2,
         "is a character device, not a regular file"),
    Case("config-is-a-fifo", "config-file", _config_file(os.mkfifo), 2,
         "is a named pipe (FIFO), not a regular file"),
    Case("config-of-20-mb", "config-file", _config_file(_big), 2,
         "is larger than 16 MiB: not a dataset config", keep=("c.yaml",)),
    Case("config-is-a-folder", "config-file", _config_file(os.mkdir), 2,
         "is a folder, not a regular file"),
]  # fmt: skip


# --- regexes that backtrack ---------------------------------------------------------------------


def _regex(regex: str, lines: str):
    def setup(d: Path):
        (d / "a.log").write_text(lines)
        source = {"name": "s", "format": "text", "path": "a.log", "options": {"regex": regex}}
        return _etl(d, [source], {"w": {"type": "string"}})

    return setup


REGEXES = [
    Case("regex-b-or-bb-hostile-line", "regex",
         _regex(r"^(?P<w>(b|bb)+)$", "bb\n" + "b" * 49 + "c\n" + "bbb\n"), 0,
         check=_reasons({NO_MATCH: 1})),
    Case("regex-backreference-hostile-line", "regex",
         _regex(r"(?P<q>['\"]?)(?P<w>(b|bb)+)(?P=q)", "'bb'\n" + "b" * 60 + "c\nbbb\n"), 0,
         "regex is matched by Python's backtracking engine (RE2 cannot run it)",
         check=_reasons({TOO_SLOW: 1})),
]  # fmt: skip

CASES = YAML_WORDS + NOT_FINITE + CONFIG_FILES + REGEXES


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_case(case: Case, tmp_path: Path, capfd):
    run_case(case, tmp_path, capfd)


def test_the_corpus_has_a_case_per_rule():
    assert {c.kind for c in CASES} == {"yaml-words", "finite", "config-file", "regex"}
    assert len({c.name for c in CASES}) == len(CASES) >= 12
