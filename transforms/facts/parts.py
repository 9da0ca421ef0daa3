"""The facts' mergeable parts: exact value counts (`Vocabulary`), their cut to the cap
(`Ranked`), number sketches (`Sketch`), records by content (`Rows`), and a bundle's or bucket's
facts (`FactParts`, `RankedFacts`). Every merge is an addition, so the order of merges cannot
change a count.

A vocabulary and the rows are kept sorted by hash: several of them merge by a stable sort of
their concatenation (numpy's stable sort finds the sorted runs and merges them), and the values
of a bucket (the top bits of the hash) are one slice.

Longer than most modules because each mergeable part is here with its merge, and the vocabularies
and rows share one hash order (`key_order`) and its cut into buckets (`FactParts.buckets`):
split apart, that order would be defined once per part.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.contract import facts as contract
from transforms.split import binary_offsets, mix

BUCKETS = 16  # parts a bundle's facts are cut into, by hash, to be merged on several workers
_BUCKET_SHIFT = np.uint64(60)
SKETCH_ERROR = contract.QUANTILE_ERROR  # relative error of a sketched quantile
_LOG_GAMMA = math.log((1 + SKETCH_ERROR) / (1 - SKETCH_ERROR))
_KEY_BIAS = 1 << 21  # |log_gamma(x)| of every finite float64 is below 80,000
KMV = 1024  # smallest hashes kept for a number's distinct-count estimate


def key_order(first: np.ndarray, second: np.ndarray, runs: bool = True) -> np.ndarray:
    """The order that sorts the pairs (first, second): a sort by `first` (stable for `runs`,
    sorted runs back to back, which it merges in linear time; else quicksort, several times
    faster on values in no order), then a sort by both only where pairs of equal `first` are
    left out of order."""
    order = np.argsort(first, kind="stable" if runs else "quicksort")
    a, b = first[order], second[order]
    if np.any((a[1:] == a[:-1]) & (b[1:] < b[:-1])):
        order = np.lexsort((second, first))
    return order


def _group_starts(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Where each run of equal (first, second) pairs starts, in pairs sorted by both."""
    return np.flatnonzero(
        np.concatenate(([True], (first[1:] != first[:-1]) | (second[1:] != second[:-1])))
    )


def _bucket_bounds(hashes: np.ndarray) -> np.ndarray:
    """Where each of the BUCKETS buckets starts in ascending hashes, and the end."""
    edges = np.arange(1, BUCKETS, dtype=np.uint64) << _BUCKET_SHIFT
    return np.concatenate(([0], np.searchsorted(hashes, edges), [len(hashes)]))


def _compact(words: pa.Array, start: int, stop: int) -> pa.Array:
    """words[start:stop] in buffers of its own (a slice pickles its whole parent's buffers)."""
    return pa.concat_arrays([words.slice(start, stop - start)])


@dataclasses.dataclass
class Vocabulary:
    """Exact counts of the distinct values of one string feature in one split: the records
    holding each, keyed by the 128-bit XXH3 digest of its bytes (`high`, `low`), sorted by it."""

    high: np.ndarray  # uint64
    low: np.ndarray  # uint64
    counts: np.ndarray  # int64
    words: pa.Array  # binary: the values

    @classmethod
    def empty(cls) -> Vocabulary:
        none = np.zeros(0, np.uint64)
        return cls(none, none, np.zeros(0, np.int64), pa.array([], pa.binary()))

    @classmethod
    def of(
        cls, high: np.ndarray, low: np.ndarray, counts: np.ndarray, words: pa.Array
    ) -> Vocabulary:
        """The vocabulary of distinct values given in any order."""
        order = key_order(high, low, runs=False)
        return cls(high[order], low[order], counts[order], words.take(pa.array(order)))

    @classmethod
    def merged(cls, parts: Sequence[Vocabulary]) -> Vocabulary:
        """One vocabulary of the parts' values, a value's counts added."""
        parts = [p for p in parts if len(p.counts)]
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls.empty()
        high = np.concatenate([p.high for p in parts])
        low = np.concatenate([p.low for p in parts])
        order = key_order(high, low)
        high, low = high[order], low[order]
        starts = _group_starts(high, low)
        counts = np.concatenate([p.counts for p in parts])[order]
        words = pa.concat_arrays([p.words for p in parts])
        return cls(
            high[starts],
            low[starts],
            np.add.reduceat(counts, starts),
            words.take(pa.array(order[starts])),
        )

    def __len__(self) -> int:
        return len(self.counts)

    def slice(self, start: int, stop: int) -> Vocabulary:
        """Values [start, stop), in arrays of their own."""
        return Vocabulary(
            self.high[start:stop].copy(),
            self.low[start:stop].copy(),
            self.counts[start:stop].copy(),
            _compact(self.words, start, stop),
        )

    def nbytes(self) -> int:
        return 24 * len(self.counts) + self.words.nbytes


