"""Parquet parsing: columns to fields, nested columns flattened, row numbers, chunking, options,
corrupt files and row groups. Fixtures are written with pyarrow."""

import datetime
import decimal
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.transforms import parsed
from transforms.contract.config import OptionError, SourceSpec
from transforms.files import FileError
from transforms.sources import parquet


def _file(table: pa.Table, **write_options) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **write_options)
    return buf.getvalue()


def _parse(data: bytes, chunk_rows=100, stream=None, **options):
    source = SourceSpec("src", "parquet", "f.parquet", parquet.options(options))
    stream = stream or io.BytesIO(data)
    return parsed.split(parquet.parse_parquet(stream, "f.parquet", source, chunk_rows))


def _rows(chunks) -> list[tuple[int, dict]]:
    return parsed.rows(chunks)


def test_columns_become_fields_with_python_values_and_row_numbers():
    table = pa.table(
        {
            "id": pa.array([1, 2, None], pa.int64()),
            "x": [1.5, None, -2.0],
            "name": ["a", None, "ç"],
            "blob": [b"\x00\xff", None, b""],
            "ok": [True, False, None],
            "tags": [["a", "b"], [], None],
        }
    )
    chunks, rejected = _parse(_file(table))
    assert rejected == []
    assert _rows(chunks) == [
        (1, {"id": 1, "x": 1.5, "name": "a", "blob": b"\x00\xff", "ok": True, "tags": ["a", "b"]}),
        (2, {"id": 2, "x": None, "name": None, "blob": None, "ok": False, "tags": []}),
        (3, {"id": None, "x": -2.0, "name": "ç", "blob": b"", "ok": None, "tags": None}),
    ]


def test_structs_lists_of_structs_and_maps_become_dotted_fields():
    table = pa.table(
        {
            "point": [{"x": 1, "y": {"z": "q"}}, None, {"x": None, "y": None}],
            "items": [[{"p": 1, "q": "a"}, {"p": 2, "q": None}], [], None],
            "attrs": pa.array([[("k", 1), ("l", 2)], None, []], pa.map_(pa.string(), pa.int64())),
        }
    )
    chunks, _ = _parse(_file(table))
    assert [fields for _, fields in _rows(chunks)] == [
        {
            "point.x": 1,
            "point.y.z": "q",
            "items.p": [1, 2],
            "items.q": ["a", None],
            "attrs.key": ["k", "l"],
            "attrs.value": [1, 2],
        },
        {
            "point.x": None,
            "point.y.z": None,
            "items.p": [],
            "items.q": [],
            "attrs.key": None,
            "attrs.value": None,
        },
        {
            "point.x": None,
            "point.y.z": None,
            "items.p": None,
            "items.q": None,
            "attrs.key": [],
            "attrs.value": [],
        },
    ]


def test_dates_times_and_decimals_become_text():
    utc = datetime.timezone.utc
    table = pa.table(
        {
            "day": pa.array([datetime.date(2024, 2, 29), None], pa.date32()),
            "at": pa.array(
                [datetime.datetime(2024, 1, 2, 3, 4, 5, 600000, tzinfo=utc), None],
                pa.timestamp("ms", tz="UTC"),
            ),
            "naive": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5), None], pa.timestamp("us")),
            "price": pa.array([decimal.Decimal("12.50"), None], pa.decimal128(6, 2)),
            "days": pa.array([[datetime.date(2024, 1, 1)], None], pa.list_(pa.date32())),
        }
    )
    chunks, _ = _parse(_file(table))
    assert [fields for _, fields in _rows(chunks)] == [
        {
            "day": "2024-02-29",
            "at": "2024-01-02T03:04:05.600000+00:00",
            "naive": "2024-01-02T03:04:05",
            "price": "12.50",
            "days": ["2024-01-01"],
        },
        {"day": None, "at": None, "naive": None, "price": None, "days": None},
    ]


def test_row_groups_are_read_in_batches_and_chunks_hold_chunk_rows():
    table = pa.table({"n": list(range(25))})
    chunks, _ = _parse(_file(table, row_group_size=3), chunk_rows=10)
    # small row groups are gathered into full chunks; row numbers run on across them
    assert [len(c) for c in chunks] == [10, 10, 5]
    assert [line for c in chunks for line in c.lines] == list(range(1, 26))
    assert [v for c in chunks for v in c.values("n")] == list(range(25))


