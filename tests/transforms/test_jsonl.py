"""JSON Lines parsing: objects are records; bad lines are rejected with their line number."""

import io

from transforms.jsonl import parse_jsonl
from transforms.records import RawChunk
from transforms.spec import SourceSpec


def _parse(data: bytes):
    rows, rejected = [], []
    source = SourceSpec("obs", "jsonl", "o.jsonl", {"encoding": "utf-8"})
    for item in parse_jsonl(io.BytesIO(data), "o.jsonl", source):
        (rows.extend(item.rows) if isinstance(item, RawChunk) else rejected.append(item))
    return rows, rejected


def test_objects_become_records_with_their_line_numbers():
    rows, rejected = _parse(b'{"id": 1, "t": ["a"]}\n\n{"id": 2, "t": null}\n')
    assert [(r.fields, r.line, r.record_no) for r in rows] == [
        ({"id": 1, "t": ["a"]}, 1, 0),
        ({"id": 2, "t": None}, 3, 1),
    ]
    assert rejected == []


def test_invalid_json_and_non_objects_are_rejected():
    rows, rejected = _parse(b'{"id": 1}\n{"id": \n[1, 2]\n')
    assert [r.fields for r in rows] == [{"id": 1}]
    assert rejected == [
        {"source": "obs", "location": "o.jsonl:2", "reason": "json: invalid JSON", "record": '{"id": '},
        {"source": "obs", "location": "o.jsonl:3", "reason": "json: not an object", "record": "[1, 2]"},
    ]
