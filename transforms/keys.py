"""The keys of records (`key:`): canonical text, provenance, and which record of a key is kept.

A record's key is made canonical a column at a time (`KeyMaker.keys`): integer columns and text
columns (CSV cells, Arrow strings, JSON strings) go through pyarrow compute whole; the values
the vector path cannot take exactly as the per-value rule does (lists, objects, floats,
booleans, bytes that are not text, number text of an odd form, values outside a key feature's
range) take that rule, `KeyMaker.__call__`, one at a time. A test compares the two on many
values.

Keyed records then carry, as Arrow columns (`KEYS`), their key and provenance: the index of their
source in the config, their file and their line (record number) in it. Records with equal order
hashes (a key's duplicates, which share the hash of their key) are put in the order (key, source,
path, line), and the first record of each key is kept (`tie_order`); everything else is in order
hash order, so the writer never compares records one at a time in Python.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.contract.config import DatasetSpec
from transforms.records import RawChunk, RecordError, Rejected, location, rejection
from transforms.schema import coerce_feature

# Per record: its canonical key, and its provenance (source index, file, line). Paths are bytes
# (UTF-8, undecodable file-name bytes as they were), compared as bytes: for text, the order of
# its code points.
KEYS = pa.schema(
    [
        ("key", pa.string()),
        ("source", pa.int16()),
        ("path", pa.dictionary(pa.int32(), pa.binary())),
        ("line", pa.int64()),
    ]
)
# Integer text the vector path casts: at most 18 digits always fits int64; longer text (leading
# zeros, out-of-range values) takes the per-value path and its reasons.
_INT_TEXT = r"^[+-]?[0-9]{1,18}$"


class KeyMaker:
    """The canonical text of a record's key: typed like its feature when the key is a feature.

    Otherwise: text as it is, bytes (TFRecord, Parquet binary) as UTF-8 text, numbers as `str`
    gives them (`7`, `7.5`, `inf`), booleans as `True`/`False`, and lists and objects as their
    ASCII JSON with sorted keys (bytes in them as UTF-8 text, other values as `str`: a TFRecord
    field is a list of bytes, a Parquet one may hold dates or decimals). A key must be valid
    text, because it is hashed and written as UTF-8: a value holding undecodable input (a lone
    surrogate, e.g. a CSV byte that is not UTF-8 or a JSON `"\\udc80"` escape) rejects its
    record with `KEY: not valid text`. A record without a value rejects with `KEY: missing key`.
    """

    def __init__(self, dataset: DatasetSpec):
        self.field = dataset.key
        self._feature = None
        if dataset.key is not None:
            for f in dataset.features:
                if f.name == dataset.key and f.is_scalar:
                    self._feature = f

    def keys(self, chunk: RawChunk) -> tuple[pa.Array, list[Rejected]]:
        """The key of every record of a chunk as a string array (null where the record is
        rejected), and the rejected records, in record order."""
        assert self.field is not None, "a KeyMaker of a dataset without a key"
        n = len(chunk)
        column = chunk.columns.get(self.field)
        vector: tuple[pa.Array, np.ndarray] | None
        if column is None:  # no record holds the field
            vector = pa.nulls(n, pa.string()), np.zeros(n, bool)
        else:
            vector = self._vector(column)
        if vector is None:  # the whole column by the per-value rule
            texts, odd = pa.nulls(n, pa.string()), np.ones(n, bool)
        else:
            texts, odd = vector
        missing = _mask(texts.is_null()) & ~odd
        reasons = {i: f"{self.field}: missing key" for i in np.flatnonzero(missing).tolist()}
        found = {}
        for i in np.flatnonzero(odd).tolist():
            assert column is not None  # odd values are values of the column
            value = column[i].as_py() if isinstance(column, pa.Array) else column[i]
            try:
                found[i] = self(value)
            except RecordError as e:
                reasons[i] = e.reason
        if found:
            mask = np.zeros(n, bool)
            mask[list(found)] = True
            texts = pc.replace_with_mask(texts, pa.array(mask), pa.array(list(found.values())))
        rejected = [
            rejection(chunk.source, location(chunk.path, chunk.lines[i]), reasons[i], chunk.raw(i))
            for i in sorted(reasons)
        ]
        return texts, rejected

    def __call__(self, value: Any) -> str:
        """One value's key (the reference rule); raises RecordError when it has none."""
        if value is None:
            raise RecordError(f"{self.field}: missing key")
        if self._feature is not None:
            value = coerce_feature(self._feature, value)[0]
        if isinstance(value, bytes):
            text = self._text(value)
        elif isinstance(value, (dict, list)):
            text = json.dumps(value, sort_keys=True, default=self._json)
        else:
            text = str(value)
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise RecordError(f"{self.field}: not valid text") from None
        return text

    def _text(self, value: bytes) -> str:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise RecordError(f"{self.field}: not valid text") from None

    def _json(self, value: Any) -> Any:
        return self._text(value) if isinstance(value, bytes) else str(value)

    def _vector(self, column: list | pa.Array) -> tuple[pa.Array, np.ndarray] | None:
        """(canonical texts, odd) of a whole column, or None when the vector path cannot take
        it. Texts are null where a value is missing or odd; `odd` marks the present values the
        per-value rule must take (it words their reasons, or keys them as it would)."""
        array = _arrow_column(column)
        if array is None:
            return None
        kind, feature = array.type, self._feature
        text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
        binary = pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
        odd = np.zeros(len(array), bool)
        try:
            if pa.types.is_null(kind):  # no value at all
                return pa.nulls(len(array), pa.string()), odd
            if feature is None:
                if not (text or binary or pa.types.is_integer(kind)):
                    return None
                return array.cast(pa.string()), odd  # binary: only when it is all UTF-8
            if feature.type == "string" and (text or binary):
                typed = array.cast(pa.string())
            elif feature.type == "int" and pa.types.is_integer(kind):
                typed = array.cast(pa.int64())
            elif feature.type == "int" and text:
                trimmed = pc.ascii_trim_whitespace(array)
                odd |= _mask(pc.invert(pc.match_substring_regex(trimmed, _INT_TEXT)))
                typed = pc.if_else(pa.array(odd), pa.scalar(None, trimmed.type), trimmed)
                typed = typed.cast(pa.int64())
            else:  # float, bytes and image keys: the per-value rule
                return None
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            return None
        odd |= _out_of_range(feature, typed)
        texts = typed.cast(pa.string())
        if odd.any():
            texts = pc.if_else(pa.array(odd), pa.scalar(None, pa.string()), texts)
        return texts, odd


