"""A read-only connection to a SQL database (SQLite file or PostgreSQL server), for the `sql`
source (`transforms.sources.sql`), and the values it returns made field values.

Drivers: the standard library's `sqlite3` (files opened read-only) and `pg8000` (pure Python;
reads in a READ ONLY transaction). Credentials never come from the config: a URL holding a
password is refused at config time, and the password is read when a worker connects, from an
environment variable (`password_env`, default PGPASSWORD) or a file (`password_file`). Error
messages never contain it.

Values are delivered as their natural Python types for `transforms.schema` to type: integers,
floats, text, bytes, booleans, lists (PostgreSQL arrays), None. NUMERIC values without a fractional
part become int (exact, also beyond 2**53), others float; dates, times and timestamps their ISO
8601 text; UUIDs and network addresses their text. A row holding a value of any other type (a
JSON object, an interval, ...) is rejected, naming the column.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import decimal
import getpass
import ipaddress
import logging
import os
import sqlite3
import uuid
from collections.abc import Iterator
from typing import Any, Protocol, cast
from urllib.parse import quote, unquote, urlsplit

from transforms.contract.config import OptionError, SourceSpec

logger = logging.getLogger(__name__)
DEFAULT_PASSWORD_ENV = "PGPASSWORD"
DEFAULT_USER_ENV = "PGUSER"
_POSTGRES_SCHEMES = ("postgresql", "postgres")
_CURSOR = "shardflow_rows"
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


class SqlError(RuntimeError):
    """A source database cannot be read as configured (connection, query): the job fails."""


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
        assert self.host is not None  # parse_url gives a postgresql target a host
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
        exponent = value.as_tuple().exponent  # "n", "N" or "F" where the value is not finite
        if isinstance(exponent, int) and exponent >= 0:
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


class Database:
    """An open, read-only connection to one source's database.

    Every driver error becomes a `SqlError` naming the source, with the password (which no
    driver message should hold) masked all the same.
    """

    def __init__(self, source: SourceSpec):
        self._source = source
        self.target = parse_url(_options(source).url)
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
        assert self.target.path is not None  # parse_url gives a sqlite target a path
        path = os.path.abspath(self.target.path)
        # mode=ro: never creates a missing file, never writes; the DoFn owning the connection
        # may be set up on another thread than the one it processes on.
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, check_same_thread=False)
        conn.text_factory = _sqlite_text
        return conn

    def _connect_postgres(self):
        import pg8000.dbapi

        opts = _options(self._source)
        self._password = _password(self._source)
        user = self.target.user or opts.user or os.environ.get(DEFAULT_USER_ENV)
        if not user:
            try:
                user = getpass.getuser()  # libpq's default: the login name
            except (KeyError, OSError):
                raise source_error(
                    self._source, "no PostgreSQL user: give one in the url, `user` or PGUSER"
                ) from None
        try:
            return pg8000.dbapi.connect(
                user=user,
                password=self._password,
                host=self.target.host,
                port=self.target.port,
                database=self.target.database,
                application_name="shardflow",
            )
        except (AttributeError, TypeError):
            if self._password is not None:
                raise
            # pg8000 answers a server's password request with None.decode()
            raise source_error(
                self._source,
                f"cannot connect to {self.target.describe()}: the server asks for a password "
                f"and none is set: give it in the environment variable {DEFAULT_PASSWORD_ENV} "
                "(or `password_env`), or in `password_file`",
            ) from None

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
            raise source_error(self._source, f"{doing}: {message}") from None

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


def source_error(source: SourceSpec, message: str) -> SqlError:
    return SqlError(f"sql source {source.name!r}: {message}")


class ConnectionOptions(Protocol):
    """What a connection reads of a sql source's options (`transforms.sources.sql.SqlOptions`,
    whose module imports this one)."""

    url: str
    user: str | None
    password_env: str | None
    password_file: str | None


def _options(source: SourceSpec) -> ConnectionOptions:
    """The connection options of a sql source."""
    return cast(ConnectionOptions, source.options)


def _password(source: SourceSpec) -> str | None:
    """The password of a PostgreSQL source, read now, from its file or environment variable."""
    opts = _options(source)
    if opts.password_file is not None:
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        try:
            with FileSystems.open(
                opts.password_file, compression_type=CompressionTypes.UNCOMPRESSED
            ) as f:
                return f.read().decode("utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            raise source_error(
                source, f"cannot read password_file {opts.password_file}: {type(e).__name__}"
            ) from None
    name = opts.password_env or DEFAULT_PASSWORD_ENV
    password = os.environ.get(name)
    if password is None and opts.password_env is not None:
        raise source_error(source, f"the environment variable {name} (password_env) is not set")
    return password
