"""The Arrow fast path of the CSV reader gives exactly what the csv-module reference gives.

Random files mix every hard case (quoted delimiters and newlines, doubled quotes, CRLF, lone CRs,
blank lines, wrong field counts, stray and unterminated quotes, null markers, non-ASCII text),
and tiny read sizes make chunks and buffers split everywhere.
"""

import io
import random

import pytest

from transforms.contract.config import SourceSpec
from transforms.files import FileError
from transforms.records import RawChunk
from transforms.sources import csv as csv_module
from transforms.sources.csv import CsvOptions, parse_csv

FIELDS = [
    "a",
    "17",
    "-3.5",
    "",
    "NA",
    "héllo",
    "x y",
    '"q, x"',
    '"a""b"',
    '"multi\nline"',
    '"cr\r\nlf"',
    '""',
    '"ok"',
]
RARE = ['x"y', '"x"y', '"open', "\r", "\x00", '"\n"']


def _file(rng: random.Random, width: int, header: bool) -> bytes:
    lines = []
    if header:
        lines.append(",".join(f"c{i}" for i in range(width)))
    for _ in range(rng.randrange(0, 30)):
        roll = rng.random()
        if roll < 0.05:
            lines.append("")
            continue
        n = width if roll < 0.85 else rng.choice([1, width - 1, width + 1])
        pool = FIELDS + RARE if rng.random() < 0.08 else FIELDS
        lines.append(",".join(rng.choice(pool) for _ in range(max(n, 1))))
    ending = rng.choice(["\n", "\r\n", "\n"])
    text = ending.join(lines) + (ending if rng.random() < 0.7 else "")
    return text.encode("utf-8")


def _read(data: bytes, source: SourceSpec, chunk_rows: int, arrow: bool):
    csv_module.ARROW = arrow
    records, rejected = [], []
    try:
        for item in parse_csv(io.BytesIO(data), "f.csv", source, chunk_rows):
            if isinstance(item, RawChunk):
                assert len(item) <= chunk_rows
                for i in range(len(item)):
                    values = {name: item.values(name)[i] for name in item.columns}
                    records.append((values, item.lines[i], item.raw(i)))
            else:
                rejected.append(item)
    except FileError as e:
        return "error", str(e)
    finally:
        csv_module.ARROW = True
    return records, rejected


@pytest.mark.parametrize("seed", range(300))
def test_arrow_path_matches_the_csv_module(seed, monkeypatch):
    rng = random.Random(seed)
    monkeypatch.setattr(csv_module, "_READ_BYTES", rng.choice([1, 7, 64, 1 << 20]))
    monkeypatch.setattr(csv_module, "_MAX_BLOCK", rng.choice([16, 256]))
    width = rng.choice([1, 2, 3])
    header = rng.random() < 0.7
    data = _file(rng, width, header)
    source = SourceSpec(
        "src",
        "csv",
        "f.csv",
        CsvOptions(
            header=header,
            columns=None if header else [f"c{i}" for i in range(width)],
            null_values=rng.choice([[""], ["", "NA"], []]),
        ),
    )
    chunk_rows = rng.choice([1, 2, 5, 100])
    assert _read(data, source, chunk_rows, True) == _read(data, source, chunk_rows, False), data


def test_fast_path_takes_well_formed_files_without_falling_back(monkeypatch):
    calls = []
    original = csv_module._python_records
    monkeypatch.setattr(csv_module, "_python_records", lambda *a: calls.append(a) or original(*a))
    data = b'a,b\n1,"x, ""y"""\n2,"two\r\nlines"\n\n3,\n'
    source = SourceSpec(
        "src",
        "csv",
        "f.csv",
        CsvOptions(),
    )
    records, rejected = _read(data, source, 100, True)
    assert calls == []
    assert [r[0] for r in records] == [
        {"a": "1", "b": 'x, "y"'},
        {"a": "2", "b": "two\r\nlines"},
        {"a": "3", "b": None},
    ]
    assert [r[1] for r in records] == [2, 3, 6]
    assert rejected == []
