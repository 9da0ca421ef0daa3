"""Avro parsing: records to fields, unions, bytes, arrays, nested records flattened like Parquet,
logical types, record numbers, chunking, broken blocks and files. Fixtures are written with
fastavro."""

import datetime
import decimal
import io
import uuid

import fastavro
import pytest

from tests.transforms import parsed
from transforms.contract.config import OptionError, SourceSpec
from transforms.files import FileError
from transforms.sources import avro

POINT = {
    "type": "record",
    "name": "Point",
    "fields": [
        {"name": "x", "type": "double"},
        {"name": "label", "type": ["null", "string"]},
    ],
}
SCHEMA = {
    "type": "record",
    "name": "Row",
    "namespace": "test",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"]},
        {"name": "score", "type": ["null", "float", "long"]},
        {"name": "blob", "type": "bytes"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 2}},
        {"name": "point", "type": ["null", POINT]},
        {"name": "path", "type": {"type": "array", "items": "test.Point"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
    ],
}


def _row(i: int, **changes) -> dict:
    row = {
        "id": i,
        "name": f"n{i}",
        "score": 1.5,
        "blob": b"\x00\xff",
        "tags": ["a", "b"],
        "kind": "B",
        "code": b"xy",
        "point": {"x": 0.5, "label": None},
        "path": [{"x": 1.0, "label": "p"}, {"x": 2.0, "label": None}],
        "attrs": {"k": 7},
    }
    row.update(changes)
    return row


def _file(records, schema=SCHEMA, **write_options) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, schema, records, **write_options)
    return buf.getvalue()


def _parse(data: bytes, chunk_rows=100):
    source = SourceSpec("src", "avro", "f.avro", avro.options({}))
    return parsed.split(avro.parse_avro(io.BytesIO(data), "f.avro", source, chunk_rows))


def _rows(chunks) -> list[tuple[int, dict]]:
    return parsed.rows(chunks)


def test_records_become_fields_with_nested_values_flattened():
    records = [
        _row(1),
        _row(2, name=None, score=None, tags=[], point=None, path=[], attrs={}),
        _row(3, score=4, attrs={"a": 1, "b": 2}),
    ]
    chunks, rejected = _parse(_file(records))
    assert rejected == []
    assert _rows(chunks) == [
        (
            1,
            {
                "id": 1,
                "name": "n1",
                "score": 1.5,
                "blob": b"\x00\xff",
                "tags": ["a", "b"],
                "kind": "B",
                "code": b"xy",
                "point.x": 0.5,
                "point.label": None,
                "path.x": [1.0, 2.0],
                "path.label": ["p", None],
                "attrs.key": ["k"],
                "attrs.value": [7],
            },
        ),
        (
            2,
            {
                "id": 2,
                "name": None,
                "score": None,
                "blob": b"\x00\xff",
                "tags": [],
                "kind": "B",
                "code": b"xy",
                "point.x": None,
                "point.label": None,
                "path.x": [],
                "path.label": [],
                "attrs.key": [],
                "attrs.value": [],
            },
        ),
        (
            3,
            {
                "id": 3,
                "name": "n3",
                "score": 4,
                "blob": b"\x00\xff",
                "tags": ["a", "b"],
                "kind": "B",
                "code": b"xy",
                "point.x": 0.5,
                "point.label": None,
                "path.x": [1.0, 2.0],
                "path.label": ["p", None],
                "attrs.key": ["a", "b"],
                "attrs.value": [1, 2],
            },
        ),
    ]


def test_logical_types_become_text():
    schema = {
        "type": "record",
        "name": "T",
        "fields": [
            {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2},
            },
            {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
            {
                "name": "days",
                "type": {"type": "array", "items": {"type": "int", "logicalType": "date"}},
            },
        ],
    }
    at = datetime.datetime(2024, 1, 2, 3, 4, 5, 600000, tzinfo=datetime.timezone.utc)
    record = {
        "day": datetime.date(2024, 2, 29),
        "at": at,
        "price": decimal.Decimal("12.50"),
        "uid": uuid.UUID(int=1),
        "days": [datetime.date(2024, 1, 1)],
    }
    chunks, _ = _parse(_file([record, dict(record, day=None)], schema))
    assert _rows(chunks)[0][1] == {
        "day": "2024-02-29",
        "at": "2024-01-02T03:04:05.600000+00:00",
        "price": "12.50",
        "uid": "00000000-0000-0000-0000-000000000001",
        "days": ["2024-01-01"],
    }
    assert _rows(chunks)[1][1]["day"] is None


