"""Reads JSON Lines files into chunks of raw records: one JSON object per line.

Fields are the object's top-level keys; JSON `null` is a missing value. A line that is not
valid JSON, or not an object, is rejected with its line number. Blank lines are not records.
A UTF-8 byte order mark at the start of the file is dropped; CRLF line ends are line ends.
"""

from __future__ import annotations

import codecs
import io
import json
from typing import Any, BinaryIO, Iterator

from transforms.formats import OptionsReader
from transforms.records import CHUNK_ROWS, RawChunk, location, one_line_records, rejection
from transforms.spec import SourceSpec


def options(raw: dict[str, Any]) -> dict[str, Any]:
    """The jsonl options, checked, with their defaults."""
    opts = OptionsReader(raw)
    out = {"encoding": opts.encoding()}
    opts.done()
    return out


def parse_jsonl(
    stream: BinaryIO, path: str, source: SourceSpec, chunk_rows: int = CHUNK_ROWS
) -> Iterator[RawChunk | dict[str, Any]]:
    """Yields chunks of raw records and, for unparseable lines, rejected-record dicts."""
    encoding = source.options["encoding"]
    if codecs.lookup(encoding).name == "utf-8":
        encoding = "utf-8-sig"  # a byte order mark at the start of the file is not JSON
    text = io.TextIOWrapper(stream, encoding=encoding, errors="surrogateescape")
    loads = json.loads
    objects: list[dict[str, Any]] = []
    lines: list[int] = []
    raws: list[str] = []
    for line_no, line in enumerate(text, start=1):
        if not line.strip():
            continue
        raw = line.rstrip("\r\n")
        try:
            fields = loads(line)
        except ValueError:
            yield rejection(source.name, location(path, line_no), "json: invalid JSON", raw)
            continue
        if not isinstance(fields, dict):
            yield rejection(source.name, location(path, line_no), "json: not an object", raw)
            continue
        objects.append(fields)
        lines.append(line_no)
        raws.append(raw)
        if len(objects) >= chunk_rows:
            yield _chunk(source.name, path, objects, lines, raws)
            objects, lines, raws = [], [], []
    if objects:
        yield _chunk(source.name, path, objects, lines, raws)


def _chunk(source, path, objects, lines, raws) -> RawChunk:
    names = dict.fromkeys(k for obj in objects for k in obj)
    columns = {name: [obj.get(name) for obj in objects] for name in names}
    return RawChunk(source, path, columns, lines, **one_line_records(raws))


parse = parse_jsonl
