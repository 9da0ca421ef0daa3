"""Per-split, per-feature statistics of the records an ETL run writes (`statistics.json`).

Computed column-wise on the validated columns of each chunk (every feature is a list column:
`list<int64|float32|binary>`, an empty list where a record has no value), as partial statistics
that merge by addition, so any runner can combine them in any order:

- every feature: records, records without a value (`missing`), values (list features hold
  several per record);
- numbers: min, max, mean and standard deviation (from exact sums of the values and their
  squares, so that the merge order cannot change a digit), and a histogram: of equal-width bars
  from exact value counts while a feature has at most `NUMBER_DISTINCT` distinct values, else
  on buckets of `asinh(x)` of width 1/8 (about 12% of a value wide: fine near zero,
  logarithmic far from it; mergeable without knowing the range in advance), with at most
  `HISTOGRAM_BARS` bars;
- strings: exact counts of the distinct values with the `MAX_DISTINCT` smallest 64-bit XXH3
  hashes (`ValueSample`): every value while a feature has at most that many in a split;
  beyond, a uniform sample of its distinct values, from which the distinct count is estimated
  (`distinct_exact` is false) and the top values are taken. Which values are kept depends only
  on the values, so samples merge in any order and grouping to the same result. While a feature
  has at most `COUNTED_VALUES` distinct values in a split (of at most `COUNTED_BYTES` in all),
  every value's count is written (`counts`: what data validation compares, value by value).
  And lengths; a value longer than `MAX_VALUE_BYTES` bytes is kept as its start, its length
  and a digest (`clip_value`), so that statistics.json and the report stay small whatever the
  data;
- bytes and images: sizes.

The statistics describe the records validated into each split, before the writer drops the
later duplicates of a key (the manifest counts those).

Longer than most modules because statistics.json is made here whole: each statistic's partial
form, its merge and its result stand together, so that what a chunk computes and what a merge
adds (exact sums, value samples, asinh buckets) stay one definition.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from fractions import Fraction
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from xxhash import xxh3_64_intdigest

from transforms.contract.statistics import (
    Bar,
    FeatureStatistics,
    Sizes,
    SplitStatistics,
    Statistics,
    ValueCount,
)

MAX_DISTINCT = 10_000  # strings: values counted per feature and split (a sample beyond)
NUMBER_DISTINCT = 1_000  # numbers: exact counts (even histograms) up to this many values
TOP_VALUES = 20
POINT_VALUES = 100  # numbers: every value's count is written up to this many distinct values
COUNTED_VALUES = 1_000  # strings: every value's count is written up to this many distinct values
COUNTED_BYTES = 100_000  # ... whose text (as kept) is at most this long in all
MAX_VALUE_BYTES = 200  # of a string value, as the statistics keep it
HISTOGRAM_BARS = 20
_BUCKETS_PER_UNIT = 8  # buckets per unit of asinh(x)
_UNIT_BITS = 1126  # exact sums count 2**-1126: every float64 (and its square's parts) is a multiple
_NUMBER_TYPES = ("int", "float")
_TEXT_TYPES = ("string",)


@dataclasses.dataclass
class FeatureStats:
    """Mergeable statistics of one feature in one split."""

    type: str
    records: int = 0
    missing: int = 0
    values: int = 0
    # numbers (finite values only)
    low: float | None = None
    high: float | None = None
    total: int = 0  # exact sum of the values, in units of 2**-_UNIT_BITS
    total_sq: int = 0  # exact sum of their squares, in the same units
    buckets: dict[int, int] = dataclasses.field(default_factory=dict)
    counts: dict[float, int] = dataclasses.field(default_factory=dict)  # numbers, while few
    truncated: bool = False
    sample: ValueSample | None = None  # strings
    # bytes and images: sizes (strings: lengths)
    size_low: int | None = None
    size_high: int | None = None
    size_total: int = 0

    def merge(self, other: FeatureStats) -> None:
        if other.low is not None:
            assert other.high is not None  # low and high are set together
            self.low = other.low if self.low is None else min(self.low, other.low)
            self.high = other.high if self.high is None else max(self.high, other.high)
        self.total += other.total
        self.total_sq += other.total_sq
        if self.type in _NUMBER_TYPES:  # exact value counts while there are few values
            self.truncated |= other.truncated
            _add(self.counts, other.counts)
            if self.truncated or len(self.counts) > NUMBER_DISTINCT:
                self.counts, self.truncated = {}, True
        self.records += other.records
        self.missing += other.missing
        self.values += other.values
        _add(self.buckets, other.buckets)
        if other.sample is not None:
            self.sample = other.sample if self.sample is None else self.sample.merge(other.sample)
        if other.size_low is not None:
            self.size_low = (
                other.size_low if self.size_low is None else min(self.size_low, other.size_low)
            )
            self.size_high = max(self.size_high or 0, other.size_high or 0)
        self.size_total += other.size_total

    def _finite(self) -> int:
        return sum(self.buckets.values())

    def result(self) -> FeatureStatistics:
        """The statistics as statistics.json holds them (`transforms.contract.statistics`)."""
        common = FeatureStatistics(
            type=self.type,
            records=self.records,
            missing=self.missing,
            missing_rate=round(self.missing / self.records, 6) if self.records else 0.0,
            values=self.values,
        )
        if self.type in _NUMBER_TYPES:
            n = self._finite()
            cast = int if self.type == "int" else float
            unit = 1 << _UNIT_BITS
            variance = (
                Fraction(self.total_sq * n * unit - self.total * self.total, n * n * unit * unit)
                if n
                else None
            )
            counted = bool(self.counts) and not self.truncated
            bars = (
                even_histogram(self.counts, self.low, self.high)
                if counted and self.low is not None and self.high is not None
                else histogram(self.buckets, self.low, self.high)
            )
            return dataclasses.replace(
                common,
                min=cast(self.low) if self.low is not None else None,
                max=cast(self.high) if self.high is not None else None,
                mean=float(Fraction(self.total, n * unit)) if n else None,
                std=math.sqrt(max(float(variance), 0.0)) if variance is not None else None,
                histogram=tuple(Bar(b["low"], b["high"], b["count"]) for b in bars),
                distinct=len(self.counts) if counted else None,
                counts=(
                    tuple(ValueCount(cast(v), c) for v, c in sorted(self.counts.items()))
                    if counted and len(self.counts) <= POINT_VALUES  # exact masses (drift, skew)
                    else None
                ),
            )
        if self.type in _TEXT_TYPES:
            sample = self.sample or ValueSample.empty()
            counted = (
                not sample.dropped
                and len(sample.hashes) <= COUNTED_VALUES
                and (pc.sum(pc.binary_length(sample.words)).as_py() or 0) <= COUNTED_BYTES
            )
            ranked = tuple(
                ValueCount(v, c) for v, c in sample.top(COUNTED_VALUES if counted else TOP_VALUES)
            )
            return dataclasses.replace(
                common,
                distinct=sample.distinct(),
                distinct_exact=not sample.dropped,
                top=ranked[:TOP_VALUES],
                length=self._sizes(),
                counts=ranked if counted else None,
            )
        return dataclasses.replace(common, size=self._sizes())

    def to_json(self) -> dict[str, Any]:
        return self.result().to_json()

    def _sizes(self) -> Sizes:
        if self.size_low is None:
            return Sizes()
        return Sizes(
            self.size_low, self.size_high, self.size_total / self.values if self.values else None
        )


def _add(into: dict, other: dict) -> None:
    for key, count in other.items():
        into[key] = into.get(key, 0) + count


@dataclasses.dataclass
class ValueSample:
    """Exact counts of the distinct values of a string feature that have the MAX_DISTINCT
    smallest 64-bit XXH3 hashes (of their bytes): all its values while it has at most that many,
    a uniform sample of its distinct values beyond (`dropped`).

    Which values are kept depends only on the set of values counted, never on their order or on
    how they were grouped: a kept value's hash is among the smallest of every part it occurs
    in, so every part kept it and its count is exact. Merging two samples gives the sample of
    all their values. Beyond MAX_DISTINCT values, the distinct count is estimated from the
    largest kept hash (k minimum values: (k - 1) / its place in the hash range, about 1% off at
    k = 10,000).
    """

    hashes: np.ndarray  # uint64, ascending, distinct
    counts: np.ndarray  # int64
    words: pa.Array  # string: the values as the statistics keep them (`clip_value`)
    dropped: bool = False  # values with larger hashes were left out

    @classmethod
    def empty(cls) -> ValueSample:
        return cls(np.zeros(0, np.uint64), np.zeros(0, np.int64), pa.array([], pa.string()))

    @classmethod
    def of(
        cls, hashes: np.ndarray, counts: np.ndarray, words: pa.Array, dropped: bool = False
    ) -> ValueSample:
        """The sample of values given in any order, a value possibly several times (its counts
        are added; equal hashes are taken for equal values)."""
        order = np.argsort(hashes, kind="stable")
        hashes = hashes[order]
        starts = np.flatnonzero(np.concatenate(([True], hashes[1:] != hashes[:-1])))
        counts = np.add.reduceat(counts[order], starts) if len(starts) else counts[order]
        rows = order[starts][:MAX_DISTINCT]
        dropped = dropped or len(starts) > MAX_DISTINCT
        return cls(hashes[starts][:MAX_DISTINCT], counts[:MAX_DISTINCT], words.take(rows), dropped)

    def merge(self, other: ValueSample) -> ValueSample:
        parts = [self._below(other), other._below(self)]
        left_out = len(parts[0].hashes) + len(parts[1].hashes) < len(self.hashes) + len(
            other.hashes
        )
        return ValueSample.of(
            np.concatenate([p.hashes for p in parts]),
            np.concatenate([p.counts for p in parts]),
            pa.concat_arrays([p.words for p in parts]),
            self.dropped or other.dropped or left_out,
        )

    def _below(self, other: ValueSample) -> ValueSample:
        """The values of this sample that can be among the smallest hashes of both: none above
        the largest hash of a full other sample."""
        if len(other.hashes) < MAX_DISTINCT:
            return self
        keep = np.flatnonzero(self.hashes <= other.hashes[-1])
        return ValueSample(self.hashes[keep], self.counts[keep], self.words.take(keep))

    def distinct(self) -> int:
        """The number of distinct values: exact, or estimated when values were dropped."""
        k = len(self.hashes)
        if not self.dropped:
            return k
        estimate = (k - 1) * 2.0**64 / (float(self.hashes[-1]) + 1.0)
        return max(round(estimate), k + 1)

    def top(self, n: int) -> list[tuple[str, int]]:
        """The n most frequent values of the sample, by count then value, with their counts."""
        table = pa.table({"count": self.counts, "word": self.words})
        order = pc.sort_indices(table, sort_keys=[("count", "descending"), ("word", "ascending")])
        top = table.take(order[:n])
        return list(zip(top.column("word").to_pylist(), top.column("count").to_pylist()))

    def nbytes(self) -> int:
        return self.hashes.nbytes + self.counts.nbytes + self.words.nbytes


@dataclasses.dataclass
class DatasetStats:
    """Statistics of every split: split index → feature name → FeatureStats, plus records."""

    splits: dict[int, dict[str, FeatureStats]] = dataclasses.field(default_factory=dict)
    records: dict[int, int] = dataclasses.field(default_factory=dict)

    def merge(self, other: DatasetStats) -> DatasetStats:
        for split, features in other.splits.items():
            mine = self.splits.setdefault(split, {})
            for name, stats in features.items():
                if name in mine:
                    mine[name].merge(stats)
                else:
                    mine[name] = stats
        _add(self.records, other.records)
        return self

    def approx_bytes(self) -> int:
        return 1024 + sum(
            64 * (len(s.buckets) + len(s.counts)) + (s.sample.nbytes() if s.sample else 0)
            for f in self.splits.values()
            for s in f.values()
        )

    def result(self, split_names: Sequence[str]) -> Statistics:
        """The dataset's statistics.json (`transforms.contract.statistics`)."""
        return Statistics(
            splits={
                name: SplitStatistics(
                    records=self.records.get(i, 0),
                    features={f: s.result() for f, s in sorted(self.splits.get(i, {}).items())},
                )
                for i, name in enumerate(split_names)
            }
        )

    def to_json(self, split_names: Sequence[str]) -> dict[str, Any]:
        return self.result(split_names).to_json()


