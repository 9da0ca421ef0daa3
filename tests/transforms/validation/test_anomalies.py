"""Anomalies of statistics built by the project's own statistics code from real columns: each
planted change is found with its kind, measure and exact value, and nothing else is."""

from __future__ import annotations

import collections
import dataclasses
import json
import math

import numpy as np
import pyarrow as pa
import pytest
from tensorflow_metadata.proto.v0 import schema_pb2

from tests.transforms.validation.typed import typed
from transforms.contract.statistics import Bar, SplitStatistics, Statistics
from transforms.stats import chunk_stats
from transforms.validation.anomalies import (
    DEFAULT_BLOCKING,
    KINDS,
    Anomaly,
    FeatureThresholds,
    Thresholds,
    find_anomalies,
)
from transforms.validation.measures import jensen_shannon_divergence, jensen_shannon_points

SPLITS = ["train", "eval"]
SPECIES = ["Adelie", "Chinstrap", "Gentoo"]
N = 2000
_ARROW = {"int": pa.int64(), "float": pa.float32(), "string": pa.binary()}

# drift is checked tightly (a baseline of the same records differs only where planted); skew
# loosely (train and eval are different records)
CHECKED = Thresholds(drift_linf=0.01, drift_js=0.01, skew_linf=0.1, skew_js=0.1)


def statistics(columns: dict[str, tuple[str, list]], split: np.ndarray) -> Statistics:
    """statistics.json of the columns ({name: (type, values)}, None for a missing value), as the
    ETL writes it, read back."""
    names = list(columns)
    arrays = []
    for name in names:
        kind, values = columns[name]
        if kind == "string":
            values = [None if v is None else v.encode() for v in values]
        arrays.append(pa.array([[] if v is None else [v] for v in values], pa.list_(_ARROW[kind])))
    stats = chunk_stats(names, [columns[n][0] for n in names], arrays, split)
    return stats.result(SPLITS)


@pytest.fixture(scope="module")
def base():
    """2,000 penguin-like records: a fifth in eval, the rest in train."""
    rng = np.random.default_rng(11)
    split = np.array([1 if i % 5 == 0 else 0 for i in range(N)], np.int16)
    columns = {
        "species": ("string", rng.choice(SPECIES, N, p=[0.45, 0.2, 0.35]).tolist()),
        "bill": ("float", rng.normal(45, 5, N).astype(np.float32).tolist()),
        "year": ("int", rng.integers(2007, 2010, N).tolist()),
        "note": (
            "string",
            [None if rng.random() < 0.1 else str(rng.choice(["calm", "windy"])) for _ in range(N)],
        ),
    }
    return columns, split


def changed(base, **columns):
    """The base columns with some replaced (a None value drops the column)."""
    out = dict(base[0])
    for name, column in columns.items():
        if column is None:
            del out[name]
        else:
            out[name] = column
    return out


def schema() -> schema_pb2.Schema:
    out = schema_pb2.Schema()
    species = out.feature.add(name="species", type=schema_pb2.BYTES, domain="species")
    species.presence.min_fraction, species.presence.min_count = 1.0, 1
    out.string_domain.add(name="species", value=SPECIES)
    bill = out.feature.add(name="bill", type=schema_pb2.FLOAT)
    bill.presence.min_count = 1
    bill.float_domain.min, bill.float_domain.max = 20.0, 90.0
    year = out.feature.add(name="year", type=schema_pb2.INT)
    year.presence.min_fraction, year.presence.min_count = 1.0, 1
    year.int_domain.min, year.int_domain.max = 2007, 2009
    note = out.feature.add(name="note", type=schema_pb2.BYTES)
    note.presence.min_fraction, note.presence.min_count = 0.7, 1
    return out


def facts(anomalies: list[Anomaly]) -> list[tuple]:
    return [
        (a.feature, a.split, a.kind, a.measure, a.value, a.threshold, a.blocking) for a in anomalies
    ]


def reference_linf(a: collections.Counter, b: collections.Counter) -> tuple[float, str]:
    """The largest difference of shares, from the records' values themselves."""
    values = sorted(set(a) | set(b))
    p = np.array([a[v] for v in values]) / sum(a.values())
    q = np.array([b[v] for v in values]) / sum(b.values())
    difference = np.abs(p - q)
    return float(difference.max()), values[int(np.flatnonzero(difference == difference.max())[-1])]


