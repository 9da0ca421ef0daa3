"""Cutting CSV and JSON Lines files from their size alone: piece summaries compose, and the
ranges cut from them start exactly where a scan of the whole file finds the first record end
after each piece's start, at piece sizes from 64 bytes to 16 MB."""

from __future__ import annotations

import random

import numpy as np
import pytest

from transforms.contract.config import SourceSpec
from transforms.sources import csv as csv_format
from transforms.sources import cuts, ranges, registry
from transforms.sources.cuts import scan


def _source(fmt: str, **options) -> SourceSpec:
    return SourceSpec("s", fmt, None, registry.check_options(fmt, options))


def _csv_bytes(seed: int, size: int) -> bytes:
    """A CSV of about `size` bytes: CRLF and LF lines, quoted commas and newlines, doubled
    quotes, and now and then a quoted value of several KB holding many lines, so that small
    pieces start and end inside quotes."""
    rng = random.Random(seed)
    out = ["id,text,x\n"]
    total, i = 0, 0
    while total < size:
        kind = rng.random()
        if kind < 0.002:
            lines = "\n".join(f'line {j}, "{j}"'.replace('"', '""') for j in range(300))
            row = f'{i},"{lines}",1\r\n'
        elif kind < 0.1:
            row = f'{i},"multi\nline, with ""quotes""",2\n'
        elif kind < 0.15:
            row = f'{i},"",{rng.random():.2f}\r\n'
        else:
            row = f"{i},plain-{'z' * rng.randrange(40)},{rng.random():.3f}\n"
        out.append(row)
        total += len(row)
        i += 1
    return "".join(out).encode()


def _expected(data: bytes, split: int) -> list[tuple]:
    """The ranges of a whole-file scan: each piece after the header (equal pieces of at most
    `split` bytes) but the first starts a range at the first record end in it."""
    whole = csv_format._Scan(memoryview(data), ord(","), eof=True)
    ends, newlines = whole.ends, whole.newlines
    header_end = int(ends[0])
    header_lines = int(np.searchsorted(newlines, header_end))
    starts = []
    count = -(-(len(data) - header_end) // split)
    bounds = [header_end + (len(data) - header_end) * i // count for i in range(count + 1)]
    for start, stop in zip(bounds[1:], bounds[2:]):
        i = int(np.searchsorted(ends, start, side="right"))  # the first end past `start`
        if i < len(ends) and ends[i] <= stop and ends[i] < len(data):
            end = int(ends[i])
            starts.append((end, int(np.searchsorted(newlines, end)) - header_lines))
    if not starts:
        return [(0, None, 0, 0)]
    out = [(0, starts[0][0], 0, 0)]
    for (start, shift), nxt in zip(starts, starts[1:] + [(None, None)]):
        out.append((start, nxt[0], header_end, shift))
    return out


def _cut(data: bytes, split: int, source: SourceSpec) -> list[tuple]:
    """`ranges.cut` on in-memory pieces (what `ranges.summarize` reads from the file)."""
    header_end, header_lines = ranges._header_end(_Bytes(data), ord(","), len(data))
    pieces = []
    for piece in ranges.even_pieces("f", len(data), split, header_end, header_lines):
        start, end = piece.start, piece.end
        after = data[end] if end < len(data) else None
        pieces.append((piece, scan(data[start:end], data[start - 1], after, ord(","))))
    return [(r.start, r.end, r.header_end, r.line_shift) for r in ranges.cut(pieces, source)]


class _Bytes:
    def __init__(self, data: bytes):
        self._data, self._pos = data, 0

    def read(self, n: int) -> bytes:
        out = self._data[self._pos : self._pos + n]
        self._pos += len(out)
        return out


@pytest.fixture(scope="module")
def small() -> bytes:
    return _csv_bytes(1, 300_000)


@pytest.fixture(scope="module")
def large() -> bytes:
    return _csv_bytes(2, 20_000_000)


def test_cuts_match_a_whole_scan_for_pieces_of_64_bytes_to_64_kb(small):
    source = _source("csv")
    for split in [64 << k for k in range(11)] + [100, 777, 3001]:
        assert _cut(small, split, source) == _expected(small, split), split


def test_cuts_match_a_whole_scan_for_pieces_of_128_kb_to_16_mb(large):
    source = _source("csv")
    for split in [128 << (10 + k) for k in range(8)]:  # 128 KB ... 16 MB
        got = _cut(large, split, source)
        assert got == _expected(large, split), split
        assert len(got) == -(-(len(large) - 10) // split)


@pytest.mark.parametrize("seed", range(20))
def test_summaries_compose_whatever_the_blocks(seed):
    rng = random.Random(seed)
    alphabet = [b'"', b"\n", b"\r\n", b"\r", b",", b"a", b"bc", b'""', b"\0"]
    weights = [6, 5, 2, 0.2, 4, 10, 5, 2, 0.05]
    data = b"".join(rng.choices(alphabet, weights, k=rng.randrange(1, 400)))
    for delimiter in (ord(","), None):
        whole = scan(data, None, None, delimiter)
        points = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(6))))
        parts = [a for a in zip([0, *points], [*points, len(data)]) if a[0] < a[1]]
        composed = None
        for start, end in parts:
            before = data[start - 1] if start else None
            after = data[end] if end < len(data) else None
            piece = scan(data[start:end], before, after, delimiter)
            composed = piece if composed is None else composed.then(piece)
        assert composed == whole, (data, points)


def test_a_piece_is_scanned_in_blocks_as_if_whole(small, tmp_path, monkeypatch):
    path = tmp_path / "a.csv"
    path.write_bytes(small)
    with open(path, "rb") as f:
        whole = cuts.scan_range(f, str(path), 1000, 250_000, ord(","))
    monkeypatch.setattr(cuts, "SCAN_BYTES", 4093)
    with open(path, "rb") as f:
        assert cuts.scan_range(f, str(path), 1000, 250_000, ord(",")) == whole
    assert whole == scan(small[1000:250_000], small[999], small[250_000], ord(","))


def test_a_file_that_ended_early_names_itself(small, tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(small[:5000])
    with open(path, "rb") as f, pytest.raises(OSError, match="a.csv: ended at byte 5000"):
        cuts.scan_range(f, str(path), 4000, 9000, ord(","))


@pytest.mark.parametrize(
    "flaw",
    [b"1,a\0b,3\n", b"1,a\rb,3\n", b'1,a"b",3\n', b'1,"a"b,3\n'],
    ids=["nul", "lone-cr", "quote-in-bare-field", "text-after-closing-quote"],
)
def test_a_flaw_in_any_piece_has_the_file_read_whole(small, flaw, tmp_path):
    for at in (len(small) // 10, len(small) // 2, len(small) - 1):
        data = small[:at] + b"\n" + flaw + small[at:]
        path = tmp_path / "a.csv"
        path.write_bytes(data)
        assert ranges.plan(str(path), len(data), _source("csv"), 4096) == [ranges.Range(str(path))]
    path.write_bytes(small)
    assert len(ranges.plan(str(path), len(small), _source("csv"), 4096)) > 50


@pytest.mark.parametrize("split", [256, 4096, 65536])
def test_records_read_in_the_ranges_are_those_of_a_whole_read(small, tmp_path, split):
    from tests.transforms.sources.test_ranges import _split, _whole

    path = tmp_path / "a.csv"
    path.write_bytes(small)
    whole = _whole(str(path), _source("csv"))
    got, count = _split(str(path), _source("csv"), split)
    assert count > len(small) // split // 2
    assert got == whole
