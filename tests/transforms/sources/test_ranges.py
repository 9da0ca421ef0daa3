"""Large CSV / JSON Lines files read in byte ranges, and Parquet files in runs of row groups,
give exactly the records of a whole read."""

from __future__ import annotations

import gzip
import random

import pytest

from transforms.contract.config import SourceSpec
from transforms.records import RawChunk
from transforms.sources import ranges, registry


def _source(fmt: str, **options) -> SourceSpec:
    return SourceSpec("s", fmt, None, registry.check_options(fmt, options))


def _records(items) -> list[tuple]:
    """Every record as (line, fields, raw text), and every rejection, in a comparable form (the
    order of records among rejections and chunk sizes are not part of a parser's output)."""
    out = []
    for item in items:
        if isinstance(item, RawChunk):
            names = list(item.columns)
            values = [item.values(n) for n in names]
            for i in range(len(item)):
                fields = tuple((n, v[i]) for n, v in zip(names, values))
                out.append(("record", int(item.lines[i]), fields, item.raw(i)))
        else:
            out.append(("rejected", item.location, item.reason, item.record))
    return sorted(out, key=repr)


def _whole(path: str, source: SourceSpec) -> list[tuple]:
    return _records(ranges.read(ranges.Range(path), source, registry.parser(source.format)))


def _split(path: str, source: SourceSpec, split_bytes: int) -> tuple[list[tuple], int]:
    size = len(open(path, "rb").read())
    parts = ranges.plan(path, size, source, split_bytes)
    items = []
    for rng in parts:
        items += _records(ranges.read(rng, source, registry.parser(source.format)))
    return sorted(items, key=repr), len(parts)


def _csv_text(rng: random.Random, rows: int, crlf: bool) -> str:
    end = "\r\n" if crlf else "\n"
    lines = ["id,name,note"]
    for i in range(rows):
        kind = rng.random()
        if kind < 0.1:
            lines.append(f'{i},"multi{end}line, with ""quotes""",x')
        elif kind < 0.15:
            lines.append(f"{i},too,many,fields")
        elif kind < 0.2:
            lines.append("")
        elif kind < 0.25:
            lines.append(f'{i},"",  spaced ')
        else:
            lines.append(f"{i},name-{i}-{'z' * rng.randrange(30)},{rng.random():.3f}")
    return end.join(lines) + (end if rng.random() < 0.7 else "")


@pytest.mark.parametrize("seed", range(12))
def test_csv_ranges_give_the_records_of_the_whole_file(tmp_path, seed):
    rng = random.Random(seed)
    path = str(tmp_path / "a.csv")
    with open(path, "w", newline="") as f:
        f.write(_csv_text(rng, 400, crlf=seed % 3 == 0))
    header = seed % 4 != 1  # without: the header line is a record (and a rejected one)
    source = _source("csv") if header else _source("csv", header=False, columns=["a", "b", "c"])
    whole = _whole(path, source)
    for split_bytes in (64, 500, 3001):
        parts, n = _split(path, source, split_bytes)
        assert n > 1
        assert parts == whole, split_bytes


@pytest.mark.parametrize("seed", range(6))
def test_jsonl_ranges_give_the_records_of_the_whole_file(tmp_path, seed):
    rng = random.Random(seed)
    lines = []
    for i in range(300):
        kind = rng.random()
        if kind < 0.1:
            lines.append("not json")
        elif kind < 0.15:
            lines.append("")
        elif kind < 0.2:
            lines.append("[1, 2]")
        else:
            lines.append(f'{{"id": {i}, "name": "n\\u00e9{i}", "x": {rng.random()}}}')
    path = tmp_path / "a.jsonl"
    path.write_text("\r\n".join(lines) if seed % 2 else "\n".join(lines) + "\n")
    source = _source("jsonl")
    whole = _whole(str(path), source)
    for split_bytes in (40, 700):
        parts, n = _split(str(path), source, split_bytes)
        assert n > 1
        assert parts == whole


@pytest.mark.parametrize(
    "name, data, options",
    [
        ("bad-quote.csv", b'id,name\n1,a"b"\n' * 50, {}),  # a quote inside a bare field
        ("lone-cr.jsonl", b'{"id": 1}\r{"id": 2}\n' * 50, {}),
        ("small.csv", b"id\n1\n", {}),
        ("latin.csv", b"id,name\n1,\xe9\n" * 50, {"encoding": "latin-1"}),
    ],
)
def test_files_that_cannot_be_cut_safely_are_read_whole(tmp_path, name, data, options):
    path = tmp_path / name
    path.write_bytes(data)
    source = _source(name.rsplit(".", 1)[1], **options)
    split = 4 if name != "small.csv" else 100
    assert ranges.plan(str(path), len(data), source, split) == [ranges.Range(str(path))]


def test_compressed_files_are_read_whole(tmp_path):
    data = gzip.compress(b"id\n" + b"1\n" * 1000)
    path = tmp_path / "a.csv.gz"
    path.write_bytes(data)
    assert ranges.plan(str(path), len(data), _source("csv"), 16) == [ranges.Range(str(path))]


def test_ranges_cover_the_file_at_record_ends(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(b'id,t\n1,"a\nb"\n2,c\n3,d\n4,e\n')
    parts = ranges.plan(str(path), path.stat().st_size, _source("csv"), 6)
    assert [(r.start, r.end, r.header_end, r.line_shift) for r in parts] == [
        # 20 bytes after the 5-byte header, in 4 pieces of 5: [5, 10) [10, 15) [15, 20) [20, 25)
        (0, 13, 0, 0),  # the header and the two-line record 1 (none ends in [5, 10))
        (13, 17, 5, 2),  # record 2: 13 ends the first record in [10, 15); it is on line 4,
        (17, 21, 5, 3),  # line 2 of "header + range": moved by 2
        (21, None, 5, 4),
    ]


@pytest.mark.parametrize("group_rows", [1, 7, 100])
def test_parquet_row_group_ranges_give_the_records_of_the_whole_file(tmp_path, group_rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(group_rows)
    n = 40 if group_rows == 1 else 230  # a range per row group: each opens the file
    table = pa.table({
        "id": list(range(n)),
        "name": [None if i % 11 == 0 else f"n{i}" * rng.randrange(5) for i in range(n)],
        "point": [{"x": float(i), "tags": [f"t{i}"] * (i % 3)} for i in range(n)],
    })  # fmt: skip
    path = str(tmp_path / "t.parquet")
    pq.write_table(table, path, row_group_size=group_rows)
    source = _source("parquet")
    whole = _whole(path, source)
    assert len(whole) == n
    for split in (1, 300, 2000):
        got, parts = _split(path, source, split)
        assert got == whole
        if group_rows < n and split == 1:
            assert parts == -(-n // group_rows)  # a range per row group
    one_group = str(tmp_path / "one.parquet")
    pq.write_table(table, one_group)
    assert ranges.plan(one_group, 10**9, source, 1) == [ranges.Range(one_group)]


def test_an_unreadable_parquet_file_is_planned_whole_and_its_parser_says_why(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1" + b"\0" * 100)
    assert ranges.plan(str(path), 104, _source("parquet"), 1) == [ranges.Range(str(path))]
