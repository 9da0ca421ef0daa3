"""Statistics of validated columns: exact, mergeable in any order, the same JSON every time."""

from __future__ import annotations

import collections
import itertools
import json
import random

import numpy as np
import pyarrow as pa
import pytest
from xxhash import xxh3_64_intdigest

from transforms.stats import (
    COUNTED_BYTES,
    COUNTED_VALUES,
    MAX_DISTINCT,
    DatasetStats,
    chunk_stats,
    column_stats,
    exact_sum,
)


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
    assert s["counts"] == s["top"]  # every value's count: at most COUNTED_VALUES values
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


def _strings(values) -> pa.Array:
    return _lists([v.encode() for v in values], pa.binary())


def test_strings_are_counted_exactly_up_to_the_bound_and_sampled_beyond():
    at_bound = [f"v{i}" for i in range(MAX_DISTINCT)]
    out = column_stats("string", _strings(at_bound + ["v0", "v1"])).to_json()
    assert (out["distinct"], out["distinct_exact"]) == (MAX_DISTINCT, True)
    assert out["top"][:2] == [{"value": "v0", "count": 2}, {"value": "v1", "count": 2}]

    rng = random.Random(3)
    values = [f"{rng.randrange(10**9):09d}-é" for _ in range(50_000)]
    values += [rng.choice(["common", "ключ", "東京"]) for _ in range(5000)]
    out = column_stats("string", _strings(values)).to_json()
    truth = collections.Counter(values)
    assert out["distinct_exact"] is False
    assert abs(out["distinct"] - len(truth)) < 0.03 * len(truth)
    assert all(t["count"] == truth[t["value"]] for t in out["top"])  # counts of kept values
    assert out["values"] == len(values) and len(out["top"]) == 20


