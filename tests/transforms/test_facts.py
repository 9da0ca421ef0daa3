"""The facts of transforms/facts/: exact counts, whatever the grouping and merge order; ranked
and cut vocabularies; quantiles exact or within the sketch's error; repeated rows and
conflicting labels; and facts.json as the contract types it."""

from __future__ import annotations

import collections
import itertools
import json

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that

from pipelines.config.loader import parse_config
from transforms.contract.facts import QUANTILE_ERROR, Facts, FactsError
from transforms.facts.count import FactCounter, row_hashes
from transforms.facts.merge import AnalyzeFacts, MergeFactParts
from transforms.facts.parts import KMV, FactParts, RankedFacts, Sketch
from transforms.facts.written import facts_of, quantiles
from transforms.stats import DatasetStats, chunk_stats

RNG = np.random.default_rng(7)


def _dataset(cap: int = 100_000, key: str | None = None):
    features = {
        "city": {"type": "string"},
        "tags": {"type": "string", "shape": [None], "required": False},
        "x": {"type": "float", "required": False},
        "n": {"type": "int"},
        "y": {"type": "string"},
    }
    return parse_config(
        {
            "name": "f",
            "sources": [{"name": "a", "format": "csv", "path": "a.csv"}],
            "features": features,
            "label": "y",
            **({"key": key} if key else {}),
            "splits": {"train": 0.5, "eval": 0.5},
            "output": {"path": "out", "vocabulary_cap": cap},
        },
        base_dir="/cfg",
    )


def _rows(n: int) -> list[dict]:
    cities = [f"c{int(v)}" for v in RNG.zipf(1.3, n) % 5000]
    return [
        {
            "city": cities[i],
            "tags": [f"t{j}" for j in RNG.integers(0, 6, RNG.integers(0, 4))],
            "x": None if i % 11 == 0 else float(np.float32(RNG.lognormal())),
            "n": int(RNG.integers(0, 9)),
            "y": "yes" if RNG.random() < 0.3 else "no",
        }
        for i in range(n)
    ]


def _columns(rows: list[dict]) -> list[pa.Array]:
    def column(name, kind):
        def listed(v):
            return [] if v is None else (v if isinstance(v, list) else [v])

        return pa.array([listed(r[name]) for r in rows], pa.list_(kind))

    return [
        column("city", pa.binary()),
        column("tags", pa.binary()),
        column("x", pa.float32()),
        column("n", pa.int64()),
        column("y", pa.binary()),
    ]


def _facts(dataset, groups: list[tuple[list[dict], np.ndarray]], order=None) -> Facts:
    """facts.json of records counted in `groups`, their bucketed parts merged in `order`."""
    counter = FactCounter(dataset)
    names = [f.name for f in dataset.features]
    kinds = [f.type for f in dataset.features]
    stats = DatasetStats()
    pieces = []
    for rows, split in groups:
        columns = [c.cast(pa.list_(pa.binary())) if c.type.value_type == pa.string() else c
                   for c in _columns(rows)]  # fmt: skip
        stats.merge(chunk_stats(names, kinds, columns, split))
        pieces.extend(counter.count(columns, split).buckets())
    if order is not None:
        pieces = [pieces[i] for i in order(len(pieces))]
    by_bucket: dict[int, list[FactParts]] = collections.defaultdict(list)
    for bucket, part in pieces:
        by_bucket[bucket].append(part)
    combine = MergeFactParts(dataset.vocabulary_cap)
    ranked = RankedFacts()
    for bucket in sorted(by_bucket, reverse=order is not None):
        accumulators = [
            combine.add_input(combine.create_accumulator(), p) for p in by_bucket[bucket]
        ]
        ranked.merge(
            combine.extract_output(combine.merge_accumulators(accumulators)),
            dataset.vocabulary_cap,
        )
    return facts_of(dataset, ranked, stats, dataset.vocabulary_cap)


def _cut(rows: list[dict], sizes: list[int], split: np.ndarray):
    out, start = [], 0
    for size in sizes:
        out.append((rows[start : start + size], split[start : start + size]))
        start += size
    return out


