"""The sql format: options, range partitions that cover every row once, value conversion, reading
SQLite files and a real PostgreSQL server (tests.services.postgres), credentials and errors."""

from __future__ import annotations

import collections
import datetime
import decimal
import ipaddress
import math
import sqlite3
import uuid

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.config.loader import ConfigError, parse_config
from transforms.contract.config import OptionError, SourceSpec
from transforms.records import RawChunk
from transforms.sources import database, registry, sql


def _source(name="s", **options) -> SourceSpec:
    return SourceSpec(name, "sql", None, sql.options(options))


def _read_all(source: SourceSpec) -> tuple[list[dict], list[dict], list[RawChunk]]:
    """(every record read, as a field dict; rejected dicts; chunks), over all partitions."""
    db = database.Database(source)
    try:
        records, rejected, chunks = [], [], []
        for partition in sql.plan_partitions(db, source):
            for item in sql.read_partition(db, source, partition):
                if isinstance(item, RawChunk):
                    chunks.append(item)
                    names = list(item.columns)
                    records += [dict(zip(names, row)) for row in zip(*item.columns.values())]
                else:
                    rejected.append(item)
        return records, rejected, chunks
    finally:
        db.close()


def _multiset(records: list[dict]) -> collections.Counter:
    return collections.Counter(repr(sorted(r.items())) for r in records)


# --- options --------------------------------------------------------------------------------------


def test_options_are_completed_with_their_defaults():
    assert sql.options({"url": "sqlite:///a.db", "table": "t"}).to_dict() == {
        "url": "sqlite:///a.db",
        "table": "t",
        "query": None,
        "partition_column": None,
        "partitions": 4,
        "chunk_rows": 8192,
        "user": None,
        "password_env": None,
        "password_file": None,
    }


def test_a_query_loses_its_trailing_semicolon():
    opts = sql.options({"url": "sqlite:///a.db", "query": "  SELECT 1;\n "})
    assert opts.query == "SELECT 1"


@pytest.mark.parametrize(
    "raw, field, message",
    [
        ({"url": "sqlite:///a.db"}, "query", "give exactly one of table and query"),
        ({"url": "sqlite:///a.db", "table": "t", "query": "SELECT 1"}, "table", "exactly one"),
        ({"table": "t"}, "url", "is required"),
        ({"url": "mysql://h/db", "table": "t"}, "url", "unsupported scheme 'mysql'"),
        ({"url": "sqlite://host/a.db", "table": "t"}, "url", "a SQLite URL has no host"),
        ({"url": "sqlite:///", "table": "t"}, "url", "names no database file"),
        ({"url": "postgresql://h:5432/", "table": "t"}, "url", "names no database"),
        ({"url": "postgresql://h:99999/db", "table": "t"}, "url", "invalid port"),
        ({"url": "postgresql://h/db?sslmode=require", "table": "t"}, "url", "no ?parameters"),
        ({"url": "sqlite:///a.db", "table": "a..b"}, "table", "must be a name or schema.name"),
        ({"url": "sqlite:///a.db", "query": " ; "}, "query", "is empty"),
        (
            {"url": "sqlite:///a.db", "table": "t", "partitions": 3},
            "partitions",
            "needs a partition_column",
        ),
        (
            {"url": "sqlite:///a.db", "table": "t", "partition_column": "id", "partitions": 0},
            "partitions",
            "at least 1",
        ),
        ({"url": "sqlite:///a.db", "table": "t", "chunk_rows": "many"}, "chunk_rows", "an integer"),
        ({"url": "sqlite:///a.db", "table": "t", "user": "u"}, "user", "postgresql URLs only"),
        (
            {"url": "sqlite:///a.db", "table": "t", "password_env": "P"},
            "password_env",
            "postgresql",
        ),
        ({"url": "postgresql://u@h/db", "table": "t", "user": "v"}, "user", "names a user already"),
        (
            {"url": "postgresql://h/db", "table": "t", "password_env": "P", "password_file": "f"},
            "password_file",
            "not both",
        ),
        ({"url": "sqlite:///a.db", "table": "t", "where": "x"}, "where", "unknown key"),
    ],
)
def test_bad_options_name_the_option(raw, field, message):
    with pytest.raises(OptionError) as e:
        sql.options(raw)
    assert e.value.field == field
    assert message in e.value.message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://me:s3cret-pw@h/db",
        "postgres://me:s3cret-pw@h:5433/db",
        "postgresql://me:@h/db",
    ],
)
def test_a_password_in_the_url_is_refused_without_repeating_it(url):
    with pytest.raises(OptionError) as e:
        sql.options({"url": url, "table": "t"})
    assert e.value.field == "url"
    assert "holds a password" in e.value.message and "password_env" in e.value.message
    assert "s3cret" not in str(e.value)


