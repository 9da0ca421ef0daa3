"""The features of a dataset config inferred from sampled records (what TFDV's `infer_schema` does
for a schema), and the likely key and label.

A feature's type is the first of int, float, string, bytes that takes every sampled value by
the Validator's own rule (`transforms.schema.coerce_scalar`), so the config never rejects a
value it was inferred from. Three choices are ours, for the data's sake: text is a number only
where the source is text (CSV cells; a JSON or Parquet string stays a string), a value written
as a float keeps a feature float (JSON `1.0`), and integers written with leading zeros (`007`,
codes and zip codes) stay text, which keeps the zeros. Shapes: a field holding lists is a list
feature, `[n]` when every sampled list holds n values (n > 1), else `[null]`; a TFRecord feature
whose lists hold one value at most is a scalar (how an Example holds one). A feature named like
a label that a few sampled records lack (at most `FEW_UNLABELLED` of them) is the label, written
required: the ETL rejects, and counts, the records without it.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from typing import Any

from pipelines.config.fields import MAX_NAME_BYTES
from pipelines.init.sample import Sample
from transforms.contract.config import PRESENT_SUFFIX, FeatureSpec
from transforms.records import RecordError
from transforms.schema import SPACE, coerce_scalar

MAX_VALUES = 20  # distinct strings a `values:` list is suggested for
SURE_VALUES = 100  # sampled values from which `values:` is written uncommented
MOSTLY = 0.05  # the share of non-numbers in a column of numbers that reads like a data error
_LEADING_ZERO = re.compile(r"[+-]?0[0-9]+")
_KEY_NAMES = ("id", "key", "uid", "uuid", "guid")
_KEY_SUFFIXES = ("_id", "_key", "_uuid", "-id")
_LABEL_NAMES = ("label", "labels", "target", "class", "y", "outcome")
FEW_UNLABELLED = 0.1  # a label missing in at most this share of sampled records is required
_LABEL_SUFFIXES = ("_label", "_target", "_class")


@dataclasses.dataclass
class Feature:
    """One inferred feature; `type` None when the field cannot be one (`skipped` says why)."""

    name: str
    type: str | None = None
    shape: tuple[int | None, ...] = ()
    required: bool = True
    values: list[Any] | None = None  # suggested `values:` (strings)
    values_doubt: str | None = None  # why `values:` is written commented out (None: it is not)
    min: float | int | None = None
    max: float | int | None = None
    present: int = 0  # sampled records holding a value
    records: int = 0  # sampled records of all sources
    notes: list[str] = dataclasses.field(default_factory=list)
    skipped: str | None = None
    canonical: list[Any] = dataclasses.field(default_factory=list)  # coerced scalar values


@dataclasses.dataclass
class Guess:
    """A suggested `key` or `label`: the feature, whether to write it uncommented, and why."""

    name: str | None
    sure: bool
    reason: str


def infer_features(samples: list[Sample]) -> list[Feature]:
    """A feature per field of the sampled records, in order of first appearance."""
    total = sum(s.records for s in samples)
    names = list(dict.fromkeys(n for s in samples for n in s.columns))
    features = [_feature(name, samples, total) for name in names]
    taken = {f.name for f in features if f.type is not None}
    for f in features:  # the trainer's NAME__present input of a numeric feature NAME
        stem = f.name.removesuffix(PRESENT_SUFFIX)
        if f.type is not None and stem != f.name and stem in taken:
            f.type, f.skipped = None, f"clashes with the presence input of feature {stem!r}"
    return features


def _feature(name: str, samples: list[Sample], total: int) -> Feature:
    feature = Feature(name, records=total)
    if not name.isprintable() or len(name.encode("utf-8")) > MAX_NAME_BYTES:
        feature.skipped = "its name cannot name a feature (a control character, or too long)"
        return feature
    holders = [s for s in samples if name in s.columns]
    values = [(v, s.text) for s in holders for v in s.columns[name] if v is not None]
    if len(holders) < len(samples):
        feature.notes.append(f"only in source(s) {', '.join(s.name for s in holders)}")
    items = _shape(feature, values, all(s.format == "tfrecord" for s in holders))
    if feature.skipped is not None:
        return feature
    feature.required = feature.present == total
    _type(feature, items)
    if feature.type is None:
        return feature
    if feature.type in ("int", "float"):
        finite = [v for v in feature.canonical if not math.isinf(v)]
        if finite:
            feature.min, feature.max = min(finite), max(finite)
    if feature.type == "string":
        _values(feature)
    return feature


def _shape(feature: Feature, values: list[tuple[Any, bool]], tfrecord: bool):
    """Sets the feature's shape and `present` count; returns its (value, is text) items."""
    if any(isinstance(v, dict) for v, _ in values):
        feature.skipped = "holds objects (nested fields), which no feature type holds"
        return []
    lists = [v for v, _ in values if isinstance(v, (list, tuple))]
    if not lists:
        feature.present = len(values)
        return values
    flat = [x for v in lists for x in v]
    if any(isinstance(x, (list, tuple, dict)) for x in flat):
        feature.skipped = "holds lists of lists or of objects, which no feature shape holds"
        return []
    if any(x is None for x in flat):
        feature.skipped = "holds lists with null items, which a list feature rejects"
        return []
    longest = max(len(v) for v in lists)
    if len(lists) < len(values) or (tfrecord and longest <= 1):
        if longest > 1:
            feature.skipped = "holds single values and lists of several values alike"
            return []
        # a one-value list is its value; an empty one is a missing value (Validator's rule)
        kept = [(v, text) for v, text in values if not _is_empty_list(v)]
        items = [(v[0] if isinstance(v, (list, tuple)) else v, text) for v, text in kept]
        feature.present = len(items)
        return items
    lengths = {len(v) for v in lists}
    n = lengths.pop() if len(lengths) == 1 else None
    if n is not None and n > 1:
        feature.shape = (n,)
        feature.notes.append(f"every sampled list holds {n} values; shape [null] if it varies")
    else:
        feature.shape = (None,)
    feature.present = len(lists)
    text = {t for _, t in values}
    return [(x, text == {True}) for x in flat]


