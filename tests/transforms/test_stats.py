"""Statistics of validated columns: exact, mergeable in any order, the same JSON every time."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest

from transforms.stats import MAX_DISTINCT, DatasetStats, chunk_stats, column_stats, exact_sum


def _lists(values, kind) -> pa.Array:
    return pa.array([[] if v is None else (v if isinstance(v, list) else [v]) for v in values],
                    pa.list_(kind))  # fmt: skip


def test_numbers_strings_and_bytes():
    f = column_stats("float", _lists([1.5, None, -2.0, [4.0, 0.5], None], pa.float32()))
    out = f.to_json()
    assert (out["records"], out["missing"], out["values"]) == (5, 2, 4)
    assert out["missing_rate"] == 0.4
    values = np.array([1.5, -2.0, 4.0, 0.5])
    assert (out["min"], out["max"]) == (-2.0, 4.0)
    assert out["mean"] == pytest.approx(values.mean(), rel=1e-15)
    assert out["std"] == pytest.approx(values.std(), rel=1e-12)
    assert sum(bar["count"] for bar in out["histogram"]) == 4
    assert out["histogram"][0]["low"] == -2.0 and out["histogram"][-1]["high"] == 4.0

    s = column_stats("string", _lists([b"b", b"a", b"b", None, b"ccc"], pa.binary())).to_json()
    assert s["top"] == [{"value": "b", "count": 2}, {"value": "a", "count": 1},
                        {"value": "ccc", "count": 1}]  # fmt: skip
    assert (s["distinct"], s["distinct_exact"]) == (3, True)
    assert s["length"] == {"min": 1, "max": 3, "mean": 1.5}

    b = column_stats("image", _lists([b"x" * 10, b"y" * 30], pa.binary())).to_json()
    assert b["size"] == {"min": 10, "max": 30, "mean": 20.0} and "top" not in b

    big = column_stats("int", _lists([2**62, -(2**62), 3], pa.int64())).to_json()
    assert (big["min"], big["max"]) == (-(2**62), 2**62)
    assert big["mean"] == 1.0


def test_exact_sums_do_not_depend_on_the_order():
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.normal(0, 1e6, 3000), rng.normal(0, 1e-6, 3000)]).astype(
        np.float32
    )
    values = values.astype(np.float64)
    total = exact_sum(values)
    assert exact_sum(values[::-1]) == total
    assert exact_sum(rng.permutation(values)) == total
    assert exact_sum(values[:1000]) + exact_sum(values[1000:]) == total


def test_merged_statistics_give_the_same_json_in_any_order():
    rng = random.Random(7)
    names, types = ["x", "n", "s"], ["float", "int", "string"]
    chunks = []
    for _ in range(12):
        n = rng.randrange(1, 300)
        columns = [
            _lists(
                [rng.uniform(-1e4, 1e4) if rng.random() > 0.1 else None for _ in range(n)],
                pa.float32(),
            ),
            _lists([rng.randrange(-50, 50) for _ in range(n)], pa.int64()),
            _lists([f"v{rng.randrange(30)}".encode() for _ in range(n)], pa.binary()),
        ]
        split = np.array([rng.randrange(2) for _ in range(n)], np.int16)
        chunks.append((columns, split))
    outputs = set()
    for seed in range(4):
        order = list(range(len(chunks)))
        random.Random(seed).shuffle(order)
        merged = DatasetStats()
        for i in order:  # sometimes merge into a fresh partial first, as combiners do
            part = chunk_stats(names, types, *chunks[i])
            merged = DatasetStats().merge(part).merge(merged) if i % 3 else merged.merge(part)
        outputs.add(json.dumps(merged.to_json(["train", "eval"]), sort_keys=True))
    assert len(outputs) == 1
    out = json.loads(outputs.pop())
    total = sum(len(split) for _, split in chunks)
    assert out["splits"]["train"]["records"] + out["splits"]["eval"]["records"] == total


def test_too_many_distinct_strings_keep_the_most_frequent():
    values = [f"rare{i}".encode() for i in range(MAX_DISTINCT + 5)] + [b"common"] * 3
    out = column_stats("string", _lists(values, pa.binary())).to_json()
    assert out["distinct_exact"] is False
    assert out["top"][0] == {"value": "common", "count": 3}


def test_few_distinct_numbers_get_even_bars_many_get_log_buckets():
    years = column_stats("int", _lists([2005, 2007, 2007, 2006, 2007], pa.int64())).to_json()
    assert years["histogram"] == [
        {"low": 2005, "high": 2006, "count": 1},
        {"low": 2006, "high": 2007, "count": 1},
        {"low": 2007, "high": 2008, "count": 3},
    ]
    assert years["distinct"] == 3
    many = np.linspace(-1000, 1000, 5000).astype(np.float32).tolist()
    wide = column_stats("float", _lists(many, pa.float32()))
    merged = column_stats("float", _lists([1.0, 2.0], pa.float32()))
    merged.merge(wide)  # exact counts stop once there are too many values
    out = merged.to_json()
    assert "distinct" not in out and len(out["histogram"]) <= 20
    assert sum(bar["count"] for bar in out["histogram"]) == 5002
