"""What a model is built from, read from the dataset's facts (facts.json, counted by the ETL over
each whole split), without TensorFlow: the one rule that the Keras trainer, the PyTorch and JAX
readers, `predict` and `inspect` read.

    from trainer.readers import dataset_facts

    facts = dataset_facts("out/penguins")          # the train split's, as torch_loader reads it
    facts.vocabulary("island")   # ('Biscoe', 'Dream', 'Torgersen'): a value's id is index + 1
    facts.counts("island")       # the train records holding each
    facts.classes                # the label's classes (None for a regression)
    facts.moments("bill_length_mm")    # (mean, std)
    facts.quantiles("bill_length_mm")  # 201 boundaries, at every 0.5% of the values

The rules:
- a string feature's vocabulary is its `values` when the config lists them, else its values in
  the split, most frequent first (ties by value), up to the dataset's vocabulary cap; the empty
  string is never in it (a missing value reads as one, and takes id 0 with every value outside
  the vocabulary);
- the label's classes are its `values`, or, for a string label without them, the split's
  distinct values, sorted;
- a number's moments are its mean and standard deviation over the split's finite values (a
  standard deviation of 0 is read as 1), its quantiles the boundaries facts.json lists.

Several datasets read as one (date partitions, `--data A B`) add their counts value by value
(exact while no vocabulary was cut at the cap), pool their moments, and mix their quantiles. A
dataset written before facts.json existed is read from its statistics.json: a vocabulary is then
the values it counted (all of them while a feature has few, else its most frequent ones).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from trainer.dataset.manifest import Manifest, load_facts, load_statistics
from trainer.dataset.union import load_datasets
from transforms.contract.facts import (
    CLASSIFICATION,
    QUANTILES,
    REGRESSION,
    REPEATED_SHARE,
    Facts,
    FeatureFacts,
    RowFacts,
)
from transforms.contract.manifest import ManifestError, ManifestFeature
from transforms.contract.statistics import FeatureStatistics, Statistics

TRAIN = "train"
NUMBERS = ("int", "float")
STRINGS = ("string",)


class MeanStd(NamedTuple):
    """A number's mean and standard deviation over a split (std 1.0 for a constant)."""

    mean: float
    std: float


