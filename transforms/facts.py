"""The facts of a dataset, counted in the Beam job over every record of each split: what a model
is built from (`facts.json`, typed in `transforms.contract.facts`).

Counted a group of chunks at a time beside the statistics (`transforms.prepare.Encoder`), as
parts that merge by addition, so that any runner, worker count and grouping gives the same
bytes:

- every string feature (the label too): the exact count of the records holding each distinct
  value (`Vocabulary`, keyed by the value's 128-bit XXH3 digest);
- every number: a sketch of its finite values (`Sketch`: counts on buckets of relative width
  `SKETCH_ERROR`, whose quantiles are within that relative error of the true ones) and the
  `KMV` smallest hashes of its distinct values (a distinct-count estimate, about 3% off);
- every record: a 64-bit hash of its content without the label (and the key, which names the
  record rather than describes it) and one of its label (`Rows`), from which repeated rows and
  conflicting labels (the same content, another label) are counted.

A bundle's parts are cut into `BUCKETS` parts by hash (`FactParts.buckets`), merged exactly per
bucket (`MergeFactParts`, a `CombinePerKey`: a bucket's distinct values meet on one worker, a
sixteenth of them), ranked and cut to the vocabulary cap there (`FactParts.ranked`), and the
buckets' ranked parts merged into one (`MergeRanked`), never holding more than twice the cap of
a feature's values. `facts_of` builds facts.json from that and the statistics, whose exact
moments, bounds and (while a number has few) value counts it takes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam import coders
from xxhash import xxh3_64_intdigest, xxh3_128_digest

from transforms.coders import ChunkCoder
from transforms.contract import facts as contract
from transforms.contract.config import DatasetSpec
from transforms.stats import DatasetStats, FeatureStats

BUCKETS = 16  # parts a bundle's facts are cut into, by hash, to be merged on several workers
_BUCKET_SHIFT = np.uint64(60)
VOCABULARY_CAP = contract.VOCABULARY_CAP
SKETCH_ERROR = contract.QUANTILE_ERROR  # relative error of a sketched quantile
_LOG_GAMMA = math.log((1 + SKETCH_ERROR) / (1 - SKETCH_ERROR))
_KEY_BIAS = 1 << 21  # |log_gamma(x)| of every finite float64 is below 80,000
KMV = 1024  # smallest hashes kept for a number's distinct-count estimate
LABEL_CLASSES = 20  # an int label with at most this many distinct train values: likely classes
_NUMBERS = ("int", "float")
_STRINGS = ("string",)

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_EMPTY = np.uint64(0x6A09E667F3BCC908)  # a record without a value of a feature


def mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, element-wise on uint64 (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


# --- parts ----------------------------------------------------------------------------------


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


# --- counting -------------------------------------------------------------------------------


class FactCounter:
    """Counts the facts of groups of validated records (one list column per feature)."""

    def __init__(self, dataset: DatasetSpec):
        self._names = [f.name for f in dataset.features]
        self._types = [f.type for f in dataset.features]
        self._label = dataset.label
        self._key = dataset.key
        self._salts = mix(np.arange(1, len(self._names) + 1, dtype=np.uint64) * _GOLDEN)

    def count(self, columns: Sequence[pa.Array], split: np.ndarray) -> FactParts:
        out = FactParts()
        n = len(split)
        content = np.zeros(n, np.uint64)
        label = np.zeros(n, np.uint64)
        splits = np.unique(split).tolist()
        for name, kind, column, salt in zip(self._names, self._types, columns, self._salts):
            lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
            lengths = lengths.astype(np.int64)
            flat = pc.list_flatten(column)
            if kind in _STRINGS:
                hashes = self._strings(out, name, flat, lengths, split, splits)
            elif kind in _NUMBERS:
                raw = flat.to_numpy(zero_copy_only=False)
                values = raw.astype(np.float64)
                value_split = np.repeat(split, lengths)
                for s in splits:
                    picked = values[value_split == s]
                    if len(picked):
                        sketch = Sketch.of(picked)
                        found = out.sketches.get((s, name))
                        out.sketches[(s, name)] = sketch if found is None else found.merge(sketch)
                # an int's own bits (beyond 2**53 a float64 would merge neighbours)
                bits = raw.astype(np.int64) if kind == "int" else values
                hashes = mix(bits.view(np.uint64))
            else:  # bytes, images
                data = flat.cast(pa.binary()).to_pylist()
                hashes = np.fromiter(map(xxh3_64_intdigest, data), np.uint64, len(data))
            row = row_hashes(hashes, lengths)
            if name == self._label:
                label = row
            elif name != self._key:
                content = mix(content ^ (row + salt))
        bits = np.left_shift(np.int64(1), split.astype(np.int64))
        out.rows = [Rows.of(content, label, bits)]
        return out

    def _strings(
        self,
        out: FactParts,
        name: str,
        flat: pa.Array,
        lengths: np.ndarray,
        split: np.ndarray,
        splits: list[int],
    ) -> np.ndarray:
        """Counts one string feature's values per split into `out`; returns each value's
        64-bit hash (for the rows)."""
        if not len(flat):
            return np.zeros(0, np.uint64)
        encoded = pc.dictionary_encode(flat.cast(pa.binary()))
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        words = encoded.dictionary
        digests = np.frombuffer(b"".join(map(xxh3_128_digest, words.to_pylist())), ">u8").reshape(
            -1, 2
        )
        high, low = digests[:, 0].astype(np.uint64), digests[:, 1].astype(np.uint64)
        rows = np.repeat(np.arange(len(lengths)), lengths)
        if lengths.max(initial=0) > 1:  # a list: a record counts once per value it holds
            pairs = np.unique(rows * len(words) + codes)
            rows, codes = pairs // len(words), pairs % len(words)
        value_split = split[rows]
        for s in splits:
            tally = np.bincount(codes[value_split == s], minlength=len(words))
            present = np.flatnonzero(tally)
            if not len(present):
                continue
            part = Vocabulary(
                high[present], low[present], tally[present].astype(np.int64),
                words.take(pa.array(present)),
            )  # fmt: skip
            out.vocabularies.setdefault((s, name), []).append(part)
        return mix(low ^ high)[encoded.indices.to_numpy(zero_copy_only=False)]


def row_hashes(value_hashes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """One hash per record of a feature's values (their hashes, in order, `lengths` a record):
    the same values in the same order give the same hash; none gives `_EMPTY`."""
    out = np.full(len(lengths), _EMPTY, np.uint64)
    full = lengths > 0
    if lengths.max(initial=0) <= 1:
        out[full] = value_hashes
        return out
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    position = np.arange(len(value_hashes), dtype=np.int64) - np.repeat(starts, lengths)
    placed = mix(value_hashes + position.astype(np.uint64) * _GOLDEN)
    sums = np.add.reduceat(placed, starts[full]) if full.any() else placed[:0]
    out[full] = mix(sums ^ lengths[full].astype(np.uint64))
    return out


# --- merging --------------------------------------------------------------------------------


class MergeFactParts(beam.CombineFn):
    """Merges the parts of one bucket, exactly, then ranks and cuts them (`FactParts.ranked`)."""

    def __init__(self, cap: int = VOCABULARY_CAP):
        self._cap = cap

    def create_accumulator(self) -> FactParts:
        return FactParts()

    def add_input(self, accumulator: FactParts, part: FactParts) -> FactParts:
        return accumulator.merge(part)

    def merge_accumulators(self, accumulators) -> FactParts:
        merged = FactParts()
        for accumulator in accumulators:
            merged.merge(accumulator)
        return merged

    def extract_output(self, accumulator: FactParts) -> RankedFacts:
        return accumulator.ranked(self._cap)


class MergeRanked(beam.CombineFn):
    """Merges the ranked facts of every bucket into one."""

    def __init__(self, cap: int = VOCABULARY_CAP):
        self._cap = cap

    def create_accumulator(self) -> RankedFacts:
        return RankedFacts()

    def add_input(self, accumulator: RankedFacts, ranked: RankedFacts) -> RankedFacts:
        return accumulator.merge(ranked, self._cap)

    def merge_accumulators(self, accumulators) -> RankedFacts:
        merged = RankedFacts()
        for accumulator in accumulators:
            merged.merge(accumulator, self._cap)
        return merged

    def extract_output(self, accumulator: RankedFacts) -> RankedFacts:
        return accumulator


class AnalyzeFacts(beam.PTransform):
    """(bucket, FactParts) pairs of every bundle → one `RankedFacts`: merged per bucket, ranked,
    then merged across buckets."""

    def __init__(self, cap: int = VOCABULARY_CAP):
        super().__init__()
        self._cap = cap

    def expand(self, parts):
        return (
            parts
            | "MergeBuckets" >> beam.CombinePerKey(MergeFactParts(self._cap))
            | "DropBuckets" >> beam.Values()
            | "MergeRanked" >> beam.CombineGlobally(MergeRanked(self._cap))
        )


# --- facts.json -----------------------------------------------------------------------------


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
                found = ranked.vocabularies.get((index, f.name))
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
    words = tuple(w.decode("utf-8", errors="surrogateescape") for w in found.words.to_pylist())
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
