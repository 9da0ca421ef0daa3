"""JSON Lines parsing: objects are records; bad lines are rejected with their line number."""

import io

from transforms.contract.config import SourceSpec
from transforms.records import RawChunk
from transforms.sources.jsonl import JsonlOptions, parse_jsonl


def _parse(data: bytes):
    rows, rejected = [], []
    source = SourceSpec("obs", "jsonl", "o.jsonl", JsonlOptions())
    for item in parse_jsonl(io.BytesIO(data), "o.jsonl", source):
        if isinstance(item, RawChunk):
            for i in range(len(item)):
                fields = {
                    k: c[i] for k, c in item.columns.items() if c[i] is not None or k in ("t",)
                }
                rows.append((fields, item.lines[i]))
        else:
            rejected.append(item)
    return rows, rejected


def test_objects_become_records_with_their_line_numbers():
    rows, rejected = _parse(b'{"id": 1, "t": ["a"]}\n\n{"id": 2, "t": null}\n')
    assert rows == [
        ({"id": 1, "t": ["a"]}, 1),
        ({"id": 2, "t": None}, 3),
    ]
    assert rejected == []


def test_invalid_json_and_non_objects_are_rejected():
    rows, rejected = _parse(b'{"id": 1}\n{"id": \n[1, 2]\n')
    assert [r[0] for r in rows] == [{"id": 1}]
    assert [r.to_json() for r in rejected] == [
        {
            "source": "obs",
            "location": "o.jsonl:2",
            "reason": "json: invalid JSON",
            "record": '{"id": ',
        },
        {
            "source": "obs",
            "location": "o.jsonl:3",
            "reason": "json: not an object",
            "record": "[1, 2]",
        },
    ]


def test_a_byte_order_mark_and_crlf_line_ends_are_not_part_of_records():
    rows, rejected = _parse(b'\xef\xbb\xbf{"id": 1}\r\n{"id": 2}\r\n')
    assert rows == [({"id": 1}, 1), ({"id": 2}, 2)]
    assert rejected == []