def test_facts_are_the_same_bytes_whatever_the_grouping_and_merge_order():
    dataset = _dataset()
    rows = _rows(3000)
    split = (RNG.random(3000) < 0.3).astype(np.int16)
    one = _facts(dataset, [(rows, split)]).dumps()
    many = _facts(dataset, _cut(rows, [1, 999, 500, 1500], split)).dumps()
    shuffled = _facts(
        dataset, _cut(rows, [700] * 4 + [200], split), order=lambda n: RNG.permutation(n)
    ).dumps()
    assert one == many == shuffled


def test_vocabularies_are_exact_counts_of_records_most_first_then_by_value():
    dataset = _dataset()
    rows = _rows(2000)
    split = np.zeros(2000, np.int16)
    facts = _facts(dataset, _cut(rows, [500] * 4, split))
    city = facts.feature("train", "city")
    expected = collections.Counter(r["city"] for r in rows)
    ranked = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))
    assert list(zip(city.vocabulary, city.counts)) == ranked
    assert city.distinct == len(expected) and city.outside == 0
    tags = facts.feature("train", "tags")  # a list: a record counts once per value it holds
    held = collections.Counter(t for r in rows for t in set(r["tags"]))
    assert dict(zip(tags.vocabulary, tags.counts)) == dict(held)
    assert tags.values == sum(len(r["tags"]) for r in rows)
    assert tags.missing == sum(not r["tags"] for r in rows)


def test_a_vocabulary_past_the_cap_keeps_the_most_frequent_and_counts_the_rest():
    dataset = _dataset(cap=10)
    rows = _rows(2000)
    facts = _facts(dataset, _cut(rows, [1000, 1000], np.zeros(2000, np.int16)))
    city = facts.feature("train", "city")
    expected = collections.Counter(r["city"] for r in rows)
    ranked = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))
    assert list(zip(city.vocabulary, city.counts)) == ranked[:10]
    assert city.distinct == len(expected)
    assert city.outside == 2000 - sum(c for _, c in ranked[:10])
    assert facts.vocabulary_cap == 10


def test_numbers_have_exact_moments_and_quantiles_while_few_values():
    dataset = _dataset()
    rows = _rows(1000)
    facts = _facts(dataset, [(rows, np.zeros(1000, np.int16))])
    n = facts.feature("train", "n")
    values = np.array([r["n"] for r in rows], np.float64)
    assert n.quantiles_exact and n.distinct == len(set(values))
    assert np.allclose(n.quantiles, np.quantile(values, np.linspace(0, 1, 201)), rtol=0, atol=0)
    assert n.mean == pytest.approx(values.mean()) and n.std == pytest.approx(values.std())
    assert dict((c.value, c.count) for c in n.value_counts) == collections.Counter(values.tolist())


def test_sketched_quantiles_are_within_the_stated_relative_error():
    values = RNG.lognormal(0, 2, 200_000)
    sketch = Sketch.of(values[:50_000]).merge(Sketch.of(values[50_000:]))
    got = np.array(quantiles(np.clip(sketch.values(), values.min(), values.max()), sketch.counts))
    order = np.sort(values)
    for q, v in zip(np.linspace(0, 1, 201), got):
        rank = q * (len(order) - 1)  # the true quantile lies between the two order statistics
        low, high = order[int(np.floor(rank))], order[int(np.ceil(rank))]
        assert low * (1 - QUANTILE_ERROR) - 1e-12 <= v <= high * (1 + QUANTILE_ERROR) + 1e-12
    assert abs(sketch.distinct() - len(values)) / len(values) < 0.1
    assert len(sketch.hashes) == KMV