def test_every_string_count_is_written_up_to_the_counted_bound():
    values = [f"v{i}" for i in range(COUNTED_VALUES) for _ in range(1 + i % 3)] + ["ключ"] * 2
    values = values[2:]  # without v0 (and one v1): COUNTED_VALUES distinct values with "ключ"
    truth = collections.Counter(values)
    assert len(truth) == COUNTED_VALUES
    out = column_stats("string", _strings(values)).to_json()
    expected = sorted(truth.items(), key=lambda item: (-item[1], item[0]))
    assert out["counts"] == [{"value": v, "count": c} for v, c in expected]
    assert out["top"] == out["counts"][:20]
    # merged from parts in another order: the same list
    merged = column_stats("string", _strings(values[::2]))
    merged.merge(column_stats("string", _strings(values[1::2][::-1])))
    assert merged.to_json()["counts"] == out["counts"]

    beyond = column_stats("string", _strings(values + ["one more"])).to_json()
    assert (beyond["distinct"], beyond["distinct_exact"]) == (COUNTED_VALUES + 1, True)
    assert "counts" not in beyond and len(beyond["top"]) == 20
    sampled = column_stats("string", _strings([f"s{i}" for i in range(MAX_DISTINCT + 1)]))
    assert "counts" not in sampled.to_json()
    long = [f"{i:03d}".encode() * 40 for i in range(COUNTED_BYTES // 120 + 1)]  # 120 bytes each
    assert "counts" not in column_stats("string", _lists(long, pa.binary())).to_json()
    assert "counts" in column_stats("string", _lists(long[:-1], pa.binary())).to_json()
    nothing = column_stats("string", _lists([None, None], pa.binary())).to_json()
    assert (nothing["counts"], nothing["top"], nothing["values"]) == ([], [], 0)


def test_merged_samples_are_exact_while_the_union_has_at_most_the_bound():
    def merged(a, b):
        stats = column_stats("string", _strings(a))
        stats.merge(column_stats("string", _strings(b)))
        return stats.to_json()

    half = [f"v{i}" for i in range(MAX_DISTINCT)]
    same = merged(half, half[::-1])  # two full samples of the same values: nothing left out
    assert (same["distinct"], same["distinct_exact"]) == (MAX_DISTINCT, True)
    assert {t["count"] for t in same["top"]} == {2}
    more = merged(half, [f"v{i}" for i in range(MAX_DISTINCT // 2, MAX_DISTINCT + 1)])
    assert more["distinct_exact"] is False and more["distinct"] > MAX_DISTINCT
    # one more value, with a larger hash than all of a full sample: left out, and so counted
    largest = max(xxh3_64_intdigest(v.encode()) for v in half)
    extra = next(
        f"x{i}" for i in itertools.count() if xxh3_64_intdigest(f"x{i}".encode()) > largest
    )
    for a, b in ((half, [extra]), ([extra], half)):
        out = merged(a, b)
        assert (out["distinct_exact"], out["distinct"] > MAX_DISTINCT) == (False, True)


def test_string_statistics_do_not_depend_on_chunks_or_merge_order():
    rng = random.Random(5)
    values = []
    for _ in range(40_000):
        r = rng.random()
        if r < 0.2:
            values.append(rng.choice(["common", "ключ", "東京", ""]))
        elif r < 0.25:
            values.append("long value " * 30 + str(rng.randrange(40)))  # clipped, distinct
        elif r < 0.3:
            values.append(None)
        else:
            values.append(f"{rng.randrange(10**8):08d}")
    split = np.array([rng.randrange(2) for _ in values], np.int16)
    column = _lists([v.encode() if v is not None else None for v in values], pa.binary())
    outputs = set()
    for sizes in ([len(values)], [8192], [1000], [rng.randrange(1, 5000) for _ in range(60)]):
        bounds = [0]
        while bounds[-1] < len(values):
            bounds.append(min(len(values), bounds[-1] + sizes[(len(bounds) - 1) % len(sizes)]))
        for seed in range(3):
            order = [  # afresh: merging adopts and then changes the statistics merged in
                chunk_stats(["s"], ["string"], [column[a:b]], split[a:b])
                for a, b in zip(bounds, bounds[1:])
            ]
            random.Random(seed).shuffle(order)
            if seed == 2:  # a tree of merges, as combiners of several workers do
                while len(order) > 1:
                    order = [
                        DatasetStats().merge(a).merge(b) if b is not None else a
                        for a, b in zip(order[::2], order[1::2] + [None])
                    ]
                merged = order[0]
            else:
                merged = DatasetStats()
                for part in order:
                    merged.merge(part)
            outputs.add(json.dumps(merged.to_json(["train", "eval"]), sort_keys=True))
    assert len(outputs) == 1
    train = json.loads(outputs.pop())["splits"]["train"]["features"]["s"]
    assert train["distinct_exact"] is False
    assert train["top"][0]["value"] in ("common", "ключ", "東京", "")


def test_few_distinct_numbers_get_even_bars_many_get_log_buckets():
    years = column_stats("int", _lists([2005, 2007, 2007, 2006, 2007], pa.int64())).to_json()
    assert years["histogram"] == [
        {"low": 2005, "high": 2006, "count": 1},
        {"low": 2006, "high": 2007, "count": 1},
        {"low": 2007, "high": 2008, "count": 3},
    ]
    assert years["distinct"] == 3
    # few values: each one's exact count too (drift and skew compare them as exact masses)
    assert years["counts"] == [
        {"value": 2005, "count": 1}, {"value": 2006, "count": 1}, {"value": 2007, "count": 3},
    ]  # fmt: skip
    hundred_one = column_stats("int", _lists(list(range(101)), pa.int64())).to_json()
    assert hundred_one["distinct"] == 101 and "counts" not in hundred_one
    many = np.linspace(-1000, 1000, 5000).astype(np.float32).tolist()
    wide = column_stats("float", _lists(many, pa.float32()))
    merged = column_stats("float", _lists([1.0, 2.0], pa.float32()))
    merged.merge(wide)  # exact counts stop once there are too many values
    out = merged.to_json()
    assert "distinct" not in out and len(out["histogram"]) <= 20
    assert sum(bar["count"] for bar in out["histogram"]) == 5002
