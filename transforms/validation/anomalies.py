"""Anomalies of a dataset's statistics against a schema, a baseline dataset and its own train
split, as TFDV's `validate_statistics` (TFX's ExampleValidator) finds them.

`find_anomalies(statistics, schema, thresholds, baseline)` reads statistics.json as
`Statistics` (`transforms.contract.statistics`) and a `tensorflow_metadata` `Schema`, and returns
`Anomaly` records, one per feature, split and finding, sorted by feature, split and kind (then
measure):

- `feature_missing`: a feature the schema requires (`presence.min_count` or
  `presence.min_fraction` above 0; not deprecated) is not in a split's statistics, or fewer
  records than `presence.min_count` hold a value (TFDV: "Column dropped");
- `feature_new`: a feature of the statistics that the schema does not have ("New column");
- `type_mismatch`: the statistics' type is not the schema's (`int` → INT, `float` → FLOAT,
  `string`, `bytes`, `image` → BYTES); the feature's other checks are skipped then;
- `missing_rate`: more records miss a value than the limit allows: `Thresholds` for the feature,
  else the schema's `presence.min_fraction` (at most 1 - min_fraction missing), else the
  default of `Thresholds` ("Column dropped");
- `out_of_domain`: string values outside the string domain (`string_domain`, or `domain` naming
  one of the schema's `string_domain`s), their share of the values above
  1 - `distribution_constraints.min_domain_mass` (any value when it is not set), with the values
  and their exact counts ("Unexpected string values");
- `out_of_range`: a minimum below `int_domain`/`float_domain.min` or a maximum above its max,
  one anomaly each ("Out-of-range values");
- `drift`: a split against the same split of `baseline` (a previous dataset): L-infinity
  distance of string value counts, Jensen-Shannon divergence of number histograms ("High Linfty
  distance between current and previous", "High approximate Jensen-Shannon divergence ...");
- `skew`: each split but `train` against `train`, with the same measures ("... between training
  and serving");
- `rejected_rate`: more than MAX_REJECTED_RATE of the records read were rejected
  (`rejected_anomaly`, from the manifest's counts: no feature, no split; not in TFDV, whose
  input holds no rejected records).

Distribution thresholds come, for each feature, from `Thresholds.features`, else from the
schema's `drift_comparator` / `skew_comparator` (`infinity_norm`, `jensen_shannon_divergence`),
else from the `Thresholds` defaults, which are None: as in TFDV, distributions are compared only
where a threshold is set. A value above its threshold is an anomaly. Distributions are compared
for the schema's features only, and only where both sides hold values (a split without any is
a missing-rate matter). String value counts are exact where statistics.json lists them all
(`counts`, or a complete `top`); otherwise only the top values are known (TFDV compares its top
values too), and the anomaly says `approximate`. A split without records has nothing to check.

Pure Python: no Beam, no TensorFlow.

Longer than most modules because it is the one list of checks behind `find_anomalies`: each kind
with the limit it takes (the feature's, the schema's or the default) and its TFDV wording, in
one pass over features and splits; the distances are `transforms.validation.measures`.
"""

from __future__ import annotations

import dataclasses
import math
import types
from typing import Any, Mapping

from tensorflow_metadata.proto.v0 import schema_pb2

from transforms.contract.config import ANOMALY_KINDS
from transforms.contract.config import DEFAULT_BLOCKING as CONTRACT_BLOCKING
from transforms.contract.statistics import FeatureStatistics, Statistics
from transforms.validation.measures import (
    jensen_shannon_divergence,
    jensen_shannon_points,
    linf_distance,
)

KINDS = ANOMALY_KINDS
# The kinds that break a rule the schema states; distribution changes and new features are
# reported without failing a run unless named in `Thresholds.blocking`.
DEFAULT_BLOCKING = frozenset(CONTRACT_BLOCKING)
TRAIN = "train"  # the split the others are compared with for skew
MAX_EXAMPLES = 20  # out-of-domain values listed in an anomaly
# Rejecting more than this share of the records read is worth a look even where the run's limit
# (output.max_rejected_fraction, by default 0.5) lets it publish.
MAX_REJECTED_RATE = 0.1

