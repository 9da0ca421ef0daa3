"""A group of validated records (one list column per feature) counted into `FactParts`: each
string's distinct values with the records holding them, each number's sketch, each record's
content and label hashes."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from xxhash import xxh3_64_intdigest, xxh3_128_digest

from transforms.contract.config import DatasetSpec
from transforms.facts.parts import FactParts, Rows, Sketch, Vocabulary
from transforms.split import GOLDEN, mix

_NUMBERS = ("int", "float")
_STRINGS = ("string",)
_EMPTY = np.uint64(0x6A09E667F3BCC908)  # a record without a value of a feature


class FactCounter:
    """Counts the facts of groups of validated records (one list column per feature)."""

    def __init__(self, dataset: DatasetSpec):
        self._names = [f.name for f in dataset.features]
        self._types = [f.type for f in dataset.features]
        self._label = dataset.label
        self._key = dataset.key
        self._salts = mix(np.arange(1, len(self._names) + 1, dtype=np.uint64) * GOLDEN)

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
            part = Vocabulary.of(
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
    placed = mix(value_hashes + position.astype(np.uint64) * GOLDEN)
    sums = np.add.reduceat(placed, starts[full]) if full.any() else placed[:0]
    out[full] = mix(sums ^ lengths[full].astype(np.uint64))
    return out