def _is_empty_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and not value


def _type(feature: Feature, items: list[tuple[Any, bool]]) -> None:
    """Sets the feature's type: the first that takes every item, and its coerced values."""
    if not items:
        feature.type = "string"
        feature.notes.append("no value in the sampled records: its type is a guess")
        return
    candidates = ["int", "float", "string", "bytes"]
    if any(isinstance(v, str) and not text for v, text in items):
        candidates = ["string", "bytes"]  # typed sources: text stays text
    elif any(isinstance(v, float) for v, _ in items):
        candidates.remove("int")
    texts = [v for v, text in items if text and isinstance(v, str)]
    zeros = [v for v in texts if _LEADING_ZERO.fullmatch(v.strip(SPACE))]
    if zeros and "int" in candidates:
        candidates = ["string", "bytes"]
        feature.notes.append(f"integers with leading zeros ({zeros[0]!r}) kept as text")
    for ftype in candidates:
        coerced = _coerce_all(feature.name, ftype, [v for v, _ in items])
        if coerced is not None:
            feature.type, feature.canonical = ftype, coerced
            break
    else:
        feature.skipped = "no feature type takes all of its sampled values"
        return
    if feature.type in ("string", "bytes") and "float" in candidates:
        if any(isinstance(v, float) and math.isnan(v) for v, _ in items):
            feature.notes.append("holds NaN, which a float feature rejects: read as text")
        elif texts and all(_numeric_text(v) for v in texts):
            feature.notes.append("numbers beyond the int64 or float32 range: read as text")
        elif texts:
            _mostly_numbers(feature, texts)
    if feature.type == "bytes":
        feature.notes.append("not all UTF-8 text: read as bytes")


def _mostly_numbers(feature: Feature, texts: list[str]) -> None:
    """Notes a text feature whose values are numbers but for a few (a typo in the data)."""
    spec = FeatureSpec(feature.name, "float", (), True)
    odd = []
    for text in texts:
        try:
            coerce_scalar(spec, text)
        except RecordError:
            odd.append(text)
    if len(odd) <= len(texts) * MOSTLY:
        feature.notes.append(
            f"{len(texts) - len(odd)} of {len(texts)} sampled values are numbers; with type "
            f"float the others ({odd[0]!r}, ...) would be rejected"
        )


def _numeric_text(text: str) -> bool:
    try:
        float(text.strip(SPACE))
    except ValueError:
        return False
    return True


def _coerce_all(name: str, ftype: str, values: list[Any]) -> list[Any] | None:
    spec = FeatureSpec(name, ftype, (), True)
    try:
        return [coerce_scalar(spec, v) for v in values]
    except RecordError:
        return None