_SCHEMA_TYPES = {
    "int": "INT",
    "float": "FLOAT",
    "string": "BYTES",
    "bytes": "BYTES",
    "image": "BYTES",
}
_DEPRECATED_STAGES = {
    schema_pb2.PLANNED,
    schema_pb2.ALPHA,
    schema_pb2.DEPRECATED,
    schema_pb2.DEBUG_ONLY,
    schema_pb2.DISABLED,
}
_MEASURED = ("max_missing_rate", "drift_linf", "drift_js", "skew_linf", "skew_js")


@dataclasses.dataclass(frozen=True)
class FeatureThresholds:
    """The limits of one feature; None takes the schema's rule, else the default (`Thresholds`).
    `math.inf` turns a check off for the feature."""

    max_missing_rate: float | None = None
    drift_linf: float | None = None
    drift_js: float | None = None
    skew_linf: float | None = None
    skew_js: float | None = None


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Limits of the checks, as defaults and per feature, and the kinds of anomaly that fail a
    run (`blocking`).

    `max_missing_rate`: the largest share of records without a value (default None: the
    schema's `presence` is the rule). `drift_linf`, `skew_linf`: the largest L-infinity distance
    of a string feature's value shares; `drift_js`, `skew_js`: the largest Jensen-Shannon
    divergence (base 2, in [0, 1]) of a number feature's histograms; None: not checked unless
    the schema's comparator sets one, as in TFDV (which checks no distribution by default).
    `blocking` defaults to the kinds that break a rule of the schema (`DEFAULT_BLOCKING`); TFDV
    rates every anomaly an error: name every kind in `KINDS` to do the same.
    """

    max_missing_rate: float | None = None
    drift_linf: float | None = None
    drift_js: float | None = None
    skew_linf: float | None = None
    skew_js: float | None = None
    features: Mapping[str, FeatureThresholds] = dataclasses.field(default_factory=dict, hash=False)
    blocking: frozenset[str] = DEFAULT_BLOCKING

    def __post_init__(self) -> None:
        _check_limits("thresholds", self)
        for name, limits in self.features.items():
            if not isinstance(limits, FeatureThresholds):
                raise ValueError(f"thresholds.features[{name!r}]: not a FeatureThresholds")
            _check_limits(f"thresholds.features[{name!r}]", limits)
        unknown = sorted(set(self.blocking) - set(KINDS))
        if unknown:
            raise ValueError(f"thresholds.blocking: unknown kinds {unknown}; kinds are {KINDS}")
        object.__setattr__(self, "blocking", frozenset(self.blocking))
        object.__setattr__(self, "features", types.MappingProxyType(dict(self.features)))

    def feature(self, name: str, limit: str) -> float | None:
        """The feature's own limit, or None (then the schema's, else `default(limit)`)."""
        own = self.features.get(name)
        return getattr(own, limit) if own is not None else None

    def default(self, limit: str) -> float | None:
        return getattr(self, limit)


def _check_limits(where: str, limits: FeatureThresholds | Thresholds) -> None:
    for limit in _MEASURED:
        value = getattr(limits, limit)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise ValueError(f"{where}.{limit}: not a number: {value!r}")
        if value < 0:
            raise ValueError(f"{where}.{limit}: must be at least 0, got {value}")


@dataclasses.dataclass(frozen=True)
class Anomaly:
    """One finding: which feature in which split, what kind, the measure with its value and
    threshold, whether it fails a run, and a one-line description that opens with TFDV's short
    description of the anomaly.

    `value` and `threshold` are numbers (a missing rate, a distance, a min or max), or for
    `type_mismatch` the statistics' type and the schema's, or None (a missing or new feature).
    `examples` lists out-of-domain values with their counts (largest first, at most
    MAX_EXAMPLES); `at_value` is the value where an L-infinity distance is reached;
    `approximate` marks findings made from the top values only.
    """

    feature: str
    split: str
    kind: str
    measure: str | None
    value: float | int | str | None
    threshold: float | int | str | None
    blocking: bool
    description: str
    examples: tuple[tuple[str, int], ...] = ()
    at_value: str | None = None
    approximate: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"anomaly kind {self.kind!r} is not one of {KINDS}")

    def to_dict(self) -> dict[str, Any]:
        """The anomaly as a JSON-able dict (examples as `{"value", "count"}` objects)."""
        out = dataclasses.asdict(self)
        out["examples"] = [{"value": v, "count": c} for v, c in self.examples]
        return out

    def sort_key(self) -> tuple:
        return (self.feature, self.split, KINDS.index(self.kind), self.measure or "")


def find_anomalies(
    statistics: Statistics,
    schema: schema_pb2.Schema,
    thresholds: Thresholds | None = None,
    baseline: Statistics | None = None,
) -> list[Anomaly]:
    """The anomalies of `statistics` (a dataset's statistics.json) against `schema`, against the
    same splits of `baseline` (drift) and of each split against train (skew), sorted by feature,
    split, kind and measure. See the module docstring for each kind."""
    thresholds = thresholds or Thresholds()
    features = {f.name: f for f in schema.feature}
    domains = {d.name: d for d in schema.string_domain}
    splits = statistics.splits
    previous = baseline.splits if baseline is not None else {}
    found: list[Anomaly] = []

    def add(feature, split, kind, description, measure=None, value=None, threshold=None, **more):
        blocking = kind in thresholds.blocking
        found.append(
            Anomaly(feature, split, kind, measure, value, threshold, blocking, description, **more)
        )

    for split, split_stats in splits.items():
        records = split_stats.records
        if not records:  # an empty split: nothing to check
            continue
        stats = split_stats.features
        for name in sorted(set(stats) - set(features)):
            add(name, split, "feature_new", "New column: column in data but not in schema")
        for name, feature in features.items():
            if _deprecated(feature):
                continue
            if name not in stats:
                if _required(feature):
                    missing = "Column dropped: column is completely missing (in the schema only)"
                    add(name, split, "feature_missing", missing)
                continue
            mine = stats[name]
            if not _presence(add, name, split, feature, mine, records, thresholds):
                continue
            expected = schema_pb2.FeatureType.Name(feature.type)
            if feature.type != schema_pb2.TYPE_UNKNOWN and _SCHEMA_TYPES.get(mine.type) != expected:
                got = f"{_SCHEMA_TYPES.get(mine.type, mine.type)} ({mine.type})"
                message = f"Expected data of type: {expected} but got {got}"
                add(name, split, "type_mismatch", message, "type", mine.type, expected)
                continue
            _domain(add, name, split, feature, domains, mine)
            _range(add, name, split, feature, mine)
            if split in previous:
                control = previous[split].features.get(name)
                _compare(add, name, split, "drift", feature, mine, control, thresholds)
            if split != TRAIN and TRAIN in splits:
                control = splits[TRAIN].features.get(name)
                _compare(add, name, split, "skew", feature, mine, control, thresholds)
    return sorted(found, key=Anomaly.sort_key)


def rejected_anomaly(
    read: int, reasons: Mapping[str, int], thresholds: Thresholds | None = None
) -> Anomaly | None:
    """The `rejected_rate` anomaly of a run that read `read` records and rejected these
    (records per reason), when more than MAX_REJECTED_RATE of them were rejected; else None.
    It names no feature and no split (""), and the three most frequent reasons."""
    rejected = sum(reasons.values())
    rate = rejected / read if read else 0.0
    if rate <= MAX_REJECTED_RATE:
        return None
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))[:3]
    top = ", ".join(f"{reason!r} ({n})" for reason, n in ranked)
    message = (
        f"Rejected records: {rejected} of {read} records read were rejected "
        f"({rate:.6g} > {MAX_REJECTED_RATE:g}); most often: {top}"
    )
    blocking = "rejected_rate" in (thresholds or Thresholds()).blocking
    return Anomaly(
        "", "", "rejected_rate", "rejected_rate", rate, MAX_REJECTED_RATE, blocking, message
    )


def _deprecated(feature: schema_pb2.Feature) -> bool:
    return feature.deprecated or feature.lifecycle_stage in _DEPRECATED_STAGES


def _required(feature: schema_pb2.Feature) -> bool:
    return feature.presence.min_count > 0 or feature.presence.min_fraction > 0


def _presence(add, name, split, feature, stats, records, thresholds) -> bool:
    """Checks how many records hold a value; False when none does where some must (the
    feature's other checks have nothing to look at then)."""
    missing = stats.missing
    present = records - missing
    min_count = feature.presence.min_count
    if present < min_count:
        message = (
            f"Column dropped: the feature was present in {present} examples, "
            f"fewer than expected ({min_count})"
        )
        add(name, split, "feature_missing", message, "present_count", present, min_count)
        return False
    limit = thresholds.feature(name, "max_missing_rate")
    if limit is None and feature.presence.HasField("min_fraction"):
        limit = round(1.0 - feature.presence.min_fraction, 12)
    if limit is None:
        limit = thresholds.default("max_missing_rate")
    rate = missing / records
    if limit is not None and rate > limit:
        message = (
            f"Column dropped: the feature was present in fewer examples than expected "
            f"(missing in {missing} of {records} records, {rate:.6g} > {limit:.6g})"
        )
        add(name, split, "missing_rate", message, "missing_rate", rate, limit)
    return True


def _domain(add, name, split, feature, domains, stats) -> None:
    if not stats.is_text:
        return
    if feature.HasField("string_domain"):
        allowed = set(feature.string_domain.value)
    elif feature.HasField("domain") and feature.domain in domains:
        allowed = set(domains[feature.domain].value)
    else:
        return
    counts, complete = _value_counts(stats)
    outside = sorted(
        ((v, c) for v, c in counts.items() if v not in allowed and c > 0),
        key=lambda item: (-item[1], item[0]),
    )
    total = stats.values
    if not outside or not total:
        return
    mass = feature.distribution_constraints.min_domain_mass
    limit = 1.0 - mass if feature.distribution_constraints.HasField("min_domain_mass") else 0.0
    share = sum(c for _, c in outside) / total
    if share <= limit:
        return
    listed = ", ".join(f"{v!r} ({_percent(c, total)})" for v, c in outside[:MAX_EXAMPLES])
    more = f" and {len(outside) - MAX_EXAMPLES} more" if len(outside) > MAX_EXAMPLES else ""
    note = "" if complete else " (approximate: only the top values are known)"
    message = (
        f"Unexpected string values: examples contain values missing from the schema: "
        f"{listed}{more}{note}"
    )
    add(name, split, "out_of_domain", message, "out_of_domain_rate", share, limit,
        examples=tuple(outside[:MAX_EXAMPLES]), approximate=not complete)  # fmt: skip


def _percent(count: int, total: int) -> str:
    """TFDV's share of a value: `<1%`, else `~N%` with N rounded down."""
    percent = 100 * count / total
    return "<1%" if percent < 1 else f"~{math.floor(percent)}%"


def _value_counts(stats: FeatureStatistics) -> tuple[dict[str, int], bool]:
    """A string feature's value counts, and whether they are all of its values."""
    counts = stats.count_of()
    if counts is not None:
        return counts, True
    top = stats.top or ()
    complete = bool(stats.distinct_exact) and stats.distinct == len(top)
    return {t.value: t.count for t in top}, complete


def _range(add, name, split, feature, stats) -> None:
    if not stats.is_number or stats.min is None:
        return
    if feature.HasField("int_domain"):
        domain, small, large = feature.int_domain, "small", "large"
    elif feature.HasField("float_domain"):
        domain, small, large = feature.float_domain, "low", "high"
    else:
        return
    for bound, word in (("min", small), ("max", large)):
        if not domain.HasField(bound):
            continue
        value, limit = getattr(stats, bound), getattr(domain, bound)
        if (value < limit) if bound == "min" else (value > limit):
            message = (
                f"Out-of-range values: unexpectedly {word} value: {_number(value)} "
                f"(the schema's {bound} is {_number(limit)})"
            )
            add(name, split, "out_of_range", message, bound, value, limit)


def _number(x: float | int) -> str:
    return str(x) if isinstance(x, int) else f"{x:.7g}"


def _compare(add, name, split, kind, feature, stats, control, thresholds) -> None:
    """Drift (against the baseline's split) or skew (against train) of one feature."""
    if control is None or control.type != stats.type:
        return
    if not stats.values or not control.values:
        return
    comparator = feature.drift_comparator if kind == "drift" else feature.skew_comparator
    between = (
        f"current and previous ({split} against the baseline's {split})"
        if kind == "drift"
        else f"training and serving ({split} against {TRAIN})"
    )
    if stats.is_text:
        limit = _limit(thresholds, name, f"{kind}_linf", comparator, "infinity_norm")
        if limit is None:
            return
        counts, complete = _value_counts(stats)
        reference, reference_complete = _value_counts(control)
        if complete and reference_complete:
            distance, at = linf_distance(counts, reference)
        else:  # a value left out of one side's top values is not a share of 0 there
            distance, at = _shared_linf(counts, reference, stats.values, control.values)
        if distance > limit:
            note = "" if complete and reference_complete else "; approximate: top values only"
            message = (
                f"High Linfty distance between {between}: {distance:.6g}, above the threshold "
                f"{limit:.6g}; the feature value with maximum difference is: {at!r}{note}"
            )
            add(name, split, kind, message, "l_infinity", distance, limit,
                at_value=at, approximate=not (complete and reference_complete))  # fmt: skip
    elif stats.is_number:
        limit = _limit(thresholds, name, f"{kind}_js", comparator, "jensen_shannon_divergence")
        if limit is None:
            return
        if not stats.histogram or not control.histogram:
            return  # values, but no finite one (all infinite): nothing to compare
        if stats.counts is not None and control.counts is not None:  # few values: exact masses
            divergence = jensen_shannon_points(_number_counts(stats), _number_counts(control))
        else:
            divergence = jensen_shannon_divergence(stats.histogram, control.histogram)
        if divergence > limit:
            message = (
                f"High approximate Jensen-Shannon divergence between {between}: "
                f"{divergence:.6g}, above the threshold {limit:.6g}"
            )
            add(name, split, kind, message, "jensen_shannon", divergence, limit)


def _number_counts(stats: FeatureStatistics) -> dict[float, int]:
    return {float(c.value): c.count for c in stats.counts or ()}


def _shared_linf(
    a: Mapping[str, int], b: Mapping[str, int], total_a: int, total_b: int
) -> tuple[float, str | None]:
    """The L-infinity distance over the values both sides list, each count a share of its
    side's values: where a side lists only its top values, a value it leaves out has an
    unknown share, not 0. Ties go to the largest value, as in `linf_distance`."""
    best, at = 0.0, None
    for value in sorted(set(a) & set(b)):
        distance = abs(a[value] / total_a - b[value] / total_b)
        if distance > 0 and distance >= best:
            best, at = distance, value
    return best, at


def _limit(thresholds, name, limit, comparator, field) -> float | None:
    own = thresholds.feature(name, limit)
    if own is not None:
        return own
    measure = getattr(comparator, field)
    if measure.HasField("threshold"):
        return measure.threshold
    return thresholds.default(limit)
