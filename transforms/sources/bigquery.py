"""Reads a BigQuery table or the result of a standard SQL query into chunks of raw records.

A query format: its reader is applied to the pipeline root (its Beam steps are
`transforms.sources.queries.ReadBigquery`). Beam's `ReadFromBigQuery` does the reading (an
export job to Avro files on GCS, `method: EXPORT`, or the BigQuery Storage Read API,
`method: DIRECT_READ`) and yields one dict per row; `RowsToChunks` batches the rows into chunks
of up to `chunk_rows` records and maps each row to fields:

- Columns are fields of the same name; a RECORD (STRUCT) column becomes one field per leaf,
  named by its path (`address.city`); a REPEATED RECORD gives each leaf as a list over the
  elements (`items.sku` → `["a", "b"]`). NULL is a missing value; an empty array an empty list.
- Values keep their natural Python types (INT64 int, FLOAT64 float, BOOL bool, STRING str,
  BYTES bytes, REPEATED a list), except: NUMERIC/BIGNUMERIC become int when they have no
  fractional part (exact, also beyond 2**53) and float otherwise; DATE, TIME, DATETIME and
  TIMESTAMP become their ISO 8601 text (`2024-05-01`, `2024-05-01T12:30:00+00:00`).
- JSON exports (`use_json_exports: true`) carry BYTES as base64: the row coder decodes them, so
  BYTES are raw bytes whatever the method. Temporal values of JSON exports stay BigQuery's text.
- A row that cannot be mapped (a value of a type none of the above, an array of arrays) is
  rejected, naming the field.

BigQuery rows have no order: the export files and read streams arrive in any order. So a row's
number, which locates it in rejected records and breaks ties among duplicates of a key, is a
stable id: 63 bits of an XXH3 hash of the row's canonical JSON. The same rows give the same
locations, the same duplicate choice and the same bytes on every run.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import re
from typing import Any, Iterable, Mapping

from xxhash import xxh3_64_intdigest

from transforms.contract.config import OptionError, SourceOptions
from transforms.records import (
    CHUNK_ROWS,
    RawChunk,
    Rejected,
    location,
    one_line_records,
    record_json,
    rejection,
)
from transforms.sources.registry import Format, OptionsReader

METHODS = ("EXPORT", "DIRECT_READ")
PRIORITIES = ("BATCH", "INTERACTIVE")

# Beam's patterns for table references (apache_beam.io.gcp.bigquery_tools), with `.` or `:`
# after the project: `project:dataset.table`, `project.dataset.table`, `dataset.table`; a
# domain-scoped project is `example.com:project`; `$20240501` names a partition.
_PROJECT = r"(?:[a-z0-9.-]+:)?[a-z][a-z0-9-]*[a-z0-9]"
_TABLE_RE = re.compile(
    rf"(?:(?P<project>{_PROJECT})[:.])?(?P<dataset>\w{{1,1024}})\.(?P<table>[\w\- $]{{1,1024}})"
)
_DATASET_RE = re.compile(rf"(?P<project>{_PROJECT})[:.](?P<dataset>\w{{1,1024}})")


# --- options --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BigqueryOptions(SourceOptions):
    """The options of a bigquery source: the table or query read, Beam's read method and its
    settings, and the rows of a chunk."""

    table: str | None = None  # as Beam's PROJECT:DATASET.TABLE (or DATASET.TABLE)
    query: str | None = None
    method: str = "EXPORT"  # one of METHODS
    project: str | None = None
    gcs_location: str | None = None
    use_json_exports: bool = False
    query_priority: str = "BATCH"  # one of PRIORITIES
    temp_dataset: str | None = None  # as PROJECT:DATASET
    selected_fields: list[str] | None = None
    row_restriction: str | None = None
    chunk_rows: int = CHUNK_ROWS


def options(raw: dict[str, Any]) -> BigqueryOptions:
    """The bigquery options, checked, with their defaults."""
    opts = OptionsReader(raw)
    table = opts.string("table", None)
    query = opts.string("query", None)
    if (table is None) == (query is None):
        raise OptionError(
            "table" if table is not None else "query", "give exactly one of table and query"
        )
    if table is not None:
        table = table_reference(table)
    if query is not None:
        query = query.strip()
        if not query:
            raise OptionError("query", "is empty")
    method = _upper_choice(opts, "method", METHODS, "EXPORT")
    out = BigqueryOptions(
        table=table,
        query=query,
        method=method,
        project=opts.string("project", None),
        gcs_location=opts.string("gcs_location", None),
        use_json_exports=opts.boolean("use_json_exports", False),
        query_priority=_upper_choice(opts, "query_priority", PRIORITIES, "BATCH"),
        temp_dataset=opts.string("temp_dataset", None),
        selected_fields=opts.strings("selected_fields", None),
        row_restriction=opts.string("row_restriction", None),
        chunk_rows=opts.integer("chunk_rows", CHUNK_ROWS, minimum=1),
    )
    opts.done()
    if out.project is not None and not re.fullmatch(_PROJECT, out.project):
        raise OptionError("project", f"{out.project!r} is not a project id")
    if out.gcs_location is not None and not out.gcs_location.startswith("gs://"):
        raise OptionError("gcs_location", "must be a gs:// folder (BigQuery exports to GCS only)")
    if out.temp_dataset is not None:
        out = dataclasses.replace(out, temp_dataset=_dataset_reference(out.temp_dataset))
    _only_with(raw, method == "EXPORT", ("gcs_location", "use_json_exports"), "method EXPORT")
    _only_with(raw, query is not None, ("query_priority", "temp_dataset"), "a query")
    _only_with(
        raw,
        method == "DIRECT_READ" and table is not None,
        ("selected_fields", "row_restriction"),
        "method DIRECT_READ and a table",
    )
    if out.selected_fields == []:
        raise OptionError("selected_fields", "names no field")
    return out


def _upper_choice(opts: OptionsReader, name: str, choices: tuple[str, ...], default: str) -> str:
    value = opts.get(name, default)
    if not isinstance(value, str) or value.upper() not in choices:
        raise OptionError(name, f"{value!r} is not one of {', '.join(choices)}")
    return value.upper()


def _only_with(raw: dict[str, Any], allowed: bool, names: Iterable[str], what: str) -> None:
    for name in names:
        if name in raw and not allowed:
            raise OptionError(name, f"applies to {what} only")


def table_reference(table: str) -> str:
    """A table option as Beam's `PROJECT:DATASET.TABLE` (or `DATASET.TABLE`)."""
    match = _TABLE_RE.fullmatch(table)
    if match is None:
        raise OptionError(
            "table", f"{table!r} must be project:dataset.table or project.dataset.table"
        )
    project = match["project"]
    return f"{project + ':' if project else ''}{match['dataset']}.{match['table']}"


