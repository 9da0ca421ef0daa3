"""Keys a column at a time: the vector path gives exactly what the per-value rule gives, and the
canonical order of a shard's records is that of the rule (order hash, key, provenance)."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pyarrow as pa
import pytest

from tests.transforms.keyed import keys_of
from transforms.contract.config import DatasetSpec, FeatureSpec, OutputSpec, SourceSpec
from transforms.keys import KeyMaker, tie_order
from transforms.records import RawChunk, RecordError, one_line_records
from transforms.sources.csv import CsvOptions


def _maker(feature: FeatureSpec | None) -> KeyMaker:
    features = (feature,) if feature is not None else (FeatureSpec("other", "int", (), False),)
    return KeyMaker(
        DatasetSpec(
            name="k",
            sources=(SourceSpec("a", "csv", "a.csv", CsvOptions()),),
            features=features,
            splits=(("train", 1.0),),
            output=OutputSpec("/tmp/k"),
            key="id",
        )
    )


MAKERS = {
    "int": FeatureSpec("id", "int", (), True),
    "int in range": FeatureSpec("id", "int", (), True, min=-5.5, max=10**15 + 0.5),
    "int of values": FeatureSpec("id", "int", (), True, values=(7, 12, -3, 10**17)),
    "string": FeatureSpec("id", "string", (), True),
    "string of values": FeatureSpec("id", "string", (), True, values=("a", "ключ", "07")),
    "float": FeatureSpec("id", "float", (), True),
    "bytes": FeatureSpec("id", "bytes", (), True),
    "not a feature": None,
}

# fmt: off
INT_TEXTS = ["7", "007", "+7", "-0", " 12 ", "\t-3\n", "000000000000000000007", "1" * 18,
             "9" * 19, "9223372036854775807", "-9223372036854775808", "9223372036854775808",
             "1_000", "１２", "٣", "1e3", "1.0", "7.5", "", " ", "+", "--1", "0x10", "１"]
TEXTS = ["a", "ключ", "東京", "a\u2028b", "", "  sp ", '"q"', "07", "\udc80", "x\udcff",
         "\ud800", "é", "e\u0301", "🎁", "null"]
OTHERS = [7, -3, 0, 10**17, 2**63, -(2**63), 2**64, True, False, 7.0, 7.5, float("inf"),
          float("nan"), b"bytes", b"\xff", [7], [], ["a", b"b"], {"b": 1, "a": [b"x"]}, None]
# fmt: on


def _values(rng: random.Random, pool: list, n: int) -> list:
    return [rng.choice(pool) for _ in range(n)]


def _chunk(column) -> RawChunk:
    n = len(column)
    return RawChunk(
        "a",
        "a.csv",
        {"id": column},
        list(range(2, n + 2)),
        **one_line_records([f"r{i}\n" for i in range(n)]),
    )


def _reference(maker: KeyMaker, values: list) -> list[tuple[str | None, str | None]]:
    """(key, reason) of each value by the per-value rule."""
    out = []
    for value in values:
        try:
            out.append((maker(value), None))
        except RecordError as e:
            out.append((None, e.reason))
    return out


def _columns(rng: random.Random) -> list:
    """Columns as sources give them: Python lists of one kind or mixed, and Arrow arrays."""
    ints = [v for v in OTHERS if type(v) is int and -(2**63) <= v < 2**63]
    columns = [
        _values(rng, INT_TEXTS + [None], 300),  # CSV cells (Python parser)
        pa.array(_values(rng, INT_TEXTS + [None], 300), pa.string()),  # CSV cells (Arrow)
        pa.array(_values(rng, [t for t in TEXTS if t.isascii() or t.isprintable()][:9], 300)),
        _values(rng, TEXTS + [None], 300),  # JSON strings, lone surrogates included
        _values(rng, ints + [None], 300),  # JSON integers
        pa.array(_values(rng, ints + [None], 300), pa.int64()),  # Parquet integers
        pa.array(_values(rng, [0, 7, 2**64 - 1], 50), pa.uint64()),
        pa.array(_values(rng, [b"a", "ключ".encode(), b"\xff", b"", None], 200), pa.binary()),
        pa.array(_values(rng, [b"a", "ключ".encode(), None], 200), pa.binary()),
        _values(rng, [7.0, 7.5, -0.0, 1e20, 2.5e-8, float("inf"), None], 100),  # JSON numbers
        _values(rng, [7, 7.0, 7.5, None], 100),
        pa.array(_values(rng, [7.0, 7.5, 1e20, None], 100), pa.float64()),
        pa.array(_values(rng, [True, False, None], 50)),
        _values(rng, INT_TEXTS + TEXTS + OTHERS, 500),  # anything
        [None] * 20,
    ]
    for _ in range(20):
        columns.append(_values(rng, rng.choice([INT_TEXTS, TEXTS, OTHERS]) + [None], 40))
    return columns


@pytest.mark.parametrize("kind", list(MAKERS))
def test_the_vector_path_keys_and_rejects_as_the_per_value_rule(kind):
    maker = _maker(MAKERS[kind])
    rng = random.Random(kind)
    for column in _columns(rng):
        values = column.to_pylist() if isinstance(column, pa.Array) else list(column)
        expected = _reference(maker, values)
        keys, rejected = maker.keys(_chunk(column))
        assert keys.type == pa.string() and len(keys) == len(values)
        assert keys.to_pylist() == [key for key, _ in expected]
        assert [(r.location, r.reason, r.record) for r in rejected] == [
            (f"a.csv:{i + 2}", reason, f"r{i}\n")
            for i, (_, reason) in enumerate(expected)
            if reason is not None
        ]


def test_a_chunk_without_the_key_field_rejects_every_record():
    keys, rejected = _maker(MAKERS["int"]).keys(RawChunk("a", "a.csv", {"x": [1, 2]}, [2, 3]))
    assert keys.to_pylist() == [None, None]
    assert [r.reason for r in rejected] == ["id: missing key"] * 2


@pytest.mark.parametrize(
    "kind, column",
    [
        ("int", pa.array([f"{i:07d}" for i in range(5000)] + [None])),
        ("int", [i - 2500 for i in range(5000)] + [None]),
        ("int", pa.array(range(5000), pa.int32())),
        ("string", pa.array([f"ключ{i}" for i in range(5000)] + [None])),
        ("string", [f"k{i}" for i in range(5000)]),
        ("not a feature", pa.array([f"{i}" for i in range(5000)])),
        ("not a feature", list(range(5000))),
    ],
)
def test_common_columns_take_no_per_value_call(kind, column, monkeypatch):
    calls = []
    maker = _maker(MAKERS[kind])
    monkeypatch.setattr(KeyMaker, "__call__", lambda self, value: calls.append(value))
    keys, rejected = maker.keys(_chunk(column))
    assert calls == [] and keys.null_count == len(rejected) == (1 if len(keys) == 5001 else 0)


def _rule_order(hashes, keys, orders) -> tuple[list[int], int]:
    """The rule, one record at a time: by (order hash, key, provenance), the first of a key."""
    ranked = sorted(range(len(hashes)), key=lambda i: (hashes[i], keys[i], orders[i]))
    kept = [i for j, i in enumerate(ranked) if j == 0 or keys[ranked[j - 1]] != keys[i]]
    return kept, len(ranked) - len(kept)


def test_tie_order_is_the_rule_order():
    rng = random.Random(11)
    for n in (0, 1, 2, 50, 3000):
        starts = ["k", "ключ", "é", "e\u0301", "", "k\u2028"]
        keys = [rng.choice(starts) + str(rng.randrange(n // 3 + 1)) for _ in range(n)]
        hashes = [zlib.crc32(k.encode()) % 97 for k in keys]  # few: many ties, colliding keys
        paths = ["b.csv", "a.csv", "a/b.csv", "é.csv", "z\udcff.csv"]
        orders = [(rng.randrange(3), rng.choice(paths), rng.randrange(10**12)) for _ in keys]
        got, dropped = tie_order(
            np.array(hashes, np.uint64), pa.Table.from_batches([keys_of(keys, orders)])
        )
        # paths compare as their bytes (the surrogate escape of an undecodable byte, too)
        encoded = [(s, p.encode("utf-8", "surrogateescape"), line) for s, p, line in orders]
        assert (got.tolist(), dropped) == _rule_order(hashes, keys, encoded)
