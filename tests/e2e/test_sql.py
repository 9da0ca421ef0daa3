"""End to end with sql sources: a SQLite file and a real PostgreSQL server (tests.services.postgres)
→ `shardflow etl` (in process) → the shards read back with TensorFlow → every value compared with
what the database holds, read here with sqlite3 and pg8000 directly; bad rows rejected with their
reasons, the ledger exact, passwords never shown, failed jobs leave nothing behind.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import struct
from pathlib import Path

import pytest
import yaml

from pipelines.etl import run
from tests import readback

pytestmark = pytest.mark.slow

SPECIES = ["Adelie", "Chinstrap", "Gentoo"]


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _write_config(folder: Path, sources: list[dict], features: dict) -> str:
    path = folder / "dataset.yaml"
    config = {
        "name": "sql-e2e",
        "sources": sources,
        "features": features,
        "splits": {"train": 0.7, "eval": 0.3},
        "output": {"path": "out", "shard_size_mb": 0.01},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


def _read_dataset(out: Path, features: list[str]) -> tuple[dict, list[tuple], list[dict]]:
    """(manifest, each example as a tuple of value tuples in `features` order, rejected records)."""
    manifest = readback.manifest(out)
    return manifest, readback.rows(out, manifest, features), readback.rejected(out)


def _check_ledger(manifest: dict) -> None:
    read = sum(s["records"] for s in manifest["sources"].values())
    written = sum(s["records"] for s in manifest["splits"].values())
    assert read == written + manifest["rejected"]["records"] + manifest["duplicates"]


# --- SQLite ---------------------------------------------------------------------------------------


def _sqlite_fixture(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE items "
        "(id INTEGER, name TEXT, score REAL, count INTEGER, payload BLOB, species TEXT)"
    )
    rows = [
        (
            i,
            f"item {i} ü",
            i * 0.37 - 20,
            None if i % 10 == 0 else i * 3,
            bytes([i % 256, 0, 255]) * (i % 4),
            SPECIES[i % 3],
        )
        for i in range(1, 301)
    ]
    conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)", rows)
    conn.executescript(
        """
        INSERT INTO items VALUES (301, 'bad count', 1.0, 'many', X'00', 'Adelie');
        INSERT INTO items VALUES (302, CAST(X'FF41' AS TEXT), 1.0, 1, X'00', 'Adelie');
        INSERT INTO items VALUES (303, 'bad species', 1.0, 1, X'00', 'Unicorn');
        INSERT INTO items VALUES (NULL, 'no id', 1.0, 1, X'00', 'Gentoo');
        """
    )
    conn.commit()
    conn.close()


def test_sqlite_table_partitioned_read_every_value_and_rejections(tmp_path):
    db = tmp_path / "items.db"
    _sqlite_fixture(db)
    features = {
        "id": {"type": "int"},
        "name": {"type": "string"},
        "score": {"type": "float"},
        "count": {"type": "int", "required": False, "default": -1},
        "payload": {"type": "bytes"},
        "species": {"type": "string", "values": SPECIES},
    }
    source = {
        "name": "items",
        "format": "sql",
        "options": {
            "url": f"sqlite:///{db}",
            "table": "items",
            "partition_column": "id",
            "partitions": 4,
            "chunk_rows": 50,
        },
    }
    assert run(["--config", _write_config(tmp_path, [source], features)]) == 0

    names = list(features)
    manifest, rows, rejected = _read_dataset(tmp_path / "out", names)
    conn = sqlite3.connect(db)
    expected = sorted(
        (
            (i,),
            (name.encode(),),
            (_f32(score),),
            (-1 if count is None else count,),
            (payload,),
            (species.encode(),),
        )
        for i, name, score, count, payload, species in conn.execute(
            "SELECT * FROM items WHERE id BETWEEN 1 AND 300"
        )
    )
    (total,) = conn.execute("SELECT COUNT(*) FROM items").fetchone()
    conn.close()
    assert len(rows) == 300 and rows == expected

    assert (
        manifest["sources"] == {"items": {"format": "sql", "records": total, "ignored_fields": {}}}
        and total == 304
    )
    assert manifest["rejected"]["reasons"] == {
        "count: not an integer": 1,
        "name: not valid UTF-8": 1,
        "species: not one of the allowed values [Adelie, Chinstrap, Gentoo]": 1,
        "id: missing required value": 1,
    }
    _check_ledger(manifest)
    by_reason = {r["reason"]: r for r in rejected}
    assert by_reason["id: missing required value"]["location"] == "sql:items:id IS NULL:1"
    assert by_reason["count: not an integer"]["location"].startswith("sql:items:id>=")
    assert json.loads(by_reason["count: not an integer"]["record"]) == {
        "id": 301,
        "name": "bad count",
        "score": 1.0,
        "count": "many",
        "payload": "\x00",
        "species": "Adelie",
    }
    assert json.loads(by_reason["name: not valid UTF-8"]["record"])["name"] == "\\xffA"
    assert {r["source"] for r in rejected} == {"items"}


# --- PostgreSQL -----------------------------------------------------------------------------------


@pytest.fixture
def readings(postgres_server):
    """A `readings` table: 300 good rows, a NaN value and a JSON object in `meta`."""
    postgres_server.execute(
        "DROP TABLE IF EXISTS readings",
        "CREATE TABLE readings (id bigint, station text, value numeric(8, 3), at timestamptz, "
        "tags text[], raw bytea, meta jsonb)",
        "INSERT INTO readings SELECT i, 'station ' || (i % 7), round(i * 1.111 - 100, 3), "
        "timestamptz '2024-01-01 00:00:00+00' + i * interval '90 minutes', "
        "CASE WHEN i % 5 = 0 THEN '{}'::text[] ELSE ARRAY['t' || (i % 3), 'u' || (i % 2)] END, "
        "decode(lpad(to_hex(i), 4, '0'), 'hex'), to_jsonb(i) FROM generate_series(1, 300) i",
        "INSERT INTO readings VALUES (301, 'nan', 'NaN', now(), '{}', '\\x00', NULL), "
        "(302, 'object', 1, now(), '{}', '\\x00', '{\"a\": 1}')",
    )
    return postgres_server


PG_FEATURES = {
    "id": {"type": "int"},
    "station": {"type": "string"},
    "value": {"type": "float"},
    "at": {"type": "string"},
    "tags": {"type": "string", "shape": [None]},
    "raw": {"type": "bytes"},
}


def _pg_expected(server) -> list[tuple]:
    conn = server.connect()
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT id, station, value, at, tags, raw FROM readings WHERE id <= 300")
        rows = cursor.fetchall()
    finally:
        conn.close()
    out = []
    for offset, keep in ((0, lambda i: True), (1000, lambda i: i % 3 == 0)):
        for i, station, value, at, tags, raw in rows:
            if keep(i):
                out.append(
                    (
                        (i + offset,),
                        (station.encode(),),
                        (_f32(float(value)),),
                        (at.isoformat().encode(),),
                        tuple(t.encode() for t in tags),
                        (raw,),
                    )
                )
    return sorted(out)


def _pg_sources(server) -> list[dict]:
    return [
        {
            "name": "readings",
            "format": "sql",
            "options": {
                "url": server.url(),
                "table": "readings",
                "partition_column": "id",
                "partitions": 3,
                "chunk_rows": 40,
            },
        },
        {
            "name": "recent",
            "format": "sql",
            "options": {
                "url": server.url(),
                "query": "SELECT id + 1000 AS id, station, value, at, tags, raw\n"
                "FROM readings WHERE id % 3 = 0 AND id <= 300  -- every third\n",
                "partition_column": "id",
                "password_env": "SHARDFLOW_E2E_PG_PASSWORD",
            },
        },
    ]


def test_postgres_table_and_query_every_value_and_rejections(
    readings, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("PGPASSWORD", readings.password)  # the default, for `readings`
    monkeypatch.setenv("SHARDFLOW_E2E_PG_PASSWORD", readings.password)  # password_env of `recent`
    config = _write_config(tmp_path, _pg_sources(readings), PG_FEATURES)
    assert readings.password not in Path(config).read_text()
    assert run(["--config", config]) == 0

    manifest, rows, rejected = _read_dataset(tmp_path / "out", list(PG_FEATURES))
    assert rows == _pg_expected(readings) and len(rows) == 400
    assert manifest["sources"] == {
        # `meta` is not a feature: counted where it holds a value (the row it rejects aside)
        "readings": {"format": "sql", "records": 302, "ignored_fields": {"meta": 300}},
        "recent": {"format": "sql", "records": 100, "ignored_fields": {}},
    }
    assert manifest["rejected"]["reasons"] == {
        "value: not a number": 1,
        "sql: meta: unsupported value type dict": 1,
    }
    _check_ledger(manifest)
    object_row = next(r for r in rejected if r["reason"].startswith("sql: meta"))
    assert object_row["source"] == "readings"
    assert object_row["location"].startswith("sql:readings:id>=")
    assert json.loads(object_row["record"])["meta"] == {"a": 1}
    assert readings.password not in capsys.readouterr().out


def test_a_wrong_password_fails_the_job_without_showing_it(
    readings, tmp_path, monkeypatch, capsys, caplog
):
    caplog.set_level(logging.DEBUG)
    wrong = "not-" + readings.password
    monkeypatch.setenv("PGPASSWORD", wrong)
    monkeypatch.setenv("SHARDFLOW_E2E_PG_PASSWORD", wrong)
    assert run(["--config", _write_config(tmp_path, _pg_sources(readings), PG_FEATURES)]) == 1

    out, err = capsys.readouterr()
    assert "shardflow etl: job failed: " in err
    assert f'password authentication failed for user "{readings.user}"' in err
    for text in (out, err, caplog.text):
        assert wrong not in text and readings.password not in text
    assert sorted(os.listdir(tmp_path)) == ["dataset.yaml"]  # no dataset, no staging folder


def test_a_server_asking_for_a_password_when_none_is_set_says_how_to_give_one(
    readings, tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.delenv("SHARDFLOW_E2E_PG_PASSWORD", raising=False)
    source = {"name": "readings", "format": "sql",
              "options": {"url": readings.url(), "table": "readings"}}  # fmt: skip
    config = _write_config(tmp_path, [source], {"id": {"type": "int"}})
    assert run(["--config", config]) == 1
    err = capsys.readouterr().err
    assert f"sql source 'readings': cannot connect to {readings.url()}" in err
    assert (
        ": the server asks for a password and none is set: give it in the environment variable "
        "PGPASSWORD (or `password_env`), or in `password_file`"
    ) in err
    assert "NoneType" not in err
    assert sorted(os.listdir(tmp_path)) == ["dataset.yaml"]


def test_a_bad_query_fails_the_job_with_the_server_message(readings, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PGPASSWORD", readings.password)
    source = {
        "name": "broken",
        "format": "sql",
        "options": {"url": readings.url(), "query": "SELECT id FROM nothere"},
    }
    assert run(["--config", _write_config(tmp_path, [source], {"id": {"type": "int"}})]) == 1
    err = capsys.readouterr().err
    assert "sql source 'broken': query failed: relation \"nothere\" does not exist" in err
    assert sorted(os.listdir(tmp_path)) == ["dataset.yaml"]