def test_a_recursive_record_is_delivered_as_it_is():
    schema = {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "v", "type": "long"},
            {"name": "next", "type": ["null", "Node"]},
        ],
    }
    chunks, _ = _parse(_file([{"v": 1, "next": {"v": 2, "next": None}}], schema))
    assert _rows(chunks) == [(1, {"v": 1, "next": {"v": 2, "next": None}})]


def test_chunks_hold_at_most_chunk_rows_across_blocks():
    data = _file([_row(i) for i in range(25)], sync_interval=200)
    chunks, _ = _parse(data, chunk_rows=10)
    assert [len(c) for c in chunks] == [10, 10, 5]
    assert [line for c in chunks for line in c.lines] == list(range(1, 26))
    assert [v for c in chunks for v in c.values("id")] == list(range(25))


def _blocks(data: bytes) -> list[tuple[int, int]]:
    return [(b.offset, b.num_records) for b in fastavro.block_reader(io.BytesIO(data))]


def test_a_truncated_last_block_is_one_rejected_record():
    data = _file([_row(i) for i in range(20)], sync_interval=300)
    blocks = _blocks(data)
    assert len(blocks) > 2
    last_offset, last_count = blocks[-1]
    chunks, rejected = _parse(data[:-10])
    kept = 20 - last_count
    assert [fields["id"] for _, fields in _rows(chunks)] == list(range(kept))
    assert [r.to_json() for r in rejected] == [
        {
            "source": "src",
            "location": f"f.avro:{kept + 1}",
            "reason": "avro: unreadable data block",
            "record": f'{{"offset": {last_offset}}}',
        }
    ]


def test_a_corrupt_compressed_block_ends_the_file_with_one_rejected_record():
    data = bytearray(_file([_row(i) for i in range(20)], codec="deflate", sync_interval=300))
    offset, count = _blocks(bytes(data))[1]
    data[offset + 20] ^= 0xFF  # inside the second block's deflate data
    chunks, rejected = _parse(bytes(data))
    assert [fields["id"] for _, fields in _rows(chunks)] == list(range(count))
    assert [(r.location, r.reason) for r in rejected] == [
        (f"f.avro:{count + 1}", "avro: unreadable data block")
    ]


def test_an_undecodable_record_rejects_the_rest_of_its_block_and_reading_goes_on():
    schema = {"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]}
    data = bytearray(_file([{"s": f"v{i}"} for i in range(6)], schema, sync_interval=8))
    blocks = _blocks(bytes(data))
    first_offset, first_count = blocks[0]
    assert first_count == 3 and len(blocks) == 2
    # the second record's string length (a zig-zag varint) becomes -64: undecodable
    at = bytes(data).index(b"\x04v1", first_offset)
    data[at] = 0x7F
    chunks, rejected = _parse(bytes(data))
    assert [(line, fields["s"]) for line, fields in _rows(chunks)] == [
        (1, "v0"),
        (4, "v3"),
        (5, "v4"),
        (6, "v5"),
    ]
    assert [(r.location, r.reason, r.record) for r in rejected] == [
        (f"f.avro:{n}", "avro: undecodable record", f'{{"block_offset": {first_offset}}}')
        for n in (2, 3)
    ]


def test_a_file_that_is_not_avro_fails_naming_the_file():
    with pytest.raises(FileError, match=r"^f\.avro: not a readable Avro file"):
        _parse(b"id,name\n1,a\n")


def test_a_file_of_values_that_are_not_records_fails():
    with pytest.raises(FileError, match=r"^f\.avro: the file's records are not Avro records"):
        _parse(_file([1, 2], "long"))


def test_an_empty_file_has_no_records():
    assert _parse(_file([])) == ([], [])


def test_options_take_no_keys():
    assert avro.options({}) == avro.AvroOptions()
    with pytest.raises(OptionError, match="columns: unknown key"):
        avro.options({"columns": ["a"]})


def test_a_block_claiming_more_records_than_bytes_is_one_rejected_record():
    schema = {"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]}
    data = bytearray(_file([{"s": f"v{i}"} for i in range(6)], schema, sync_interval=8))
    first_offset, first_count = _blocks(bytes(data))[0]
    assert data[first_offset] == 2 * first_count  # the count, a zig-zag varint of one byte
    data[first_offset] = 0x7E  # 63 records in a block of a few bytes
    chunks, rejected = _parse(bytes(data))
    assert [line for line, _ in _rows(chunks)] == [1, 2, 3, 5, 6, 7]
    assert [(r.location, r.reason) for r in rejected] == [
        ("f.avro:4", "avro: unreadable data block")
    ]