def chunk_stats(
    names: Sequence[str], types: Sequence[str], columns: Sequence[pa.Array], split: np.ndarray
) -> DatasetStats:
    """The statistics of one chunk's validated columns (one list array per feature), by split."""
    out = DatasetStats()
    for s in np.unique(split).tolist():
        out.records[s] = int(np.count_nonzero(split == s))
        out.splits[s] = {}
    for name, kind, column in zip(names, types, columns):
        for s, stats in feature_stats(kind, column, split).items():
            out.splits[s][name] = stats
    return out


def column_stats(kind: str, column: pa.ListArray) -> FeatureStats:
    """The statistics of one feature's list column (all in one split)."""
    return feature_stats(kind, column, np.zeros(len(column), np.int16)).get(0) or FeatureStats(kind)


def feature_stats(kind: str, column: pa.ListArray, split: np.ndarray) -> dict[int, FeatureStats]:
    """The statistics of one feature's list column in each split: the column is read once, and
    each split's values are picked out of it with numpy."""
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(column)
    value_split = np.repeat(split, lengths)
    if kind in _NUMBER_TYPES:
        values = flat.to_numpy(zero_copy_only=False)
    elif len(flat):
        sizes = pc.binary_length(flat).to_numpy(zero_copy_only=False)
        if kind in _TEXT_TYPES:
            encoded = pc.dictionary_encode(flat)
            codes = encoded.indices.to_numpy(zero_copy_only=False)
            hashes, words = _distinct_values(encoded.dictionary)
    out = {}
    for s in np.unique(split).tolist():
        rows = split == s
        counts = lengths[rows]
        stats = out[s] = FeatureStats(
            type=kind,
            records=int(np.count_nonzero(rows)),
            missing=int(np.count_nonzero(counts == 0)),
            values=int(counts.sum()),
        )
        if not stats.values:
            continue
        picked = value_split == s
        if kind in _NUMBER_TYPES:
            _number_stats(stats, kind, values[picked])
            continue
        size = sizes[picked]
        stats.size_low, stats.size_high = int(size.min()), int(size.max())
        stats.size_total = int(size.sum())
        if kind in _TEXT_TYPES:
            tally = np.bincount(codes[picked], minlength=len(words))
            present = np.flatnonzero(tally)
            stats.sample = ValueSample.of(hashes[present], tally[present], words.take(present))
    return out


