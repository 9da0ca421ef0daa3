"""Distances between two distributions of one feature, as TFDV's drift and skew comparators
measure them: the L-infinity distance of categorical value counts and the Jensen-Shannon
divergence of numeric histograms.

Both follow TensorFlow Data Validation's definitions (`tensorflow_data_validation/anomalies/
metrics.cc`): `LInftyDistance` normalizes each side's value counts by that side's own total and
takes the largest absolute difference of a value's shares; `JensenShannonDivergence` aligns two
histograms on the union of their bucket edges, assuming values spread uniformly within a
bucket, normalizes them, and takes (KL(P‖M) + KL(Q‖M)) / 2 with M = (P + Q) / 2 and base-2
logarithms, so the result lies in [0, 1] (capped at 1 against rounding). Where our histograms
differ from TFDV's (bars of a single value), `jensen_shannon_divergence` says how it places them.

Pure Python and numpy: no Beam, no TensorFlow.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from transforms.contract.statistics import Bar


def linf_distance(a: Mapping[str, int], b: Mapping[str, int]) -> tuple[float, str | None]:
    """The L-infinity distance between two categorical distributions given as value counts, and
    the value where it is reached.

    Each side is normalized by its own total (TFDV's `kSeparateTotal`); the distance is the
    largest |a[v] / sum(a) - b[v] / sum(b)| over the union of values, in [0, 1]. A side without
    any count has every share 0. Ties go to the largest value (in code point order, which is the
    byte order of UTF-8), as TFDV's scan of its ordered map with `>=` does; the value is None
    when the distance is 0 (nothing differs).
    """
    total_a, total_b = _total(a), _total(b)
    best, at = 0.0, None
    for value in sorted(set(a) | set(b)):
        p = a.get(value, 0) / total_a if total_a else 0.0
        q = b.get(value, 0) / total_b if total_b else 0.0
        difference = abs(p - q)
        if difference > 0.0 and difference >= best:
            best, at = difference, value
    return best, at


def _total(counts: Mapping[str, int]) -> int:
    for value, count in counts.items():
        if count < 0:
            raise ValueError(f"{value!r}: negative count {count}")
    return sum(counts.values())


def jensen_shannon_divergence(hist_a: Sequence[Bar], hist_b: Sequence[Bar]) -> float:
    """The Jensen-Shannon divergence, base 2 (in [0, 1]), of two histograms given as sequences
    of `Bar`s (low, high, count: statistics.json's `histogram`), whose edges may differ.

    As TFDV: both are re-binned onto the union of their bar edges, a bar's count spread
    uniformly over its width, then normalized; JSD(P, Q) = (KL(P‖M) + KL(Q‖M)) / 2 with
    M = (P + Q) / 2 and log2 (TFDV's `std::log2`: 1 means disjoint supports), capped at 1.

    A bar of zero width (low == high: a split holding a single value) is a point mass at that
    value. It joins an interval of the union grid over which one side has mass spread: the one
    with lo <= value < hi, else the one that ends at the value (bars hold their top value), so
    a single integer 5 compares with the integer bar [5, 6) of another split as the same value.
    Where no such interval holds it, it is an atom that only a point of the same value matches.
    (TFDV keeps every point bucket apart, which would call a single 5 and the bar [5, 6)
    disjoint.)

    Empty histograms (no counts): two give 0, one against a non-empty one gives 1.
    """
    low_a, high_a, count_a = _bars(hist_a)
    low_b, high_b, count_b = _bars(hist_b)
    total_a, total_b = count_a.sum(), count_b.sum()
    if total_a == 0 and total_b == 0:
        return 0.0
    if total_a == 0 or total_b == 0:
        return 1.0
    wide_a, wide_b = high_a > low_a, high_b > low_b
    edges = np.unique(
        np.concatenate([low_a[wide_a], high_a[wide_a], low_b[wide_b], high_b[wide_b]])
    )
    mass_a = _spread(low_a[wide_a], high_a[wide_a], count_a[wide_a], edges)
    mass_b = _spread(low_b[wide_b], high_b[wide_b], count_b[wide_b], edges)
    covered = (mass_a > 0) | (mass_b > 0)
    atoms: dict[float, list[float]] = {}
    for side, (low, wide, count, mass) in enumerate(
        ((low_a, wide_a, count_a, mass_a), (low_b, wide_b, count_b, mass_b))
    ):
        for value, n in zip(low[~wide].tolist(), count[~wide].tolist()):
            where = _interval_of(value, edges, covered)
            if where is None:
                atoms.setdefault(value, [0.0, 0.0])[side] += n
            else:
                mass[where] += n
    extra = np.array([atoms[v] for v in sorted(atoms)], np.float64).reshape(-1, 2)
    p = np.concatenate([mass_a, extra[:, 0]])
    q = np.concatenate([mass_b, extra[:, 1]])
    return _jsd(p / p.sum(), q / q.sum())


def jensen_shannon_points(a: Mapping[float, int], b: Mapping[float, int]) -> float:
    """The Jensen-Shannon divergence, base 2 (in [0, 1]), of two distributions of exact values
    (value -> count): of numbers with few distinct values, where histograms' bars would move
    with the data's min and max. Empty: two give 0, one against a non-empty one gives 1."""
    values = sorted(set(a) | set(b))
    p = np.array([a.get(v, 0) for v in values], np.float64)
    q = np.array([b.get(v, 0) for v in values], np.float64)
    if not p.sum() and not q.sum():
        return 0.0
    if not p.sum() or not q.sum():
        return 1.0
    return _jsd(p / p.sum(), q / q.sum())


def _bars(histogram: Sequence[Bar]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    low = np.array([float(bar.low) for bar in histogram], np.float64)
    high = np.array([float(bar.high) for bar in histogram], np.float64)
    count = np.array([float(bar.count) for bar in histogram], np.float64)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ValueError("histogram: bar edges must be finite")
    if np.any(high < low):
        raise ValueError("histogram: a bar has high < low")
    if np.any(count < 0):
        raise ValueError("histogram: a bar has a negative count")
    return low, high, count


def _spread(low: np.ndarray, high: np.ndarray, count: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The counts of bars of positive width on the intervals between `edges` (which include
    every bar edge), each bar spread uniformly over its width."""
    if len(edges) < 2:
        return np.zeros(0, np.float64)
    start, stop = edges[:-1, None], edges[1:, None]
    overlap = np.clip(np.minimum(stop, high[None, :]) - np.maximum(start, low[None, :]), 0, None)
    return (overlap / (high - low)[None, :] * count[None, :]).sum(axis=1)


def _interval_of(value: float, edges: np.ndarray, covered: np.ndarray) -> int | None:
    """The covered interval of the grid that holds a point: [lo, hi) with lo <= value < hi,
    else one that ends at value; None when neither is covered."""
    i = int(np.searchsorted(edges, value, side="right")) - 1
    if 0 <= i < len(covered) and covered[i]:
        return i
    if 1 <= i <= len(covered) and edges[i] == value and covered[i - 1]:
        return i - 1
    return None


def _jsd(p: np.ndarray, q: np.ndarray) -> float:
    m = (p + q) / 2
    total = 0.0
    for x in (p, q):
        present = x > 0
        total += float(np.sum(x[present] * np.log2(x[present] / m[present])))
    return min(max(total / 2, 0.0), 1.0)
