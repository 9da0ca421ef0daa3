"""Reads Avro object container files into chunks of raw records, with fastavro.

A file's records must be Avro records; their fields are the record's fields. Values are
delivered as Python values: null (also a null union branch) is a missing value, `bytes` and
`fixed` stay bytes, enums are their symbol, arrays are lists; dates, times and timestamps are
ISO 8601 text, decimals and UUIDs are text (logical types). Nested values are flattened like
Parquet columns (`transforms.sources.parquet`): a record field `a{x, y}` gives `a.x` and `a.y`
(a null record: both missing), an array of records gives one list per field (`a.x`), a map `m` gives
the lists `m.key` and `m.value`. A union of several records, maps or arrays of records, and
recursive records, are delivered as they are (dicts), which the Validator rejects.

Record numbers (1-based, in file order) are the records' "lines". A file whose header cannot be
read fails the job (`FileError`, naming the file). Within a data block, a record that cannot be
decoded is rejected with the rest of its block (`avro: undecodable record`), as the block's
following records cannot be located; when the block claims more records than it has bytes, its
count is corrupt, and the rest of the block is one `avro: unreadable data block`. A block that
cannot be read at all (truncated, corrupt compressed data, a wrong sync marker) ends the reading
of the file: the rest of the file is one rejected record (`avro: unreadable data block`), since
its record count is unknown.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from typing import Any, BinaryIO, Callable, Iterator

import fastavro
from fastavro.schema import SchemaParseException

from transforms.contract.config import SourceOptions, SourceSpec
from transforms.files import FileError
from transforms.records import CHUNK_ROWS, RawChunk, Rejected, location, rejection
from transforms.sources.chunks import ChunkBuilder
from transforms.sources.nested import flat_name, plain_value
from transforms.sources.registry import Format, OptionsReader

UNDECODABLE_RECORD = "avro: undecodable record"
UNREADABLE_BLOCK = "avro: unreadable data block"
# What fastavro raises on bad bytes (C and Python readers): short reads, bad varints, lengths,
# union or enum indexes, text that is not UTF-8, sync markers, codec data.
_DATA_ERRORS = (EOFError, ValueError, IndexError, KeyError, OverflowError, zlib.error)

# A field's value → {suffix: value}, suffix "" for the value itself (see `_expander`).
Expand = Callable[[Any], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class AvroOptions(SourceOptions):
    """The options of an avro source: none so far."""


def options(raw: dict[str, Any]) -> AvroOptions:
    """The avro options (none so far), checked."""
    opts = OptionsReader(raw)
    opts.done()
    return AvroOptions()


def parse_avro(
    stream: BinaryIO, path: str, source: SourceSpec, chunk_rows: int = CHUNK_ROWS
) -> Iterator[RawChunk | Rejected]:
    """Yields chunks of records and, for undecodable records or blocks, `Rejected` records."""
    try:
        blocks = fastavro.block_reader(stream)
        named: dict[str, Any] = {}
        schema = fastavro.parse_schema(blocks.writer_schema, named_schemas=named)
    except (*_DATA_ERRORS, SchemaParseException) as e:
        raise FileError(f"{path}: not a readable Avro file: {e}") from None
    if not (isinstance(schema, dict) and schema.get("type") == "record"):
        kind = schema.get("type") if isinstance(schema, dict) else schema
        raise FileError(f"{path}: the file's records are not Avro records (schema type {kind!r})")
    expanders = _record_fields(schema, named)
    pending = ChunkBuilder(
        source.name, path, chunk_rows, columns_of=functools.partial(_columns, expanders)
    )
    offset = _tell(stream)  # where the next block starts
    number = 0  # records read so far, rejected ones included
    block_iter = iter(blocks)
    while True:
        try:
            block = next(block_iter)
        except StopIteration:
            break
        except _DATA_ERRORS:
            yield rejection(
                source.name, location(path, number + 1), UNREADABLE_BLOCK, {"offset": offset}
            )
            break
        offset = block.offset + block.size
        records: list[dict[str, Any]] = []
        rest = 0
        try:
            for record in block:
                # the schema is a record's (checked above): each item is a dict
                records.append(record)  # type: ignore[arg-type]
        except _DATA_ERRORS:
            decoded = len(records)
            rest = block.num_records - decoded
            if rest > block.size:  # more records than bytes: the block's count is corrupt
                where = location(path, number + decoded + 1)
                yield rejection(source.name, where, UNREADABLE_BLOCK, {"offset": block.offset})
                rest = 1
            else:
                for i in range(decoded, block.num_records):
                    where = location(path, number + i + 1)
                    yield rejection(
                        source.name, where, UNDECODABLE_RECORD, {"block_offset": block.offset}
                    )
        yield from pending.add_rows(records, range(number + 1, number + len(records) + 1))
        number += len(records) + rest
    yield from pending.flush()


parse = parse_avro
FORMAT = Format(
    name="avro",
    kind="file",
    options_type=AvroOptions,
    options=options,
    reader=parse_avro,
    extensions=(".avro",),
)


def _tell(stream: BinaryIO) -> int | None:
    try:
        return stream.tell()
    except (OSError, AttributeError):
        return None


def _columns(expanders: dict[str, Expand | None], records: list[dict]) -> dict[str, list[Any]]:
    """The columns of records: their fields, nested values flattened by the fields' expanders."""
    columns: dict[str, list[Any]] = {}
    for name, expand in expanders.items():
        values = [record.get(name) for record in records]
        if expand is None:
            columns[name] = values
            continue
        expanded = [expand(v) for v in values]
        for suffix in expanded[0] if expanded else ():
            columns[flat_name(name, suffix)] = [e[suffix] for e in expanded]
    return columns


