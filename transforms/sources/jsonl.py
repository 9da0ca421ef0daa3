"""Reads JSON Lines files into chunks of raw records: one JSON object per line.

Fields are the object's top-level keys; JSON `null` is a missing value. Blank lines (empty or
only whitespace) are not records. A UTF-8 byte order mark at the start of the file is dropped.
Only `\\n` ends a line (a `\\r` just before it is part of the line end, CRLF files): a lone `\\r`
is JSON whitespace between tokens, and inside a string it is the control character JSON forbids,
never a line break, so line numbers count `\\n`s as they do for the text format and for the byte
ranges of `transforms.sources.ranges`.

A line is rejected, with its line number and text, and the reading goes on, when it is
  `json: invalid JSON`                    not JSON (json.loads says so)
  `json: not an object`                   JSON, but not an object
  `json: nested deeper than 100 levels`   arrays/objects nested deeper than `MAX_DEPTH`
  `json: field name is not valid text`    a key holds a lone surrogate (`"\\udc80"`, or bytes
                                          the encoding cannot decode)
  `json: line longer than 64 Mi characters, not read`   read in pieces, never held whole
  `json: duplicate key`                   an object (at any depth) holds a key twice: which
                                          value was meant is not known (the line shows the key)
The depth limit is checked on the text before parsing: Python's parser recurses per level, and
a line like `[[[[...` 100000 deep would otherwise end the job with a RecursionError, while a
depth just under the interpreter's limit would parse here and fail later, in whatever recurses
over the value next (pickling, encoding), depending on the stack depth at that point. A field
name must be text because it becomes a column, a counter and a key of the manifest; values are
kept as they are (a `string` feature rejects a value that is not valid text, an unread field
is only counted).

Numbers keep their value or their text, never a rounded value: one number policy for every
source (transforms/schema.py). A number that a float64 cannot hold exactly enough to be checked
is kept as its JSON text, which the schema then reads as it reads CSV text: beyond float64
(`1e400`: `outside float32 range`, never infinity), nonzero but under float64's smallest value
(`1e-400`: `too small for float32`, never 0.0), an integral float of 2**53 or more
(`9007199254740993.0`: `not an integer` for an `int` feature, never the neighbouring integer),
an integer longer than Python converts (4,300 digits: `integer out of int64 range`, not
"invalid JSON").
"""

from __future__ import annotations

import codecs
import dataclasses
import io
import json
import math
import re
from typing import Any, BinaryIO, Iterator

import numpy as np

from transforms.contract.config import SourceOptions, SourceSpec
from transforms.records import (
    CHUNK_ROWS,
    MAX_LINE_CHARS,
    RawChunk,
    Rejected,
    location,
    one_line_records,
    rejection,
    rest_of_line,
)
from transforms.sources.chunks import ChunkBuilder
from transforms.sources.registry import FILE_COMPRESSIONS, Format, OptionsReader

MAX_DEPTH = 100  # as Ruby's JSON parser; GeoJSON, the deepest common layout, needs 4 or 5
INVALID = "json: invalid JSON"
NOT_AN_OBJECT = "json: not an object"
TOO_DEEP = f"json: nested deeper than {MAX_DEPTH} levels"
BAD_NAME = "json: field name is not valid text"
DUPLICATE_KEY = "json: duplicate key"
TOO_LONG = "json: line longer than 64 Mi characters, not read"
MAX_CHUNK_FIELDS = 1000  # distinct keys in one chunk's records; more and the chunk is cut
_INT_DIGITS = 4300  # Python's limit on the digits int() converts (sys.int_info)
_EXACT_INTEGERS = 2.0**53  # from here a float64 cannot tell neighbouring integers apart
_NONZERO_MANTISSA = re.compile(r"[^eE]*[1-9]")


class _DuplicateKey(ValueError):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def _float(text: str) -> float | str:
    """A JSON number with a fraction or exponent: its float, or its text when the float would
    not be the number (overflow, underflow to 0, an integer past 2**53)."""
    value = float(text)
    if value in (math.inf, -math.inf):
        return text
    if value == 0.0:
        return text if _NONZERO_MANTISSA.match(text) else value
    if abs(value) >= _EXACT_INTEGERS and value.is_integer():
        return text
    return value


def _int(text: str) -> int | str:
    """A JSON integer: its int, or its text when it is longer than Python converts."""
    return text if len(text) > _INT_DIGITS else int(text)


_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_float=_float, parse_int=_int)

# A JSON string (escapes included), and anything that is not a bracket: what the depth scan drops.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_OPENING = np.frombuffer(b"[{", np.uint8)