def reference_jsd(hist_a: tuple[Bar, ...], hist_b: tuple[Bar, ...]) -> float:
    """JSD of contiguous histograms re-binned on the union of their edges through their
    piecewise-linear cumulative counts."""
    masses = []
    grid = np.union1d(
        [b.low for b in hist_a] + [hist_a[-1].high],
        [b.low for b in hist_b] + [hist_b[-1].high],
    )
    for hist in (hist_a, hist_b):
        edges = [b.low for b in hist] + [hist[-1].high]
        cumulative = np.concatenate([[0.0], np.cumsum([b.count for b in hist])])
        mass = np.diff(np.interp(grid, edges, cumulative))
        masses.append(mass / mass.sum())
    p, q = masses
    m = (p + q) / 2
    kl_p = np.sum(p[p > 0] * np.log2(p[p > 0] / m[p > 0]))
    kl_q = np.sum(q[q > 0] * np.log2(q[q > 0] / m[q > 0]))
    return float(kl_p + kl_q) / 2


def in_split(values: list, split: np.ndarray, index: int) -> collections.Counter:
    return collections.Counter(v for v, s in zip(values, split) if s == index and v is not None)


# --- the clean comparison ---------------------------------------------------------------------


def test_the_same_data_against_itself_has_no_anomalies(base):
    stats = statistics(base[0], base[1])
    assert find_anomalies(stats, schema(), CHECKED, baseline=stats) == []
    assert find_anomalies(stats, schema()) == []


def test_a_rerun_of_the_same_records_has_no_drift(base):
    rerun = statistics(base[0], base[1])
    stats = statistics(base[0], base[1])
    assert stats == rerun
    tight = Thresholds(drift_linf=0.0, drift_js=0.0)  # any distance at all would be reported
    assert find_anomalies(stats, schema(), tight, baseline=rerun) == []


# --- planted changes --------------------------------------------------------------------------


def test_a_new_category_is_out_of_domain_and_drifts(base):
    columns, split = base
    species = list(columns["species"][1])
    train = np.flatnonzero(split == 0)
    for i in train[::40][:37]:
        species[i] = "Emperor"
    current = statistics(changed(base, species=("string", species)), split)
    found = find_anomalies(current, schema(), CHECKED, baseline=statistics(columns, split))

    distance, at = reference_linf(
        in_split(species, split, 0), in_split(columns["species"][1], split, 0)
    )
    assert facts(found) == [
        ("species", "train", "out_of_domain", "out_of_domain_rate", 37 / 1600, 0.0, False),
        ("species", "train", "drift", "l_infinity", distance, 0.01, False),
    ]
    domain, drift = found
    assert (domain.examples, domain.approximate) == ((("Emperor", 37),), False)
    assert domain.description == (
        "Unexpected string values: examples contain values missing from the schema: 'Emperor' (~2%)"
    )
    assert (drift.at_value, drift.approximate) == (at, False)
    assert drift.description.startswith(
        "High Linfty distance between current and previous (train against the baseline's "
        f"train): {distance:.6g}, above the threshold 0.01; the feature value with maximum "
        f"difference is: {at!r}"
    )
    assert json.loads(json.dumps(domain.to_dict())) == {
        "feature": "species",
        "split": "train",
        "kind": "out_of_domain",
        "measure": "out_of_domain_rate",
        "value": 37 / 1600,
        "threshold": 0.0,
        "blocking": False,
        "description": domain.description,
        "examples": [{"value": "Emperor", "count": 37}],
        "at_value": None,
        "approximate": False,
    }


def test_a_shifted_number_drifts_by_the_reference_divergence(base):
    columns, split = base
    bill = (np.array(columns["bill"][1], np.float32) + np.float32(5)).tolist()
    previous = statistics(columns, split)
    current = statistics(changed(base, bill=("float", bill)), split)
    found = find_anomalies(current, schema(), CHECKED, baseline=previous)

    assert [(a.feature, a.split, a.kind, a.measure, a.threshold) for a in found] == [
        ("bill", "eval", "drift", "jensen_shannon", 0.01),
        ("bill", "train", "drift", "jensen_shannon", 0.01),
    ]
    for anomaly in found:
        now = current.splits[anomaly.split].features["bill"].histogram
        before = previous.splits[anomaly.split].features["bill"].histogram
        assert anomaly.value == pytest.approx(reference_jsd(now, before), rel=1e-12)
        assert anomaly.value == jensen_shannon_divergence(now, before)
        assert 0.05 < anomaly.value < 0.5  # a shift of one standard deviation
        assert anomaly.description.startswith(
            "High approximate Jensen-Shannon divergence between current and previous"
        )
        assert anomaly.blocking is False


