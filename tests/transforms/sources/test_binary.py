"""Fixed-length binary records: options, struct and byte-range layouts, header, footer, rest."""

import gzip
import io
import json
import math
import struct

import numpy as np
import pytest

from transforms.contract.config import OptionError, SourceSpec
from transforms.records import RawChunk
from transforms.sources import binary as binary_module
from transforms.sources.binary import options, parse_binary

POINT = "<iHf?5x8s"  # 24 bytes: id, count, weight, flag, padding, name
RANGES = {
    "id": {"offset": 0, "length": 4, "type": "int", "endian": "big"},
    "count": {"offset": 4, "length": 2, "type": "uint"},
    "weight": {"offset": 6, "length": 8, "type": "float", "endian": "big"},
    "name": {"offset": 14, "length": 6, "type": "string"},
    "tail": {"offset": 14, "length": 6, "type": "bytes"},
}


def _parse(data: bytes, chunk_rows=100, stream=None, **raw_options):
    source = SourceSpec("src", "binary", "f.bin", options(raw_options))
    records, rejected = [], []
    for item in parse_binary(stream or io.BytesIO(data), "f.bin", source, chunk_rows):
        if isinstance(item, RawChunk):
            assert item.raw_text is None and 0 < len(item) <= chunk_rows
            for i in range(len(item)):
                records.append(
                    (item.lines[i], {name: item.values(name)[i] for name in item.columns})
                )
        else:
            rejected.append(item)
    return records, rejected


def test_options_defaults_for_each_layout():
    assert options({"record_bytes": 4}).to_dict() == {
        "record_bytes": 4,
        "header_bytes": 0,
        "footer_bytes": 0,
        "struct": None,
        "fields": None,
    }
    opts = options({"record_bytes": 24, "struct": POINT, "fields": ["a", "b", "c", "d", "e"]})
    assert opts.fields == ["a", "b", "c", "d", "e"]
    opts = options({"record_bytes": 20, "fields": RANGES, "header_bytes": 3})
    assert opts.fields["count"] == {"offset": 4, "length": 2, "type": "uint", "endian": "little"}
    assert opts.header_bytes == 3


def _r(**spec):
    return {"record_bytes": 8, "fields": {"a": {"offset": 0, "length": 4, "type": "int", **spec}}}


@pytest.mark.parametrize(
    "raw, field, message",
    [
        ({}, "record_bytes", "is required"),
        ({"record_bytes": 0}, "record_bytes", "must be at least 1"),
        ({"record_bytes": "8"}, "record_bytes", "must be an integer"),
        ({"record_bytes": 8, "footer_bytes": -1}, "footer_bytes", "must be at least 0"),
        (
            {"record_bytes": 8, "struct": "<i", "fields": ["a"]},
            "struct",
            "'<i' describes 4 bytes, record_bytes is 8",
        ),
        (
            {"record_bytes": 8, "struct": "<2k", "fields": ["a"]},
            "struct",
            "invalid struct format '<2k'",
        ),
        ({"record_bytes": 8, "struct": "8x", "fields": []}, "struct", "'8x' unpacks no values"),
        ({"record_bytes": 8, "struct": "<ii"}, "fields", "is required"),
        (
            {"record_bytes": 8, "struct": "<ii", "fields": ["a"]},
            "fields",
            "names 1 fields, struct '<ii' unpacks 2 items",
        ),
        (
            {"record_bytes": 8, "struct": "<ii", "fields": ["a", "a"]},
            "fields",
            "duplicate field name 'a'",
        ),
        (
            {"record_bytes": 8, "struct": "<ii", "fields": {"a": {}}},
            "fields",
            "must be a list of field names",
        ),
        ({"record_bytes": 8, "fields": ["a"]}, "fields", "must map field names"),
        ({"record_bytes": 8, "fields": {"a": 3}}, "fields.a", "must be a mapping"),
        (_r(offset=6), "fields.a.length", "bytes 6 to 10 do not fit in record_bytes (8)"),
        (_r(length=3), "fields.a.length", "must be 1, 2, 4, 8 for type int"),
        (_r(type="float", length=1), "fields.a.length", "must be 2, 4, 8 for type float"),
        (_r(type="text"), "fields.a.type", "'text' is not one of int, uint, float, bytes, string"),
        (_r(endian="middle"), "fields.a.endian", "'middle' is not one of little, big"),
        (_r(offset=-1), "fields.a.offset", "must be at least 0"),
        (_r(signed=True), "fields.a.signed", "unknown key"),
        ({"record_bytes": 8, "layout": "x"}, "layout", "unknown key"),
    ],
)
def test_bad_options_name_the_option(raw, field, message):
    with pytest.raises(OptionError) as e:
        options(raw)
    assert e.value.field == field
    assert e.value.message.startswith(message)


def _points(n: int, start: int = 0) -> list[tuple]:
    return [(start + i, 7 * i, i / 4, i % 2 == 1, f"p{i}".encode()) for i in range(n)]


def test_struct_layout_gives_struct_values_between_header_and_footer():
    points = _points(3)
    data = b"HEAD" + b"".join(struct.pack(POINT, *p) for p in points) + b"FOOT!"
    names = ["id", "count", "weight", "flag", "name"]
    records, rejected = _parse(
        data, record_bytes=24, header_bytes=4, footer_bytes=5, struct=POINT, fields=names
    )
    assert records == [
        (
            i + 1,
            {
                "id": i,
                "count": 7 * i,
                "weight": i / 4,
                "flag": int(i % 2),
                "name": p[4].ljust(8, b"\0"),
            },
        )
        for i, p in enumerate(points)
    ]
    assert rejected == []


