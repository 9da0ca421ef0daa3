"""Text lines: options, line terminators and numbers, blank lines, regex fields, rejected lines."""

import io
import random

import pytest

from transforms.contract.config import OptionError, SourceSpec
from transforms.records import RawChunk
from transforms.sources import text as text_module
from transforms.sources.text import NO_MATCH, options, parse_text

LOG = r"(?P<level>[A-Z]+) (?P<ms>\d+)ms(?: user=(?P<user>\w+))?"


def _parse(data: bytes, chunk_rows=100, **raw_options):
    source = SourceSpec("src", "text", "f.txt", options(raw_options))
    records, rejected = [], []
    for item in parse_text(io.BytesIO(data), "f.txt", source, chunk_rows):
        if isinstance(item, RawChunk):
            assert item.text and 0 < len(item) <= chunk_rows
            for i in range(len(item)):
                fields = {name: item.values(name)[i] for name in item.columns}
                records.append((item.lines[i], fields, item.raw(i)))
        else:
            rejected.append(item)
    return records, rejected


def test_options_defaults():
    assert options({}).to_dict() == {
        "encoding": "utf-8",
        "field": "line",
        "regex": None,
        "skip_blank_lines": True,
    }
    assert options({"regex": LOG, "encoding": "Latin-1"}).encoding == "iso8859-1"
    assert options({"regex": LOG}).field is None


@pytest.mark.parametrize(
    "raw, field, message",
    [
        (
            {"regex": "(?P<a>x"},
            "regex",
            "invalid regular expression: missing ), unterminated subpattern",
        ),
        ({"regex": r"(\d+) (\w+)"}, "regex", "has no named group"),
        ({"regex": ""}, "regex", "must be a non-empty string"),
        ({"regex": LOG, "field": "x"}, "field", "cannot be used with regex"),
        ({"field": ""}, "field", "must be a non-empty string"),
        ({"encoding": "klingon"}, "encoding", "unknown encoding 'klingon'"),
        ({"skip_blank_lines": "no"}, "skip_blank_lines", "must be true or false"),
        ({"delimiter": ","}, "delimiter", "unknown key"),
    ],
)
def test_bad_options_name_the_option(raw, field, message):
    with pytest.raises(OptionError) as e:
        options(raw)
    assert e.value.field == field
    assert e.value.message.startswith(message)


def test_each_line_is_one_record_without_its_terminator():
    data = "first\r\nsecond has a lone \r inside\n\n   \nvierte Zeile é\nno newline at the end"
    records, rejected = _parse(data.encode())
    assert records == [
        (1, {"line": "first"}, "first"),
        (2, {"line": "second has a lone \r inside"}, "second has a lone \r inside"),
        (5, {"line": "vierte Zeile é"}, "vierte Zeile é"),
        (6, {"line": "no newline at the end"}, "no newline at the end"),
    ]
    assert rejected == []


def test_blank_lines_are_records_when_asked_and_the_field_can_be_renamed():
    records, _ = _parse(b"a\n\n \r\nb\r\n", skip_blank_lines=False, field="sentence")
    assert [(n, f) for n, f, _ in records] == [
        (1, {"sentence": "a"}),
        (2, {"sentence": ""}),
        (3, {"sentence": " "}),
        (4, {"sentence": "b"}),
    ]


def test_a_byte_order_mark_is_not_text_and_other_encodings_decode():
    assert _parse(b"\xef\xbb\xbfhello\n")[0] == [(1, {"line": "hello"}, "hello")]
    records, _ = _parse("café\nnaïve\n".encode("latin-1"), encoding="latin-1")
    assert [f["line"] for _, f, _ in records] == ["café", "naïve"]
    records, _ = _parse("α\nβ\n".encode("utf-16"), encoding="utf-16")
    assert [f["line"] for _, f, _ in records] == ["α", "β"]


