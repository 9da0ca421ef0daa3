"""Joining sources of three formats on a key: matches, unmatched keys, many-to-one, the ledger.

people.csv (ids 1-6, id 6 twice), scores.parquet (ids 1-3 and 7, id 3 twice) and a SQLite
`cities` table (ids 1, 2 and 8) are joined on `id`. What every key must become:

  1, 2   in all three sources: one record; each adds 2 to `joined`
  3      people + scores; its second scores row is a duplicate (many-to-one: the first wins)
  4, 5   people only: written, the optional features from the others empty
  6      people only, twice: one record and one duplicate
  7      scores only: no `name` (required), rejected; 8, cities only: rejected the same way
"""

from __future__ import annotations

import json
import sqlite3

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipelines.etl import run
from tests import readback

pytestmark = pytest.mark.slow

PEOPLE = "id,name,age\n1,ann,31\n2,bob,\n3,cid,45\n4,dee,52\n5,eve,29\n6,fay,38\n6,fay again,99\n"
SCORES = [
    {"id": 1, "score": 0.5, "name": "Ann (scores)"},
    {"id": 2, "score": 1.5, "name": None},
    {"id": 3, "score": 2.5, "name": "Cid (scores)"},
    {"id": 3, "score": 9.0, "name": "later row"},
    {"id": 7, "score": 7.5, "name": None},
]
CITIES = [(1, "Oslo"), (2, "Lima"), (8, "Pune")]


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    d = tmp_path_factory.mktemp("join")
    (d / "people.csv").write_text(PEOPLE)
    pq.write_table(pa.Table.from_pylist(SCORES), d / "scores.parquet")
    with sqlite3.connect(d / "cities.db") as db:
        db.execute("CREATE TABLE cities (id INTEGER, city TEXT)")
        db.executemany("INSERT INTO cities VALUES (?, ?)", CITIES)
    db.close()
    config = {
        "name": "joined",
        "sources": [
            {"name": "people", "format": "csv", "path": "people.csv"},
            {"name": "scores", "format": "parquet", "path": "scores.parquet"},
            {
                "name": "cities",
                "format": "sql",
                "options": {"url": "sqlite:///cities.db", "table": "cities"},
            },
        ],
        "key": "id",
        "combine": "join",
        "features": {
            "id": {"type": "int"},
            "name": {"type": "string"},
            "age": {"type": "int", "required": False},
            "score": {"type": "float", "required": False},
            "city": {"type": "string", "required": False},
            "scores_name": {"type": "string", "required": False, "source": "scores.name"},
        },
        "splits": {"train": 0.5, "eval": 0.5},
        "output": {"path": "out"},
    }
    (d / "join.yaml").write_text(yaml.safe_dump(config))
    assert run(["--config", str(d / "join.yaml")]) == 0
    out = d / "out"
    return out, json.loads((out / "manifest.json").read_text())


def _read(out, manifest) -> dict[int, dict]:
    rows = {}
    for feature in readback.features(out, manifest):
        values = {name: list(readback.values(feature[name])[1]) for name in feature}
        rows[values.pop("id")[0]] = values
    return rows


def test_joined_records_hold_every_source_s_fields(joined):
    out, manifest = joined
    assert _read(out, manifest) == {
        # scores are exact in float32
        1: {
            "name": [b"ann"],
            "age": [31],
            "score": [0.5],
            "city": [b"Oslo"],
            "scores_name": [b"Ann (scores)"],
        },
        2: {"name": [b"bob"], "age": [], "score": [1.5], "city": [b"Lima"], "scores_name": []},
        3: {
            "name": [b"cid"],
            "age": [45],
            "score": [2.5],
            "city": [],
            "scores_name": [b"Cid (scores)"],
        },
        4: {"name": [b"dee"], "age": [52], "score": [], "city": [], "scores_name": []},
        5: {"name": [b"eve"], "age": [29], "score": [], "city": [], "scores_name": []},
        6: {"name": [b"fay"], "age": [38], "score": [], "city": [], "scores_name": []},
    }


def test_unmatched_and_many_to_one_records_are_counted_in_the_ledger(joined):
    out, manifest = joined
    assert manifest["sources"] == {
        "people": {"format": "csv", "records": 7, "ignored_fields": {}},
        "scores": {"format": "parquet", "records": 5, "ignored_fields": {}},
        "cities": {"format": "sql", "records": 3, "ignored_fields": {}},
    }
    written = sum(s["records"] for s in manifest["splits"].values())
    assert (written, manifest["duplicates"], manifest["joined"]) == (6, 2, 5)
    assert manifest["rejected"]["reasons"] == {"name: missing required value": 2}
    assert 7 + 5 + 3 == written + manifest["rejected"]["records"] + 2 + 5
    rejected = [json.loads(line) for line in open(out / manifest["rejected"]["files"][0]["path"])]
    assert sorted(r["source"] for r in rejected) == ["cities", "scores"]
    assert sorted(r["location"] for r in rejected) == [
        f"{out.parent / 'scores.parquet'}:5",  # id 7: the fifth row of the Parquet file
        "sql:cities:3",  # id 8: the third row of the table
    ]