def test_byte_ranges_decode_each_type_and_endianness():
    def record(i, count, w, name: bytes):
        return (
            struct.pack(">i", i)
            + struct.pack("<H", count)
            + struct.pack(">d", w)
            + name.ljust(6, b"\0")
        )

    data = record(-5, 59995, 1.5, b"abc") + record(2**31 - 1, 61022, -0.25, b"\xffz\0\0q\0")
    records, rejected = _parse(data, record_bytes=20, fields=RANGES)
    assert records == [
        (1, {"id": -5, "count": 59995, "weight": 1.5, "name": "abc", "tail": b"abc\0\0\0"}),
        # only trailing NULs end a string; a value that is not UTF-8 stays bytes, for validation
        (
            2,
            {
                "id": 2**31 - 1,
                "count": 61022,
                "weight": -0.25,
                "name": b"\xffz\0\0q",
                "tail": b"\xffz\0\0q\0",
            },
        ),
    ]
    assert rejected == []


@pytest.mark.parametrize(
    "kind, length", [("int", 1), ("int", 8), ("uint", 8), ("float", 2), ("float", 4)]
)
@pytest.mark.parametrize("endian", ["little", "big"])
def test_every_numeric_width_matches_numpy(kind, length, endian):
    dtype = np.dtype(
        ("<" if endian == "little" else ">")
        + {"int": "i", "uint": "u", "float": "f"}[kind]
        + str(length)
    )
    values = np.array([0, 1, 3, 100, -2 if kind != "uint" else 2], dtype=dtype)
    if kind == "uint" and length == 8:
        values[-1] = 2**64 - 1
    field = {"offset": 1, "length": length, "type": kind, "endian": endian}
    data = b"".join(b"#" + values[i : i + 1].tobytes() for i in range(len(values)))
    records, _ = _parse(data, record_bytes=1 + length, fields={"v": field})
    assert [f["v"] for _, f in records] == values.tolist()


def test_without_a_layout_each_record_is_one_bytes_field():
    records, _ = _parse(b"abcdefgh", record_bytes=4)
    assert records == [(1, {"record": b"abcd"}), (2, {"record": b"efgh"})]


def test_leftover_bytes_are_one_rejected_record_named_by_their_count():
    data = b"HH" + b"".join(struct.pack(POINT, *p) for p in _points(2)) + b"\x01\x02\x03" + b"F"
    records, rejected = _parse(
        data,
        record_bytes=24,
        header_bytes=2,
        footer_bytes=1,
        struct=POINT,
        fields=["id", "count", "weight", "flag", "name"],
    )
    assert [n for n, _ in records] == [1, 2]
    assert [r.to_json() for r in rejected] == [
        {
            "source": "src",
            "location": "f.bin:3",
            "reason": "binary: 3 bytes left after the last whole record of 24 bytes",
            "record": json.dumps({"offset": 50, "length": 3, "hex": "010203"}),
        }
    ]


@pytest.mark.parametrize("data", [b"", b"HEA", b"HEADERFO"])
def test_a_file_too_short_for_header_and_footer_is_one_rejected_record(data):
    records, rejected = _parse(data, record_bytes=2, header_bytes=6, footer_bytes=4)
    assert records == []
    assert [r.to_json() for r in rejected] == [
        {
            "source": "src",
            "location": "f.bin:1",
            "reason": f"binary: file of {len(data)} bytes is shorter than header_bytes + "
            "footer_bytes (10)",
            "record": json.dumps({"offset": 0, "length": len(data), "hex": data.hex()}),
        }
    ]


def test_an_empty_file_without_header_or_footer_has_no_records():
    assert _parse(b"", record_bytes=4) == ([], [])
    assert _parse(b"HF", record_bytes=4, header_bytes=1, footer_bytes=1) == ([], [])


class _Trickle(io.RawIOBase):
    """A stream that returns at most 3 bytes per read, like a slow socket."""

    def __init__(self, data: bytes):
        self._data = memoryview(data)

    def readable(self):
        return True

    def readinto(self, b):
        n = min(len(b), 3, len(self._data))
        b[:n], self._data = self._data[:n], self._data[n:]
        return n


@pytest.mark.parametrize("max_chunk_bytes", [5, 24, 1 << 20])
def test_chunks_short_reads_and_compressed_streams_give_the_same_records(
    monkeypatch, max_chunk_bytes
):
    monkeypatch.setattr(binary_module, "_MAX_CHUNK_BYTES", max_chunk_bytes)
    data = b"H" + b"".join(struct.pack(POINT, *p) for p in _points(11)) + b"xyz" + b"FF"
    opts = dict(record_bytes=24, header_bytes=1, footer_bytes=2, struct=POINT, fields=list("abcde"))
    expected = _parse(data, **opts)
    assert [n for n, _ in expected[0]] == list(range(1, 12))
    assert [r.location for r in expected[1]] == ["f.bin:12"]
    assert _parse(data, chunk_rows=4, **opts) == expected
    assert _parse(data, chunk_rows=3, stream=_Trickle(data), **opts) == expected
    zipped = gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(data)))
    assert _parse(b"", chunk_rows=5, stream=zipped, **opts) == expected


def test_float_specials_and_native_alignment_come_through():
    fmt = "@bd"  # native alignment: 7 padding bytes after the b
    size = struct.calcsize(fmt)
    data = struct.pack(fmt, -1, float("inf")) + struct.pack(fmt, 2, float("nan"))
    records, _ = _parse(data, record_bytes=size, struct=fmt, fields=["b", "d"])
    assert records[0] == (1, {"b": -1, "d": math.inf})
    assert math.isnan(records[1][1]["d"])