def _distinct_values(values: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(64-bit XXH3 hashes, the values as the statistics keep them) of distinct string values.

    Arrow makes the bytes objects and xxhash hashes them, both in C; only values longer than
    MAX_VALUE_BYTES are cut in Python (`clip_value`)."""
    values = values.cast(pa.binary())
    data = values.to_pylist()
    hashes = np.fromiter(map(xxh3_64_intdigest, data), np.uint64, len(data))
    words = values.cast(pa.string())
    long = pc.greater(pc.binary_length(values), MAX_VALUE_BYTES)
    if pc.any(long).as_py():
        clipped = [clip_value(data[i]) for i in pc.indices_nonzero(long).to_pylist()]
        words = pc.replace_with_mask(words, long, pa.array(clipped, pa.string()))
    return hashes, words


def clip_value(value: bytes) -> str:
    """A string value as the statistics keep it: whole up to MAX_VALUE_BYTES bytes; longer, its
    first MAX_VALUE_BYTES bytes (whole characters) and `… (N bytes, sha256 HEX16)`.

    The digest keeps long values that share their start apart, so distinct counts stay exact;
    values are cut before they are counted, so the statistics never hold more of one than that.
    """
    if len(value) <= MAX_VALUE_BYTES:
        return value.decode("utf-8", errors="replace")
    start = value[:MAX_VALUE_BYTES].decode("utf-8", errors="ignore")  # drops a cut character
    digest = hashlib.sha256(value).hexdigest()[:16]
    return f"{start}… ({len(value)} bytes, sha256 {digest})"


def _number_stats(stats: FeatureStats, kind: str, values: np.ndarray) -> None:
    """Fills the number statistics of one split's values."""
    big = False
    if kind == "int":  # exact bounds: int64 beyond 2**53 does not survive float64
        stats.low, stats.high = int(values.min()), int(values.max())
        big = int(np.abs(values).max()) >= 1 << 26  # squares beyond float64's 53 bits
    ints: list[int] = values.tolist() if big else []
    values = values.astype(np.float64)
    values = values[np.isfinite(values)]
    if not len(values):
        return
    if kind != "int":
        stats.low, stats.high = float(values.min()), float(values.max())
    if big:  # summed as Python ints
        stats.total = sum(ints) << _UNIT_BITS
        stats.total_sq = sum(v * v for v in ints) << _UNIT_BITS
    else:  # float32 values and small ints: x and x*x are exact in float64
        stats.total = exact_sum(values)
        stats.total_sq = exact_sum(values * values)
    distinct, counts = np.unique(values, return_counts=True)
    if len(distinct) <= NUMBER_DISTINCT:
        cast = int if kind == "int" else float
        stats.counts = {cast(v): c for v, c in zip(distinct.tolist(), counts.tolist())}
    else:
        stats.truncated = True
    keys = _bucket(values)
    lowest = int(keys.min())
    tally = np.bincount(keys - lowest)
    stats.buckets = {lowest + k: int(tally[k]) for k in np.flatnonzero(tally).tolist()}


def exact_sum(values: np.ndarray) -> int:
    """The exact sum of float64 values, as an integer count of 2**-_UNIT_BITS.

    Sums of floats depend on the order of the additions, which depends on how a runner split
    and merged the work; these sums do not, so statistics.json is byte-identical on a rerun.
    Each value is its 53-bit integer significand times a power of two; the significands are cut
    into two halves of at most 27 bits, and the halves of each exponent are summed by
    `np.bincount` in float64, which is exact while a sum stays below 2**53 (fewer than 2**26
    values in a call); the sums per exponent are then shifted into place as Python ints.
    """
    if not len(values):
        return 0
    significands, exponents = np.frexp(values)
    scaled = significands * 2.0**53  # integers, |scaled| < 2**53
    high = np.trunc(scaled / 2.0**26)  # |high| < 2**27
    low = scaled - high * 2.0**26  # |low| < 2**26
    first = int(exponents.min())
    slot = exponents - first
    highs = np.bincount(slot, weights=high)
    lows = np.bincount(slot, weights=low)
    total = 0
    for i in np.flatnonzero((highs != 0) | (lows != 0)).tolist():
        shift = first + i - 53 + _UNIT_BITS
        total += (int(highs[i]) << (shift + 26)) + (int(lows[i]) << shift)
    return total


def _bucket(values: np.ndarray) -> np.ndarray:
    return np.floor(np.arcsinh(values) * _BUCKETS_PER_UNIT).astype(np.int64)


def even_histogram(counts: dict, low: float, high: float) -> list[dict]:
    """Bars of equal width over [low, high] from exact value counts: one per value when there
    are at most HISTOGRAM_BARS values of an int feature, else HISTOGRAM_BARS bars."""
    values = sorted(counts)
    if low == high or len(values) == 1:
        return [{"low": low, "high": high, "count": sum(counts.values())}]
    bars = min(HISTOGRAM_BARS, len(values))
    if all(isinstance(v, int) for v in values) and high - low + 1 <= HISTOGRAM_BARS:
        bars = int(high - low + 1)  # one bar per integer
        width: float = 1
        edges = [low + i for i in range(bars + 1)]
    else:
        width = (high - low) / bars
        edges = [low + i * width for i in range(bars)] + [high]
    totals = [0] * bars
    for v in values:
        totals[min(int((v - low) / width), bars - 1)] += counts[v]
    return [{"low": edges[i], "high": edges[i + 1], "count": totals[i]} for i in range(bars)]


def histogram(buckets: dict[int, int], low: float | None, high: float | None) -> list[dict]:
    """At most HISTOGRAM_BARS bars of [low, high) and counts, from the asinh buckets (the first
    and last bar end at the smallest and largest value)."""
    if not buckets or low is None or high is None:  # no finite value
        return []
    keys = sorted(buckets)
    first, last = keys[0], keys[-1]
    per_bar = max(1, math.ceil((last - first + 1) / HISTOGRAM_BARS))
    bars: dict[int, int] = {}
    for key in keys:
        bar = (key - first) // per_bar
        bars[bar] = bars.get(bar, 0) + buckets[key]
    out = []
    for bar in range((last - first) // per_bar + 1):
        start, stop = first + bar * per_bar, first + (bar + 1) * per_bar
        out.append(
            {
                "low": max(low, math.sinh(start / _BUCKETS_PER_UNIT)),
                "high": min(high, math.sinh(stop / _BUCKETS_PER_UNIT)),
                "count": bars.get(bar, 0),
            }
        )
    return out
