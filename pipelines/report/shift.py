"""Which splits look unlike train: a few simple rules on statistics.json, flagged in the run report.

Each feature of each split other than the first (train) is compared with the same feature in
train; a rule that fires gives a `Shift`, a short sentence the report shows in the feature's
card and counts in the page's warning banner:

- `missing`: the share of records without a value differs by more than `MISSING_GAP` (10
  percentage points);
- `mean`: a number's mean lies more than `MEAN_SHIFT_STD` (0.5) of train's standard deviation
  away from train's mean (any difference when train's values are all equal);
- `absent`: a string value is absent from one split although its share of the other split's
  values predicts at least `MIN_EXPECTED` (5) occurrences in it (checked only where the absent
  side's statistics list every one of its values: no more distinct values than its `top` lists,
  20 at most, counted exactly);
- `share`: a string value's share of the values differs by more than `SHARE_GAP` (20 percentage
  points).

Shares are of a split's values (`values`, the records with a value for a one-value feature).
These are rules of thumb for a reader's eye, not statistical tests: a split of a few records can
fire them by chance, and a drift they do not describe passes them.
"""

from __future__ import annotations

import dataclasses

from transforms.contract.statistics import FeatureStatistics

MISSING_GAP = 0.10
MEAN_SHIFT_STD = 0.5
MIN_EXPECTED = 5
SHARE_GAP = 0.20


@dataclasses.dataclass(frozen=True)
class Shift:
    """A rule that fired: `split`'s `feature` differs from train's, as `text` says."""

    split: str
    feature: str
    rule: str  # missing, mean, absent or share
    text: str
    train: str = "train"  # the split compared with


def value_counts(stats: FeatureStatistics) -> tuple[dict[str, int], bool]:
    """A string feature's counted values ({value: count}, of its `top`) and whether they are all
    of its values (exact, and no more distinct values than the statistics list)."""
    counts = {str(t.value): t.count for t in stats.top or ()}
    distinct = stats.distinct
    exact = stats.distinct_exact is not False
    return counts, exact and distinct is not None and distinct <= len(counts)


def shifts(
    feature: str,
    train: FeatureStatistics,
    split: str,
    other: FeatureStatistics,
    train_name: str = "train",
) -> list[Shift]:
    """The rules that fire for `feature` of `split` (its statistics `other`) against train's
    (`train`, of the split `train_name`)."""
    found = []
    a, b = train.missing_rate, other.missing_rate
    if abs(b - a) > MISSING_GAP:
        found.append(
            Shift(
                split,
                feature,
                "missing",
                f"{_pct(b)} of its records have no value, {_pct(a)} in {train_name}",
            )
        )
    if train.is_number:
        found += _mean_shift(feature, train, split, other, train_name)
    elif train.is_text:
        found += _value_shifts(feature, train, split, other, train_name)
    return [dataclasses.replace(f, train=train_name) for f in found]


def _mean_shift(
    feature: str,
    train: FeatureStatistics,
    split: str,
    other: FeatureStatistics,
    train_name: str,
) -> list[Shift]:
    mean_a, std, mean_b = train.mean, train.std, other.mean
    if mean_a is None or mean_b is None or std is None:
        return []
    gap = abs(mean_b - mean_a)
    if (gap > MEAN_SHIFT_STD * std) if std > 0 else (gap > 0):
        how = f"{gap / std:.1f} std" if std > 0 else "any"
        return [
            Shift(
                split,
                feature,
                "mean",
                f"mean {_num(mean_b)}, {how} from {train_name}'s {_num(mean_a)} (std {_num(std)})",
            )
        ]
    return []


def _value_shifts(
    feature: str,
    train: FeatureStatistics,
    split: str,
    other: FeatureStatistics,
    train_name: str,
) -> list[Shift]:
    counts_a, complete_a = value_counts(train)
    counts_b, complete_b = value_counts(other)
    values_a, values_b = train.values, other.values
    if not values_a or not values_b:
        return []  # a split without values: the missing rule tells
    found = []
    for value in [*counts_a, *(v for v in counts_b if v not in counts_a)]:
        share_a = counts_a[value] / values_a if value in counts_a else (0.0 if complete_a else None)
        share_b = counts_b[value] / values_b if value in counts_b else (0.0 if complete_b else None)
        shown = _quoted(value)
        if share_b == 0.0 and share_a is not None and share_a * values_b >= MIN_EXPECTED:
            found.append(
                Shift(
                    split,
                    feature,
                    "absent",
                    f"{shown} is absent, {_pct(share_a)} of {train_name}'s values",
                )
            )
        elif share_a == 0.0 and share_b is not None and share_b * values_a >= MIN_EXPECTED:
            found.append(
                Shift(
                    split,
                    feature,
                    "absent",
                    f"{shown} is {_pct(share_b)} of its values, absent from {train_name}",
                )
            )
        elif share_a is not None and share_b is not None and abs(share_b - share_a) > SHARE_GAP:
            found.append(
                Shift(
                    split,
                    feature,
                    "share",
                    f"{shown} is {_pct(share_b)} of its values, {_pct(share_a)} in {train_name}",
                )
            )
    return found


def _quoted(value: str, limit: int = 40) -> str:
    shown = value if len(value) <= limit else value[: limit - 1] + "…"
    return f'"{shown}"'


def _pct(share: float) -> str:
    return f"{100 * share:.1f} %"


def _num(value: float) -> str:
    return f"{value:.4g}"
