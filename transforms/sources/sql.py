"""Reads a table or a query result of a SQL database (SQLite, PostgreSQL) into chunks of records.

A query format: its reader is applied to the pipeline root (its Beam steps are
`transforms.sources.queries.ReadSql`). With `partition_column`, a first
step reads the column's MIN and MAX and cuts the result into `partitions` ranges; each range is one
Beam element, read by its own DoFn call over its own connection, `chunk_rows` rows at a time
(SQLite's cursor, a PostgreSQL server-side cursor), so no worker holds a whole result. The ranges
cover every value exactly once by construction: the first is open below (`c < b1`), the middle
ones are half-open (`b1 <= c < b2`), the last is open above (`c >= bk`), and the NULLs of the
column are their own partition. Without `partition_column` the result is read by one DoFn call.

The connection, its drivers, credentials and value conversion are `transforms.sources.database`;
a row holding a value of no field-value form is rejected, naming the column; a connection or
query error fails the job.
"""

from __future__ import annotations

import dataclasses
import decimal
import itertools
import logging
import math
import os
from collections.abc import Iterator
from typing import Any

from transforms.contract.config import OptionError, SourceOptions, SourceSpec
from transforms.records import (
    CHUNK_ROWS,
    RawChunk,
    Rejected,
    location,
    rejection,
)
from transforms.sources.database import (
    Database,
    convert_rows,
    parse_url,
    source_error,
)
from transforms.sources.registry import Format, OptionsReader

logger = logging.getLogger(__name__)
DEFAULT_PARTITIONS = 4
_PG_ONLY = ("user", "password_env", "password_file")
_QUERY_ALIAS = "shardflow_query"


@dataclasses.dataclass(frozen=True)
class SqlOptions(SourceOptions):
    """The options of a sql source: the database's url, the table or query read, how the rows
    are cut into partitions and chunks, and a PostgreSQL user's name and password."""

    url: str
    table: str | None = None  # a name or schema.name; None: `query`
    query: str | None = None
    partition_column: str | None = None
    partitions: int = DEFAULT_PARTITIONS
    chunk_rows: int = CHUNK_ROWS
    user: str | None = None
    password_env: str | None = None
    password_file: str | None = None


def options(raw: dict[str, Any]) -> SqlOptions:
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
    out = SqlOptions(
        url=url,
        table=table,
        query=query,
        partition_column=partition_column,
        partitions=partitions if partitions is not None else DEFAULT_PARTITIONS,
        chunk_rows=opts.integer("chunk_rows", CHUNK_ROWS, minimum=1),
        user=opts.string("user", None),
        password_env=opts.string("password_env", None),
        password_file=opts.string("password_file", None),
    )
    opts.done()
    target = parse_url(url)
    if target.dialect == "sqlite":
        for name in _PG_ONLY:
            if getattr(out, name) is not None:
                raise OptionError(name, "applies to postgresql URLs only")
    if out.user is not None and target.user is not None:
        raise OptionError("user", "the url names a user already")
    if out.password_env is not None and out.password_file is not None:
        raise OptionError("password_file", "give password_env or password_file, not both")
    return out


def resolve_paths(opts: SqlOptions, base_dir: str) -> SqlOptions:
    """The options with a relative SQLite path and password_file resolved against `base_dir`."""
    url, secret = opts.url, opts.password_file
    target = parse_url(url)
    if target.dialect == "sqlite":
        assert target.path is not None  # parse_url gives a sqlite target a path
        if not os.path.isabs(target.path):
            url = "sqlite:///" + os.path.normpath(os.path.join(base_dir, target.path))
    if secret is not None and "://" not in secret and not os.path.isabs(secret):
        secret = os.path.normpath(os.path.join(base_dir, secret))
    return dataclasses.replace(opts, url=url, password_file=secret)


