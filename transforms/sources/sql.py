"""Reads a table or a query result of a SQL database (SQLite, PostgreSQL) into chunks of records.

A query format: `Read(source)` is applied to the pipeline root. With `partition_column`, a first
step reads the column's MIN and MAX and cuts the result into `partitions` ranges; each range is one
Beam element, read by its own DoFn call over its own connection, `chunk_rows` rows at a time
(SQLite's cursor, a PostgreSQL server-side cursor), so no worker holds a whole result. The ranges
cover every value exactly once by construction: the first is open below (`c < b1`), the middle
ones are half-open (`b1 <= c < b2`), the last is open above (`c >= bk`), and the NULLs of the
column are their own partition. Without `partition_column` the result is read by one DoFn call.

Drivers: the standard library's `sqlite3` (files opened read-only) and `pg8000` (pure Python;
reads in a READ ONLY transaction). Credentials never come from the config: a URL holding a
password is refused at config time, and the password is read when a worker connects, from an
environment variable (`password_env`, default PGPASSWORD) or a file (`password_file`). Error
messages never contain it.

Values are delivered as their natural Python types for `transforms.schema` to type: integers,
floats, text, bytes, booleans, lists (PostgreSQL arrays), None. NUMERIC values without a fractional
part become int (exact, also beyond 2**53), others float; dates, times and timestamps their ISO
8601 text; UUIDs and network addresses their text. A row holding a value of any other type (a
JSON object, an interval, ...) is rejected, naming the column; a connection or query error fails
the job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import decimal
import getpass
import ipaddress
import itertools
import logging
import math
import os
import sqlite3
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import apache_beam as beam

from transforms.contract.config import OptionError, SourceSpec
from transforms.records import (
    CHUNK_ROWS,
    COUNTS,
    REJECTED,
    RawChunk,
    gc_paused,
    location,
    rejection,
)
from transforms.sources.read import tagged
from transforms.sources.registry import OptionsReader

logger = logging.getLogger(__name__)

DEFAULT_PARTITIONS = 4
DEFAULT_PASSWORD_ENV = "PGPASSWORD"
DEFAULT_USER_ENV = "PGUSER"
_POSTGRES_SCHEMES = ("postgresql", "postgres")
_PG_ONLY = ("user", "password_env", "password_file")
_QUERY_ALIAS = "shardflow_query"
_CURSOR = "shardflow_rows"


class SqlError(RuntimeError):
    """A source database cannot be read as configured (connection, query): the job fails."""


# --- options --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Target:
    """Where a source's database is: a SQLite file, or a PostgreSQL server and database."""

    dialect: str  # "sqlite" | "postgresql"
    path: str | None = None  # sqlite
    host: str | None = None
    port: int | None = None
    database: str | None = None
    user: str | None = None

    def describe(self) -> str:
        """The target as a URL for messages (it never holds a password)."""
        if self.dialect == "sqlite":
            return f"sqlite:///{self.path}"
        user = f"{self.user}@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"postgresql://{user}{host}:{self.port}/{self.database}"


