"""Reads files of fixed-length binary records into chunks of raw records.

Like tf.data's FixedLengthRecordDataset: a file is `header_bytes`, then records of exactly
`record_bytes` each, then `footer_bytes`. Its layout is one of:

- `struct: "<format>"` with `fields: [names]`: Python's `struct` format of one record (its size
  must be `record_bytes`), one name per item it unpacks. Values are exactly what `struct` gives
  (`Ns` and `c`: bytes, unchanged), except `?`, which gives 0 or 1.
- `fields: {name: {offset, length, type, endian}}`: named byte ranges of a record (they may
  overlap). `type`: `int` / `uint` (length 1, 2, 4 or 8), `float` (2, 4 or 8), `bytes` (the
  range unchanged) or `string` (trailing NUL bytes removed, then decoded as UTF-8; a value that
  is not UTF-8 stays bytes, which a `string` feature rejects as `not valid UTF-8`). `endian`:
  `little` (default) or `big`.
- neither: one field `record`, the record's bytes.

Records are numbered from 1 in each file. Bytes left over after the last whole record (the file
size minus header and footer is not a multiple of `record_bytes`) are rejected as one record,
and so is a file too short to hold its header and footer: nothing is dropped silently. Whole
chunks are decoded at once, with `struct.iter_unpack` or a numpy structured dtype.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any, BinaryIO, Iterator

import numpy as np

from transforms.contract.config import OptionError, SourceOptions, SourceSpec
from transforms.records import CHUNK_ROWS, RawChunk, Rejected, location, rejection
from transforms.sources.registry import FILE_COMPRESSIONS, Format, OptionsReader

RANGE_TYPES = ("int", "uint", "float", "bytes", "string")
ENDIANS = {"little": "<", "big": ">"}
_LENGTHS = {"int": (1, 2, 4, 8), "uint": (1, 2, 4, 8), "float": (2, 4, 8)}
_KINDS = {"int": "i", "uint": "u", "float": "f"}
_MAX_CHUNK_BYTES = 16 << 20  # a chunk of long records holds fewer than chunk_rows
_MAX_RECORD_BYTES = 1 << 30  # one record is read whole: a bigger one is a typo


@dataclasses.dataclass(frozen=True)
class BinaryOptions(SourceOptions):
    """The options of a binary source: fixed-size records after a header and before a footer,
    each one field `record` of bytes, or the fields a `struct` format unpacks (`fields` their
    names), or byte ranges (`fields` maps a name to its offset, length, type and endian)."""

    record_bytes: int
    header_bytes: int = 0
    footer_bytes: int = 0
    struct: str | None = None
    fields: list[str] | dict[str, dict[str, Any]] | None = None


def options(raw: dict[str, Any]) -> BinaryOptions:
    """The binary options, checked, with their defaults."""
    opts = OptionsReader(raw)
    record_bytes = opts.integer("record_bytes", minimum=1, maximum=_MAX_RECORD_BYTES)
    header_bytes = opts.integer("header_bytes", 0, minimum=0)
    footer_bytes = opts.integer("footer_bytes", 0, minimum=0)
    layout = opts.string("struct", None)
    fields: list[str] | dict[str, dict[str, Any]] | None = None
    if layout is not None:
        fields = _struct_fields(layout, opts.get("fields", None), record_bytes)
    elif opts.has("fields"):
        fields = _range_fields(opts.get("fields"), record_bytes)
    opts.done()
    return BinaryOptions(
        record_bytes=record_bytes,
        header_bytes=header_bytes,
        footer_bytes=footer_bytes,
        struct=layout,
        fields=fields,
    )


def _struct_fields(fmt: str, names: Any, record_bytes: int) -> list[str]:
    try:
        size = struct.calcsize(fmt)
    except (struct.error, UnicodeEncodeError) as e:  # a format is ASCII: "ü" is not one
        raise OptionError("struct", f"invalid struct format {fmt!r}: {e}") from None
    if size != record_bytes:
        raise OptionError(
            "struct", f"{fmt!r} describes {size} bytes, record_bytes is {record_bytes}"
        )
    items = len(struct.unpack(fmt, bytes(size)))
    if not items:
        raise OptionError("struct", f"{fmt!r} unpacks no values")
    if names is None:
        raise OptionError("fields", "is required with struct: one name per item")
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise OptionError("fields", "must be a list of field names, one per item of struct")
    if len(names) != items:
        raise OptionError(
            "fields", f"names {len(names)} fields, struct {fmt!r} unpacks {items} items"
        )
    _check_unique(names)
    return list(names)


def _range_fields(raw: Any, record_bytes: int) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, dict) or not raw:
        raise OptionError(
            "fields",
            "must map field names to {offset, length, type, endian} (or list struct items)",
        )
    out = {}
    for name, spec in raw.items():
        if not isinstance(name, str) or not name:
            raise OptionError("fields", f"field name {name!r} must be a non-empty string")
        if not isinstance(spec, dict):
            raise OptionError(f"fields.{name}", "must be a mapping {offset, length, type, endian}")
        try:
            out[name] = _range(spec, record_bytes)
        except OptionError as e:
            raise OptionError(f"fields.{name}.{e.field}", e.message) from None
    return out


def _range(raw: dict[str, Any], record_bytes: int) -> dict[str, Any]:
    opts = OptionsReader(raw)
    offset = opts.integer("offset", minimum=0)
    length = opts.integer("length", minimum=1)
    kind = opts.choice("type", RANGE_TYPES)
    endian = opts.choice("endian", tuple(ENDIANS), "little")
    opts.done()
    if kind in _LENGTHS and length not in _LENGTHS[kind]:
        allowed = ", ".join(map(str, _LENGTHS[kind]))
        raise OptionError("length", f"must be {allowed} for type {kind}")
    if offset + length > record_bytes:
        raise OptionError(
            "length",
            f"bytes {offset} to {offset + length} do not fit in record_bytes ({record_bytes})",
        )
    return {"offset": offset, "length": length, "type": kind, "endian": endian}


def _check_unique(names: list[str]) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise OptionError("fields", f"duplicate field name {name!r}")
        seen.add(name)


def parse_binary(
    stream: BinaryIO, path: str, source: SourceSpec, chunk_rows: int = CHUNK_ROWS
) -> Iterator[RawChunk | Rejected]:
    """Yields chunks of records and, for leftover bytes, a rejected record."""
    opts = source.options_as(BinaryOptions)
    size, header, footer = opts.record_bytes, opts.header_bytes, opts.footer_bytes
    decode = _decoder(opts)
    per_chunk = max(1, min(chunk_rows, _MAX_CHUNK_BYTES // size))
    reader = _Reader(stream)
    head = reader.read(header)
    if len(head) < header:
        yield _too_short(source.name, path, head, header, footer)
        return
    buf = b""
    number = 1  # of the next record
    while True:
        buf += reader.read(per_chunk * size + footer - len(buf))
        n = min(per_chunk, max(0, len(buf) - footer) // size)
        if n == 0 and reader.eof:
            break
        if n:
            columns = decode(memoryview(buf)[: n * size])
            yield RawChunk(source.name, path, columns, list(range(number, number + n)))
            number += n
            buf = buf[n * size :]
    if len(buf) < footer:
        yield _too_short(source.name, path, head + buf, header, footer)
    elif len(buf) > footer:
        leftover = buf[: len(buf) - footer]
        offset = header + (number - 1) * size
        reason = f"binary: {len(leftover)} bytes left after the last whole record of {size} bytes"
        yield rejection(
            source.name, location(path, number), reason, _bytes_record(offset, leftover)
        )


parse = parse_binary
FORMAT = Format(
    name="binary",
    kind="file",
    options_type=BinaryOptions,
    options=options,
    reader=parse_binary,
    extensions=(".bin",),
    compressed=FILE_COMPRESSIONS,
)


def _too_short(source: str, path: str, data: bytes, header: int, footer: int) -> Rejected:
    reason = (
        f"binary: file of {len(data)} bytes is shorter than header_bytes + footer_bytes "
        f"({header + footer})"
    )
    return rejection(source, location(path, 1), reason, _bytes_record(0, data))


def _bytes_record(offset: int, data: bytes) -> str:
    return json.dumps({"offset": offset, "length": len(data), "hex": data.hex()})


class _Reader:
    """Reads exactly the bytes asked for, unless the stream ends first."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self.eof = False

    def read(self, n: int) -> bytes:
        parts = []
        while n > 0 and not self.eof:
            piece = self._stream.read(n)
            if piece:
                parts.append(piece)
                n -= len(piece)
            else:
                self.eof = True
        return b"".join(parts)