def source_label(opts: SqlOptions) -> str:
    """`sql:<table>` or `sql:query`: the prefix of the locations of a source's records."""
    return f"sql:{opts.table}" if opts.table is not None else "sql:query"


def quote_identifier(name: str) -> str:
    """A name quoted for SQL: exact (case-sensitive), any character allowed."""
    return '"' + name.replace('"', '""') + '"'


def from_clause(opts: SqlOptions) -> str:
    """The FROM item of every statement: the table, or the query as a subquery."""
    if opts.table is not None:
        return ".".join(quote_identifier(part) for part in opts.table.split("."))
    # the newline ends a trailing `-- comment` of the query before our closing parenthesis
    return f"(\n{opts.query}\n) AS {_QUERY_ALIAS}"


def select_sql(opts: SqlOptions, where: str | None = None) -> str:
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
    cuts: Iterator[int | decimal.Decimal | float]
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


def plan_partitions(db: Database, source: SourceSpec) -> list[Partition]:
    """The partitions to read a source in: one without a partition column, else its ranges."""
    opts = source.options_as(SqlOptions)
    column = opts.partition_column
    if column is None:
        return [Partition(None, None)]
    names = db.column_names(select_sql(opts))
    if column not in names:
        raise source_error(
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
    lo, hi = _min_max(db, _bounds_sql(opts, col, conditions))
    if not (_finite(lo) and _finite(hi)):
        # Infinities (and PostgreSQL's NaN, which sorts above them) would leave no room for
        # ranges; they still fall in the open-ended first and last ranges.
        low, high = ("-9e999", "9e999") if db.dialect == "sqlite" else ("'-Infinity'", "'Infinity'")
        conditions.append(f"{col} > {low} AND {col} < {high}")
        lo, hi = _min_max(db, _bounds_sql(opts, col, conditions))
    for bound in (lo, hi):
        if bound is not None and (
            isinstance(bound, bool) or not isinstance(bound, (int, float, decimal.Decimal))
        ):
            raise source_error(
                source,
                f"partition_column {column!r} must be numeric, "
                f"it holds {type(bound).__name__} values",
            )
    has_nulls = db.first_row(select_sql(opts, f"{col} IS NULL") + " LIMIT 1") is not None
    cuts = [] if lo is None else cut_points(lo, hi, opts.partitions)
    return range_partitions(column, cuts, has_nulls, db.dialect)


def _bounds_sql(opts: SqlOptions, col: str, conditions: list[str]) -> str:
    sql = f"SELECT MIN({col}), MAX({col}) FROM {from_clause(opts)}"
    return f"{sql} WHERE {' AND '.join(conditions)}" if conditions else sql


def _min_max(db: Database, sql: str) -> tuple[Any, Any]:
    """The one row of a `_bounds_sql` query: (MIN, MAX)."""
    row = db.first_row(sql)
    assert row is not None  # an aggregate without GROUP BY has one row
    lo, hi = row
    return lo, hi


def _finite(value: Any) -> bool:
    if isinstance(value, decimal.Decimal):
        return value.is_finite()
    return not isinstance(value, float) or math.isfinite(value)


def read_partition(
    db: Database, source: SourceSpec, partition: Partition
) -> Iterator[RawChunk | Rejected]:
    """Yields one partition's rows as chunks, and `Rejected` records for unconvertible rows.

    Rows are numbered from 1 in the order the database returns them; a record's location is
    `sql:<table or query>[:<partition>]:<row number>`.
    """
    opts = source.options_as(SqlOptions)
    path = source_label(opts) + (f":{partition.label}" if partition.label else "")
    start = 0
    sql = select_sql(opts, partition.where)
    for names, rows in db.rows(sql, opts.chunk_rows, partition.params):
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise source_error(
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


FORMAT = Format(
    name="sql",
    kind="query",
    options_type=SqlOptions,
    options=options,
    reader="transforms.sources.queries:ReadSql",  # Beam: imported when a pipeline reads
    resolve_paths=resolve_paths,
)