def _values(feature: Feature) -> None:
    """Suggests `values:` for a string feature with few distinct values that repeat."""
    counts = collections.Counter(v.decode("utf-8") for v in feature.canonical)
    n = len(feature.canonical)
    if not 1 <= len(counts) <= MAX_VALUES or len(counts) * 2 > n:
        return
    feature.values = sorted(counts)
    once = sorted(v for v, c in counts.items() if c == 1)
    if n < SURE_VALUES:
        feature.values_doubt = f"only {n} sampled values: uncomment when these are all"
    elif once:
        feature.values_doubt = (
            f"{once[0]!r} is seen once in {n} sampled values (a typo, or one of many rare "
            "values?): uncomment when these are all"
        )


# --- key and label ------------------------------------------------------------------------


def _is_key_name(name: str) -> bool:
    lower = name.lower()
    return lower in _KEY_NAMES or lower.endswith(_KEY_SUFFIXES) or bool(re.search("[a-z]Id$", name))


def _is_label_name(name: str) -> bool:
    lower = name.lower()
    return lower in _LABEL_NAMES or lower.endswith(_LABEL_SUFFIXES)


def guess_key(features: list[Feature], samples: list[Sample]) -> Guess:
    """A feature named like a key (id, *_id, key, ...) that every sampled record holds, with
    a different value in each. A key drops duplicate records and drives the split: it is sure
    only when named as a record's own key (id, key, uuid, ...) or when every record was read;
    `user_id` unique in a sample may well repeat in the rest of the data (a reference to
    another table), which would drop records."""
    named = [
        f
        for f in features
        if f.type in ("int", "string") and f.shape == () and _is_key_name(f.name)
    ]
    named.sort(key=lambda f: f.name.lower() not in _KEY_NAMES)  # id before user_id
    first_reason = None
    for f in named:
        repeats = len(f.canonical) - len(set(f.canonical))
        if not f.required:
            reason = f"named like a key, but missing in {f.records - f.present} sampled records"
        elif repeats:
            where = " (values repeat across sources)" if _across_sources(f, samples) else ""
            reason = (
                f"named like a key, but {repeats} of {f.present} sampled records "
                f"{'repeats' if repeats == 1 else 'repeat'} an earlier value{where}: a key "
                "drops duplicate records"
            )
        elif f.name.lower() in _KEY_NAMES or all(s.whole for s in samples):
            return Guess(
                f.name,
                True,
                f"a different value in each of the {f.present} sampled records: duplicates of a "
                "key are dropped, and the split follows the key",
            )
        else:
            return Guess(
                f.name,
                False,
                f"a different value in each of the {f.present} sampled records, but the rest "
                "of the input was not read and a name like this may refer to another table: a "
                "key drops records sharing a value",
            )
        first_reason = first_reason or (f.name, reason)
    if first_reason is not None:
        return Guess(first_reason[0], False, first_reason[1])
    return Guess(None, False, "no feature named like a key (id, *_id, key) with unique values")


def _across_sources(feature: Feature, samples: list[Sample]) -> bool:
    """Whether a feature's values repeat only between sources (each source's are unique)."""
    holders = [s for s in samples if feature.name in s.columns]
    if len(holders) < 2:
        return False
    start = 0
    for s in holders:
        n = sum(v is not None and not _is_empty_list(v) for v in s.columns[feature.name])
        own = feature.canonical[start : start + n]
        if len(set(own)) != len(own):
            return False
        start += n
    return True


def guess_label(features: list[Feature], key: Guess) -> Guess:
    """A scalar feature named like a label (label, target, class, y, ...): sure; else the last
    one with few distinct values, as a guess."""
    candidates = [
        f
        for f in features
        if f.type in ("int", "float", "string") and f.shape == () and f.name != key.name
    ]
    named = [f for f in candidates if _is_label_name(f.name)]
    if named:
        f = named[0]
        others = f" (so are {', '.join(g.name for g in named[1:])})" if named[1:] else ""
        if not f.required:
            lacking = f.records - f.present
            missing = f"missing in {lacking} of {f.records} sampled records"
            if lacking > FEW_UNLABELLED * f.records:
                return Guess(f.name, False, f"named like a label{others}, but {missing}")
            # a few records without it: the label, required, so that the ETL rejects them
            f.required = True
            f.notes.append(f"the label: required ({missing}, which the ETL rejects)")
        return Guess(f.name, True, f"named like a label{others}")
    few = [f for f in candidates if f.values is not None and f.required]
    if few:
        f = few[-1]
        assert f.values is not None  # `few` holds only features with values
        return Guess(
            f.name,
            False,
            f"a guess: the last feature with few distinct values ({len(f.values)}); "
            "name what the model predicts",
        )
    return Guess(None, False, "no feature named like a label (label, target, class, y, ...)")