def test_a_jump_in_the_missing_rate_breaks_the_schemas_presence(base):
    columns, split = base
    note = [None if i % 10 == 0 else v for i, v in enumerate(columns["note"][1])]
    missing = sum(1 for v, s in zip(note, split) if s == 1 and v is None)
    assert 190 < missing < 250  # half of eval, and the tenth that missed already
    current = statistics(changed(base, note=("string", note)), split)

    found = find_anomalies(current, schema())
    assert facts(found) == [
        ("note", "eval", "missing_rate", "missing_rate", missing / 400, 0.3, True)
    ]
    assert found[0].description.startswith(
        "Column dropped: the feature was present in fewer examples than expected "
        f"(missing in {missing} of 400 records"
    )
    # a limit of the feature's own comes first; math.inf turns the check off
    for limit, expected in ((0.6, []), (math.inf, []), (0.05, ["eval", "train"])):
        thresholds = Thresholds(features={"note": FeatureThresholds(max_missing_rate=limit)})
        assert [a.split for a in find_anomalies(current, schema(), thresholds)] == expected


def test_a_type_change_is_a_mismatch_and_nothing_else_of_the_feature(base):
    columns, split = base
    years = [float(y) + 0.5 for y in columns["year"][1]]
    current = statistics(changed(base, year=("float", years)), split)
    found = find_anomalies(current, schema(), CHECKED, baseline=statistics(columns, split))
    assert facts(found) == [
        ("year", "eval", "type_mismatch", "type", "float", "INT", True),
        ("year", "train", "type_mismatch", "type", "float", "INT", True),
    ]
    assert found[0].description == "Expected data of type: INT but got FLOAT (float)"


def test_an_eval_split_unlike_train_is_skewed(base):
    columns, split = base
    species = [
        "Gentoo" if s == 1 and v == "Chinstrap" else v for v, s in zip(columns["species"][1], split)
    ]
    bill = [v + 10.0 if s == 1 else v for v, s in zip(columns["bill"][1], split)]
    current = statistics(changed(base, species=("string", species), bill=("float", bill)), split)
    found = find_anomalies(current, schema(), CHECKED)

    distance, at = reference_linf(in_split(species, split, 1), in_split(species, split, 0))
    eval_bill = current.splits["eval"].features["bill"].histogram
    train_bill = current.splits["train"].features["bill"].histogram
    divergence = reference_jsd(eval_bill, train_bill)
    assert [(a.feature, a.split, a.kind, a.measure, a.threshold) for a in found] == [
        ("bill", "eval", "skew", "jensen_shannon", 0.1),
        ("species", "eval", "skew", "l_infinity", 0.1),
    ]
    assert found[0].value == pytest.approx(divergence, rel=1e-12)
    assert (found[1].value, found[1].at_value) == (distance, at)
    assert found[1].description.startswith(
        "High Linfty distance between training and serving (eval against train)"
    )


def test_a_dropped_and_an_added_feature(base):
    columns, split = base
    flipper = np.random.default_rng(5).integers(170, 230, N).tolist()
    current = statistics(changed(base, note=None, flipper=("int", flipper)), split)
    found = find_anomalies(current, schema(), CHECKED, baseline=statistics(columns, split))
    assert facts(found) == [
        ("flipper", "eval", "feature_new", None, None, None, False),
        ("flipper", "train", "feature_new", None, None, None, False),
        ("note", "eval", "feature_missing", None, None, None, True),
        ("note", "train", "feature_missing", None, None, None, True),
    ]
    assert found[0].description == "New column: column in data but not in schema"
    dropped = "Column dropped: column is completely missing (in the schema only)"
    assert found[2].description == found[3].description == dropped


def test_values_beyond_the_schemas_range(base):
    columns, split = base
    train = np.flatnonzero(split == 0)
    years, bill = list(columns["year"][1]), list(columns["bill"][1])
    years[train[3]], years[train[8]] = 2011, 2006
    bill[train[5]] = 95.5
    current = statistics(changed(base, year=("int", years), bill=("float", bill)), split)
    found = find_anomalies(current, schema())
    assert facts(found) == [
        ("bill", "train", "out_of_range", "max", 95.5, 90.0, True),
        ("year", "train", "out_of_range", "max", 2011, 2009, True),
        ("year", "train", "out_of_range", "min", 2006, 2007, True),
    ]
    assert found[1].description == (
        "Out-of-range values: unexpectedly large value: 2011 (the schema's max is 2009)"
    )