@dataclasses.dataclass
class Ranked:
    """A feature's vocabulary in one split cut to the cap: the values with the most records,
    ties by value (in no order until `ranked`); `distinct` and `total` count every value, kept
    or not."""

    counts: np.ndarray  # int64
    words: pa.Array  # binary
    distinct: int
    total: int  # the counts of every value, added

    @classmethod
    def of(cls, vocabulary: Vocabulary, cap: int) -> Ranked:
        counts, words = _top(vocabulary.counts, vocabulary.words, cap)
        return cls(counts, words, len(vocabulary.counts), int(vocabulary.counts.sum()))

    @classmethod
    def merged(cls, parts: Sequence[Ranked], cap: int) -> Ranked:
        """The parts' values (of other buckets: no value is in two parts), cut to the cap."""
        if len(parts) == 1:
            counts, words = parts[0].counts, parts[0].words
        else:
            counts = np.concatenate([p.counts for p in parts])
            words = pa.concat_arrays([p.words for p in parts])
        counts, words = _top(counts, words, cap)
        return cls(counts, words, sum(p.distinct for p in parts), sum(p.total for p in parts))

    def ranked(self, cap: int) -> Ranked:
        """Cut to the cap and ranked: most records first, ties by value."""
        counts, words = _top(self.counts, self.words, cap)
        order = pc.sort_indices(
            pa.table({"count": counts, "word": words}),
            sort_keys=[("count", "descending"), ("word", "ascending")],
        )
        return Ranked(counts[order.to_numpy()], words.take(order), self.distinct, self.total)


def _top(counts: np.ndarray, words: pa.Array, cap: int) -> tuple[np.ndarray, pa.Array]:
    """The `cap` distinct values with the most records, ties by value, in no order: those above
    the cap-th count, and the smallest values of those at it."""
    n = len(counts)
    if n <= cap:
        return counts, words
    threshold = np.partition(counts, n - cap)[n - cap]
    above = np.flatnonzero(counts > threshold)
    tied = np.flatnonzero(counts == threshold)
    need = cap - len(above)
    if need < len(tied):
        tied = _smallest(words, tied, need)
    keep = np.concatenate([above, tied])
    return counts[keep], words.take(pa.array(keep))


def _smallest(words: pa.Array, rows: np.ndarray, k: int) -> np.ndarray:
    """The rows of the k smallest of words[rows] (distinct values, byte order): among those
    whose first 8 bytes are at most the k-th smallest first 8 bytes, where there are many."""
    if len(rows) > 4 * k:
        prefixes = _prefixes(words)[rows]
        bound = np.partition(prefixes, k - 1)[k - 1]
        rows = rows[prefixes <= bound]
    return rows[pc.bottom_k_unstable(words.take(pa.array(rows)), k).to_numpy()]


def _prefixes(words: pa.Array) -> np.ndarray:
    """The first 8 bytes of each value, zero-padded, as a big-endian integer: in the values'
    byte order, but for values that share them."""
    offsets = binary_offsets(words).astype(np.int64)
    starts, lengths = offsets[:-1], np.diff(offsets)
    out = np.zeros(len(words), np.uint64)
    buffer = words.buffers()[2]
    if buffer is None or not buffer.size:
        return out
    data = np.frombuffer(buffer, np.uint8)
    for j in range(8):
        byte = data[np.minimum(starts + j, len(data) - 1)].astype(np.uint64)
        out |= np.where(lengths > j, byte, np.uint64(0)) << np.uint64(56 - 8 * j)
    return out