def _decoder(opts: BinaryOptions):
    """A function from whole records' bytes to {field: values}."""
    fields = opts.fields
    if fields is None:
        size = opts.record_bytes
        return lambda data: {
            "record": [bytes(data[i : i + size]) for i in range(0, len(data), size)]
        }
    if isinstance(fields, list):  # the names of the items `struct` unpacks
        assert opts.struct is not None
        return _StructDecoder(opts.struct, fields)
    return _RangeDecoder(fields, opts.record_bytes)


class _StructDecoder:
    def __init__(self, fmt: str, names: list[str]):
        self._fmt = fmt
        self._names = names
        # `?` items unpack as booleans: given as 0/1, so that int features take them
        self._flags = [
            i
            for i, v in enumerate(struct.unpack(fmt, bytes(struct.calcsize(fmt))))
            if type(v) is bool
        ]

    def __call__(self, data: memoryview) -> dict[str, list[Any]]:
        columns = [list(column) for column in zip(*struct.iter_unpack(self._fmt, data))]
        for i in self._flags:
            columns[i] = list(map(int, columns[i]))
        return dict(zip(self._names, columns))


class _RangeDecoder:
    def __init__(self, fields: dict[str, dict[str, Any]], record_bytes: int):
        self._fields = fields
        formats = []
        for spec in fields.values():
            kind, length = spec["type"], spec["length"]
            if kind in _KINDS:
                formats.append(f"{ENDIANS[spec['endian']]}{_KINDS[kind]}{length}")
            elif kind == "string":
                formats.append(f"S{length}")  # numpy drops trailing NULs of S items
            else:
                formats.append(f"V{length}")  # the bytes unchanged
        self._dtype = np.dtype(
            {
                "names": list(fields),
                "formats": formats,
                "offsets": [spec["offset"] for spec in fields.values()],
                "itemsize": record_bytes,
            }
        )

    def __call__(self, data: memoryview) -> dict[str, list[Any]]:
        records = np.frombuffer(data, self._dtype)
        columns = {}
        for name, spec in self._fields.items():
            values = records[name].tolist()
            if spec["type"] == "string":
                values = _texts(values)
            columns[name] = values
        return columns


def _texts(values: list[bytes]) -> list[str | bytes]:
    """Each value decoded as UTF-8, or left as bytes when it is not UTF-8."""
    try:
        return [v.decode("utf-8") for v in values]
    except UnicodeDecodeError:
        return [_text(v) for v in values]


def _text(value: bytes) -> str | bytes:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value