@dataclasses.dataclass(frozen=True)
class JsonlOptions(SourceOptions):
    """The options of a jsonl source: the text encoding of its files."""

    encoding: str = "utf-8"  # a codec's canonical name


def options(raw: dict[str, Any]) -> JsonlOptions:
    """The jsonl options, checked, with their defaults."""
    opts = OptionsReader(raw)
    out = JsonlOptions(encoding=opts.encoding())
    opts.done()
    return out


def parse_jsonl(
    stream: BinaryIO, path: str, source: SourceSpec, chunk_rows: int = CHUNK_ROWS
) -> Iterator[RawChunk | Rejected]:
    """Yields chunks of raw records and, for unparseable lines, `Rejected` records."""
    encoding = source.options_as(JsonlOptions).encoding
    if codecs.lookup(encoding).name == "utf-8":
        encoding = "utf-8-sig"  # a byte order mark at the start of the file is not JSON
    text = io.TextIOWrapper(stream, encoding=encoding, errors="surrogateescape", newline="\n")
    pending = ChunkBuilder(
        source.name, path, chunk_rows, columns_of=_columns, raw_fields=one_line_records
    )
    keys: set[str] = set()  # the keys of the records waiting
    for line_no, (line, overlong) in enumerate(_bounded_lines(text), start=1):
        if overlong:
            where = location(path, line_no)
            yield rejection(source.name, where, TOO_LONG, f"<{overlong} characters>")
            continue
        if not line.strip():
            continue
        raw = _without_line_end(line)
        fields, reason = parse_line(line)
        if reason is not None:
            yield rejection(source.name, location(path, line_no), reason, raw)
            continue
        assert fields is not None  # parse_line gives the object or the reason
        chunk = pending.add_row(fields, line_no, raw)
        keys.update(fields)
        if chunk is not None:
            keys.clear()
            yield chunk
        elif len(keys) > MAX_CHUNK_FIELDS:  # lines of many distinct keys: a chunk is a table
            keys.clear()  # with a column per key, so it is cut short of its rows
            yield from pending.flush()
    yield from pending.flush()


parse = parse_jsonl
FORMAT = Format(
    name="jsonl",
    kind="file",
    options_type=JsonlOptions,
    options=options,
    reader=parse_jsonl,
    extensions=(".jsonl", ".ndjson", ".json"),
    compressed=FILE_COMPRESSIONS,
    splittable=True,
)


def _bounded_lines(text: io.TextIOWrapper) -> Iterator[tuple[str, int]]:
    """(line, 0) per line of `text`, or ("", its length) for a line longer than MAX_LINE_CHARS,
    read in pieces and not held."""
    while line := text.readline(MAX_LINE_CHARS + 1):
        if len(line) <= MAX_LINE_CHARS or line.endswith("\n"):
            yield line, 0
            continue
        yield "", rest_of_line(text, line, MAX_LINE_CHARS)


def parse_line(line: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the object of one line, None), or (None, the reason the line is rejected)."""
    # Counting brackets is C-fast; only a line with more than MAX_DEPTH of them can be too deep.
    if line.count("[") + line.count("{") > MAX_DEPTH and nesting_depth(line) > MAX_DEPTH:
        return None, TOO_DEEP
    try:
        fields = _DECODER.decode(line)
    except _DuplicateKey:
        return None, DUPLICATE_KEY
    except ValueError:
        return None, INVALID
    except RecursionError:  # text that is not JSON can fool the depth scan: the parser decides
        return None, TOO_DEEP
    if not isinstance(fields, dict):
        return None, NOT_AN_OBJECT
    names = "".join(fields)
    if not names.isascii():
        try:
            names.encode("utf-8")
        except UnicodeEncodeError:
            return None, BAD_NAME
    return fields, None


def nesting_depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings do not
    count), found without recursion; for text that is not JSON, an upper bound of sorts."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if not brackets:
        return 0
    a = np.frombuffer(brackets.encode("ascii"), np.uint8)
    steps = np.where(np.isin(a, _OPENING), 1, -1)
    return int(np.cumsum(steps).max())


def _without_line_end(line: str) -> str:
    if line.endswith("\n"):
        line = line[:-1]
    return line[:-1] if line.endswith("\r") else line


def _columns(objects: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The columns of objects: one per key of any of them, in the order keys first appear."""
    names = dict.fromkeys(k for obj in objects for k in obj)
    return {name: [obj.get(name) for obj in objects] for name in names}