def test_the_config_loader_reports_a_password_in_the_url_as_a_config_error(tmp_path):
    raw = {
        "name": "d",
        "sources": [
            {
                "name": "db",
                "format": "sql",
                "options": {"url": "postgresql://me:s3cret-pw@h/db", "table": "t"},
            }
        ],
        "features": {"v": {"type": "int"}},
        "output": {"path": "out"},
    }
    with pytest.raises(ConfigError) as e:
        parse_config(raw, base_dir=str(tmp_path))
    assert str(e.value).startswith("sources[0].options.url: holds a password")
    assert "s3cret" not in str(e.value)


def test_postgresql_urls_are_parsed_with_libpq_defaults():
    assert database.parse_url("postgresql:///db") == database.Target(
        "postgresql", None, "localhost", 5432, "db"
    )
    assert database.parse_url("postgres://a%40b@[::1]:6000/my%20db") == database.Target(
        "postgresql", None, "::1", 6000, "my db", "a@b"
    )
    assert database.parse_url("postgres://a%40b@[::1]:6000/my%20db").describe() == (
        "postgresql://a@b@[::1]:6000/my db"
    )


def test_sqlite_urls_take_relative_and_absolute_paths():
    assert database.parse_url("sqlite:///data/a.db").path == "data/a.db"
    assert database.parse_url("sqlite:////srv/a.db").path == "/srv/a.db"


def test_resolve_paths_makes_relative_files_absolute_against_the_config_folder():
    opts = sql.options({"url": "sqlite:///data/a.db", "table": "t"})
    assert sql.resolve_paths(opts, "/cfg").url == "sqlite:////cfg/data/a.db"
    opts = sql.options({"url": "sqlite:////srv/a.db", "table": "t"})
    assert sql.resolve_paths(opts, "/cfg") == opts
    opts = sql.options({"url": "postgresql://h/db", "table": "t", "password_file": "secret"})
    assert sql.resolve_paths(opts, "/cfg").password_file == "/cfg/secret"
    opts = sql.options({"url": "postgresql://h/db", "table": "t", "password_file": "gs://b/secret"})
    assert sql.resolve_paths(opts, "/cfg").password_file == "gs://b/secret"


# --- partitions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lo, hi, k, cuts",
    [
        (1, 100, 4, [26, 51, 76]),
        (-10, 9, 4, [-5, 0, 5]),
        (1, 3, 4, [2, 3]),  # fewer integers than partitions
        (5, 5, 4, []),
        (1, 100, 1, []),
        (0.0, 1.0, 4, [0.25, 0.5, 0.75]),
        (1, 2.5, 2, [1.75]),  # SQLite: an integer MIN and a real MAX
        (decimal.Decimal(0), decimal.Decimal("1.0"), 2, [decimal.Decimal("0.5")]),
        (2**70, 2**70 + 8, 2, [2**70 + 4]),  # exact beyond float precision
        (0.0, math.inf, 4, []),
        (decimal.Decimal(0), decimal.Decimal("NaN"), 4, []),
    ],
)
def test_cut_points_are_increasing_and_inside_the_range(lo, hi, k, cuts):
    assert sql.cut_points(lo, hi, k) == cuts


def test_range_partitions_are_open_at_both_ends_and_keep_nulls_apart():
    parts = sql.range_partitions("id", [10, 20], has_nulls=True)
    assert parts == [
        sql.Partition("id<10", '"id" < ?', (10,)),
        sql.Partition("10<=id<20", '"id" >= ? AND "id" < ?', (10, 20)),
        sql.Partition("id>=20", '"id" >= ?', (20,)),
        sql.Partition("id IS NULL", '"id" IS NULL'),
    ]
    pg = sql.range_partitions("id", [10, 20], has_nulls=False, dialect="postgresql")
    assert [(p.where, p.params) for p in pg] == [
        ('"id" < $1', (10,)),
        ('"id" >= $1 AND "id" < $2', (10, 20)),
        ('"id" >= $1', (20,)),
    ]
    assert sql.range_partitions('a"b', [], has_nulls=False) == [
        sql.Partition('a"b IS NOT NULL', '"a""b" IS NOT NULL')
    ]