def _dataset_reference(dataset: str) -> str:
    match = _DATASET_RE.fullmatch(dataset)
    if match is None:
        raise OptionError("temp_dataset", f"{dataset!r} must be project.dataset or project:dataset")
    if match["dataset"].startswith("beam_temp_dataset_"):
        raise OptionError("temp_dataset", "names beginning with beam_temp_dataset_ are Beam's own")
    return f"{match['project']}:{match['dataset']}"


def source_label(opts: BigqueryOptions) -> str:
    """`bigquery:<table>` or `bigquery:query`: the prefix of the locations of a source's records."""
    return f"bigquery:{opts.table}" if opts.table is not None else "bigquery:query"


# --- reading --------------------------------------------------------------------------------------


# --- rows to records ------------------------------------------------------------------------------


class UnmappableValue(ValueError):
    """A row value with no field-value form; `reason` names the field."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def rows_to_chunk(
    source: str, path: str, rows: list[Any]
) -> tuple[RawChunk | None, list[Rejected]]:
    """The chunk of the rows that map to fields (None if none do), and the rejected others."""
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    raws: list[str] = []
    rejected: list[Rejected] = []
    for row in rows:
        raw = record_json(row)
        row_id = row_number(raw)
        try:
            if not isinstance(row, Mapping):
                raise UnmappableValue(f"not a row but {type(row).__name__}")
            fields = flatten_row(row)
        except UnmappableValue as e:
            rejected.append(rejection(source, location(path, row_id), f"bigquery: {e.reason}", raw))
            continue
        records.append(fields)
        lines.append(row_id)
        raws.append(raw)
    if not records:
        return None, rejected
    names = dict.fromkeys(name for fields in records for name in fields)
    columns = {name: [_field(fields, name) for fields in records] for name in names}
    return RawChunk(source, path, columns, lines, **one_line_records(raws)), rejected


def _field(fields: dict[str, Any], name: str) -> Any:
    """A record's value of a field; a leaf of an empty REPEATED RECORD is an empty list."""
    value = fields.get(name)
    if value is None and "." in name:
        parent = name
        while "." in parent:
            parent = parent.rsplit(".", 1)[0]
            if fields.get(parent) == []:
                return []
    return value


def row_number(raw: str) -> int:
    """A row's stable id: 63 bits of the XXH3 hash of its canonical JSON."""
    return xxh3_64_intdigest(raw.encode("utf-8", "surrogatepass")) >> 1


def flatten_row(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A row's fields: each column, and each leaf of a RECORD column under its dotted path."""
    fields: dict[str, Any] = {}
    for name, value in row.items():
        path = f"{prefix}{name}"
        if isinstance(value, Mapping):
            fields.update(flatten_row(value, path + "."))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            fields.update(_repeated_record(value, path))
        else:
            fields[path] = field_value(value, path)
    return fields


def _repeated_record(elements: list[Mapping[str, Any]], path: str) -> dict[str, list[Any]]:
    """A REPEATED RECORD as one list per leaf, over the elements (None where one lacks it)."""
    flat = [flatten_row(element, path + ".") for element in elements]
    leaves = dict.fromkeys(leaf for fields in flat for leaf in fields)
    out = {}
    for leaf in leaves:
        values = [fields.get(leaf) for fields in flat]
        if any(isinstance(v, list) for v in values):
            raise UnmappableValue(f"{leaf}: an array inside an array")
        out[leaf] = values
    return out


_PLAIN = (str, int, float, bytes)  # bool is an int


def field_value(value: Any, name: str) -> Any:
    """One BigQuery value as a field value: int, float, str, bytes, bool, None or a list of them."""
    if value is None or isinstance(value, _PLAIN):
        return value
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value == value.to_integral_value():
            return int(value)
        return float(value)
    if isinstance(value, (datetime.date, datetime.time)):  # a datetime is a date
        return value.isoformat()
    if isinstance(value, list):
        items = [field_value(v, name) for v in value]
        if any(isinstance(v, list) for v in items):
            raise UnmappableValue(f"{name}: an array inside an array")
        return items
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise UnmappableValue(f"{name}: unsupported value type {type(value).__name__}")


FORMAT = Format(
    name="bigquery",
    kind="query",
    options_type=BigqueryOptions,
    options=options,
    reader="transforms.sources.queries:ReadBigquery",  # Beam: imported when a pipeline reads
)