def parse_url(url: str) -> Target:
    """The target of a `url` option; raises OptionError("url", ...) for anything unusable."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in _POSTGRES_SCHEMES:
        if parts.password is not None:
            raise OptionError(
                "url",
                "holds a password: remove it from the config and give it through password_env "
                f"(an environment variable, default {DEFAULT_PASSWORD_ENV}) or password_file",
            )
        if parts.query or parts.fragment:
            raise OptionError("url", "takes no ?parameters or #fragment")
        try:
            port = parts.port or 5432
        except ValueError:
            raise OptionError("url", "has an invalid port") from None
        database = unquote(parts.path.lstrip("/"))
        if not database:
            raise OptionError("url", "names no database: postgresql://[user@]host[:port]/database")
        user = unquote(parts.username) if parts.username else None
        return Target("postgresql", None, parts.hostname or "localhost", port, database, user)
    if scheme == "sqlite":
        if parts.netloc:
            raise OptionError(
                "url",
                "a SQLite URL has no host: sqlite:///relative/path.db or "
                "sqlite:////absolute/path.db",
            )
        if parts.query or parts.fragment:
            raise OptionError("url", "takes no ?parameters or #fragment")
        path = parts.path[1:]
        if not path:
            raise OptionError("url", "names no database file: sqlite:///path.db")
        return Target("sqlite", path=path)
    raise OptionError("url", f"unsupported scheme {parts.scheme!r} (sqlite, postgresql)")


def options(raw: dict[str, Any]) -> dict[str, Any]:
    """The sql options, checked, with their defaults."""
    opts = OptionsReader(raw)
    url = opts.string("url")
    table = opts.string("table", None)
    query = opts.string("query", None)
    if (table is None) == (query is None):
        raise OptionError(
            "table" if table is not None else "query", "give exactly one of table and query"
        )
    if table is not None and not all(table.split(".")):
        raise OptionError("table", f"{table!r} must be a name or schema.name")
    if query is not None:
        query = query.strip().rstrip(";").strip()
        if not query:
            raise OptionError("query", "is empty")
    partition_column = opts.string("partition_column", None)
    partitions = opts.integer("partitions", None, minimum=1)
    if partitions is not None and partition_column is None:
        raise OptionError("partitions", "needs a partition_column to cut the rows by")
    out = {
        "url": url,
        "table": table,
        "query": query,
        "partition_column": partition_column,
        "partitions": partitions if partitions is not None else DEFAULT_PARTITIONS,
        "chunk_rows": opts.integer("chunk_rows", CHUNK_ROWS, minimum=1),
        "user": opts.string("user", None),
        "password_env": opts.string("password_env", None),
        "password_file": opts.string("password_file", None),
    }
    opts.done()
    target = parse_url(url)
    if target.dialect == "sqlite":
        for name in _PG_ONLY:
            if out[name] is not None:
                raise OptionError(name, "applies to postgresql URLs only")
    if out["user"] is not None and target.user is not None:
        raise OptionError("user", "the url names a user already")
    if out["password_env"] is not None and out["password_file"] is not None:
        raise OptionError("password_file", "give password_env or password_file, not both")
    return out


def resolve_paths(opts: dict[str, Any], base_dir: str) -> dict[str, Any]:
    """The options with a relative SQLite path and password_file resolved against `base_dir`."""
    out = dict(opts)
    target = parse_url(opts["url"])
    if target.dialect == "sqlite" and not os.path.isabs(target.path):
        out["url"] = "sqlite:///" + os.path.normpath(os.path.join(base_dir, target.path))
    secret = opts["password_file"]
    if secret is not None and "://" not in secret and not os.path.isabs(secret):
        out["password_file"] = os.path.normpath(os.path.join(base_dir, secret))
    return out


def source_label(opts: dict[str, Any]) -> str:
    """`sql:<table>` or `sql:query`: the prefix of the locations of a source's records."""
    return f"sql:{opts['table']}" if opts["table"] is not None else "sql:query"


# --- SQL text -------------------------------------------------------------------------------------


def quote_identifier(name: str) -> str:
    """A name quoted for SQL: exact (case-sensitive), any character allowed."""
    return '"' + name.replace('"', '""') + '"'


def from_clause(opts: dict[str, Any]) -> str:
    """The FROM item of every statement: the table, or the query as a subquery."""
    if opts["table"] is not None:
        return ".".join(quote_identifier(part) for part in opts["table"].split("."))
    # the newline ends a trailing `-- comment` of the query before our closing parenthesis
    return f"(\n{opts['query']}\n) AS {_QUERY_ALIAS}"


def select_sql(opts: dict[str, Any], where: str | None = None) -> str:
    sql = f"SELECT * FROM {from_clause(opts)}"
    return sql if where is None else f"{sql} WHERE {where}"


@dataclasses.dataclass(frozen=True)
class Partition:
    """One slice of a source's rows: those whose partition column satisfies `where` (None: all).

    `label` names the slice in the locations of its records, e.g. `100<=id<200`. The bounds in
    `where` are placeholders (`?` for SQLite, `$1`, `$2` for PostgreSQL) bound to `params`:
    values read from the database never become SQL text.
    """

    label: str | None
    where: str | None
    params: tuple = ()


def _literal(value: int | float | decimal.Decimal) -> str:  # noqa: PYI041 (ints stay exact)
    return str(value) if isinstance(value, (int, decimal.Decimal)) else repr(float(value))


