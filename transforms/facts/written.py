"""facts.json of a run (`transforms.contract.facts.Facts`): the merged, ranked facts with the
exact moments, bounds and few-value counts of the merged statistics; quantiles from exact counts
or the sketch; the label's classes and the task its values suggest."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from transforms.contract import facts as contract
from transforms.contract.config import DatasetSpec
from transforms.facts.parts import KMV, Ranked, RankedFacts, Sketch
from transforms.stats import DatasetStats, FeatureStats

VOCABULARY_CAP = contract.VOCABULARY_CAP
LABEL_CLASSES = 20  # an int label with at most this many distinct train values: likely classes
_NUMBERS = ("int", "float")
_STRINGS = ("string",)


def facts_of(
    dataset: DatasetSpec, ranked: RankedFacts, stats: DatasetStats, cap: int = VOCABULARY_CAP
) -> contract.Facts:
    """facts.json of a run: its ranked facts, with the moments, bounds and value counts of the
    merged statistics."""
    splits = {}
    for index, split in enumerate(dataset.split_names):
        features = {}
        for f in dataset.features:
            stat = stats.splits.get(index, {}).get(f.name) or FeatureStats(f.type)
            common = contract.FeatureFacts(
                type=f.type, records=stat.records, missing=stat.missing, values=stat.values
            )
            if f.type in _STRINGS:
                found = ranked.vocabulary((index, f.name), cap)
                features[f.name] = _string_facts(common, found)
            elif f.type in _NUMBERS:
                sketch = ranked.sketches.get((index, f.name))
                features[f.name] = _number_facts(common, stat, sketch)
            else:
                features[f.name] = common
        splits[split] = contract.SplitFacts(records=stats.records.get(index, 0), features=features)
    rows = ranked.rows
    return contract.Facts(
        vocabulary_cap=cap,
        splits=splits,
        label=_label_facts(dataset, splits),
        rows=contract.RowFacts(**dataclasses.asdict(rows)),
    )


def _string_facts(common: contract.FeatureFacts, found: Ranked | None) -> contract.FeatureFacts:
    if found is None:
        return dataclasses.replace(common, distinct=0, vocabulary=(), counts=(), outside=0)
    counts = found.counts.tolist()
    try:  # checked and decoded by Arrow, at once
        words = tuple(found.words.cast(pa.string()).to_pylist())
    except pa.ArrowInvalid:  # bytes that are not UTF-8 stay apart, as \udcXX escapes
        words = tuple(w.decode("utf-8", "surrogateescape") for w in found.words.to_pylist())
    return dataclasses.replace(
        common,
        distinct=found.distinct,
        distinct_exact=True,
        vocabulary=words,
        counts=tuple(counts),
        outside=found.total - sum(counts),
    )


def _number_facts(
    common: contract.FeatureFacts, stat: FeatureStats, sketch: Sketch | None
) -> contract.FeatureFacts:
    result = stat.result()
    exact = bool(stat.counts) and not stat.truncated
    if exact:
        values = np.array(sorted(stat.counts), np.float64)
        counts = np.array([stat.counts[v] for v in sorted(stat.counts)], np.int64)
        distinct = len(values)
    elif sketch is not None and len(sketch.keys):
        values, counts, distinct = sketch.values(), sketch.counts, sketch.distinct()
    else:
        values, counts, distinct = np.zeros(0), np.zeros(0, np.int64), 0
    finite = int(counts.sum())
    if finite:  # the sketch's ends are the exact bounds
        values = np.clip(values, result.min, result.max)
    return dataclasses.replace(
        common,
        finite=finite,
        min=result.min,
        max=result.max,
        mean=result.mean,
        std=result.std,
        distinct=distinct,
        distinct_exact=exact or (sketch is not None and len(sketch.hashes) < KMV),
        quantiles=quantiles(values, counts) if finite else (),
        quantiles_exact=exact,
        value_counts=(
            tuple(contract.Count(v, c) for v, c in zip(_cast(common.type, values), counts.tolist()))
            if exact and distinct <= contract.COUNTED_NUMBERS
            else None
        ),
    )


def _cast(kind: str, values: np.ndarray) -> list:
    return [int(v) for v in values.tolist()] if kind == "int" else values.tolist()


def quantiles(values: np.ndarray, counts: np.ndarray) -> tuple[float, ...]:
    """The QUANTILES + 1 boundaries (0, 1/Q, ..., 1) of values given once each with their
    counts (ascending), interpolated between the order statistics as numpy's default
    `np.quantile` does."""
    n = int(counts.sum())
    ends = np.cumsum(counts)  # order statistic i (0-based) is values[searchsorted(ends, i+1)]
    position = np.linspace(0.0, n - 1, contract.QUANTILES + 1)
    below = np.floor(position).astype(np.int64)
    above = np.minimum(below + 1, n - 1)
    low = values[np.searchsorted(ends, below + 1)]
    high = values[np.searchsorted(ends, above + 1)]
    result = low + (high - low) * (position - below)
    return tuple(float(v) for v in result)


def _label_facts(
    dataset: DatasetSpec, splits: dict[str, contract.SplitFacts]
) -> contract.LabelFacts | None:
    """The label's classes (with their train records) and the task it suggests."""
    name = dataset.label
    if name is None:
        return None
    feature = next(f for f in dataset.features if f.name == name)
    train = splits.get("train") or next(iter(splits.values()))
    found = train.features[name]
    if feature.values is not None:
        counted = dict(zip(found.vocabulary or (), found.counts or ()))
        counted.update({c.value: c.count for c in found.value_counts or ()})
        classes = tuple(contract.Count(v, counted.get(v, 0)) for v in feature.values)
        return contract.LabelFacts(name, "classification", "its values are listed", classes)
    if feature.type in _STRINGS:
        pairs = sorted(zip(found.vocabulary or (), found.counts or ()))
        classes = tuple(contract.Count(v, c) for v, c in pairs)
        return contract.LabelFacts(name, "classification", "a string label", classes)
    if feature.type == "int" and found.value_counts is not None and found.distinct:
        if found.distinct <= LABEL_CLASSES:
            return contract.LabelFacts(
                name,
                "regression",
                f"an int label without values; its {found.distinct} distinct train values "
                f"suggest a classification (values: {[c.value for c in found.value_counts]})",
                None,
                suggested="classification",
            )
    return contract.LabelFacts(
        name,
        "regression",
        f"a{'n' if feature.type == 'int' else ''} {feature.type} label without values",
        None,
    )