# --- values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (7, 7),
        (1.5, 1.5),
        ("x", "x"),
        (b"\x00", b"\x00"),
        (True, True),
        (None, None),
        (decimal.Decimal(12), 12),
        (decimal.Decimal(12345678901234567890123), 12345678901234567890123),
        (decimal.Decimal("1E+2"), 100),
        (decimal.Decimal("12.50"), 12.5),
        (datetime.date(2024, 2, 29), "2024-02-29"),
        (datetime.datetime(2024, 2, 29, 12, 34, 56, 789000), "2024-02-29T12:34:56.789000"),
        (datetime.datetime(2024, 2, 29, 10, 0, tzinfo=datetime.UTC), "2024-02-29T10:00:00+00:00"),
        (datetime.time(12, 34, 56), "12:34:56"),
        (uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        (ipaddress.ip_network("10.0.0.0/8"), "10.0.0.0/8"),
        ([1, None, decimal.Decimal("2.5")], [1, None, 2.5]),
        ((1.0, 2.0), [1.0, 2.0]),
        (memoryview(b"ab"), b"ab"),
        (bytearray(b"ab"), b"ab"),
    ],
)
def test_database_values_become_field_values(value, expected):
    assert database.convert_value(value) == expected
    assert type(database.convert_value(value)) is type(expected)


def test_a_nan_numeric_becomes_a_float_nan_for_the_schema_to_reject():
    assert math.isnan(database.convert_value(decimal.Decimal("NaN")))


@pytest.mark.parametrize("value", [datetime.timedelta(days=1), {"a": 1}, [{"a": 1}], object()])
def test_values_without_a_field_form_are_unsupported(value):
    with pytest.raises(database.UnsupportedValue):
        database.convert_value(value)


def test_convert_rows_rejects_a_row_naming_its_first_unsupported_column():
    rows = [(1, {"a": 1}, datetime.timedelta(1)), (2, [1], None), (3, 5, datetime.timedelta(2))]
    columns, reasons = database.convert_rows(["id", "meta", "span"], rows)
    assert columns == {"id": [1, 2, 3], "meta": [None, [1], 5], "span": [None, None, None]}
    assert reasons == {
        0: "sql: meta: unsupported value type dict",
        2: "sql: span: unsupported value type timedelta",
    }


def test_convert_rows_of_an_empty_result_has_every_column():
    assert database.convert_rows(["a", "b"], []) == ({"a": [], "b": []}, {})


# --- SQLite ---------------------------------------------------------------------------------------

# A partition column as SQLite allows it: integers, reals, negatives, NULLs, text and a blob.
_MIXED_IDS = [*range(-20, 180), 2.5, 2.75, -0.5, 1e9, None, None, "abc", "12", b"\x01"]


@pytest.fixture
def sqlite_db(tmp_path) -> str:
    path = tmp_path / "a.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE items (id, name TEXT, score REAL, data BLOB)")
    conn.executemany(
        "INSERT INTO items VALUES (?, ?, ?, ?)",
        [(v, f"n{i}", i / 4, bytes([i % 256])) for i, v in enumerate(_MIXED_IDS)],
    )
    conn.execute("CREATE TABLE empty (id INTEGER)")
    conn.execute("CREATE TABLE nulls (id INTEGER)")
    conn.executemany("INSERT INTO nulls VALUES (?)", [(None,)] * 3)
    conn.commit()
    conn.close()
    return str(path)


def _sqlite_rows(path: str, sql_text: str) -> list[dict]:
    conn = sqlite3.connect(path)
    cursor = conn.execute(sql_text)
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, row)) for row in cursor]
    conn.close()
    return rows


@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 7, 500])
def test_partitioned_sqlite_read_yields_every_row_exactly_once(sqlite_db, partitions):
    source = _source(
        url=f"sqlite:///{sqlite_db}",
        table="items",
        partition_column="id",
        partitions=partitions,
        chunk_rows=16,
    )
    records, rejected, chunks = _read_all(source)
    expected = _sqlite_rows(sqlite_db, "SELECT * FROM items")
    assert len(records) == len(expected) == len(_MIXED_IDS)
    assert _multiset(records) == _multiset(expected)
    assert rejected == []
    assert all(len(c) <= 16 for c in chunks)
    # rows are numbered within their partition, whose range the location names
    paths = {c.path for c in chunks}
    assert "sql:items:id IS NULL" in paths
    for path in paths:
        lines = sorted(line for c in chunks if c.path == path for line in c.lines)
        assert lines == list(range(1, len(lines) + 1))