def cut_points(lo: Any, hi: Any, partitions: int) -> list[Any]:
    """The increasing interior boundaries b1 < ... < bk cutting [lo, hi] into even ranges.

    Fewer than `partitions - 1` when the range holds fewer distinct integers; none for one
    partition, or for bounds that are not finite numbers.
    """
    if isinstance(lo, int) and isinstance(hi, int):
        span = hi - lo + 1
        cuts = (lo + span * i // partitions for i in range(1, partitions))
    elif isinstance(lo, decimal.Decimal) and isinstance(hi, decimal.Decimal):
        if not (lo.is_finite() and hi.is_finite()):
            return []
        cuts = (lo + (hi - lo) * i / partitions for i in range(1, partitions))
    else:
        lo, hi = float(lo), float(hi)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return []
        cuts = (lo + (hi - lo) * i / partitions for i in range(1, partitions))
    return sorted({c for c in cuts if lo < c <= hi})


def range_partitions(
    column: str, cuts: list[Any], has_nulls: bool, dialect: str = "sqlite"
) -> list[Partition]:
    """Partitions covering every value of `column` once: the first and last ranges are open."""
    col = quote_identifier(column)
    if not cuts:
        parts = [Partition(f"{column} IS NOT NULL", f"{col} IS NOT NULL")]
    else:
        one, two = ("?", "?") if dialect == "sqlite" else ("$1", "$2")
        shown = [_literal(c) for c in cuts]  # for locations only
        parts = [Partition(f"{column}<{shown[0]}", f"{col} < {one}", (cuts[0],))]
        for (a, b), (sa, sb) in zip(itertools.pairwise(cuts), itertools.pairwise(shown)):
            where = f"{col} >= {one} AND {col} < {two}"
            parts.append(Partition(f"{sa}<={column}<{sb}", where, (a, b)))
        parts.append(Partition(f"{column}>={shown[-1]}", f"{col} >= {one}", (cuts[-1],)))
    if has_nulls:
        parts.append(Partition(f"{column} IS NULL", f"{col} IS NULL"))
    return parts


# --- values ---------------------------------------------------------------------------------------

_PLAIN = frozenset({int, float, str, bytes, bool, type(None)})
_TEXT_TYPES = (
    uuid.UUID,
    ipaddress.IPv4Address,
    ipaddress.IPv6Address,
    ipaddress.IPv4Network,
    ipaddress.IPv6Network,
    ipaddress.IPv4Interface,
    ipaddress.IPv6Interface,
)


class UnsupportedValue(ValueError):
    """A database value with no field-value form (a JSON object, an interval, ...)."""

    def __init__(self, value: Any):
        super().__init__(type(value).__name__)
        self.type_name = type(value).__name__


def convert_value(value: Any) -> Any:
    """One database value as a field value: int, float, str, bytes, bool, None or a list of them."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value.as_tuple().exponent >= 0:
            return int(value)
        return float(value)
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [convert_value(v) for v in value]
    if isinstance(value, _TEXT_TYPES):
        return str(value)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise UnsupportedValue(value)


def convert_rows(
    names: list[str], rows: list[tuple]
) -> tuple[dict[str, list[Any]], dict[int, str]]:
    """The rows as columns of field values, and {row index: reason} of the rows that cannot be.

    A rejected row's reason names its first column holding an unsupported value.
    """
    columns: dict[str, list[Any]] = {}
    reasons: dict[int, str] = {}
    for name, values in zip(names, zip(*rows)):
        if _PLAIN.issuperset(map(type, values)):
            columns[name] = list(values)
            continue
        converted = []
        for i, value in enumerate(values):
            try:
                converted.append(convert_value(value))
            except UnsupportedValue as e:
                converted.append(None)
                reasons.setdefault(i, f"sql: {name}: unsupported value type {e.type_name}")
        columns[name] = converted
    if not rows:
        columns = {name: [] for name in names}
    return columns, reasons


# --- connections ----------------------------------------------------------------------------------


class Database:
    """An open, read-only connection to one source's database.

    Every driver error becomes a `SqlError` naming the source, with the password (which no
    driver message should hold) masked all the same.
    """

    def __init__(self, source: SourceSpec):
        self._source = source
        self.target = parse_url(source.options["url"])
        self._password: str | None = None
        self._conn: Any = None
        with self._errors(f"cannot connect to {self.target.describe()}"):
            if self.target.dialect == "sqlite":
                self._conn = self._connect_sqlite()
            else:
                self._conn = self._connect_postgres()

    @property
    def dialect(self) -> str:
        return self.target.dialect

    def _connect_sqlite(self) -> sqlite3.Connection:
        path = os.path.abspath(self.target.path)
        # mode=ro: never creates a missing file, never writes; the DoFn owning the connection
        # may be set up on another thread than the one it processes on.
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, check_same_thread=False)
        conn.text_factory = _sqlite_text
        return conn

    def _connect_postgres(self):
        import pg8000.dbapi

        opts = self._source.options
        self._password = _password(self._source)
        user = self.target.user or opts["user"] or os.environ.get(DEFAULT_USER_ENV)
        if not user:
            try:
                user = getpass.getuser()  # libpq's default: the login name
            except (KeyError, OSError):
                raise _error(
                    self._source, "no PostgreSQL user: give one in the url, `user` or PGUSER"
                ) from None
        return pg8000.dbapi.connect(
            user=user,
            password=self._password,
            host=self.target.host,
            port=self.target.port,
            database=self.target.database,
            application_name="shardflow",
        )

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except SqlError:
            raise
        except (sqlite3.Error, OSError) + self._pg_errors() as e:
            message = _driver_message(e)
            if self._password:
                message = message.replace(self._password, "***")
            raise _error(self._source, f"{doing}: {message}") from None

    def _pg_errors(self) -> tuple[type[BaseException], ...]:
        if self.target.dialect == "sqlite":
            return ()
        import pg8000.dbapi

        return (pg8000.dbapi.Error,)

    def rows(
        self, sql: str, chunk_rows: int, params: tuple = ()
    ) -> Iterator[tuple[list[str], list[tuple]]]:
        """(column names, up to chunk_rows rows) for the whole result of `sql`, in order.

        `params` are bound to the placeholders of `sql` (see Partition), by the driver.
        """
        with self._errors("query failed"):
            if self.dialect == "sqlite":
                cursor = self._conn.execute(sql, params)
                names = [d[0] for d in cursor.description]
                while True:
                    rows = cursor.fetchmany(chunk_rows)
                    yield names, rows
                    if len(rows) < chunk_rows:
                        return
            cursor = self._conn.cursor()
            # pg8000 holds a whole result in memory: a server-side cursor hands it out in chunks.
            try:
                cursor.execute("SET TRANSACTION READ ONLY")
                declare = f"DECLARE {_CURSOR} NO SCROLL CURSOR FOR {sql}"
                if params:
                    # $n placeholders straight to the server (pg8000's paramstyle conversion
                    # would misread a `%` of the user's query)
                    self._conn.execute_unnamed(declare, vals=params)
                else:
                    cursor.execute(declare)
                while True:
                    cursor.execute(f"FETCH FORWARD {int(chunk_rows)} FROM {_CURSOR}")
                    rows = cursor.fetchall()
                    yield [d[0] for d in cursor.description], list(rows)
                    if len(rows) < chunk_rows:
                        return
            finally:
                self._conn.rollback()

    def first_row(self, sql: str) -> tuple | None:
        """The first row of `sql`'s result (None when empty)."""
        for _, rows in self.rows(sql, 1):
            return tuple(rows[0]) if rows else None
        return None

    def column_names(self, sql: str) -> list[str]:
        for names, _ in self.rows(f"{sql} LIMIT 0", 1):
            return names
        return []

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection: nothing to save
                self._conn.close()
            self._conn = None


def _driver_message(error: BaseException) -> str:
    # pg8000 puts the server's error fields in a dict: M is the message, D the detail.
    arg = error.args[0] if error.args else None
    if isinstance(arg, dict) and "M" in arg:
        return arg["M"] + (f" ({arg['D']})" if arg.get("D") else "")
    return str(error) or type(error).__name__


def _sqlite_text(data: bytes) -> str | bytes:
    """A SQLite TEXT value: str, or its bytes when they are not UTF-8.

    sqlite3 would fail the whole read on such a value; as bytes, the schema rejects it for string
    features ("not valid UTF-8") and bytes features get it unchanged.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def _error(source: SourceSpec, message: str) -> SqlError:
    return SqlError(f"sql source {source.name!r}: {message}")


def _password(source: SourceSpec) -> str | None:
    """The password of a PostgreSQL source, read now, from its file or environment variable."""
    opts = source.options
    if opts["password_file"] is not None:
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        try:
            with FileSystems.open(
                opts["password_file"], compression_type=CompressionTypes.UNCOMPRESSED
            ) as f:
                return f.read().decode("utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            raise _error(
                source, f"cannot read password_file {opts['password_file']}: {type(e).__name__}"
            ) from None
    name = opts["password_env"] or DEFAULT_PASSWORD_ENV
    password = os.environ.get(name)
    if password is None and opts["password_env"] is not None:
        raise _error(source, f"the environment variable {name} (password_env) is not set")
    return password


# --- reading --------------------------------------------------------------------------------------


def plan_partitions(db: Database, source: SourceSpec) -> list[Partition]:
    """The partitions to read a source in: one without a partition column, else its ranges."""
    opts = source.options
    column = opts["partition_column"]
    if column is None:
        return [Partition(None, None)]
    names = db.column_names(select_sql(opts))
    if column not in names:
        raise _error(
            source,
            f"partition_column {column!r} is not a column of the result "
            f"(columns: {', '.join(names)})",
        )
    col = quote_identifier(column)
    conditions = []
    if db.dialect == "sqlite":
        # SQLite columns may mix types; text and blobs sort after every number and so fall in
        # the last, open-ended range: the bounds come from the numbers alone.
        conditions.append(f"typeof({col}) IN ('integer', 'real')")
    lo, hi = db.first_row(_bounds_sql(opts, col, conditions))
    if not (_finite(lo) and _finite(hi)):
        # Infinities (and PostgreSQL's NaN, which sorts above them) would leave no room for
        # ranges; they still fall in the open-ended first and last ranges.
        low, high = ("-9e999", "9e999") if db.dialect == "sqlite" else ("'-Infinity'", "'Infinity'")
        conditions.append(f"{col} > {low} AND {col} < {high}")
        lo, hi = db.first_row(_bounds_sql(opts, col, conditions))
    for bound in (lo, hi):
        if bound is not None and (
            isinstance(bound, bool) or not isinstance(bound, (int, float, decimal.Decimal))
        ):
            raise _error(
                source,
                f"partition_column {column!r} must be numeric, "
                f"it holds {type(bound).__name__} values",
            )
    has_nulls = db.first_row(select_sql(opts, f"{col} IS NULL") + " LIMIT 1") is not None
    cuts = [] if lo is None else cut_points(lo, hi, opts["partitions"])
    return range_partitions(column, cuts, has_nulls, db.dialect)


def _bounds_sql(opts: dict[str, Any], col: str, conditions: list[str]) -> str:
    sql = f"SELECT MIN({col}), MAX({col}) FROM {from_clause(opts)}"
    return f"{sql} WHERE {' AND '.join(conditions)}" if conditions else sql


def _finite(value: Any) -> bool:
    if isinstance(value, decimal.Decimal):
        return value.is_finite()
    return not isinstance(value, float) or math.isfinite(value)


def read_partition(
    db: Database, source: SourceSpec, partition: Partition
) -> Iterator[RawChunk | dict[str, Any]]:
    """Yields one partition's rows as chunks, and rejected-record dicts for unconvertible rows.

    Rows are numbered from 1 in the order the database returns them; a record's location is
    `sql:<table or query>[:<partition>]:<row number>`.
    """
    opts = source.options
    path = source_label(opts) + (f":{partition.label}" if partition.label else "")
    start = 0
    sql = select_sql(opts, partition.where)
    for names, rows in db.rows(sql, opts["chunk_rows"], partition.params):
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise _error(
                source,
                f"the result has several columns named {', '.join(map(repr, twice))}: "
                "give them distinct names (AS ...)",
            )
        if not rows:
            continue
        columns, reasons = convert_rows(names, rows)
        lines = list(range(start + 1, start + len(rows) + 1))
        if reasons:
            for i, reason in sorted(reasons.items()):
                raw = dict(zip(names, rows[i]))
                yield rejection(source.name, location(path, lines[i]), reason, raw)
            keep = [i for i in range(len(rows)) if i not in reasons]
            columns = {name: [values[i] for i in keep] for name, values in columns.items()}
            lines = [lines[i] for i in keep]
        if lines:
            yield RawChunk(source.name, path, columns, lines)
        start += len(rows)


class _PlanPartitionsFn(beam.DoFn):
    def __init__(self, source: SourceSpec):
        self._source = source

    def process(self, _):
        if self._source.options["partition_column"] is None:
            yield Partition(None, None)
            return
        db = Database(self._source)
        try:
            parts = plan_partitions(db, self._source)
        finally:
            db.close()
        logger.info("sql source %r: %d partition(s)", self._source.name, len(parts))
        yield from parts


class _ReadPartitionFn(beam.DoFn):
    def __init__(self, source: SourceSpec):
        self._source = source
        self._db: Database | None = None

    def setup(self):
        self._db = Database(self._source)

    def process(self, partition: Partition):
        with gc_paused():
            items = read_partition(self._db, self._source, partition)
            yield from tagged(items, self._source.name)

    def teardown(self):
        if self._db is not None:
            self._db.close()
            self._db = None


class Read(beam.PTransform):
    """Reads one sql source, a partition per Beam element. Returns (chunks, rejected, counts)."""

    def __init__(self, source: SourceSpec):
        super().__init__()
        self._source = source

    def expand(self, pbegin):
        read = (
            pbegin
            | "Start" >> beam.Impulse()
            | "PlanPartitions" >> beam.ParDo(_PlanPartitionsFn(self._source))
            # a fusion break: the partitions spread over the workers instead of staying on one
            | "SpreadPartitions" >> beam.Reshuffle()
            | "ReadPartitions"
            >> beam.ParDo(_ReadPartitionFn(self._source))
            .with_output_types(RawChunk)
            .with_outputs(REJECTED, COUNTS, main="chunks")
        )
        return read.chunks, read[REJECTED], read[COUNTS]
