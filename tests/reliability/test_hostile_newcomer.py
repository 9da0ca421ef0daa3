"""The hostile corpus, the newcomer's part: what a new user tries first on a real dataset, with
`init` and `etl` (tests/reliability/hostile.py has the harness and its invariants). `init`
guesses the label from the column's name, then its place, or leaves it unset saying why; names
how the dates of a column are written; never changes its input. `etl --limit` larger than the
data leaves a complete dataset; `--limit 0` is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.reliability.hostile import Case, config, csv_source, run_case

WROTE = "shardflow init: wrote "
DATA = ("data.csv",)  # what init reads: unchanged after it


def _init(text: str):
    def setup(d: Path) -> tuple[str, list[str]]:
        (d / "data.csv").write_text(text)
        return "init", ["--source", str(d / "data.csv"), "--output", str(d / "c.yaml")]

    return setup


def _csv(header: str, row, n: int = 200) -> str:
    return header + "\n" + "".join(f"{row(i)}\n" for i in range(n))


def _written(d: Path) -> tuple[dict, list[str]]:
    text = (d / "c.yaml").read_text()
    return yaml.safe_load(text), text.splitlines()


def _label(name: str | None, says: str = ""):
    """Checks the written config's label (None: unset) and that a line of it says `says`."""

    def check(d: Path) -> None:
        config, lines = _written(d)
        assert config.get("label") == name, lines
        assert any(says in line for line in lines if "label:" in line), lines

    return check


def _feature_says(feature: str, says: str):
    def check(d: Path) -> None:
        config, lines = _written(d)
        assert config["features"][feature] == {"type": "string"}
        (line,) = [x for x in lines if x.startswith(f"  {feature}:")]
        assert says in line, line

    return check


def _dates(written) -> str:
    return _csv("id,when", lambda i: f"{i},{written(1 + i % 28, 1 + i % 12, 2020 + i % 4)}", 300)


def _headerless(d: Path) -> None:
    config, lines = _written(d)
    options = config["sources"][0]["options"]
    assert (options["header"], options["columns"]) == (False, ["column_1", "column_2", "column_3"])
    assert "label" not in config and "key" not in config
    assert any(x.startswith("# label: column_3 ") for x in lines), lines  # a commented guess


INIT = [
    Case("init-label-in-the-middle", "newcomer",
         _init(_csv("a,label,b", lambda i: f"{i},{'xy'[i % 2]},{i * 2}")), 0, WROTE,
         check=_label("label", "named like a label"), keep=DATA),
    Case("init-penguins-species-first", "newcomer",
         _init(_csv("species,island,bill_length_mm,sex",
                    lambda i: f"{('Adelie', 'Gentoo')[i % 2]},{('Dream', 'Biscoe')[i % 2]},"
                              f"{30 + i % 20}.5,{('male', 'female')[i % 2]}")), 0, WROTE,
         check=_label("species", "named like what a model predicts"), keep=DATA),
    Case("init-housing-median-income-is-not-the-label", "newcomer",
         _init(_csv("median_income,median_house_value,ocean_proximity",
                    lambda i: f"{1 + i % 9}.5,{100000 + 917 * i}.0,{('INLAND', 'BAY')[i % 2]}")),
         0, WROTE, check=_label("median_house_value", "named like what a model predicts"),
         keep=DATA),
    Case("init-id-first-is-never-the-label", "newcomer",
         _init(_csv("id,x1,x2,kind", lambda i: f"{i},{i * 0.5},{i * 3},{'abc'[i % 3]}")), 0,
         WROTE, check=_label(None, "a guess: the last column, with 3 distinct values"),
         keep=DATA),
    Case("init-ambiguous-label-left-unset", "newcomer",
         _init(_csv("colour,size,shape", lambda i: f"{('red', 'blue')[i % 2]},{i},{'rfs'[i % 3]}")),
         0, WROTE, check=_label(None, "unset: the first column 'colour' (2 values) and the last "
                                      "'shape' (3 values) could each be a class"), keep=DATA),
    Case("init-two-target-names-left-unset", "newcomer",
         _init(_csv("species,size,price", lambda i: f"{('a', 'b')[i % 2]},{i},{i * 2.5}")), 0,
         WROTE, check=_label(None, "unset: 'species' and 'price' are each named like what a "
                                   "model predicts"), keep=DATA),
    Case("init-headerless-csv", "newcomer",
         _init("".join(f"{i},{i * 0.5},{('ok', 'bad')[i % 2]}\n" for i in range(200))), 0,
         WROTE, check=_headerless, keep=DATA),
    Case("init-day-first-dates", "newcomer",
         _init(_dates(lambda d, m, y: f"{d:02d}/{m:02d}/{y}")), 0, WROTE,
         check=_feature_says("when", "dates written day first (dd/mm/YYYY), e.g. '01/01/2020': "
                                     "kept as text; training reads only YYYY-MM-DD as dates"),
         keep=DATA),
    Case("init-month-first-dates", "newcomer",
         _init(_dates(lambda d, m, y: f"{m}/{d}/{y}")), 0, WROTE,
         check=_feature_says("when", "dates written month first (mm/dd/YYYY)"), keep=DATA),
    Case("init-iso-dates", "newcomer",
         _init(_dates(lambda d, m, y: f"{y}-{m:02d}-{d:02d}")), 0, WROTE,
         check=_feature_says("when", "dates written YYYY-MM-DD: training reads their year"),
         keep=DATA),
]  # fmt: skip