@dataclass(frozen=True)
class DatasetFacts:
    """The facts of one split of one or more datasets read as one (see the module's doc)."""

    split: str
    features: Mapping[str, ManifestFeature]
    label: str | None
    classes: tuple[str | int, ...] | None
    vocabularies: Mapping[str, tuple[str, ...]]
    value_counts: Mapping[str, tuple[int, ...]]
    number_moments: Mapping[str, MeanStd]
    number_quantiles: Mapping[str, tuple[float, ...]]
    rows: RowFacts | None = None  # repeated rows and conflicting labels (one dataset's)
    suggested_task: str | None = None  # what the label's values suggest, when not its task
    distinct_values: Mapping[str, int] = field(default_factory=dict)
    from_facts: bool = True  # False: read from statistics.json (a dataset without facts)
    records: int = 0  # of the split
    # strings but the label: every counted value but "" with its records, most first
    ranked: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    present: Mapping[str, int] = field(default_factory=dict)  # records holding a value
    totals: Mapping[str, int] = field(default_factory=dict)  # values (list features: several)
    # the label's values (as text) with their records, in every split
    label_counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # numbers: min, max
    number_values: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # while few

    @classmethod
    def of(
        cls,
        manifest: Manifest,
        split: str = TRAIN,
        *,
        facts: Sequence[Facts | None] | None = None,
        statistics: Statistics | None = None,
    ) -> DatasetFacts:
        """The facts of `split` of the dataset `manifest` describes, from the facts.json of
        each of its parts (`facts` when they were read already), else from its statistics.json
        (`statistics`, read here when not given; none for several datasets read as one)."""
        parts = load_facts(manifest) if facts is None else facts
        if parts and all(f is not None for f in parts):
            return _of_facts(manifest, split, [f for f in parts if f is not None])
        if statistics is None and not manifest.parts:
            statistics = load_statistics(manifest.root)
        return _of_statistics(manifest, split, statistics)

    def notes(self) -> list[str]:
        """What the facts say a user should know before training, a sentence each: an int
        label whose few values suggest classes, rows that repeat (and labels that conflict)."""
        out = []
        label = self.features.get(self.label) if self.label is not None else None
        if self.suggested_task == CLASSIFICATION and self.classes is None and label is not None:
            values = self.number_values.get(self.label or "", ())
            shown = ", ".join(str(int(v)) for v in values)
            out.append(
                f"label {self.label!r} is an int with {len(values)} distinct train values "
                f"({shown}) and is trained as a regression; to learn it as classes, list them "
                f"in the config: `values: [{shown}]`"
            )
        rows = self.rows
        if rows is not None and rows.records and rows.repeated >= REPEATED_SHARE * rows.records:
            share = rows.repeated / rows.records
            out.append(
                f"{rows.repeated:,} of {rows.records:,} records ({share:.0%}) repeat another "
                f"record's features and label ({rows.repeated_rows:,} distinct rows are "
                f"repeated), {rows.conflicting:,} share their features with a record of "
                f"another label, and {rows.across_splits:,} have a copy in another split: "
                "where copies are one entity (a person, a respondent), give the config a "
                "`key` so that they land in one split"
            )
        return out

    def vocabulary(self, name: str) -> tuple[str, ...]:
        """A string feature's vocabulary: a value's id is its index + 1, and 0 for a value
        outside it (the empty string, a missing value); empty when the split holds no value
        (the readers then give the strings themselves)."""
        return self.vocabularies.get(self._string(name), ())

    def counts(self, name: str) -> tuple[int, ...]:
        """The records of the split holding each value of `vocabulary(name)`."""
        return self.value_counts.get(self._string(name), ())

    def moments(self, name: str) -> MeanStd:
        """A number's (mean, std) over the split."""
        self._number(name)
        if name not in self.number_moments:
            raise ManifestError(f"feature {name!r}: no finite value in split {self.split!r}")
        return self.number_moments[name]

    def quantiles(self, name: str) -> tuple[float, ...]:
        """A number's quantile boundaries over the split (empty without a finite value)."""
        self._number(name)
        return self.number_quantiles.get(name, ())

    def _string(self, name: str) -> str:
        feature = self._feature(name)
        if feature.type not in STRINGS or name == self.label:
            what = "the label" if name == self.label else f"a {feature.type} feature"
            raise ManifestError(f"feature {name!r}: {what} has no vocabulary")
        return name

    def _number(self, name: str) -> None:
        feature = self._feature(name)
        if feature.type not in NUMBERS:
            raise ManifestError(f"feature {name!r}: a {feature.type} feature is not a number")

    def _feature(self, name: str) -> ManifestFeature:
        if name not in self.features:
            raise ManifestError(f"no feature {name!r} (features: {', '.join(self.features)})")
        return self.features[name]


def dataset_facts(data: str | Sequence[str] | Manifest, split: str = TRAIN) -> DatasetFacts:
    """The facts of `split` of the dataset(s) at `data` (one URI, or several read as one, as
    `torch_loader` takes them)."""
    manifest = data if isinstance(data, Manifest) else load_datasets(data)
    manifest.shards(split)  # ManifestError naming the split when there is no such split
    return DatasetFacts.of(manifest, split)


# --- from facts.json ------------------------------------------------------------------------