def test_a_feature_without_any_value_in_a_split_is_dropped(base):
    columns, split = base
    note = [None if s == 1 else v for v, s in zip(columns["note"][1], split)]
    current = statistics(changed(base, note=("string", note)), split)
    found = find_anomalies(current, schema(), CHECKED, baseline=statistics(columns, split))
    assert facts(found) == [("note", "eval", "feature_missing", "present_count", 0, 1, True)]


# --- approximate findings, thresholds, blocking -----------------------------------------------


def test_out_of_domain_values_of_a_sample_are_approximate():
    codes = [f"c{i:04d}" for i in range(1000)]
    out = schema_pb2.Schema()
    feature = out.feature.add(name="code", type=schema_pb2.BYTES)
    feature.string_domain.value.extend(codes)  # a domain of the feature's own
    split = np.zeros(1050, np.int16)
    found = find_anomalies(statistics({"code": ("string", codes + ["NEW"] * 50)}, split), out)
    assert facts(found) == [
        ("code", "train", "out_of_domain", "out_of_domain_rate", 50 / 1050, 0.0, False)
    ]
    assert (found[0].examples, found[0].approximate) == ((("NEW", 50),), True)
    assert found[0].description.endswith("(approximate: only the top values are known)")
    # a share within 1 - min_domain_mass passes
    feature.distribution_constraints.min_domain_mass = 0.95
    assert find_anomalies(statistics({"code": ("string", codes + ["NEW"] * 50)}, split), out) == []


def test_thresholds_come_from_the_feature_then_the_schema_then_the_default(base):
    columns, split = base
    species = [
        "Gentoo" if s == 1 and v == "Chinstrap" else v for v, s in zip(columns["species"][1], split)
    ]
    current = statistics(changed(base, species=("string", species)), split)

    def skews(thresholds, skew_threshold=None):
        strict = schema()
        if skew_threshold is not None:
            strict.feature[0].skew_comparator.infinity_norm.threshold = skew_threshold
        return [(a.measure, a.threshold) for a in find_anomalies(current, strict, thresholds)]

    assert skews(Thresholds()) == []  # nothing is compared without a threshold
    assert skews(Thresholds(skew_linf=0.1)) == [("l_infinity", 0.1)]
    assert skews(Thresholds(skew_linf=0.1), skew_threshold=0.9) == []  # the schema's
    assert skews(Thresholds(), skew_threshold=0.15) == [("l_infinity", 0.15)]
    own = Thresholds(features={"species": FeatureThresholds(skew_linf=0.05)})
    assert skews(own, skew_threshold=0.9) == [("l_infinity", 0.05)]
    off = Thresholds(skew_linf=0.1, features={"species": FeatureThresholds(skew_linf=math.inf)})
    assert skews(off) == []


def test_blocking_kinds_are_chosen_by_the_thresholds(base):
    columns, split = base
    bill = [v + 10.0 if s == 1 else v for v, s in zip(columns["bill"][1], split)]
    current = statistics(changed(base, bill=("float", bill)), split)
    assert [a.blocking for a in find_anomalies(current, schema(), CHECKED)] == [False]
    every = Thresholds(skew_js=0.1, blocking=frozenset(KINDS))
    assert [a.blocking for a in find_anomalies(current, schema(), every)] == [True]
    assert "skew" not in DEFAULT_BLOCKING and "type_mismatch" in DEFAULT_BLOCKING


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"blocking": frozenset({"drift", "typo"})},
         r"thresholds.blocking: unknown kinds \['typo'\]"),
        ({"drift_js": -0.1}, "thresholds.drift_js: must be at least 0, got -0.1"),
        ({"skew_linf": float("nan")}, "thresholds.skew_linf: not a number"),
        ({"features": {"a": FeatureThresholds(max_missing_rate=True)}},
         r"thresholds.features\['a'\].max_missing_rate: not a number"),
    ],
)  # fmt: skip
def test_thresholds_are_checked(arguments, message):
    with pytest.raises(ValueError, match=message):
        Thresholds(**arguments)


def test_an_empty_split_has_nothing_to_check(base):
    columns, split = base
    stats = statistics(columns, split)
    stats = dataclasses.replace(stats, splits={**stats.splits, "test": SplitStatistics(0, {})})
    assert find_anomalies(stats, schema(), CHECKED, baseline=stats) == []