def test_repeated_rows_and_conflicting_labels_are_counted_over_every_split():
    dataset = _dataset(key="n")  # the key names a record: left out of its content
    base = {"city": "a", "tags": ["t1"], "x": 1.5, "n": 0, "y": "no"}
    rows = [
        dict(base, n=1),  # content A, label no
        dict(base, n=2),  # A, no: a copy
        dict(base, n=3, y="yes"),  # A, yes: a conflict
        dict(base, n=4, city="b"),  # B
        dict(base, n=5, city="b"),  # B: a copy
        dict(base, n=6, tags=["t1", "t2"]),  # C
        dict(base, n=7, tags=["t2", "t1"]),  # D: the same tags in another order
    ]
    split = np.array([0, 1, 0, 0, 0, 1, 1], np.int16)
    rows_facts = _facts(dataset, _cut(rows, [3, 4], split)).rows
    assert rows_facts.records == 7
    assert (rows_facts.repeated, rows_facts.repeated_rows) == (2, 2)
    assert (rows_facts.conflicting, rows_facts.conflicting_rows) == (3, 1)
    assert rows_facts.across_splits == 2  # the two copies of (A, no): train and eval


def test_row_hashes_tell_order_and_missing_values_apart():
    hashes = np.array([5, 6, 6, 5, 5], np.uint64)
    rows = row_hashes(hashes, np.array([2, 2, 0, 1]))
    assert len(set(rows.tolist())) == 4


def test_the_label_suggests_classes_for_an_int_with_few_values():
    dataset = parse_config(
        {
            "name": "f",
            "sources": [{"name": "a", "format": "csv", "path": "a.csv"}],
            "features": {"x": {"type": "float"}, "y": {"type": "int"}},
            "label": "y",
            "output": {"path": "out"},
        },
        base_dir="/cfg",
    )
    counter = FactCounter(dataset)
    columns = [
        pa.array([[float(i)] for i in range(100)], pa.list_(pa.float32())),
        pa.array([[i % 2] for i in range(100)], pa.list_(pa.int64())),
    ]
    split = np.zeros(100, np.int16)
    stats = chunk_stats(["x", "y"], ["float", "int"], columns, split)
    ranked = RankedFacts()
    for _, part in counter.count(columns, split).buckets():
        ranked.merge(part.ranked(100), 100)
    label = facts_of(dataset, ranked, stats).label
    assert (label.task, label.suggested, label.classes) == ("regression", "classification", None)
    assert "2 distinct train values" in label.reason


def test_facts_json_reads_back_equal_and_names_a_wrong_field():
    dataset = _dataset()
    facts = _facts(dataset, [(_rows(300), np.zeros(300, np.int16))])
    assert Facts.loads(facts.dumps()) == facts
    raw = json.loads(facts.dumps())
    raw["splits"]["train"]["features"]["city"]["counts"].append(1)
    with pytest.raises(FactsError, match="city.counts: must hold one count per vocabulary"):
        Facts.from_json(raw)


def test_analyze_facts_merges_bucketed_parts_on_the_runner():
    dataset = _dataset()
    rows = _rows(500)
    split = np.zeros(500, np.int16)
    counter = FactCounter(dataset)
    parts = [
        piece
        for chunk, s in _cut(rows, [250, 250], split)
        for piece in counter.count(_columns(chunk), s).buckets()
    ]
    expected = collections.Counter(r["city"] for r in rows)

    def check(outputs):
        (ranked,) = outputs
        found = ranked.vocabularies[(0, "city")]
        got = dict(zip((w.decode() for w in found.words.to_pylist()), found.counts.tolist()))
        assert got == dict(expected) and found.distinct == len(expected)

    with TestPipeline() as p:
        out = p | beam.Create(parts) | AnalyzeFacts()
        assert_that(out, check)


def test_every_bucket_of_a_part_holds_only_its_own_values():
    dataset = _dataset()
    counter = FactCounter(dataset)
    rows = _rows(400)
    part = counter.count(_columns(rows), np.zeros(400, np.int16))
    seen = collections.Counter()
    for bucket, piece in part.buckets():
        for vocabulary in itertools.chain.from_iterable(piece.vocabularies.values()):
            assert set((vocabulary.high >> np.uint64(60)).tolist()) == {bucket}
            seen.update(vocabulary.words.to_pylist())
    assert seen[b"t1"] == 1  # each (split, feature, value) once: in its own bucket