def test_partitions_are_the_ranges_of_the_numeric_values(sqlite_db):
    source = _source(
        url=f"sqlite:///{sqlite_db}", table="items", partition_column="id", partitions=4
    )
    db = database.Database(source)
    labels = [p.label for p in sql.plan_partitions(db, source)]
    db.close()
    # numbers from -20 to 1e9; "abc", "12" and the blob sort above every number (last range)
    assert labels == [
        "id<249999985.0",
        "249999985.0<=id<499999990.0",
        "499999990.0<=id<749999995.0",
        "id>=749999995.0",
        "id IS NULL",
    ]


def test_a_query_source_is_partitioned_as_a_subquery(sqlite_db):
    query = "SELECT id, name AS label FROM items WHERE score < 40 -- small ones\n;"
    source = _source(url=f"sqlite:///{sqlite_db}", query=query, partition_column="id", chunk_rows=7)
    records, _rejected, chunks = _read_all(source)
    expected = _sqlite_rows(sqlite_db, "SELECT id, name AS label FROM items WHERE score < 40")
    assert _multiset(records) == _multiset(expected) and len(records) == 160
    assert {c.path.split(":")[1] for c in chunks} == {"query"}


def test_without_a_partition_column_one_read_numbers_every_row(sqlite_db):
    source = _source(url=f"sqlite:///{sqlite_db}", table="items", chunk_rows=50)
    records, _, chunks = _read_all(source)
    assert [len(c) for c in chunks] == [50, 50, 50, 50, 9]
    assert {c.path for c in chunks} == {"sql:items"}
    assert [line for c in chunks for line in c.lines] == list(range(1, 210))
    assert records[0] == {"id": -20, "name": "n0", "score": 0.0, "data": b"\x00"}


@pytest.mark.parametrize("table, paths", [("empty", set()), ("nulls", {"sql:nulls:id IS NULL"})])
def test_empty_and_all_null_partition_columns(sqlite_db, table, paths):
    source = _source(url=f"sqlite:///{sqlite_db}", table=table, partition_column="id")
    records, _, chunks = _read_all(source)
    assert len(records) == {"empty": 0, "nulls": 3}[table]
    assert {c.path for c in chunks} == paths


def test_text_that_is_not_utf8_arrives_as_bytes(tmp_path):
    path = tmp_path / "t.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (v TEXT)")
    conn.execute("INSERT INTO t VALUES ('ok'), (CAST(X'FF41' AS TEXT))")
    conn.commit()
    conn.close()
    records, _, _ = _read_all(_source(url=f"sqlite:///{path}", table="t"))
    assert records == [{"v": "ok"}, {"v": b"\xffA"}]


def test_a_missing_partition_column_is_an_error_listing_the_columns(sqlite_db):
    source = _source(url=f"sqlite:///{sqlite_db}", table="items", partition_column="idd")
    with pytest.raises(
        database.SqlError,
        match=r"partition_column 'idd' is not a column of the result "
        r"\(columns: id, name, score, data\)",
    ):
        _read_all(source)


def test_a_missing_sqlite_file_fails_and_is_not_created(tmp_path):
    source = _source(name="db", url=f"sqlite:///{tmp_path}/none.db", table="t")
    with pytest.raises(
        database.SqlError,
        match=r"sql source 'db': cannot connect to sqlite:///.*none.db: "
        "unable to open database file",
    ):
        database.Database(source)
    assert not (tmp_path / "none.db").exists()


def test_a_bad_query_fails_with_the_database_message(sqlite_db):
    source = _source(name="db", url=f"sqlite:///{sqlite_db}", table="nothere")
    with pytest.raises(
        database.SqlError, match="sql source 'db': query failed: no such table: nothere"
    ):
        _read_all(source)


def test_the_read_transform_returns_chunks_rejected_and_counts(sqlite_db):
    source = _source(
        url=f"sqlite:///{sqlite_db}", table="items", partition_column="id", chunk_rows=30
    )
    expected_ids = [repr(v) for v in _MIXED_IDS]
    with TestPipeline(runner="FnApiRunner") as p:
        chunks, rejected, counts = p | registry.reader("sql")(source)
        ids = chunks | beam.FlatMap(lambda c: [repr(v) for v in c.columns["id"]])
        assert_that(ids, equal_to(expected_ids), label="CheckIds")
        assert_that(rejected, equal_to([]), label="CheckRejected")
        total = counts | beam.CombinePerKey(sum)
        assert_that(total, equal_to([("read/s", len(_MIXED_IDS))]), label="CheckCounts")


