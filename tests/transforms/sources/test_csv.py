"""CSV parsing: quoting, embedded newlines, CRLF, null markers, line numbers, rejected rows."""

import dataclasses
import io

import pytest

from transforms.contract.config import SourceSpec
from transforms.files import FileError
from transforms.records import RawChunk, Rejected
from transforms.sources import csv as csv_module
from transforms.sources.csv import CsvOptions, parse_csv


def _source(**options):
    return SourceSpec("src", "csv", "f.csv", dataclasses.replace(CsvOptions(), **options))


class Row:
    def __init__(self, chunk, i):
        self.fields = {name: chunk.values(name)[i] for name in chunk.columns}
        self.line, self.raw = chunk.lines[i], chunk.raw(i)


@pytest.fixture(params=[True, False], ids=["arrow", "python"], autouse=True)
def parser(request, monkeypatch):
    """Every test runs against both parsers: the Arrow fast path and the csv-module reference."""
    monkeypatch.setattr(csv_module, "ARROW", request.param)
    return request.param


def _parse(data: bytes, chunk_rows=100, **options):
    rows, rejected = [], []
    for item in parse_csv(io.BytesIO(data), "f.csv", _source(**options), chunk_rows):
        if isinstance(item, RawChunk):
            assert item.text
            rows.extend(Row(item, i) for i in range(len(item)))
        else:
            rejected.append(item)
    return rows, rejected


def test_quoted_fields_keep_delimiters_quotes_and_newlines():
    data = b'a,b\n"x, y","say ""hi"""\n"two\nlines",z\n'
    rows, rejected = _parse(data)
    assert [r.fields for r in rows] == [
        {"a": "x, y", "b": 'say "hi"'},
        {"a": "two\nlines", "b": "z"},
    ]
    assert [r.line for r in rows] == [2, 3]
    assert rejected == []


def test_crlf_line_endings_are_not_part_of_values():
    rows, _ = _parse(b'a,b\r\n1,2\r\n3,"4\r\n5"\r\n')
    assert [r.fields for r in rows] == [{"a": "1", "b": "2"}, {"a": "3", "b": "4\r\n5"}]


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_column_name():
    for data in (b"\xef\xbb\xbfa,b\r\n1,2\r\n", b'\xef\xbb\xbfa,b\n1,"x\ny"\n'):
        rows, rejected = _parse(data)
        assert list(rows[0].fields) == ["a", "b"], data
        assert rows[0].line == 2 and not rows[0].raw.startswith("\ufeff")
        assert rejected == []
    rows, _ = _parse(b"\xef\xbb\xbfx\n1\n", header=False, columns=["a"])
    assert [r.fields for r in rows] == [{"a": "x"}, {"a": "1"}]


def test_null_markers_become_missing_values():
    rows, _ = _parse(b"a,b,c\n,NA,x\n", null_values=["", "NA"])
    assert rows[0].fields == {"a": None, "b": None, "c": "x"}


def test_wrong_field_count_is_rejected_with_line_and_text():
    data = b'a,b\n1,2\n"multi\nline",2,3\n4\n5,6\n'
    rows, rejected = _parse(data)
    assert [r.fields for r in rows] == [{"a": "1", "b": "2"}, {"a": "5", "b": "6"}]
    assert [r.line for r in rows] == [2, 6]
    assert [r.to_json() for r in rejected] == [
        {
            "source": "src",
            "location": "f.csv:3",
            "reason": "csv: expected 2 fields, got 3",
            "record": '"multi\nline",2,3\n',
        },
        {
            "source": "src",
            "location": "f.csv:5",
            "reason": "csv: expected 2 fields, got 1",
            "record": "4\n",
        },
    ]


def test_bad_quoting_is_rejected_and_parsing_goes_on():
    rows, rejected = _parse(b'a,b\n"x"y,1\n2,3\n')
    assert [r.fields for r in rows] == [{"a": "2", "b": "3"}]
    assert len(rejected) == 1
    assert rejected[0].location == "f.csv:2"
    assert rejected[0].reason.startswith("csv: ")


def test_unterminated_quote_at_end_of_file_is_rejected():
    rows, rejected = _parse(b'a,b\n1,2\n3,"open\nmore\n')
    assert [r.fields for r in rows] == [{"a": "1", "b": "2"}]
    assert [(r.location, r.record) for r in rejected] == [("f.csv:3", '3,"open\nmore\n')]


def test_blank_lines_are_not_records():
    rows, rejected = _parse(b"a\n1\n\n2\n")
    assert [(r.fields["a"], r.line) for r in rows] == [("1", 2), ("2", 4)]
    assert rejected == []


def test_no_header_uses_configured_columns_and_delimiter():
    rows, _ = _parse(b"1;x\n2;y\n", header=False, columns=["n", "s"], delimiter=";")
    assert [r.fields for r in rows] == [{"n": "1", "s": "x"}, {"n": "2", "s": "y"}]


def test_encoding_option_decodes_the_file():
    rows, _ = _parse("a\ncafé\n".encode("latin-1"), encoding="latin-1")
    assert rows[0].fields == {"a": "café"}


def test_chunks_hold_at_most_chunk_rows():
    data = b"a\n" + b"".join(b"%d\n" % i for i in range(10))
    chunks = [c for c in parse_csv(io.BytesIO(data), "f.csv", _source(), 4)]
    assert [len(c) for c in chunks] == [4, 4, 2]


def test_duplicate_header_names_fail_the_file():
    with pytest.raises(FileError, match="duplicate column names"):
        _parse(b"a,a\n1,2\n")


def test_empty_file_has_no_records():
    assert _parse(b"") == ([], [])


def test_record_text_spans_exactly_its_own_lines_across_chunks():
    data = b'a,b\n1,"x\ny"\nbad\n\n2,z\n3,"p\r\nq"\n'
    chunks = [c for c in parse_csv(io.BytesIO(data), "f.csv", _source(), 2)]
    records = [
        (c.lines[i], c.raw(i)) for c in chunks if isinstance(c, RawChunk) for i in range(len(c))
    ]
    assert records == [(2, '1,"x\ny"\n'), (6, "2,z\n"), (7, '3,"p\r\nq"\n')]
    assert [c.record for c in chunks if isinstance(c, Rejected)] == ["bad\n"]
