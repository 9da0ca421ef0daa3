"""Reader edge cases: input that used to crash a job or misread a whole file is one rejected
record (reason, location, raw text), or read as the user meant, and the job goes on.

Unit tests call the readers' parse functions directly (the CSV ones with both parsers, the Arrow
fast path and the csv-module reference); one end-to-end run (`edge`) reads every case together
and checks the manifest, the rejected file, the statistics and the report; one more run checks
the job-level error of a CSV file written with another delimiter.

Policies (also listed in tests/reliability/README.md):
- JSONL nested deeper than 100 levels: rejected `json: nested deeper than 100 levels`, checked
  on the text before parsing (no RecursionError, whatever the depth).
- A JSONL key that is not valid text (a lone surrogate escape `"\\udc80"`, or a byte the
  encoding cannot decode): the record is rejected `json: field name is not valid text`.
  Values are kept as they are (a `string` feature rejects one that is not text).
- A CSV header name with a byte the encoding cannot decode: the column is named with a `\\xNN`
  escape (`na\\xffme`), the file is read, and the column is an ignored field like any other.
- A CSV header that is one column holding `;`, a tab or `|`, read with the default `,`: the job
  fails (exit 1) naming the delimiter to set; nothing is published.
- TFRecord length larger than the rest of the file (2**62, or just one byte too many): the rest
  is one `tfrecord: truncated record`, earlier records are kept; no read is sized by the length.
- A truncated `.tfrecord.gz`: every record inflated whole is kept, the tail is one
  `tfrecord: truncated record` (as for an uncompressed file).
- CSV blank lines (nothing but spaces and tabs) are never records nor the header; a file of only
  blank lines has no records; a line holding the delimiter is a row of empty fields.
- JSONL lines end at `\\n` only: a lone `\\r` is JSON whitespace (or, in a string, invalid JSON).
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import random
import re
import struct
import tracemalloc
import zlib
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from pipelines.etl import run
from tests import readback
from transforms.contract.config import SourceSpec
from transforms.contract.layout import masked_crc
from transforms.encode import encode_columns
from transforms.files import FileError, open_file
from transforms.records import RawChunk
from transforms.sink.framing import frame_records
from transforms.sources import csv as csv_module
from transforms.sources import ranges, registry, tfrecord
from transforms.sources.csv import parse_csv
from transforms.sources.jsonl import parse_jsonl

INT, BYTES = pa.list_(pa.int64()), pa.list_(pa.binary())
DEEP_LIST = "[" * 100_000
DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000
TOO_DEEP = "json: nested deeper than 100 levels"
BAD_NAME = "json: field name is not valid text"
TRUNCATED = "tfrecord: truncated record"


# --- helpers ----------------------------------------------------------------------------------


def _items(items) -> list[tuple]:
    """(line, fields, raw text) per record and ("rejected", location, reason, record) per
    rejection, in the reader's order."""
    out = []
    for item in items:
        if isinstance(item, RawChunk):
            columns = {name: item.values(name) for name in item.columns}
            for i in range(len(item)):
                fields = {k: v[i] for k, v in columns.items() if v[i] is not None}
                raw = item.raw(i) if item.raw_text is not None else None
                out.append((int(item.lines[i]), fields, raw))
        else:
            out.append(("rejected", item.location, item.reason, item.record))
    return out


def _jsonl(data: bytes) -> list[tuple]:
    source = SourceSpec("j", "jsonl", "f.jsonl", registry.check_options("jsonl", {}))
    return _items(parse_jsonl(io.BytesIO(data), "f.jsonl", source))


def _csv_source(**options) -> SourceSpec:
    return SourceSpec("c", "csv", "f.csv", registry.check_options("csv", options))


def _csv(data: bytes, **options) -> list[tuple]:
    return _items(parse_csv(io.BytesIO(data), "f.csv", _csv_source(**options), 3))


@pytest.fixture(params=[True, False], ids=["arrow", "python"])
def both_parsers(request, monkeypatch):
    """The CSV test runs with the Arrow fast path and with the csv-module reference."""
    monkeypatch.setattr(csv_module, "ARROW", request.param)


def _examples(ids: list[int], names: list[bytes]) -> list[bytes]:
    arrays = [pa.array([[i] for i in ids], INT), pa.array([[n] for n in names], BYTES)]
    return encode_columns(["id", "name"], arrays).to_pylist()


def _length_header(length: int) -> bytes:
    head = struct.pack("<Q", length)
    return head + struct.pack("<I", masked_crc(head))