# --- PostgreSQL (a real server) -------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg(postgres_server):
    """The server with tables `numbers` (partitioning) and `kinds` (one column per type)."""
    postgres_server.execute(
        "DROP TABLE IF EXISTS numbers, kinds",
        "CREATE TABLE numbers (id bigint, n numeric, f double precision, t text)",
        "INSERT INTO numbers SELECT i, i * 1.5, i / 7.0, 't' || i FROM generate_series(-50, 449) i",
        "INSERT INTO numbers VALUES (NULL, NULL, NULL, 'null'), (NULL, 'NaN', 'NaN', 'nan'), "
        "(9000000000000000000, 1e30, 'Infinity', 'big')",
        "CREATE TABLE kinds (id int, n numeric, n2 numeric(10, 2), r real, by bytea, bo boolean, "
        "da date, ts timestamp, tz timestamptz, u uuid, ia int[], ip inet, j jsonb, iv interval)",
        "INSERT INTO kinds VALUES "
        "(1, 12345678901234567890123, 3.10, 1.5, '\\x00ff', true, '2024-02-29', "
        "'2024-02-29 12:34:56.789', '2024-02-29 12:34:56+02', "
        "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,2,NULL}', '10.0.0.1', '[1, 2]', NULL)",
        "INSERT INTO kinds (id, j) VALUES (2, '{\"a\": 1}')",
        "INSERT INTO kinds (id, iv) VALUES (3, '1 day')",
    )
    return postgres_server


def _pg_source(pg, monkeypatch, name="s", **options) -> SourceSpec:
    monkeypatch.setenv("PGPASSWORD", pg.password)
    return _source(name, url=pg.url(), **options)


def _pg_rows(pg, query: str) -> list[dict]:
    conn = pg.connect()
    try:
        cursor = conn.cursor()
        cursor.execute(query)
        names = [d[0] for d in cursor.description]
        return [
            dict(zip(names, [database.convert_value(v) for v in row])) for row in cursor.fetchall()
        ]
    finally:
        conn.close()


def _comparable(records):
    # NaN != NaN: compare floats by their text
    return _multiset(
        [{k: repr(v) if isinstance(v, float) else v for k, v in r.items()} for r in records]
    )


@pytest.mark.parametrize(
    "column, partitions", [("id", 4), ("id", 1), ("n", 3), ("f", 5), ("id", 50)]
)
def test_partitioned_postgres_read_yields_every_row_exactly_once(
    pg, monkeypatch, column, partitions
):
    source = _pg_source(
        pg,
        monkeypatch,
        table="numbers",
        partition_column=column,
        partitions=partitions,
        chunk_rows=64,
    )
    records, rejected, chunks = _read_all(source)
    expected = _pg_rows(pg, "SELECT * FROM numbers")
    (count,) = _pg_rows(pg, "SELECT COUNT(*) AS c FROM numbers")
    assert len(records) == count["c"] == 503
    assert _comparable(records) == _comparable(expected)
    assert rejected == [] and all(len(c) <= 64 for c in chunks)


def test_infinities_and_nan_leave_the_ranges_to_the_finite_values(pg, monkeypatch):
    source = _pg_source(pg, monkeypatch, table="numbers", partition_column="f", partitions=2)
    db = database.Database(source)
    labels = [p.label for p in sql.plan_partitions(db, source)]
    db.close()
    assert labels == [
        f"f<{(-50 / 7.0 + 449 / 7.0) / 2!r}",
        f"f>={(-50 / 7.0 + 449 / 7.0) / 2!r}",
        "f IS NULL",
    ]


def test_a_postgres_query_source_reads_in_server_side_chunks(pg, monkeypatch):
    source = _pg_source(
        pg,
        monkeypatch,
        query="SELECT id, t FROM numbers WHERE id BETWEEN 1 AND 50",
        partition_column="id",
        partitions=2,
        chunk_rows=7,
    )
    records, _, chunks = _read_all(source)
    assert sorted(r["id"] for r in records) == list(range(1, 51))
    assert sorted(len(c) for c in chunks) == [4] * 2 + [7] * 6
    assert {c.path for c in chunks} == {"sql:query:id<26", "sql:query:id>=26"}