# --- nested values: a plan per field, compiled once per file from the writer's schema ----------


def _record_fields(schema: dict, named: dict[str, Any]) -> dict[str, Expand | None]:
    """Top-level field → how to flatten its values (None: the value is delivered unchanged)."""
    plans = {}
    for field in schema["fields"]:
        expand = _expander(field["type"], named, (schema["name"],))
        plans[field["name"]] = expand
    return plans


def _expander(schema: Any, named: dict[str, Any], seen: tuple[str, ...]) -> Expand | None:
    """A function giving the flat fields of a value of `schema`, or None for a plain value."""
    schema = _resolve(schema, named)
    if isinstance(schema, list):  # a union
        branches = [b for b in schema if _resolve(b, named) != "null"]
        if len(branches) == 1:
            return _expander(branches[0], named, seen)
        if any(_logical(_resolve(b, named)) for b in branches):
            return _plain
        return None
    if not isinstance(schema, dict):
        return None
    kind = schema["type"]
    if kind == "record":
        if schema["name"] in seen:  # recursive: no finite set of fields
            return None
        inner = seen + (schema["name"],)
        subs = [(f["name"], _expander(f["type"], named, inner) or _plain) for f in schema["fields"]]
        return _record_expander(subs, _suffixes(subs))
    if kind == "array":
        item = _expander(schema["items"], named, seen)
        if item is None or item is _plain:
            return _plain if _contains_logical(schema, named) else None
        return _list_expander(item, item(None).keys())
    if kind == "map":
        value = _expander(schema["values"], named, seen) or _plain
        return _map_expander(value, value(None).keys())
    return _plain if _logical(schema) else None


def _resolve(schema: Any, named: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema in named:
        return named[schema]
    return schema


def _logical(schema: Any) -> bool:
    return isinstance(schema, dict) and "logicalType" in schema


def _contains_logical(schema: Any, named: dict[str, Any]) -> bool:
    schema = _resolve(schema, named)
    if isinstance(schema, list):
        return any(_contains_logical(b, named) for b in schema)
    if isinstance(schema, dict) and schema.get("type") == "array":
        return _contains_logical(schema["items"], named)
    return _logical(schema)


def _plain(value: Any) -> dict[str, Any]:
    return {"": plain_value(value)}


def _suffixes(subs: list[tuple[str, Expand]]) -> list[tuple[str, str, str]]:
    """(field, its suffix, the flat suffix) of every leaf of a record's fields."""
    return [(name, s, flat_name(name, s)) for name, sub in subs for s in sub(None)]


def _record_expander(subs: list[tuple[str, Expand]], leaves: list) -> Expand:
    def expand(value: Any) -> dict[str, Any]:
        if value is None:
            return {flat: None for _, _, flat in leaves}
        out = {}
        for name, sub in subs:
            for suffix, v in sub(value.get(name)).items():
                out[flat_name(name, suffix)] = v
        return out

    return expand


def _list_expander(item: Expand, suffixes) -> Expand:
    suffixes = list(suffixes)

    def expand(value: Any) -> dict[str, Any]:
        if value is None:
            return {s: None for s in suffixes}
        items = [item(v) for v in value]
        return {s: [i[s] for i in items] for s in suffixes}

    return expand


def _map_expander(value_expand: Expand, suffixes) -> Expand:
    values = _list_expander(value_expand, suffixes)
    leaves = ["key"] + [flat_name("value", s) for s in suffixes]

    def expand(value: Any) -> dict[str, Any]:
        if value is None:
            return {leaf: None for leaf in leaves}
        out = {"key": list(value)}
        for suffix, v in values(list(value.values())).items():
            out[flat_name("value", suffix)] = v
        return out

    return expand