def test_columns_option_reads_only_those_columns_and_a_missing_one_is_absent():
    table = pa.table({"a": [1, 2], "b": ["x", "y"], "c": [0.5, 1.5]})
    chunks, _ = _parse(_file(table), columns=["c", "a", "not_there"])
    assert [fields for _, fields in _rows(chunks)] == [{"a": 1, "c": 0.5}, {"a": 2, "c": 1.5}]


def test_no_rows_no_records():
    assert _parse(_file(pa.table({"a": pa.array([], pa.int64())}))) == ([], [])


def test_options_defaults_and_errors():
    assert parquet.options({}) == parquet.ParquetOptions(columns=None)
    assert parquet.options({"columns": ["a"]}) == parquet.ParquetOptions(columns=["a"])
    with pytest.raises(OptionError, match="columns: must be a list of strings"):
        parquet.options({"columns": "a"})
    with pytest.raises(OptionError, match="delimiter: unknown key"):
        parquet.options({"delimiter": ","})


def test_a_file_that_is_not_parquet_fails_naming_the_file():
    with pytest.raises(FileError, match=r"^f\.parquet: not a readable Parquet file: .*magic bytes"):
        _parse(b"id,name\n1,a\n")
    data = _file(pa.table({"a": [1, 2, 3]}))
    with pytest.raises(FileError, match=r"^f\.parquet: not a readable Parquet file"):
        _parse(data[: len(data) // 2])


def _corrupt_middle_row_group() -> bytes:
    table = pa.table({"n": list(range(9)), "s": [f"v{i}" * 4 for i in range(9)]})
    data = bytearray(_file(table, row_group_size=3, use_dictionary=False))
    column = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(1).column(0)
    data[column.data_page_offset] ^= 0xFF  # the page header of rows 4-6 no longer parses
    return bytes(data)


def test_an_undecodable_row_group_rejects_its_rows_and_the_others_are_read():
    chunks, rejected = _parse(_corrupt_middle_row_group(), chunk_rows=4)
    assert [(line, fields["n"]) for line, fields in _rows(chunks)] == [
        (1, 0),
        (2, 1),
        (3, 2),
        (7, 6),
        (8, 7),
        (9, 8),
    ]
    assert [r.to_json() for r in rejected] == [
        {
            "source": "src",
            "location": f"f.parquet:{row}",
            "reason": "parquet: unreadable row group",
            "record": '{"row_group": 1}',
        }
        for row in (4, 5, 6)
    ]


class _FailingFile(io.BytesIO):
    """A file whose reads in one byte range fail: an I/O error, not corrupt data."""

    def __init__(self, data: bytes, start: int, end: int):
        super().__init__(data)
        self._bad = range(start, end)

    def read(self, size=-1):
        if self.tell() in self._bad:
            raise ConnectionError("connection reset")
        return super().read(size)


def test_an_io_error_of_the_file_fails_instead_of_rejecting_rows():
    table = pa.table({"n": list(range(30_000))})  # row groups larger than the footer read-ahead
    data = _file(table, row_group_size=10_000, use_dictionary=False, compression="none")
    column = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(1).column(0)
    start = column.data_page_offset
    stream = _FailingFile(data, start, start + column.total_compressed_size)
    source = SourceSpec("src", "parquet", "f.parquet", parquet.options({}))
    items = parquet.parse_parquet(stream, "f.parquet", source, 10_000)
    assert next(items).lines[-1] == 10_000  # the first row group was read
    with pytest.raises(ConnectionError, match="connection reset"):
        next(items)


def test_a_column_named_like_a_flattened_field_fails_the_file():
    table = pa.table({"a": [{"b": 1}], "a.b": [2]})
    with pytest.raises(FileError, match="two fields named 'a.b'"):
        _parse(_file(table))


def test_nested_columns_of_a_sliced_batch_are_flattened_from_the_slice():
    batch = pa.RecordBatch.from_pydict(
        {
            "items": [[{"p": 1}], None, [{"p": 2}, {"p": 3}], [{"p": None}]],
            "attrs": pa.array([[("a", 1)], [("b", 2)], None, []], pa.map_(pa.string(), pa.int64())),
        }
    )
    assert parquet.record_fields(batch.slice(1, 3), "f.parquet") == {
        "items.p": [None, [2, 3], [None]],
        "attrs.key": [["b"], None, []],
        "attrs.value": [[2], None, []],
    }
