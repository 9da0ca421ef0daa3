"""The facts' mergeable parts: exact value counts (`Vocabulary`), their ranked cut (`Ranked`),
number sketches (`Sketch`), records by content (`Rows`), and a bundle's or bucket's facts
(`FactParts`, `RankedFacts`). Every merge is an addition, so the order of merges cannot change a
count.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam import coders

from transforms.coders import ChunkCoder
from transforms.contract import facts as contract
from transforms.split import mix

BUCKETS = 16  # parts a bundle's facts are cut into, by hash, to be merged on several workers
_BUCKET_SHIFT = np.uint64(60)
SKETCH_ERROR = contract.QUANTILE_ERROR  # relative error of a sketched quantile
_LOG_GAMMA = math.log((1 + SKETCH_ERROR) / (1 - SKETCH_ERROR))
_KEY_BIAS = 1 << 21  # |log_gamma(x)| of every finite float64 is below 80,000
KMV = 1024  # smallest hashes kept for a number's distinct-count estimate


@dataclasses.dataclass
class Vocabulary:
    """Exact counts of the distinct values of one string feature in one split: the records
    holding each, keyed by the 128-bit XXH3 digest of its bytes (`high`, `low`)."""

    high: np.ndarray  # uint64
    low: np.ndarray  # uint64
    counts: np.ndarray  # int64
    words: pa.Array  # binary: the values

    @classmethod
    def empty(cls) -> Vocabulary:
        none = np.zeros(0, np.uint64)
        return cls(none, none, np.zeros(0, np.int64), pa.array([], pa.binary()))

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
        counts = np.concatenate([p.counts for p in parts])
        words = pa.concat_arrays([p.words for p in parts])
        order = np.lexsort((low, high))
        high, low = high[order], low[order]
        starts = np.flatnonzero(
            np.concatenate(([True], (high[1:] != high[:-1]) | (low[1:] != low[:-1])))
        )
        return cls(
            high[starts],
            low[starts],
            np.add.reduceat(counts[order], starts),
            words.take(pa.array(order[starts])),
        )

    def take(self, rows: np.ndarray) -> Vocabulary:
        return Vocabulary(
            self.high[rows], self.low[rows], self.counts[rows], self.words.take(pa.array(rows))
        )

    def nbytes(self) -> int:
        return 24 * len(self.counts) + self.words.nbytes


@dataclasses.dataclass
class Ranked:
    """A feature's vocabulary in one split, ranked (most records first, ties by value) and cut
    to the cap; `distinct` and `total` count every value, kept or not."""

    counts: np.ndarray  # int64, descending
    words: pa.Array  # binary
    distinct: int
    total: int  # the counts of every value, added

    @classmethod
    def of(cls, vocabulary: Vocabulary, cap: int) -> Ranked:
        ranked = cls(vocabulary.counts, vocabulary.words, 0, 0)._cut(cap)
        ranked.distinct, ranked.total = len(vocabulary.counts), int(vocabulary.counts.sum())
        return ranked

    def merge(self, other: Ranked, cap: int) -> Ranked:
        both = Ranked(
            np.concatenate([self.counts, other.counts]),
            pa.concat_arrays([self.words, other.words]),
            0,
            0,
        )._cut(cap)
        both.distinct, both.total = self.distinct + other.distinct, self.total + other.total
        return both

    def _cut(self, cap: int) -> Ranked:
        table = pa.table({"count": self.counts, "word": self.words})
        order = pc.sort_indices(table, sort_keys=[("count", "descending"), ("word", "ascending")])
        kept = order[:cap]
        return Ranked(self.counts[kept.to_numpy()], self.words.take(kept), 0, 0)


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
        unique, counts = np.unique(keys, return_counts=True)
        bits = np.unique(mix(values.astype(np.float64).view(np.uint64)))
        return cls(unique.astype(np.int64), counts.astype(np.int64), bits[:KMV])

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


def sketch_keys(values: np.ndarray) -> np.ndarray:
    """The bucket of each finite value: ceil(log_gamma |x|) moved above 0 and signed; 0 for 0."""
    keys = np.zeros(len(values), np.int64)
    size = np.abs(values)
    nonzero = size > 0
    exponents = np.ceil(np.log(size[nonzero]) / _LOG_GAMMA).astype(np.int64) + _KEY_BIAS
    keys[nonzero] = np.where(values[nonzero] > 0, exponents, -exponents)
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
    the records of each pair and a bit per split holding one."""

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
        return cls._reduced(content, label, np.ones(len(content), np.int64), splits)

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
        cls, content: np.ndarray, label: np.ndarray, counts: np.ndarray, splits: np.ndarray
    ) -> Rows:
        """One entry per (content, label): counts added, split bits or-ed."""
        order = np.lexsort((label, content))
        content, label = content[order], label[order]
        starts = np.flatnonzero(
            np.concatenate(([True], (content[1:] != content[:-1]) | (label[1:] != label[:-1])))
        )
        return cls(
            content[starts],
            label[starts],
            np.add.reduceat(counts[order], starts),
            np.bitwise_or.reduceat(splits[order], starts),
        )

    def take(self, rows: np.ndarray) -> Rows:
        return Rows(self.content[rows], self.label[rows], self.counts[rows], self.splits[rows])

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
    strings (not yet merged: merged when there are many, and per bucket) and the sketches of
    numbers; the rows."""

    vocabularies: dict[tuple[int, str], list[Vocabulary]] = dataclasses.field(default_factory=dict)
    sketches: dict[tuple[int, str], Sketch] = dataclasses.field(default_factory=dict)
    rows: list[Rows] = dataclasses.field(default_factory=list)

    _MERGE_AT = 8  # parts of one vocabulary merged into one when there are this many

    def merge(self, other: FactParts) -> FactParts:
        for key, parts in other.vocabularies.items():
            mine = self.vocabularies.setdefault(key, [])
            mine.extend(parts)
            if len(mine) >= self._MERGE_AT:
                mine[:] = [Vocabulary.merged(mine)]
        for key, sketch in other.sketches.items():
            found = self.sketches.get(key)
            self.sketches[key] = sketch if found is None else found.merge(sketch)
        self.rows.extend(other.rows)
        if len(self.rows) >= self._MERGE_AT:
            self.rows[:] = [Rows.merged(self.rows)]
        return self

    def buckets(self) -> Iterator[tuple[int, FactParts]]:
        """This part cut by hash into (bucket, part) pairs: a value's (a row's) counts all go
        to one bucket; the sketches, small, to bucket 0."""
        cut: dict[int, FactParts] = {}
        for key, parts in self.vocabularies.items():
            vocabulary = Vocabulary.merged(parts)
            bucket = (vocabulary.high >> _BUCKET_SHIFT).astype(np.int64)
            for b in np.unique(bucket).tolist():
                part = cut.setdefault(b, FactParts())
                part.vocabularies[key] = [vocabulary.take(np.flatnonzero(bucket == b))]
        if self.rows:
            rows = Rows.merged(self.rows)
            bucket = (rows.content >> _BUCKET_SHIFT).astype(np.int64)
            for b in np.unique(bucket).tolist():
                cut.setdefault(b, FactParts()).rows = [rows.take(np.flatnonzero(bucket == b))]
        if self.sketches:
            cut.setdefault(0, FactParts()).sketches = dict(self.sketches)
        yield from sorted(cut.items(), key=lambda item: item[0])

    def ranked(self, cap: int) -> RankedFacts:
        """This bucket's facts (whole: every count of its values is here), ranked and cut."""
        return RankedFacts(
            vocabularies={
                key: Ranked.of(Vocabulary.merged(parts), cap)
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
    """Facts with each vocabulary ranked and cut to the cap, and the rows counted."""

    vocabularies: dict[tuple[int, str], Ranked] = dataclasses.field(default_factory=dict)
    sketches: dict[tuple[int, str], Sketch] = dataclasses.field(default_factory=dict)
    rows: RowCounts = dataclasses.field(default_factory=RowCounts)

    def merge(self, other: RankedFacts, cap: int) -> RankedFacts:
        for key, ranked in other.vocabularies.items():
            found = self.vocabularies.get(key)
            self.vocabularies[key] = ranked if found is None else found.merge(ranked, cap)
        for key, sketch in other.sketches.items():
            found_sketch = self.sketches.get(key)
            self.sketches[key] = sketch if found_sketch is None else found_sketch.merge(sketch)
        self.rows = self.rows.merge(other.rows)
        return self

    def approx_bytes(self) -> int:
        return (
            1024
            + sum(8 * len(r.counts) + r.words.nbytes for r in self.vocabularies.values())
            + sum(24 * len(s.keys) for s in self.sketches.values())
        )


coders.registry.register_coder(FactParts, ChunkCoder)
coders.registry.register_coder(RankedFacts, ChunkCoder)