@dataclasses.dataclass
class Sketch:
    """A number's finite values in one split: their counts on buckets of relative width
    SKETCH_ERROR (keys in the values' order: 0 for zero, negative for negative values), and
    the KMV smallest hashes of the distinct values."""

    keys: np.ndarray  # int64, ascending
    counts: np.ndarray  # int64
    hashes: np.ndarray  # uint64, ascending, at most KMV

    @classmethod
    def of(cls, values: np.ndarray) -> Sketch:
        """The sketch of float64 values (finite ones only are counted)."""
        values = values[np.isfinite(values)]
        keys = sketch_keys(values)
        low = int(keys.min(initial=0))
        span = int(keys.max(initial=0)) - low + 1
        if span <= max(4 * len(keys), 1 << 16):  # keys of a few decades: counted in an array
            tally = np.bincount(keys - low, minlength=span)
            present = np.flatnonzero(tally)
            unique, counts = present + low, tally[present]
        else:
            unique, counts = np.unique(keys, return_counts=True)
        hashes = smallest_distinct(mix(values.astype(np.float64).view(np.uint64)), KMV)
        return cls(unique.astype(np.int64), counts.astype(np.int64), hashes)

    def merge(self, other: Sketch) -> Sketch:
        keys = np.concatenate([self.keys, other.keys])
        unique, inverse = np.unique(keys, return_inverse=True)
        counts = np.bincount(
            inverse, weights=np.concatenate([self.counts, other.counts]), minlength=len(unique)
        )
        hashes = np.unique(np.concatenate([self.hashes, other.hashes]))[:KMV]
        return Sketch(unique, np.rint(counts).astype(np.int64), hashes)

    def distinct(self) -> int:
        """The distinct values: exact while fewer than KMV, else estimated from the KMV-th
        smallest hash (k minimum values)."""
        k = len(self.hashes)
        if k < KMV:
            return k
        return max(k + 1, round((k - 1) * 2.0**64 / (float(self.hashes[-1]) + 1.0)))

    def values(self) -> np.ndarray:
        """Each bucket's value (within SKETCH_ERROR of every value it counts)."""
        return sketch_values(self.keys)


def smallest_distinct(hashes: np.ndarray, k: int) -> np.ndarray:
    """The k smallest distinct values of `hashes`, ascending (all of them when fewer): found
    among the 4k smallest values when those hold k distinct ones, else among all."""
    n = len(hashes)
    if n > 4 * k:
        bound = np.partition(hashes, 4 * k - 1)[4 * k - 1]
        smallest = _distinct(hashes[hashes <= bound])
        if len(smallest) >= k:
            return smallest[:k]
    return _distinct(hashes)[:k]


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, ascending (np.unique, which hashes first: slower where most values
    are distinct)."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def sketch_keys(values: np.ndarray) -> np.ndarray:
    """The bucket of each finite value: ceil(log_gamma |x|) moved above 0 and signed; 0 for 0."""
    size = np.abs(values)
    zero = size == 0
    if zero.any():
        size[zero] = 1.0  # any finite log: the key is set to 0 below
    exponents = np.log(size)
    exponents /= _LOG_GAMMA
    keys = np.ceil(exponents, out=exponents).astype(np.int64)
    keys += _KEY_BIAS
    np.negative(keys, out=keys, where=values < 0)
    keys[zero] = 0
    return keys


def sketch_values(keys: np.ndarray) -> np.ndarray:
    """The value of each bucket: 2 gamma^k / (gamma + 1), signed."""
    gamma = math.exp(_LOG_GAMMA)
    exponents = np.abs(keys) - _KEY_BIAS
    size = 2.0 * np.exp(exponents * _LOG_GAMMA) / (gamma + 1.0)
    return np.where(keys == 0, 0.0, np.sign(keys) * size)