# --- etl --limit -------------------------------------------------------------------------------

ROWS = "id,name\n" + "".join(f"{i},n{i}\n" for i in range(1, 6))  # 5 records
ID_NAME = {"id": {"type": "int"}, "name": {"type": "string"}}


def _etl_limit(limit: str):
    def setup(d: Path) -> tuple[str, list[str]]:
        return "etl", ["--config", config(d, [csv_source(d, ROWS)], ID_NAME), "--limit", limit]

    return setup


def _manifest_limit(limit: int | None, records: int):
    def check(d: Path) -> None:
        manifest = json.loads((d / "out" / "manifest.json").read_text())
        assert manifest.get("limit") == limit
        assert manifest["sources"]["s"]["records"] == records

    return check


def _init_then_etl(d: Path) -> tuple[str, list[str]]:
    """The newcomer's loop on dates written day first: the config init writes runs as it is."""
    from pipelines.init import main

    (d / "data.csv").write_text(_dates(lambda d, m, y: f"{d:02d}/{m:02d}/{y}"))
    assert main(["--source", str(d / "data.csv"), "--output", str(d / "c.yaml")]) == 0
    return "etl", ["--config", str(d / "c.yaml"), "--output", str(d / "out")]


def _all_written(d: Path) -> None:
    manifest = json.loads((d / "out" / "manifest.json").read_text())
    assert sum(s["records"] for s in manifest["splits"].values()) == 300
    assert manifest["rejected"]["records"] == 0


ETL = [
    Case("etl-limit-above-the-data-is-complete", "newcomer", _etl_limit("1000"), 0,
         "shardflow etl: hostile:", check=_manifest_limit(None, 5), keep=("a.csv",)),
    Case("etl-limit-at-the-data-is-partial", "newcomer", _etl_limit("5"), 0,
         "partial: the first 5 records of each source at most", check=_manifest_limit(5, 5)),
    Case("etl-limit-below-the-data-is-partial", "newcomer", _etl_limit("2"), 0,
         "partial: the first 2 records of each source at most", check=_manifest_limit(2, 2)),
    Case("etl-limit-zero", "newcomer", _etl_limit("0"), 2,
         "argument --limit: '0' must be at least 1", keep=("a.csv", "c.yaml")),
    Case("etl-limit-not-a-number", "newcomer", _etl_limit("ten"), 2,
         "argument --limit: 'ten' is not a whole number", keep=("a.csv", "c.yaml")),
    Case("etl-on-init-day-first-dates", "newcomer", _init_then_etl, 0,
         "shardflow etl: c: 300 records read",
         check=_all_written, keep=("data.csv", "c.yaml")),
]  # fmt: skip

CASES = INIT + ETL


@pytest.mark.timeout(90)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_case(case: Case, tmp_path: Path, capfd):
    run_case(case, tmp_path, capfd)


def test_the_corpus_names_are_unique_and_every_case_is_a_newcomers():
    assert len({c.name for c in CASES}) == len(CASES) >= 8
    assert {c.kind for c in CASES} == {"newcomer"}