def test_values_left_out_of_top_values_are_not_counted_as_absent():
    # train lists only its 20 most frequent values (1,500 distinct); eval lists all of its own:
    # the same shares must not look like skew
    def zipf(n_values: int, scale: int) -> list[tuple[str, int]]:
        return [(f"v{i:04d}", scale * 10_000 // (i + 1)) for i in range(n_values)]

    train, eval_ = zipf(1500, 10), zipf(800, 1)
    feature = lambda pairs, listed, exact_all: {  # noqa: E731
        "type": "string", "records": sum(c for _, c in pairs), "missing": 0,
        "values": sum(c for _, c in pairs), "distinct": len(pairs), "distinct_exact": True,
        "top": [{"value": v, "count": c} for v, c in pairs[:20]],
        **({"counts": [{"value": v, "count": c} for v, c in listed]} if exact_all else {}),
    }  # fmt: skip
    statistics = typed({"format_version": 1, "splits": {
        "train": {"records": 1, "features": {"s": feature(train, train, False)}},
        "eval": {"records": 1, "features": {"s": feature(eval_, eval_, True)}},
    }})  # fmt: skip
    schema = schema_pb2.Schema()
    schema.feature.add(name="s", type=schema_pb2.BYTES)
    found = find_anomalies(statistics, schema, Thresholds(skew_linf=0.01))
    # each listed count a share of its side's values: v0000 differs most
    top = eval_[0][1] / sum(c for _, c in eval_) - train[0][1] / sum(c for _, c in train)
    assert [(a.kind, a.at_value, a.approximate) for a in found] == [("skew", "v0000", True)]
    assert found[0].value == pytest.approx(top, rel=1e-12)
    assert found[0].value < 0.02  # normalized by each side's own 20 values, it was 0.14


def test_numbers_with_few_values_drift_as_exact_masses():
    def stats(counts: dict[int, int]) -> Statistics:
        total = sum(counts.values())
        code = {
            "type": "int", "records": total, "missing": 0, "values": total,
            "min": min(counts), "max": max(counts), "distinct": len(counts),
            "histogram": [{"low": min(counts), "high": max(counts) + 1, "count": total}],
            "counts": [{"value": v, "count": c} for v, c in sorted(counts.items())],
        }  # fmt: skip
        train = {"records": total, "features": {"code": code}}
        return typed({"format_version": 1, "splits": {"train": train}})

    schema = schema_pb2.Schema()
    schema.feature.add(name="code", type=schema_pb2.INT)
    codes = {1: 40, 2: 30, 5: 10, 10: 10, 100: 10}
    limits = Thresholds(drift_js=0.05)
    # one more record of a new largest value is no drift (its bars would all have moved)
    assert find_anomalies(stats({**codes, 101: 1}), schema, limits, stats(codes)) == []
    moved = {1: 10, 2: 60, 5: 10, 10: 10, 100: 10}
    (found,) = find_anomalies(stats(moved), schema, limits, stats(codes))
    expected = jensen_shannon_points(
        {float(v): c for v, c in moved.items()}, {float(v): c for v, c in codes.items()}
    )
    assert (found.kind, found.measure, found.value) == ("drift", "jensen_shannon", expected)


def test_rejecting_more_than_a_tenth_of_the_records_read_is_a_warning():
    from transforms.validation.anomalies import MAX_REJECTED_RATE, rejected_anomaly

    assert MAX_REJECTED_RATE == 0.1
    # at the threshold: nothing; no record read: nothing
    assert rejected_anomaly(1000, {"x: not a number": 100}) is None
    assert rejected_anomaly(0, {}) is None
    reasons = {"x: not a number": 5, "region: not one of the allowed values [C, N, S]": 90}
    reasons |= {"y: missing required value": 5, "z: below min 0": 1}
    found = rejected_anomaly(1000, reasons)
    assert found == Anomaly(
        "", "", "rejected_rate", "rejected_rate", 0.101, 0.1, False,
        "Rejected records: 101 of 1000 records read were rejected (0.101 > 0.1); most often: "
        "'region: not one of the allowed values [C, N, S]' (90), 'x: not a number' (5), "
        "'y: missing required value' (5)",
    )  # fmt: skip
    blocking = Thresholds(blocking=frozenset({"rejected_rate"}))
    assert rejected_anomaly(1000, reasons, blocking).blocking
