"""Reads Parquet files into chunks of raw records: one record per row, fields are the columns.

Nested columns become flat fields with dotted names, so that every field is a value or a list
of values (what a `tf.train.Example` feature can hold):

  struct `a{x, y}`          → `a.x`, `a.y` (a null struct: both missing); nested structs recurse
  list of structs `a[{x}]`  → `a.x`: the list of the elements' x (one list field per child)
  map `m`                   → `m.key` and `m.value`: the lists of its keys and of its values

Other values are delivered as Python values: numbers, booleans, text, bytes, lists (list
columns); dates, times and timestamps as ISO 8601 text, decimals as text. The schema Validator
types them. `avro` uses the same mapping (`flat_name`, `plain_value`).

A file is read a row group at a time, in record batches of at most `chunk_rows` rows, never as a
whole. A file whose footer cannot be read fails the job (`FileError`, naming the file). A row
group whose pages cannot be decoded has its rows not yet delivered rejected one by one, with the
reason `parquet: unreadable row group`; the other row groups are read. An error of the file
itself (I/O) is not a data error: it fails the bundle, which Beam retries.

Values are delivered as Python lists, not Arrow arrays: the Validator converts non-text Arrow
columns to lists anyway, and a rejected record of a binary format is shown by converting every
column of its chunk (`RawChunk.raw`), which is quadratic with Arrow columns.
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any, BinaryIO, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.contract.config import SourceOptions, SourceSpec
from transforms.files import FileError
from transforms.records import CHUNK_ROWS, RawChunk, Rejected, location, rejection
from transforms.sources.chunks import ChunkBuilder
from transforms.sources.nested import flat_name, plain_value
from transforms.sources.registry import Format, OptionsReader

UNREADABLE_ROW_GROUP = "parquet: unreadable row group"
_DATA_ERRORS = (OSError, pa.ArrowException)


@dataclasses.dataclass(frozen=True)
class ParquetOptions(SourceOptions):
    """The options of a parquet source: the columns to read."""

    columns: list[str] | None = None  # None: every column


def options(raw: dict[str, Any]) -> ParquetOptions:
    """The parquet options, checked, with their defaults."""
    opts = OptionsReader(raw)
    out = ParquetOptions(columns=opts.strings("columns", None))
    opts.done()
    return out


def parse_parquet(
    stream: BinaryIO,
    path: str,
    source: SourceSpec,
    chunk_rows: int = CHUNK_ROWS,
    row_groups: range | None = None,
) -> Iterator[RawChunk | Rejected]:
    """Yields chunks of rows and, for rows of undecodable row groups, `Rejected` records.

    `row_groups`: read only these (rows keep their numbers in the whole file)."""
    watched = _WatchedFile(stream)
    try:
        parquet = pq.ParquetFile(watched, page_checksum_verification=True)
    except _DATA_ERRORS as e:
        watched.raise_own_error()
        raise FileError(f"{path}: not a readable Parquet file: {_one_line(e)}") from None
    wanted = source.options_as(ParquetOptions).columns
    names = parquet.schema_arrow.names
    # A requested column that a file lacks is missing in its records, as an absent JSON key is.
    columns = None if wanted is None else [name for name in wanted if name in names]
    pending = ChunkBuilder(source.name, path, chunk_rows)
    first = 0  # rows of the row groups before this one
    for group in range(parquet.metadata.num_row_groups):
        rows = parquet.metadata.row_group(group).num_rows
        if row_groups is not None and group not in row_groups:
            first += rows
            continue
        done = 0
        batches = parquet.iter_batches(chunk_rows, row_groups=[group], columns=columns)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                break
            except _DATA_ERRORS:
                watched.raise_own_error()
                for row in range(first + done, first + rows):
                    where = location(path, row + 1)
                    yield rejection(source.name, where, UNREADABLE_ROW_GROUP, {"row_group": group})
                break
            lines = range(first + done + 1, first + done + 1 + batch.num_rows)
            yield from pending.add(record_fields(batch, path), lines)
            done += batch.num_rows
        first += rows
    yield from pending.flush()


parse = parse_parquet
FORMAT = Format(
    name="parquet",
    kind="file",
    options_type=ParquetOptions,
    options=options,
    reader=parse_parquet,
    extensions=(".parquet", ".pq"),
    splittable=True,
)


def record_fields(batch: pa.RecordBatch, path: str) -> dict[str, list[Any]]:
    """The fields of a batch's rows: flattened nested columns, as lists of Python values."""
    fields: dict[str, list[Any]] = {}
    for name, column in zip(batch.schema.names, batch.columns):
        for field, array in flatten(name, column):
            if field in fields:
                raise FileError(
                    f"{path}: two fields named {field!r} once nested columns are flattened"
                )
            fields[field] = python_values(array)
    return fields


def flatten(name: str, array: pa.Array) -> Iterator[tuple[str, pa.Array]]:
    """The leaf fields of a column: structs, lists of structs and maps split (module docstring)."""
    kind = array.type
    if pa.types.is_struct(kind):
        for field, child in zip(kind, array.flatten()):
            yield from flatten(flat_name(name, field.name), child)
    elif _is_list(kind) and pa.types.is_struct(array.values.type):
        # A map is a list of key/value structs; any list of structs splits into one list per field.
        rebuild = pa.LargeListArray if pa.types.is_large_list(kind) else pa.ListArray
        mask = array.is_null() if array.null_count else None
        # Offsets from 0 over the slice of the child values this array spans (a sliced array's
        # offsets start elsewhere, and Arrow cannot combine those with a null mask).
        start, end = array.offsets[0].as_py(), array.offsets[-1].as_py()
        offsets = pc.subtract(array.offsets, start)
        values = array.values.slice(start, end - start)
        for field, child in zip(values.type, values.flatten()):
            yield from flatten(
                flat_name(name, field.name), rebuild.from_arrays(offsets, child, mask=mask)
            )
    else:
        yield name, array


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind)


def python_values(array: pa.Array) -> list[Any]:
    """The values of a leaf column as Python values (dates, times, decimals as text)."""
    values = array.to_pylist()
    if _needs_text(array.type):
        values = [plain_value(v) for v in values]
    return values


def _needs_text(kind: pa.DataType) -> bool:
    if _is_list(kind) or pa.types.is_fixed_size_list(kind):
        return _needs_text(kind.value_type)
    return (
        pa.types.is_date(kind)
        or pa.types.is_time(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_decimal(kind)
    )


class _WatchedFile(io.RawIOBase):
    """The input stream, remembering an I/O error it raised.

    pyarrow reports corrupt data and a failing file alike (OSError); only the second kind is
    raised by the stream itself, and it must fail the bundle instead of rejecting rows.
    """

    def __init__(self, stream: BinaryIO):
        super().__init__()
        self._stream = stream
        self.error: OSError | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        try:
            return self._stream.read(size)
        except OSError as e:
            self.error = e
            raise

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        try:
            return self._stream.seek(offset, whence)
        except OSError as e:
            self.error = e
            raise

    def tell(self) -> int:
        return self._stream.tell()

    def raise_own_error(self) -> None:
        if self.error is not None:
            raise self.error


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