def _of_facts(manifest: Manifest, split: str, parts: list[Facts]) -> DatasetFacts:
    vocabularies: dict[str, tuple[str, ...]] = {}
    counts: dict[str, tuple[int, ...]] = {}
    moments, quantiles, distinct = {}, {}, {}
    all_ranked, present, totals, bounds, number_values = {}, {}, {}, {}, {}
    found = [p.splits.get(split) for p in parts]
    splits = [s for s in found if s is not None]
    for name, feature in manifest.features.items():
        facts = [s.features[name] for s in splits if name in s.features]
        present[name] = sum(f.records - f.missing for f in facts)
        totals[name] = sum(f.values for f in facts)
        if feature.type in STRINGS:
            ranked = _added(facts)
            if name != manifest.label:
                all_ranked[name] = {w: c for w, c in ranked.items() if w != ""}
                _add_vocabulary(name, feature, ranked, vocabularies, counts)
            distinct[name] = len(ranked)
        elif feature.type in NUMBERS:
            numbers = [f for f in facts if f.finite]
            if numbers:
                moments[name] = _pooled(numbers)
                quantiles[name] = _mixed(numbers)
                distinct[name] = max(f.distinct or 0 for f in numbers)
                bounds[name] = (
                    min(f.min for f in numbers if f.min is not None),
                    max(f.max for f in numbers if f.max is not None),
                )
                if all(f.value_counts is not None for f in numbers):
                    seen = {c.value for f in numbers for c in f.value_counts or ()}
                    number_values[name] = tuple(sorted(seen))
                    distinct[name] = len(seen)
    classes, suggested = _classes(manifest, parts, split)
    return DatasetFacts(
        split=split,
        features=manifest.features,
        label=manifest.label,
        classes=classes,
        vocabularies=vocabularies,
        value_counts=counts,
        number_moments=moments,
        number_quantiles=quantiles,
        rows=parts[0].rows if len(parts) == 1 else None,
        suggested_task=suggested,
        distinct_values=distinct,
        records=sum(s.records for s in splits),
        ranked=all_ranked,
        present=present,
        totals=totals,
        label_counts=_label_counts(manifest, parts),
        bounds=bounds,
        number_values=number_values,
    )


def _label_counts(manifest: Manifest, parts: list[Facts]) -> dict[str, dict[str, int]]:
    """The label's values (as text: a number's digits) with their records, in every split."""
    if manifest.label is None:
        return {}
    out: dict[str, dict[str, int]] = {}
    unknown = set()  # splits where a part lists no value of the label (a number with many)
    for p in parts:
        for split, found in p.splits.items():
            f = found.features.get(manifest.label)
            if f is None or (f.vocabulary is None and f.value_counts is None):
                unknown.add(split)
                continue
            counted = out.setdefault(split, {})
            pairs = list(zip(f.vocabulary or (), f.counts or ()))
            pairs += [(str(c.value), c.count) for c in f.value_counts or ()]
            for value, count in pairs:
                counted[value] = counted.get(value, 0) + count
    return {split: counts for split, counts in out.items() if split not in unknown}


def _add_vocabulary(
    name: str,
    feature: ManifestFeature,
    ranked: Mapping[str, int],
    vocabularies: dict[str, tuple[str, ...]],
    counts: dict[str, tuple[int, ...]],
) -> None:
    """A string feature's vocabulary (its `values`, else its counted values, most first; never
    "") and counts, added to `vocabularies` and `counts` when it has one (without one, a feature
    reads as its strings)."""
    words = (
        tuple(str(v) for v in feature.values if v != "")
        if feature.values is not None
        else tuple(w for w in ranked if w != "")
    )
    if words:
        vocabularies[name] = words
        counts[name] = tuple(ranked.get(w, 0) for w in words)


def _added(facts: list[FeatureFacts]) -> dict[str, int]:
    """A string's values with their records, most first (ties by value), added over parts."""
    total: dict[str, int] = {}
    for f in facts:
        for word, count in zip(f.vocabulary or (), f.counts or ()):
            total[word] = total.get(word, 0) + count
    if len(facts) == 1:
        return total  # in the file's order already
    return dict(sorted(total.items(), key=lambda item: (-item[1], item[0].encode())))


def _pooled(facts: list[FeatureFacts]) -> MeanStd:
    """The mean and standard deviation of the parts' finite values together."""
    n = sum(f.finite or 0 for f in facts)
    mean = sum((f.finite or 0) * (f.mean or 0.0) for f in facts) / n
    second = sum((f.finite or 0) * ((f.std or 0.0) ** 2 + (f.mean or 0.0) ** 2) for f in facts)
    std = math.sqrt(max(second / n - mean * mean, 0.0))
    return MeanStd(float(mean), float(std) if std > 0 else 1.0)