def test_postgres_values_become_field_values_and_unsupported_ones_reject_their_row(pg, monkeypatch):
    source = _pg_source(pg, monkeypatch, name="k", query="SELECT * FROM kinds ORDER BY id")
    records, rejected, _ = _read_all(source)
    assert records == [
        {
            "id": 1,
            "n": 12345678901234567890123,
            "n2": 3.1,
            "r": 1.5,
            "by": b"\x00\xff",
            "bo": True,
            "da": "2024-02-29",
            "ts": "2024-02-29T12:34:56.789000",
            "tz": "2024-02-29T10:34:56+00:00",
            "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "ia": [1, 2, None],
            "ip": "10.0.0.1",
            "j": [1, 2],
            "iv": None,
        }
    ]
    assert [(r.location, r.reason) for r in rejected] == [
        ("sql:query:2", "sql: j: unsupported value type dict"),
        ("sql:query:3", "sql: iv: unsupported value type timedelta"),
    ]
    assert rejected[0].source == "k"
    assert '"j": {"a": 1}' in rejected[0].record and '"iv": "1 day, 0:00:00"' in rejected[1].record


def test_duplicate_column_names_fail_the_read(pg, monkeypatch):
    # (SQLite renames them itself in a subquery: id, id:1)
    source = _pg_source(pg, monkeypatch, query="SELECT id, t AS id FROM numbers")
    with pytest.raises(
        database.SqlError, match="several columns named 'id': give them distinct names"
    ):
        _read_all(source)


def test_a_text_partition_column_is_refused(pg, monkeypatch):
    source = _pg_source(pg, monkeypatch, table="numbers", partition_column="t")
    with pytest.raises(
        database.SqlError, match="partition_column 't' must be numeric, it holds str values"
    ):
        _read_all(source)


def test_postgres_sources_are_read_in_a_read_only_transaction(pg, monkeypatch):
    pg.execute("DROP SEQUENCE IF EXISTS counter", "CREATE SEQUENCE counter")
    source = _pg_source(pg, monkeypatch, query="SELECT nextval('counter') AS v")
    with pytest.raises(database.SqlError, match="read-only transaction"):
        _read_all(source)


def test_the_password_comes_from_the_named_environment_variable(pg, monkeypatch):
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("SHARDFLOW_DB_SECRET", pg.password)
    source = _source(url=pg.url(), table="numbers", password_env="SHARDFLOW_DB_SECRET")
    assert len(_read_all(source)[0]) == 503


def test_the_password_comes_from_a_file(pg, monkeypatch, tmp_path):
    monkeypatch.delenv("PGPASSWORD", raising=False)
    (tmp_path / "secret").write_text(pg.password + "\n")
    source = _source(url=pg.url(), table="numbers", password_file=str(tmp_path / "secret"))
    assert len(_read_all(source)[0]) == 503


def test_the_user_may_come_from_pguser(pg, monkeypatch):
    monkeypatch.setenv("PGUSER", pg.user)
    monkeypatch.setenv("PGPASSWORD", pg.password)
    url = f"postgresql://{pg.host}:{pg.port}/{pg.database}"
    assert len(_read_all(_source(url=url, table="numbers"))[0]) == 503


def test_a_missing_password_variable_is_named(pg, monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    source = _source(name="db", url=pg.url(), table="numbers", password_env="NOT_SET_ANYWHERE")
    with pytest.raises(
        database.SqlError,
        match=r"sql source 'db': the environment variable "
        r"NOT_SET_ANYWHERE \(password_env\) is not set",
    ):
        database.Database(source)


def test_a_failed_login_says_why_and_never_shows_the_password(pg, monkeypatch):
    wrong = "Wr0ng-" + pg.password[:10]
    monkeypatch.setenv("PGPASSWORD", wrong)
    source = _source(name="db", url=pg.url(), table="numbers")
    with pytest.raises(database.SqlError) as e:
        database.Database(source)
    assert str(e.value) == (
        f"sql source 'db': cannot connect to {pg.url()}: "
        f'password authentication failed for user "{pg.user}"'
    )
    assert wrong not in str(e.value) and pg.password not in str(e.value)


def test_an_unreachable_server_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PGPASSWORD", "x")
    source = _source(name="db", url="postgresql://u@127.0.0.1:1/db", table="t")
    with pytest.raises(
        database.SqlError,
        match=r"sql source 'db': cannot connect to "
        r"postgresql://u@127.0.0.1:1/db: Can't create a connection",
    ):
        database.Database(source)


def test_a_missing_postgres_table_fails_with_the_server_message(pg, monkeypatch):
    source = _pg_source(pg, monkeypatch, name="db", table="nothere", partition_column="id")
    with pytest.raises(
        database.SqlError,
        match="sql source 'db': query failed: relation \"nothere\" does not exist",
    ):
        _read_all(source)
