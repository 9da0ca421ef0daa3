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
from transforms.facts.merge import AnalyzeFacts, rank_bucket
from transforms.facts.parts import KMV, FactParts, Ranked, RankedFacts, Sketch, Vocabulary
from transforms.facts.spill import read_facts, write_facts
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
    ranked = RankedFacts()
    for bucket in sorted(by_bucket, reverse=order is not None):
        ranked.merge(rank_bucket(by_bucket[bucket], dataset.vocabulary_cap), dataset.vocabulary_cap)
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


def test_analyze_facts_merges_the_spilled_pieces_of_every_bucket_on_the_runner(tmp_path):
    dataset = _dataset()
    rows = _rows(500)
    split = np.zeros(500, np.int16)
    counter = FactCounter(dataset)
    pieces = [
        piece
        for chunk, s in _cut(rows, [250, 250], split)
        for piece in write_facts(counter.count(_columns(chunk), s), str(tmp_path))
    ]
    assert len(list(tmp_path.glob("*.facts"))) == 2  # a file a spill
    expected = collections.Counter(r["city"] for r in rows)

    def check(outputs):
        (ranked,) = outputs
        found = ranked.vocabulary((0, "city"), dataset.vocabulary_cap)
        got = dict(zip((w.decode() for w in found.words.to_pylist()), found.counts.tolist()))
        assert got == dict(expected) and found.distinct == len(expected)

    with TestPipeline() as p:
        out = p | beam.Create(pieces) | AnalyzeFacts()
        assert_that(out, check)


def test_a_spill_file_holds_each_bucket_apart_and_reads_back_equal(tmp_path):
    dataset = _dataset()
    part = FactCounter(dataset).count(_columns(_rows(400)), np.zeros(400, np.int16))
    pieces = write_facts(part, str(tmp_path))
    assert [b for b, _ in pieces] == [b for b, _ in part.buckets()]
    (path,) = {piece.path for _, piece in pieces}
    for (bucket, piece), (_, expected) in zip(pieces, part.buckets()):
        got = read_facts(piece)
        assert got.vocabularies.keys() == expected.vocabularies.keys()
        for key, (vocabulary,) in got.vocabularies.items():
            assert vocabulary.words.equals(expected.vocabularies[key][0].words)
            assert vocabulary.counts.tolist() == expected.vocabularies[key][0].counts.tolist()
    with open(path, "r+b") as f:  # cut short: the last bucket's piece names what is missing
        f.truncate(pieces[-1][1].stop - 1)
    with pytest.raises(OSError, match="facts spill file is truncated"):
        read_facts(pieces[-1][1])


def _vocabulary(words: list[bytes], counts: list[int], high=None, low=None) -> Vocabulary:
    from xxhash import xxh3_128_digest

    digests = np.frombuffer(b"".join(map(xxh3_128_digest, words)), ">u8").reshape(-1, 2)
    return Vocabulary.of(
        np.asarray(high, np.uint64) if high is not None else digests[:, 0].astype(np.uint64),
        np.asarray(low, np.uint64) if low is not None else digests[:, 1].astype(np.uint64),
        np.asarray(counts, np.int64),
        pa.array(words, pa.binary()),
    )


def test_vocabularies_merge_by_value_whatever_the_runs_and_their_order():
    words = [f"w{i}".encode() for i in range(300)]
    expected = collections.Counter()
    runs = []
    for _ in range(12):
        picked = sorted(set(RNG.choice(300, RNG.integers(1, 120)).tolist()))
        counts = RNG.integers(1, 9, len(picked)).tolist()
        expected.update(dict(zip((words[i] for i in picked), counts)))
        runs.append(_vocabulary([words[i] for i in picked], counts))
    for order in (runs, runs[::-1], [runs[i] for i in RNG.permutation(12)]):
        parts = FactParts()
        for run in order:
            parts.merge(FactParts(vocabularies={(0, "w"): [run]}))
        merged = Vocabulary.merged(parts.vocabularies[(0, "w")])
        assert dict(zip(merged.words.to_pylist(), merged.counts.tolist())) == dict(expected)
        assert np.all(np.diff(merged.high.astype(np.float64)) >= 0)


def test_values_whose_high_hash_bits_collide_stay_apart():
    # the same 64 high bits, other low bits: a sort by the high bits alone would leave the
    # pairs out of order and count b and c as one
    one = _vocabulary([b"a", b"c"], [1, 2], high=[5, 7], low=[0, 9])
    two = _vocabulary([b"b", b"c"], [4, 8], high=[7, 7], low=[3, 9])
    merged = Vocabulary.merged([one, two])
    assert dict(zip(merged.words.to_pylist(), merged.counts.tolist())) == {
        b"a": 1, b"b": 4, b"c": 10,
    }  # fmt: skip
    assert merged.low.tolist() == [0, 3, 9]


def test_a_cut_keeps_the_most_records_then_the_smallest_values_whatever_the_parts():
    words = [f"v{i:03d}".encode() for i in range(200)]
    counts = RNG.integers(1, 6, 200)
    vocabulary = _vocabulary(words, counts.tolist())
    want = sorted(zip(words, counts.tolist()), key=lambda wc: (-wc[1], wc[0]))[:37]
    one = Ranked.of(vocabulary, 37).ranked(37)
    assert list(zip(one.words.to_pylist(), one.counts.tolist())) == want
    pieces = [Ranked.of(_vocabulary(words[i::3], counts[i::3].tolist()), 37) for i in range(3)]
    merged = Ranked.merged(pieces, 37).ranked(37)
    assert list(zip(merged.words.to_pylist(), merged.counts.tolist())) == want
    assert (merged.distinct, merged.total) == (200, int(counts.sum()))


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