@dataclasses.dataclass
class Rows:
    """Records by content: (hash of the content without the label, hash of the label) with
    the records of each pair and a bit per split holding one, sorted by the pair."""

    content: np.ndarray  # uint64
    label: np.ndarray  # uint64
    counts: np.ndarray  # int64
    splits: np.ndarray  # int64: bit s set when split s holds the pair

    @classmethod
    def empty(cls) -> Rows:
        none = np.zeros(0, np.uint64)
        return cls(none, none, np.zeros(0, np.int64), np.zeros(0, np.int64))

    @classmethod
    def of(cls, content: np.ndarray, label: np.ndarray, splits: np.ndarray) -> Rows:
        """The rows of records, one a record (content and label hashes, split bits)."""
        return cls._reduced(content, label, np.ones(len(content), np.int64), splits, runs=False)

    @classmethod
    def merged(cls, parts: Sequence[Rows]) -> Rows:
        parts = [p for p in parts if len(p.counts)]
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls.empty()
        return cls._reduced(
            np.concatenate([p.content for p in parts]),
            np.concatenate([p.label for p in parts]),
            np.concatenate([p.counts for p in parts]),
            np.concatenate([p.splits for p in parts]),
        )

    @classmethod
    def _reduced(
        cls,
        content: np.ndarray,
        label: np.ndarray,
        counts: np.ndarray,
        splits: np.ndarray,
        runs: bool = True,
    ) -> Rows:
        """One entry per (content, label), sorted by both: counts added, split bits or-ed
        (`runs`: the entries are sorted runs back to back, see `key_order`)."""
        order = key_order(content, label, runs)
        content, label = content[order], label[order]
        starts = _group_starts(content, label)
        return cls(
            content[starts],
            label[starts],
            np.add.reduceat(counts[order], starts),
            np.bitwise_or.reduceat(splits[order], starts),
        )

    def __len__(self) -> int:
        return len(self.counts)

    def slice(self, start: int, stop: int) -> Rows:
        """Entries [start, stop), in arrays of their own."""
        return Rows(
            self.content[start:stop].copy(),
            self.label[start:stop].copy(),
            self.counts[start:stop].copy(),
            self.splits[start:stop].copy(),
        )

    def summary(self) -> RowCounts:
        """The counts of repeated rows and conflicting labels among these records, whose
        content groups are whole (every record of a content is here)."""
        if not len(self.counts):
            return RowCounts()
        records = int(self.counts.sum())
        content = self.content
        first = np.concatenate(([True], content[1:] != content[:-1]))
        group = np.cumsum(first) - 1
        labels = np.bincount(group)  # distinct labels of each content
        records_of = np.bincount(group, weights=self.counts).astype(np.int64)
        conflicting = labels > 1
        several = (self.splits & (self.splits - 1)) != 0  # more than one bit set
        return RowCounts(
            records=records,
            repeated=records - len(self.counts),
            repeated_rows=int(np.count_nonzero(self.counts > 1)),
            conflicting=int(records_of[conflicting].sum()),
            conflicting_rows=int(np.count_nonzero(conflicting)),
            across_splits=int(self.counts[several].sum()),
        )


@dataclasses.dataclass
class RowCounts:
    records: int = 0
    repeated: int = 0  # records that are a copy of another (every copy after the first)
    repeated_rows: int = 0  # distinct rows that occur more than once
    conflicting: int = 0  # records whose content occurs with another label too
    conflicting_rows: int = 0  # distinct contents that occur with several labels
    across_splits: int = 0  # records whose row occurs in more than one split

    def merge(self, other: RowCounts) -> RowCounts:
        return RowCounts(
            *(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other)))
        )