def _arrow_column(column: list | pa.Array) -> pa.Array | None:
    """A column as an Arrow array, its type inferred from a list (None when Arrow cannot hold
    the list: mixed kinds, integers beyond int64, text holding lone surrogates)."""
    if isinstance(column, pa.Array):
        return column
    try:
        return pa.array(column)
    except (pa.ArrowException, ValueError, TypeError, OverflowError, UnicodeEncodeError):
        return None


def _out_of_range(feature, values: pa.Array) -> np.ndarray:
    """Where a key feature's typed values break its min, max or allowed values (an int
    feature's bounds compared as integers: exact beyond 2**53 too)."""
    bad = np.zeros(len(values), bool)
    if feature.min is not None:
        bad |= _mask(pc.less(values, pa.scalar(math.ceil(feature.min), pa.int64())))
    if feature.max is not None:
        bad |= _mask(pc.greater(values, pa.scalar(math.floor(feature.max), pa.int64())))
    if feature.values is not None:
        allowed = pa.array(sorted(feature.values), values.type)
        bad |= _mask(pc.invert(pc.is_in(values, value_set=allowed)))
    return bad


def _mask(condition: pa.Array) -> np.ndarray:
    """A boolean Arrow array as numpy, null as False."""
    return pc.fill_null(condition, False).to_numpy(zero_copy_only=False)


def key_columns(
    keys: pa.Array,
    sources: Sequence[int] | int,
    lines: Sequence[int],
    paths: Sequence[str],
    path_index: Sequence[int] | None = None,
) -> pa.RecordBatch:
    """The KEYS columns of records: their keys, source indexes (one for all, or one each) and
    lines, and their files: `paths[path_index[i]]` (all `paths[0]` without an index)."""
    n = len(keys)
    index = np.zeros(n, np.int32) if path_index is None else np.asarray(path_index, np.int32)
    files = pa.array([path_bytes(p) for p in paths], pa.binary())
    source = np.full(n, sources, np.int16) if isinstance(sources, int) else sources
    return pa.RecordBatch.from_arrays(
        [
            keys,
            pa.array(source, pa.int16()),
            pa.DictionaryArray.from_arrays(pa.array(index), files),
            pa.array(np.asarray(lines, np.int64)),
        ],
        schema=KEYS,
    )


def path_bytes(path: str) -> bytes:
    """A file path as the provenance holds it: UTF-8, undecodable bytes as they were."""
    return path.encode("utf-8", "surrogateescape")


def tie_order(hashes: np.ndarray, keys: pa.Table | None) -> tuple[np.ndarray, int]:
    """The canonical order of records by order hash, and the number of duplicates dropped.

    Records with equal hashes are ordered by key and provenance (`keys`, keyed datasets), and
    then only the first record of each key is kept; without a key, equal hashes (equal content
    but for a 2**-64 chance) stay in input order, for the caller to order. Returns (the indexes
    of the records kept, in order, duplicates).
    """
    order = np.argsort(hashes, kind="stable")
    spans = equal_spans(hashes[order])
    if keys is None or not len(spans):
        return order, 0
    # positions (in `order`) of the records that share their hash with another
    inside = np.concatenate([np.arange(a, b) for a, b in spans])
    rows = order[inside]
    tied = keys.take(rows)
    table = pa.table(
        {
            "hash": pa.array(hashes[rows]),
            "key": tied.column("key"),
            "source": tied.column("source"),
            "path": tied.column("path").cast(pa.binary()),
            "line": tied.column("line"),
        }
    )
    names = ("hash", "key", "source", "path", "line")
    ranked = pc.sort_indices(table, sort_keys=[(n, "ascending") for n in names]).to_numpy()
    order[inside] = rows[ranked]
    # a key's records share its hash, so after this sort they are neighbours
    ranked_keys = table.column("key").take(ranked)
    repeated = np.zeros(len(order), bool)
    repeated[inside[1:]] = _mask(pc.equal(ranked_keys[1:], ranked_keys[:-1]))
    return order[~repeated], int(np.count_nonzero(repeated))


def equal_spans(values: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) of each run of two or more equal neighbours in a sorted array."""
    if len(values) < 2:
        return []
    equal = np.concatenate(([0], (values[1:] == values[:-1]).astype(np.int8), [0]))
    edges = np.diff(equal)
    return list(
        zip(np.flatnonzero(edges == 1).tolist(), (np.flatnonzero(edges == -1) + 1).tolist())
    )