def test_undecodable_bytes_are_kept_for_validation_and_escaped_in_record_text():
    records, _ = _parse(b"ok \xc3\xa9\nbad \xff byte\n")
    assert records[1][1:] == ({"line": "bad \udcff byte"}, "bad \\xff byte")
    assert records[0][2] == "ok é"
    records, rejected = _parse(b"1\n\xfe2\n", regex=r"(?P<n>\d)")
    assert rejected[0].record == "\\xfe2"
    # the rejected output is written as UTF-8: its text must be encodable
    rejected[0].record.encode("utf-8")


def test_regex_groups_become_fields_and_unmatched_lines_are_rejected():
    data = (
        b"INFO 12ms user=ann\r\nWARN 7ms\n\nnot a log line\nERROR 3ms user=bo trailing\nDEBUG 1ms\n"
    )
    records, rejected = _parse(data, regex=LOG)
    assert records == [
        (1, {"level": "INFO", "ms": "12", "user": "ann"}, "INFO 12ms user=ann"),
        (2, {"level": "WARN", "ms": "7", "user": None}, "WARN 7ms"),
        (6, {"level": "DEBUG", "ms": "1", "user": None}, "DEBUG 1ms"),
    ]
    # the whole line must match: a matching prefix is not enough
    assert [r.to_json() for r in rejected] == [
        {"source": "src", "location": "f.txt:4", "reason": NO_MATCH, "record": "not a log line"},
        {
            "source": "src",
            "location": "f.txt:5",
            "reason": NO_MATCH,
            "record": "ERROR 3ms user=bo trailing",
        },
    ]


def test_unnamed_groups_are_not_fields_and_a_block_of_only_rejections_yields_no_chunk():
    records, _ = _parse(b"a-1\nb-2\n", regex=r"(?P<k>\w)(-)(\d)")
    assert [f for _, f, _ in records] == [{"k": "a"}, {"k": "b"}]
    records, rejected = _parse(b"x\ny\n", regex=r"(?P<k>\d)")
    assert records == [] and [r.location for r in rejected] == ["f.txt:1", "f.txt:2"]


def _reference(data: str, regex: str | None) -> tuple[list, list]:
    """What parse_text must give, line by line with plain Python."""
    import re

    if data.startswith("\ufeff"):
        data = data[1:]
    lines = data.split("\n")
    if lines[-1] == "":
        lines.pop()
    records, rejected = [], []
    for number, line in enumerate(lines, start=1):
        if line.endswith("\r"):
            line = line[:-1]
        if not line.strip():
            continue
        if regex is None:
            records.append((number, {"line": line}, line))
        elif (m := re.fullmatch(regex, line)) is None:
            rejected.append((f"f.txt:{number}", line))
        else:
            records.append((number, m.groupdict(), line))
    return records, rejected


@pytest.mark.parametrize("seed", range(60))
def test_blocks_and_chunks_split_anywhere_give_the_same_records(seed, monkeypatch):
    rng = random.Random(seed)
    monkeypatch.setattr(text_module, "_READ_BYTES", rng.choice([1, 2, 5, 17, 1 << 20]))
    pieces = ["INFO 5ms", "WARN 10ms user=x", "junk", "", " ", "é ü", "\r", "a\rb", "\ufeff"]
    endings = ["\n", "\r\n"]
    data = "".join(rng.choice(pieces) + rng.choice(endings) for _ in range(rng.randrange(0, 40)))
    if rng.random() < 0.3:
        data = "\ufeff" + data
    if rng.random() < 0.5:
        data += rng.choice(pieces)
    regex = rng.choice([None, LOG])
    chunk_rows = rng.choice([1, 3, 100])
    raw = {} if regex is None else {"regex": regex}
    records, rejected = _parse(data.encode(), chunk_rows, **raw)
    expected_records, expected_rejected = _reference(data, regex)
    assert records == expected_records
    assert [(r.location, r.record) for r in rejected] == expected_rejected