def _mixed(facts: list[FeatureFacts]) -> tuple[float, ...]:
    """The quantile boundaries of the parts' values together: each part's own when one; else
    those of the mixture of the parts (each interval between a part's boundaries holding an
    equal share of its values)."""
    if len(facts) == 1:
        return facts[0].quantiles or ()
    points, weights = [], []
    for f in facts:
        q = np.asarray(f.quantiles or (), np.float64)
        if len(q) < 2:
            continue
        points.append((q[1:] + q[:-1]) / 2)
        weights.append(np.full(len(q) - 1, (f.finite or 0) / (len(q) - 1)))
    x, w = np.concatenate(points), np.concatenate(weights)
    order = np.argsort(x, kind="stable")
    x, cumulative = x[order], np.cumsum(w[order])
    grid = np.linspace(0.0, cumulative[-1], QUANTILES + 1)
    picked = x[np.minimum(np.searchsorted(cumulative, grid), len(x) - 1)]
    picked[0] = min(f.min for f in facts if f.min is not None)
    picked[-1] = max(f.max for f in facts if f.max is not None)
    return tuple(float(v) for v in picked)


def _classes(
    manifest: Manifest, parts: list[Facts], split: str
) -> tuple[tuple[str | int, ...] | None, str | None]:
    """The label's classes (None: a regression, or no label) and the task its values suggest
    when that is not its own."""
    if manifest.label is None:
        return None, None
    feature = manifest.features[manifest.label]
    suggested = next((p.label.suggested for p in parts if p.label and p.label.suggested), None)
    if feature.values is not None:
        return tuple(feature.values), None
    if feature.type not in STRINGS:
        return None, suggested
    values: set[str] = set()
    for p in parts:
        found = p.feature(split, manifest.label)
        if found is not None:
            values.update(v for v, c in zip(found.vocabulary or (), found.counts or ()) if c)
    return tuple(sorted(values)), None


def task_of(facts: DatasetFacts) -> str | None:
    """The label's task: a classification when it has classes; None without a label."""
    if facts.label is None:
        return None
    return CLASSIFICATION if facts.classes is not None else REGRESSION


# --- from statistics.json (a dataset without facts) -----------------------------------------


def _of_statistics(manifest: Manifest, split: str, statistics: Statistics | None) -> DatasetFacts:
    vocabularies: dict[str, tuple[str, ...]] = {}
    counts: dict[str, tuple[int, ...]] = {}
    moments = {}
    for name, feature in manifest.features.items():
        stats = _stats(statistics, split, name)
        if feature.type in STRINGS and name != manifest.label:
            _add_vocabulary(name, feature, _listed(stats), vocabularies, counts)
        elif feature.type in NUMBERS and stats is not None and stats.mean is not None:
            moments[name] = MeanStd(float(stats.mean), float(stats.std) if stats.std else 1.0)
    classes = None
    if manifest.label is not None:
        feature = manifest.features[manifest.label]
        stats = _stats(statistics, split, manifest.label)
        if feature.values is not None:
            classes = tuple(feature.values)
        elif feature.type in STRINGS and stats is not None and stats.counts is not None:
            classes = tuple(sorted(str(c.value) for c in stats.counts))
    return DatasetFacts(
        split=split,
        features=manifest.features,
        label=manifest.label,
        classes=classes,
        vocabularies=vocabularies,
        value_counts=counts,
        number_moments=moments,
        number_quantiles={},
        from_facts=False,
    )


def _listed(stats: FeatureStatistics | None) -> dict[str, int]:
    if stats is None:
        return {}
    listed = stats.counts if stats.counts is not None else stats.top or ()
    ranked = sorted(listed, key=lambda c: (-c.count, str(c.value)))
    return {str(c.value): c.count for c in ranked}


def _stats(stats: Statistics | None, split: str, name: str) -> FeatureStatistics | None:
    return None if stats is None else stats.feature(split, name)