def _tfrecords(path: Path) -> list[tuple]:
    source = SourceSpec("t", "tfrecord", str(path), tfrecord.options({}))
    with open_file(str(path)) as stream:
        return _items(tfrecord.parse_tfrecord(stream, str(path), source, 100))


def _truncated_gzip_shard(ids: list[int]) -> tuple[bytes, int, int]:
    """A gzip TFRecord file of these ids cut short, how many records inflate whole from it, and
    the offset (uncompressed) of the first one that does not."""
    examples = _examples(ids, [b"g%d" % i for i in ids])
    data = gzip.compress(frame_records(examples))
    cut = data[: len(data) * 2 // 3]
    inflated = len(zlib.decompressobj(31).decompress(cut))
    ends = [0, *itertools.accumulate(16 + len(e) for e in examples)]
    whole = sum(1 for end in ends[1:] if end <= inflated)
    assert 0 < whole < len(ids)
    return cut, whole, ends[whole]


# --- text with a regex ---------------------------------------------------------------------------


def _text(data: bytes, regex: str) -> list[tuple]:
    from transforms.sources.text import parse_text

    source = SourceSpec("t", "text", "f.log", registry.check_options("text", {"regex": regex}))
    return _items(parse_text(io.BytesIO(data), "f.log", source))


@pytest.mark.parametrize(("regex", "nested"), [
    (r"(?P<a>(a+)+)b", "(a+)+"),
    (r"(?P<a>(\w+\s?)*)", "(\\w+\\s?)*"),
    (r"(?P<k>\w+)=(?P<v>[^,]*)(?:,\w+=[^,]*)*", "(?:,\\w+=[^,]*)*"),
    (r"(?P<a>\w+) (?P<b>\d+)", None),
    (r"(?P<a>(?:ab)+)", None),  # a repeated group of no repeat
    (r"(?P<a>(a++)+)", None),  # possessive: no backtracking
    (r"(?P<a>(?>a+)+)", None),  # atomic
])  # fmt: skip
def test_a_nested_quantifier_is_found_in_the_parsed_regex(regex, nested):
    from transforms.sources.text import nested_quantifier

    assert nested_quantifier(regex) == (None if nested is None else nested.replace("\\\\", "\\"))


@pytest.mark.timeout(60)
def test_a_hostile_line_against_a_backtracking_regex_takes_linear_time():
    """(a+)+ against 'aaaa…c' doubles Python's time per character (7 minutes at 32): RE2 takes
    microseconds, and the line is rejected as any line that does not match."""
    import time

    lines = b"aaa b\n" + b"a" * 5000 + b"c\n" + b"\xffa b\n" + b"aa b\n"
    started = time.monotonic()
    items = _text(lines, r"(?P<word>(a+)+) (?P<rest>\w)")
    assert time.monotonic() - started < 5
    assert items == [
        ("rejected", "f.log:2", "text: line does not match regex", "a" * 5000 + "c"),
        # undecodable bytes, which RE2 cannot take: Python's engine, within its time limit
        ("rejected", "f.log:3", "text: line does not match regex", "\\xffa b"),
        (1, {"word": "aaa", "rest": "b"}, "aaa b"),  # rejections come first, then the chunk
        (4, {"word": "aa", "rest": "b"}, "aa b"),
    ]  # fmt: skip


@pytest.mark.timeout(60)
def test_a_regex_re2_can_run_is_matched_by_re2_even_without_a_nested_quantifier():
    """(b|bb)+ holds no nested quantifier, but Python's engine tries every way to split a run of
    b's (Fibonacci many: minutes at 49 characters); RE2 takes microseconds."""
    import time

    from transforms.sources.text import Linear, compile_regex, regex_note

    regex = r"^(?P<w>(b|bb)+)$"
    assert isinstance(compile_regex(regex), Linear)
    assert regex_note(regex) is None  # RE2 matches as Python's engine would: nothing to say
    started = time.monotonic()
    items = _text(b"bbb\n" + b"b" * 49 + b"c\n" + b"b\xff\n", regex)
    assert time.monotonic() - started < 5
    assert items == [
        ("rejected", "f.log:2", "text: line does not match regex", "b" * 49 + "c"),
        ("rejected", "f.log:3", "text: line does not match regex", "b\\xff"),
        (1, {"w": "bbb"}, "bbb"),
    ]


@pytest.mark.timeout(60)
def test_a_regex_only_python_can_run_gives_up_on_a_line_after_its_time_limit(monkeypatch):
    """A backreference RE2 cannot run: Python's engine (the `regex` package) with a time limit
    per line; a line past it is rejected with a reason and the next lines are read."""
    import time

    from transforms.sources import text

    monkeypatch.setattr(text, "MATCH_SECONDS", 0.2)
    regex = r"(?P<q>['\"]?)(?P<w>(b|bb)+)(?P=q)"
    assert isinstance(text.compile_regex(regex), text.Budgeted)
    assert "Python's backtracking engine" in text.regex_note(regex)
    started = time.monotonic()
    items = _text(b"'bb'\n" + b"b" * 60 + b"c\n" + b"bbb\n", regex)
    assert time.monotonic() - started < 5
    assert items == [
        ("rejected", "f.log:2", text.TOO_SLOW, "b" * 60 + "c"),
        (1, {"q": "'", "w": "bb"}, "'bb'"),
        (3, {"q": "", "w": "bbb"}, "bbb"),
    ]
    assert "longer than 1 s" in text.TOO_SLOW  # the limit as the reason counts it


# ASCII and Latin-1 whole, then every 11th code point (surrogates left out): every category
SAMPLE_CODE_POINTS = [*range(0x100), *range(0x100, 0xD800, 11), *range(0xE000, 0x110000, 11)]


def test_re2_matches_what_pythons_engine_matches():
    """RE2's \\w, \\d, \\s are ASCII; `for_re2` spells Python's Unicode classes for it, so that
    every character Python's Unicode database knows is matched alike (one a newer Unicode
    assigned may differ). \\b has no Unicode form in RE2: Python's engine, with its limit."""
    import unicodedata

    from transforms.sources.text import Budgeted, Linear, compile_regex, regex_note

    for cls in ("w", "d", "s", "W", "D", "S"):
        ours, python = compile_regex(rf"(?P<x>\{cls})"), re.compile(rf"(?P<x>\{cls})")
        assert isinstance(ours, Linear)
        differ = [
            c
            for c in map(chr, SAMPLE_CODE_POINTS)
            if (ours.groups(c) is None) != (python.fullmatch(c) is None)
        ]
        assert {unicodedata.category(c) for c in differ} <= {"Cn"}, cls
    assert regex_note(r"(?P<a>\w+) (?P<b>\d+)") is None
    regex = r"(?P<a>[\w.]+)[^\s]{,2} (?P<b>\d+)"
    lines = ["café.x!! ١٢", "a_1 12", "ab!!! 1", "a\u00a0 1", "x 1a"]
    assert _text("\n".join(lines).encode() + b"\n", regex) == [
        ("rejected", f"f.log:{i}", "text: line does not match regex", line)
        for i, line in enumerate(lines, start=1)
        if re.fullmatch(regex, line) is None
    ] + [
        (i, re.fullmatch(regex, line).groupdict(), line)
        for i, line in enumerate(lines, start=1)
        if re.fullmatch(regex, line) is not None
    ]
    # \b: RE2's on ASCII lines, Python's engine (with its limit) on the others
    assert _text("café x\nab x\n".encode(), r"(?P<w>\b\w+\b) x") == [
        (1, {"w": "café"}, "café x"),
        (2, {"w": "ab"}, "ab x"),
    ]
    assert isinstance(compile_regex(r"(?P<w>[\S])"), Budgeted)  # RE2's \S lacks \v


def test_a_nested_quantifier_re2_cannot_run_is_refused_at_config_time(tmp_path, capsys):
    (tmp_path / "a.log").write_text("aa aa\n")
    config = {
        "name": "t",
        "sources": [{"name": "logs", "format": "text", "path": "a.log",
                     "options": {"regex": r"(?P<w>(a+)+) \1"}}],
        "features": {"w": {"type": "string"}},
        "splits": {"train": 1.0},
        "output": {"path": "out"},
    }  # fmt: skip
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    assert run(["--config", str(tmp_path / "c.yaml"), "--validate-only"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shardflow etl: error: sources[0].options.regex: has a nested quantifier")
    assert "(a+)+" in err and "RE2" in err and "possessive (a++)" in err
    config["sources"][0]["options"]["regex"] = r"(?P<w>(a+)+) (?P<x>a+)"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    assert run(["--config", str(tmp_path / "c.yaml"), "--validate-only"]) == 0
    assert capsys.readouterr().err == (
        "shardflow etl: warning: sources[0] 'logs': regex has a nested quantifier ((a+)+): "
        "matched by RE2 in linear time\n"
    )


@pytest.mark.parametrize("regex", [None, r"(?P<line>.*)"])
def test_text_a_line_longer_than_the_limit_is_rejected_unread(monkeypatch, regex):
    """A file of one endless line (a link to /dev/zero is refused; a huge regular file is not):
    past MAX_LINE_CHARS the line is counted, not held, and rejected with its length."""
    from transforms.sources import text

    monkeypatch.setattr(text, "MAX_LINE_CHARS", 100)
    monkeypatch.setattr(text, "_READ_BYTES", 16)  # blocks smaller than a line
    data = b"short\n" + b"x" * 250 + b"\nafter\n" + b"y" * 300
    options = {"regex": regex} if regex else {}
    source = SourceSpec("t", "text", "f.log", registry.check_options("text", options))
    items = _items(text.parse_text(io.BytesIO(data), "f.log", source))
    too_long = "text: line longer than 64 Mi characters, not read"
    assert sorted(items, key=str) == [
        ("rejected", "f.log:2", too_long, "<250 characters>"),
        ("rejected", "f.log:4", too_long, "<300 characters>"),
        (1, {"line": "short"}, "short"),
        (3, {"line": "after"}, "after"),
    ]


def test_jsonl_a_line_longer_than_the_limit_is_rejected_unread(monkeypatch):
    from transforms.sources import jsonl

    monkeypatch.setattr(jsonl, "MAX_LINE_CHARS", 100)
    data = b'{"a": 1}\n{"b": "' + b"x" * 250 + b'"}\n{"a": 2}\n' + b"[" * 500
    assert _jsonl(data) == [
        ("rejected", "f.jsonl:2", "json: line longer than 64 Mi characters, not read",
         "<259 characters>"),
        ("rejected", "f.jsonl:4", "json: line longer than 64 Mi characters, not read",
         "<500 characters>"),
        (1, {"a": 1}, '{"a": 1}'),
        (3, {"a": 2}, '{"a": 2}'),
    ]  # fmt: skip


# --- JSON Lines ---------------------------------------------------------------------------------


def test_jsonl_nested_too_deeply_is_rejected_with_its_line_not_a_crash():
    at_limit = '{"id": 3, "x": ' + "[" * 99 + "]" * 99 + "}"
    over = '{"id": 4, "x": ' + "[" * 100 + "]" * 100 + "}"
    brackets_in_strings = '{"id": 5, "s": "' + "[" * 500 + '"}'
    data = "\n".join(['{"id": 1}', DEEP_LIST, DEEP_OBJECT, at_limit, over, brackets_in_strings])
    assert _jsonl(data.encode() + b"\n") == [
        ("rejected", "f.jsonl:2", TOO_DEEP, DEEP_LIST),
        ("rejected", "f.jsonl:3", TOO_DEEP, DEEP_OBJECT),
        ("rejected", "f.jsonl:5", TOO_DEEP, over),
        (1, {"id": 1}, '{"id": 1}'),
        (4, {"id": 3, "x": json.loads("[" * 99 + "]" * 99)}, at_limit),
        (6, {"id": 5, "s": "[" * 500}, brackets_in_strings),
    ]


def test_jsonl_field_names_that_are_not_text_reject_the_record():
    data = (
        b'{"\\udc80": 1, "id": 2}\n'  # a lone surrogate escape
        b'{"\xff": 1, "id": 3}\n'  # a byte UTF-8 cannot decode
        b'{"\\ud83d\\ude00": 1, "id": 4}\n'  # a surrogate pair is text: U+1F600
        b'{"id": 5, "s": "\\udc80"}\n'  # a value is kept; a string feature rejects it
    )
    assert _jsonl(data) == [
        ("rejected", "f.jsonl:1", BAD_NAME, '{"\\udc80": 1, "id": 2}'),
        ("rejected", "f.jsonl:2", BAD_NAME, '{"\\xff": 1, "id": 3}'),
        (3, {"\U0001f600": 1, "id": 4}, '{"\\ud83d\\ude00": 1, "id": 4}'),
        (4, {"id": 5, "s": "\udc80"}, '{"id": 5, "s": "\\udc80"}'),
    ]


def test_jsonl_a_lone_cr_is_not_a_line_break():
    data = b'{"id": 1,\r "name": "a"}\n{"id": 2, "name": "b\rc"}\r\n\r\n{"id": 3}\r\n{"id": 4}\r'
    assert _jsonl(data) == [
        ("rejected", "f.jsonl:2", "json: invalid JSON", '{"id": 2, "name": "b\rc"}'),
        (1, {"id": 1, "name": "a"}, '{"id": 1,\r "name": "a"}'),
        (4, {"id": 3}, '{"id": 3}'),
        (5, {"id": 4}, '{"id": 4}'),
    ]


# --- TFRecord -----------------------------------------------------------------------------------


@pytest.mark.parametrize("claim", ["huge", "one-too-many"])
def test_tfrecord_length_beyond_the_end_of_the_file_is_a_truncated_tail(tmp_path, claim):
    good = frame_records(_examples([1, 2], [b"a", b"b"]))
    tail = b"z" * 1000
    length = 2**62 if claim == "huge" else len(tail) - 4 + 1  # the data, its CRC, and a byte
    path = tmp_path / "f.tfrecord"
    path.write_bytes(good + _length_header(length) + tail)
    tracemalloc.start()
    try:
        items = _tfrecords(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert items == [
        ("rejected", f"{path}:3", TRUNCATED, json.dumps({"offset": len(good)})),
        (1, {"id": [1], "name": [b"a"]}, None),
        (2, {"id": [2], "name": [b"b"]}, None),
    ]
    assert peak < 8 << 20  # the claimed length never sizes a read (it used to: MemoryError)


def test_tfrecord_corrupt_length_is_checked_before_the_length_is_used(tmp_path):
    good = frame_records(_examples([1], [b"a"]))
    header = bytearray(_length_header(2**62))
    header[8] ^= 0xFF  # the length's checksum fails
    path = tmp_path / "f.tfrecord"
    path.write_bytes(good + bytes(header) + b"z" * 100)
    assert _tfrecords(path) == [
        (
            "rejected",
            f"{path}:2",
            "tfrecord: corrupt record length",
            json.dumps({"offset": len(good)}),
        ),
        (1, {"id": [1], "name": [b"a"]}, None),
    ]


@pytest.mark.parametrize("damage", ["length checksum", "length", "both"])
def test_tfrecord_records_behind_a_corrupt_length_are_read(tmp_path, damage):
    """A damaged length (or its checksum) in mid-file costs one record, not the rest of the
    file: the reader goes on at the next frame whose length and data checksums hold."""
    examples = _examples(list(range(1, 8)), [b"r%d" % i for i in range(1, 8)])
    data = bytearray(frame_records(examples))
    third = sum(16 + len(e) for e in examples[:2])  # where record 3 starts
    if damage in ("length checksum", "both"):
        data[third + 9] ^= 0x40
    if damage in ("length", "both"):
        data[third + 2] ^= 0x01  # a length 65,536 bytes longer than the record
    path = tmp_path / "f.tfrecord"
    path.write_bytes(bytes(data))
    items = _tfrecords(path)
    rejected = [item for item in items if item[0] == "rejected"]
    assert rejected == [
        ("rejected", f"{path}:3", "tfrecord: corrupt record length", json.dumps({"offset": third}))
    ]
    read = [item for item in items if item[0] != "rejected"]
    assert [(n, f["id"]) for n, f, _ in read] == [(n, [n]) for n in (1, 2, 4, 5, 6, 7)]


def test_truncated_gzip_tfrecord_keeps_every_record_inflated_whole(tmp_path):
    ids = list(range(3000))
    data, whole, tail = _truncated_gzip_shard(ids)
    path = tmp_path / "f.tfrecord.gz"
    path.write_bytes(data)
    items = _tfrecords(path)
    assert [item for item in items if item[0] == "rejected"] == [
        ("rejected", f"{path}:{whole + 1}", TRUNCATED, json.dumps({"offset": tail}))
    ]
    assert [item[1]["id"][0] for item in items if item[0] != "rejected"] == ids[:whole]


def test_corrupt_gzip_tfrecord_keeps_the_records_before_the_damage(tmp_path):
    """Inflated a block of compressed input at a time: the records of the blocks before the one
    with the damage are kept (it used to fail the job)."""
    noise = random.Random(0)
    examples = _examples(list(range(3000)), [noise.randbytes(50) for _ in range(3000)])
    data = bytearray(gzip.compress(frame_records(examples)))
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "f.tfrecord.gz"
    path.write_bytes(bytes(data))
    items = _tfrecords(path)
    rejected = {int(item[1].rsplit(":", 1)[1]): item[2] for item in items if item[0] == "rejected"}
    read = [item[1]["id"][0] + 1 for item in items if item[0] != "rejected"]  # record numbers
    last = max(rejected)
    # the damage may first pass as data (a record's checksum fails), then the stream breaks
    assert rejected.pop(last) in ("tfrecord: corrupt compressed data", TRUNCATED)
    assert set(rejected.values()) <= {"tfrecord: data checksum mismatch"}
    assert 0 < len(read) and sorted(read + list(rejected)) == list(range(1, last))


# --- CSV ----------------------------------------------------------------------------------------


def test_csv_blank_lines_are_never_records_or_the_header(both_parsers):
    data = b"\n  \n\t\r\nid,name\n1,a\n \t \n\n2,b\n   "
    assert _csv(data) == [
        (5, {"id": "1", "name": "a"}, "1,a\n"),
        (8, {"id": "2", "name": "b"}, "2,b\n"),
    ]
    assert _csv(b"id\n1\n  \n2\n") == [(2, {"id": "1"}, "1\n"), (4, {"id": "2"}, "2\n")]
    assert _csv(b"1,a\n\n \n2,b\n", header=False, columns=["id", "name"]) == [
        (1, {"id": "1", "name": "a"}, "1,a\n"),
        (4, {"id": "2", "name": "b"}, "2,b\n"),
    ]


def test_csv_a_quote_left_open_says_how_many_lines_it_swallowed(both_parsers):
    items = _csv(b'id,name\n1,a\n2,"b\n3,c\n4,d\n5,e\n')
    assert sorted(items, key=str) == [
        (
            "rejected",
            "f.csv:3",
            "csv: a quote opened in this record is never closed: the 4 lines to the end of the "
            "file are one record",
            '2,"b\n3,c\n4,d\n5,e\n',
        ),
        (2, {"id": "1", "name": "a"}, "1,a\n"),
    ]


def test_csv_a_line_or_field_longer_than_the_limit_is_rejected_unread(both_parsers, monkeypatch):
    """A CSV line, or a quoted field of many lines, longer than MAX_CHARS (64 Mi characters;
    100 here) is one rejection with its length, never held whole; the records after a long
    line are read, by the Arrow path and the reference parser alike."""
    import csv

    monkeypatch.setattr(csv_module, "MAX_CHARS", 100)
    monkeypatch.setattr(csv_module, "_READ_BYTES", 32)
    limit = csv.field_size_limit(100)
    try:
        line = _csv(b"id,name\n1,a\n2," + b"x" * 250 + b"\n3,c\n")
        field = _csv(b'id,name\n1,a\n2,"' + b"y\n" * 60 + b'"\n')
    finally:
        csv.field_size_limit(limit)
    too_long = "csv: a line or field longer than 64 Mi characters, not read"
    assert sorted(line, key=str) == [
        ("rejected", "f.csv:3", too_long, "<252 characters>"),
        (2, {"id": "1", "name": "a"}, "1,a\n"),
        (4, {"id": "3", "name": "c"}, "3,c\n"),
    ]
    rejected = [item for item in field if item[0] == "rejected"]
    assert rejected[0] == ("rejected", "f.csv:3", too_long, "<105 characters>")
    # what follows the cut is read as the csv module reads it after an error: line by line,
    # each line counted (here as a wrong field count, the closing quote as an open one)
    assert len(field) == 1 + len(rejected)  # record 1 and the rejections: nothing uncounted
    assert {r[2] for r in rejected[1:-1]} == {"csv: expected 2 fields, got 1"}
    assert rejected[-1][2].startswith("csv: a quote opened in this record is never closed")


def test_csv_a_file_of_blank_lines_has_no_records(both_parsers):
    for data in (b"\n", b"\n\n  \n\t\n", b"\r\n \r\n", b"   "):
        assert _csv(data) == [], data


def test_csv_a_line_holding_the_delimiter_is_a_row_of_empty_fields(both_parsers):
    assert _csv(b"a\tb\n\t\n1\t2\n", delimiter="\t") == [
        (2, {}, "\t\n"),
        (3, {"a": "1", "b": "2"}, "1\t2\n"),
    ]
    assert _csv(b"a b\n  \n1 2\n", delimiter=" ") == [
        ("rejected", "f.csv:2", "csv: expected 2 fields, got 3", "  \n"),
        (3, {"a": "1", "b": "2"}, "1 2\n"),
    ]


def _blank_lines_csv(rng: random.Random) -> str:
    lines = ["", "  ", "id,name,note"]
    for i in range(300):
        kind = rng.random()
        if kind < 0.15:
            lines.append(rng.choice(["", " ", "\t", " \t  "]))
        elif kind < 0.2:
            lines.append(f'{i},"multi\n  \nline",x')  # a blank line inside quotes is a value
        else:
            lines.append(f"{i},n{i},{'z' * rng.randrange(20)}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(3))
def test_csv_ranges_agree_with_a_whole_read_on_blank_lines(tmp_path, both_parsers, seed):
    path = tmp_path / "a.csv"
    path.write_text(_blank_lines_csv(random.Random(seed)))
    source = SourceSpec("c", "csv", str(path), registry.check_options("csv", {}))
    parse = registry.parser("csv")
    whole = _items(ranges.read(ranges.Range(str(path)), source, parse))
    assert len(whole) > 200 and all(item[0] != "rejected" for item in whole)
    for split_bytes in (3, 200, 1500):
        parts = ranges.plan(str(path), path.stat().st_size, source, split_bytes)
        assert len(parts) > 1 and parts[0].end > len("\n  \nid,name,note\n") - 1
        got = [item for rng in parts for item in _items(ranges.read(rng, source, parse))]
        assert sorted(got, key=repr) == sorted(whole, key=repr), split_bytes


def test_csv_header_bytes_that_are_not_text_name_an_escaped_column(both_parsers):
    assert _csv(b"id,na\xffme,name\n1,x,a\n") == [
        (2, {"id": "1", "na\\xffme": "x", "name": "a"}, "1,x,a\n")
    ]


@pytest.mark.parametrize(
    "header, held, setting",
    [(b"a;b;c", ";", '";"'), (b"a\tb\tc", "\t", '"\\t"'), (b"a|b;c|d", "|", '"|"')],
)
def test_csv_one_column_header_holding_another_delimiter_fails_the_file(
    both_parsers, header, held, setting
):
    with pytest.raises(FileError) as e:
        _csv(header + b"\n1;2;3\n")
    name = header.decode()
    assert str(e.value) == (
        f"f.csv: the header has one column {name!r} holding {held!r}: "
        f"set options.delimiter: {setting}"
    )


def test_csv_one_column_header_is_fine_with_that_delimiter_or_without_another_one(both_parsers):
    assert _csv(b"a;b\n1;2\n", delimiter=";") == [(2, {"a": "1", "b": "2"}, "1;2\n")]
    assert _csv(b"a b\n1 2\n") == [(2, {"a b": "1 2"}, "1 2\n")]
    assert _csv(b"a,b;c\n1,2\n") == [(2, {"a": "1", "b;c": "2"}, "1,2\n")]


def test_csv_other_encodings_still_decode(both_parsers):
    data = "\n  \nid,café\n1,crème\n".encode("latin-1")
    assert _csv(data, encoding="latin-1") == [(4, {"id": "1", "café": "crème"}, "1,crème\n")]
    data = "id,name\n1,日本\n".encode("utf-16")
    assert _csv(data, encoding="utf-16") == [(2, {"id": "1", "name": "日本"}, "1,日本\n")]


# --- end to end ---------------------------------------------------------------------------------

EVENTS = (
    DEEP_LIST.encode()
    + b"\n"  # 1
    + DEEP_OBJECT.encode()
    + b"\n"  # 2
    + b'{"\\udc80": 1, "id": 2, "name": "s"}\n'  # 3
    + b'{"\xff": 1, "id": 3, "name": "b"}\n'  # 4
    + b'{"id": 4,\r "name": "cr"}\r\n'  # 5: a lone CR is whitespace
    + b'{"id": 5, "name": "j", "extra": 1}\n'  # 6
    + b'{"id": 6, "name": "d", "extra": '
    + b"[" * 99
    + b"]" * 99
    + b"}\n"  # 7: 100 deep: read
)
TABLE = b"\n \nid,na\xffme,name\n10,zz,a\n\t\n11,,b\n"  # the \xff column is read by nothing


def _config(d: Path, sources: list[dict]) -> Path:
    config = {
        "name": "edge",
        "sources": sources,
        "key": "id",
        "features": {"id": {"type": "int"}, "name": {"type": "string"}},
        "splits": {"train": 0.5, "eval": 0.5},
        "output": {"path": "out"},
    }
    path = d / "edge.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    d = tmp_path_factory.mktemp("edge")
    (d / "events.jsonl").write_bytes(EVENTS)
    (d / "table.csv").write_bytes(TABLE)
    (d / "table-blank.csv").write_bytes(b"\n  \n\t\n\n")  # no header, no records
    (d / "latin.csv").write_bytes("id,name\n20,café\n".encode("latin-1"))
    good = frame_records(_examples([30, 31], [b"t0", b"t1"]))
    (d / "frames.tfrecord").write_bytes(good + _length_header(2**62) + b"z" * 100)
    shard_ids = list(range(1000, 4000))
    shard, whole, tail = _truncated_gzip_shard(shard_ids)
    (d / "shard.tfrecord.gz").write_bytes(shard)
    sources = [
        {"name": "events", "format": "jsonl", "path": "events.jsonl"},
        {"name": "table", "format": "csv", "path": "table*.csv"},
        {"name": "latin", "format": "csv", "path": "latin.csv", "options": {"encoding": "latin-1"}},
        {"name": "frames", "format": "tfrecord", "path": "frames.tfrecord"},
        {"name": "shard", "format": "tfrecord", "path": "shard.tfrecord.gz"},
    ]
    assert run(["--config", str(_config(d, sources))]) == 0
    out = d / "out"
    manifest = readback.manifest(out)
    written = readback.rows(out, manifest, ["id", "name"])
    rejected = {(r["source"], r["location"].rsplit("/", 1)[-1]): r for r in readback.rejected(out)}
    return out, manifest, written, rejected, len(good), shard_ids[:whole], tail


def test_every_edge_case_is_read_and_the_job_goes_on(edge):
    _, manifest, written, rejected, _, shard_ids, _ = edge
    assert {name: s["records"] for name, s in manifest["sources"].items()} == {
        "events": 7,
        "table": 2,
        "latin": 1,
        "frames": 3,
        "shard": len(shard_ids) + 1,
    }
    assert written == sorted(
        [
            ((4,), (b"cr",)),
            ((5,), (b"j",)),
            ((6,), (b"d",)),
            ((10,), (b"a",)),
            ((11,), (b"b",)),
            ((20,), ("café".encode(),)),
            ((30,), (b"t0",)),
            ((31,), (b"t1",)),
        ]
        + [((i,), (b"g%d" % i,)) for i in shard_ids]
    )
    assert manifest["rejected"]["reasons"] == {TOO_DEEP: 2, BAD_NAME: 2, TRUNCATED: 2}
    assert manifest["rejected"]["reasons"] == dict(Counter(r["reason"] for r in rejected.values()))
    assert manifest["duplicates"] == 0


def test_rejections_name_the_reason_location_and_raw_text(edge):
    _, _, _, rejected, good_bytes, shard_ids, tail = edge
    got = {key: (r["reason"], r["record"]) for key, r in rejected.items()}
    assert got == {
        ("events", "events.jsonl:1"): (TOO_DEEP, DEEP_LIST),
        ("events", "events.jsonl:2"): (TOO_DEEP, DEEP_OBJECT),
        ("events", "events.jsonl:3"): (BAD_NAME, '{"\\udc80": 1, "id": 2, "name": "s"}'),
        ("events", "events.jsonl:4"): (BAD_NAME, '{"\\xff": 1, "id": 3, "name": "b"}'),
        ("frames", "frames.tfrecord:3"): (TRUNCATED, json.dumps({"offset": good_bytes})),
        ("shard", f"shard.tfrecord.gz:{len(shard_ids) + 1}"): (
            TRUNCATED,
            json.dumps({"offset": tail}),
        ),
    }


def test_field_names_that_were_not_text_reach_manifest_statistics_and_report(edge):
    out, manifest, *_ = edge
    ignored = {name: s["ignored_fields"] for name, s in manifest["sources"].items()}
    assert ignored == {
        "events": {"extra": 2},
        "table": {"na\\xffme": 1},
        "latin": {},
        "frames": {},
        "shard": {},
    }
    statistics = json.loads((out / manifest["statistics"]["path"]).read_text(encoding="utf-8"))
    assert statistics
    report = (out / "report.html").read_text(encoding="utf-8")
    assert "na\\xffme" in report


def test_csv_header_of_another_delimiter_fails_the_job_naming_the_fix(tmp_path, capsys):
    (tmp_path / "semi.csv").write_bytes(b"id;name\n1;a\n2;b\n")
    cfg = _config(tmp_path, [{"name": "semi", "format": "csv", "path": "semi.csv"}])
    capsys.readouterr()
    assert run(["--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert (
        "semi.csv: the header has one column 'id;name' holding ';': set options.delimiter: \";\""
        in err.strip().splitlines()[-1]
    )