@dataclasses.dataclass
class FactParts:
    """Facts of some records, as parts to merge: per (split index, feature) the vocabularies of
    strings and the sketches of numbers; the rows. Vocabularies and rows are held as they come,
    as sorted runs, and merged once, all runs at a time (`buckets`, `ranked`): a merge of k
    runs costs about log k passes over them, where merging each as it came would cost log n."""

    vocabularies: dict[tuple[int, str], list[Vocabulary]] = dataclasses.field(default_factory=dict)
    sketches: dict[tuple[int, str], Sketch] = dataclasses.field(default_factory=dict)
    rows: list[Rows] = dataclasses.field(default_factory=list)

    def merge(self, other: FactParts) -> FactParts:
        for key, parts in other.vocabularies.items():
            self.vocabularies.setdefault(key, []).extend(parts)
        for key, sketch in other.sketches.items():
            found = self.sketches.get(key)
            self.sketches[key] = sketch if found is None else found.merge(sketch)
        self.rows.extend(other.rows)
        return self

    def __bool__(self) -> bool:
        return bool(self.vocabularies or self.sketches or self.rows)

    def buckets(self) -> Iterator[tuple[int, FactParts]]:
        """This part cut by hash into (bucket, part) pairs, in bucket order, a bucket's part
        made when it is asked for: a value's (a row's) counts all go to one bucket; the
        sketches, small, to bucket 0. Each feature's runs are merged first, in place."""
        for parts in self.vocabularies.values():  # in place: a feature's runs, then the next's
            parts[:] = [Vocabulary.merged(parts)]
        vocabularies = {key: parts[0] for key, parts in self.vocabularies.items()}
        vocabulary_bounds = {key: _bucket_bounds(v.high) for key, v in vocabularies.items()}
        if self.rows:
            self.rows[:] = [Rows.merged(self.rows)]
        rows = self.rows[0] if self.rows else None
        row_bounds = _bucket_bounds(rows.content) if rows is not None else None
        for b in range(BUCKETS):
            part = FactParts()
            for key, vocabulary in vocabularies.items():
                start, stop = vocabulary_bounds[key][b : b + 2].tolist()
                if start < stop:
                    part.vocabularies[key] = [vocabulary.slice(start, stop)]
            if rows is not None and row_bounds is not None:
                start, stop = row_bounds[b : b + 2].tolist()
                if start < stop:
                    part.rows = [rows.slice(start, stop)]
            if b == 0:
                part.sketches = dict(self.sketches)
            if part:
                yield b, part

    def ranked(self, cap: int) -> RankedFacts:
        """This bucket's facts (whole: every count of its values is here), cut to the cap."""
        return RankedFacts(
            vocabularies={
                key: [Ranked.of(Vocabulary.merged(parts), cap)]
                for key, parts in self.vocabularies.items()
            },
            sketches=dict(self.sketches),
            rows=Rows.merged(self.rows).summary() if self.rows else RowCounts(),
        )

    def approx_bytes(self) -> int:
        return (
            1024
            + sum(v.nbytes() for parts in self.vocabularies.values() for v in parts)
            + sum(32 * len(r.counts) for r in self.rows)
        )


@dataclasses.dataclass
class RankedFacts:
    """Facts with each vocabulary cut to the cap (as parts of other buckets, merged once they
    hold more than a few times the cap, and by `vocabulary`), and the rows counted."""

    vocabularies: dict[tuple[int, str], list[Ranked]] = dataclasses.field(default_factory=dict)
    sketches: dict[tuple[int, str], Sketch] = dataclasses.field(default_factory=dict)
    rows: RowCounts = dataclasses.field(default_factory=RowCounts)

    _HELD = 4  # a vocabulary's parts are merged once they hold this many times the cap

    def merge(self, other: RankedFacts, cap: int) -> RankedFacts:
        for key, parts in other.vocabularies.items():
            mine = self.vocabularies.setdefault(key, [])
            mine.extend(parts)
            if len(mine) > 1 and sum(len(p.counts) for p in mine) > self._HELD * cap:
                mine[:] = [Ranked.merged(mine, cap)]
        for key, sketch in other.sketches.items():
            found_sketch = self.sketches.get(key)
            self.sketches[key] = sketch if found_sketch is None else found_sketch.merge(sketch)
        self.rows = self.rows.merge(other.rows)
        return self

    def vocabulary(self, key: tuple[int, str], cap: int) -> Ranked | None:
        """The ranked vocabulary of (split index, feature), cut to the cap; None without one."""
        parts = self.vocabularies.get(key)
        return Ranked.merged(parts, cap).ranked(cap) if parts else None

    def compacted(self, cap: int) -> RankedFacts:
        """These facts with each vocabulary in one part cut to the cap (ranked by
        `vocabulary`, once)."""
        for parts in self.vocabularies.values():
            parts[:] = [Ranked.merged(parts, cap)]
        return self

    def approx_bytes(self) -> int:
        return (
            1024
            + sum(
                8 * len(r.counts) + r.words.nbytes
                for parts in self.vocabularies.values()
                for r in parts
            )
            + sum(24 * len(s.keys) for s in self.sketches.values())
        )
