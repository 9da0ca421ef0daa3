"""The features of a dataset config inferred from the records read (what TFDV's `infer_schema`
does for a schema), and the likely key and label.

A feature's type is the first of int, float, string, bytes that takes every value read by the
ETL's own Validator (`transforms.schema.Validator`, a column at a time, or a slice of one: a type
that does not fit stops at its first slice), so the config never rejects a value it was inferred
from. Values are handled as Arrow arrays where they are of one kind (the CSV reader's text, a
JSON column of numbers), so that a million records cost seconds, not minutes. Three choices
are ours, for the data's sake: text is a number only where the source is text (CSV cells; a
JSON or Parquet string stays a string), a value written as a float keeps a feature float (JSON
`1.0`), and integers written with leading zeros (`007`, codes and zip codes) stay text, which
keeps the zeros. Shapes: a field holding lists is a list feature, `[n]` when every list read
holds n values (n > 1), else `[null]`; a TFRecord feature whose lists hold one value at most is a
scalar (how an Example holds one). A feature named like a label that a few records lack (at most
`guess.FEW_UNLABELLED` of them) is the label, written required: the ETL rejects, and counts, the
records without it. A `values:` list (a string's few values; an int label's two classes) is
written closed only when every record of its sources was read: a value a sample missed would be
rejected by every run. The key and label are guessed in `pipelines.init.guess`. A column of dates
is noted with the way they are written (31/12/2024 is day first), since training reads only
YYYY-MM-DD as dates.

Longer than most modules because it is one decision per field, made in steps on the same Arrow
parts: its shape, then its type by the Validator, then its bounds, `values:` and date notes,
each step reading what the one before found.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.config.fields import MAX_NAME_BYTES
from pipelines.init import detect
from pipelines.init.sample import Sample
from transforms.contract.config import PRESENT_SUFFIX, FeatureSpec
from transforms.schema import SPACE, SourceColumns, Validator, coerce_scalar

MAX_VALUES = 20  # distinct strings a `values:` list is suggested for
SURE_VALUES = 100  # sampled values from which `values:` is written uncommented
MOSTLY = 0.05  # the share of non-numbers in a column of numbers that reads like a data error
_LEADING_ZERO = re.compile(r"[+-]?0[0-9]+")
_STEP = 1 << 16  # values validated at a time, from _FIRST_STEP on
_FIRST_STEP = 1 << 10
_SOURCE = "init"  # the one source of the Validator a column is checked with
_ARROW_TYPES = {
    "int": pa.int64(),
    "float": pa.float64(),
    "string": pa.binary(),
    "bytes": pa.binary(),
}
# Dates: a string whose values are this share of dates is noted (the trainer's own share), from
# its first DATE_VALUES values; YYYY-MM-DD (the trainer's dates), or 31/12/2024, 12.31.2024, ...
DATE_SHARE = 0.95
DATE_VALUES = 100_000
_TIME = r"(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?\s*(?:Z|UTC|[+-]\d{2}(?::?\d{2})?)?"
_ISO_DATE = rf"^\s*\d{{4}}[-/]\d{{1,2}}[-/]\d{{1,2}}{_TIME}\s*$"
_NUMERIC_DATE = rf"^\s*(?P<a>\d{{1,2}})(?P<sep>[/.-])(?P<b>\d{{1,2}})[/.-]\d{{4}}{_TIME}\s*$"


@dataclasses.dataclass
class Feature:
    """One inferred feature; `type` None when the field cannot be one (`skipped` says why)."""

    name: str
    type: str | None = None
    shape: tuple[int | None, ...] = ()
    required: bool = True
    values: list[Any] | None = None  # suggested `values:` (strings, or an int label's ints)
    values_doubt: str | None = None  # why `values:` is written commented out (None: it is not)
    min: float | int | None = None
    max: float | int | None = None
    present: int = 0  # records read holding a value
    records: int = 0  # records read of all sources
    whole: bool = True  # every record of the sources holding it was read
    notes: list[str] = dataclasses.field(default_factory=list)
    skipped: str | None = None
    # the values read, as the feature's type: int64, float64 or binary (strings as UTF-8)
    canonical: pa.ChunkedArray = dataclasses.field(
        default_factory=lambda: pa.chunked_array([], pa.null())
    )


@dataclasses.dataclass
class Part:
    """The present values of a field in one chunk of records: an Arrow array (the CSV reader's
    text, or Python values of one kind made one) or a list of Python values; `text` when they
    are a text source's (CSV cells, lines), `kinds` their Python types."""

    values: Any
    text: bool
    kinds: frozenset[type]


# Lists of Python values of these kinds become Arrow arrays of this type, which the Validator
# checks and types a column at a time, as it does a Parquet column.
_COMPACT = {
    frozenset({int}): pa.int64(),
    frozenset({float}): pa.float64(),
    frozenset({int, float}): pa.float64(),
    frozenset({str}): pa.string(),
    frozenset({bytes}): pa.binary(),
}


def infer_features(samples: list[Sample]) -> list[Feature]:
    """A feature per field of the records read, in order of first appearance."""
    total = sum(s.records for s in samples)
    names = list(dict.fromkeys(n for s in samples for n in s.names))
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
    holders = [s for s in samples if name in s.names]
    feature.whole = all(s.whole for s in holders)
    if len(holders) < len(samples):
        feature.notes.append(f"only in source(s) {', '.join(s.name for s in holders)}")
    parts = [_part(values, text) for s in holders for values, text in s.parts(name)]
    parts = [p for p in parts if len(p.values)]
    items = _shape(feature, parts, all(s.format == "tfrecord" for s in holders))
    if feature.skipped is not None:
        return feature
    feature.required = feature.present == total
    _type(feature, items)
    if feature.type is None:
        return feature
    if feature.type in ("int", "float"):
        finite = feature.canonical
        if feature.type == "float":
            finite = finite.filter(pc.invert(pc.is_inf(finite)))
        if len(finite):
            bounds = pc.min_max(finite)
            feature.min, feature.max = bounds["min"].as_py(), bounds["max"].as_py()
    if feature.type == "string":
        _values(feature)
        _dates(feature)
    return feature


def _part(values: Any, text: bool) -> Part:
    """A chunk's values of a field, without the missing ones."""
    if isinstance(values, pa.Array) and pa.types.is_string(values.type):  # the CSV reader's
        return Part(values.drop_null() if values.null_count else values, text, frozenset({str}))
    if isinstance(values, pa.Array):
        values = values.to_pylist()
    present = [v for v in values if v is not None]
    return Part(present, text, frozenset(map(type, present)))


def _compact(part: Part) -> Part:
    """The part as an Arrow array, where its values are of one kind that Arrow holds alike."""
    kind = _COMPACT.get(part.kinds)
    if isinstance(part.values, pa.Array) or kind is None:
        return part
    try:
        return Part(pa.array(part.values, kind), part.text, part.kinds)
    except (pa.ArrowException, OverflowError, UnicodeEncodeError):  # beyond int64, surrogates
        return part


def _shape(feature: Feature, parts: list[Part], tfrecord: bool) -> list[Part]:
    """Sets the feature's shape and `present` count; returns its scalar values, as parts."""
    present = sum(len(p.values) for p in parts)
    if any(dict in p.kinds for p in parts):
        feature.skipped = "holds objects (nested fields), which no feature type holds"
        return []
    nested = [p for p in parts if p.kinds & {list, tuple}]
    if not nested:
        feature.present = present
        return [_compact(p) for p in parts]
    lists = [v for p in nested for v in p.values if isinstance(v, (list, tuple))]
    flat = [x for v in lists for x in v]
    if any(isinstance(x, (list, tuple, dict)) for x in flat):
        feature.skipped = "holds lists of lists or of objects, which no feature shape holds"
        return []
    if any(x is None for x in flat):
        feature.skipped = "holds lists with null items, which a list feature rejects"
        return []
    longest = max(len(v) for v in lists)
    if len(lists) < present or (tfrecord and longest <= 1):
        if longest > 1:
            feature.skipped = "holds single values and lists of several values alike"
            return []
        # a one-value list is its value; an empty one is a missing value (Validator's rule)
        parts = [_unwrapped(p) for p in parts]
        feature.present = sum(len(p.values) for p in parts)
        return [_compact(p) for p in parts if len(p.values)]
    lengths = {len(v) for v in lists}
    n = lengths.pop() if len(lengths) == 1 else None
    if n is not None and n > 1:
        feature.shape = (n,)
        feature.notes.append(f"every sampled list holds {n} values; shape [null] if it varies")
    else:
        feature.shape = (None,)
    feature.present = len(lists)
    text = all(p.text for p in parts)
    return [_compact(Part(flat, text, frozenset(map(type, flat))))]


def _unwrapped(part: Part) -> Part:
    if not part.kinds & {list, tuple}:
        return part
    kept = [v for v in part.values if not is_empty_list(v)]
    values = [v[0] if isinstance(v, (list, tuple)) else v for v in kept]
    return Part(values, part.text, frozenset(map(type, values)))


def is_empty_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and not value


def _type(feature: Feature, parts: list[Part]) -> None:
    """Sets the feature's type: the first that takes every value, and its typed values."""
    parts = [p for p in parts if len(p.values)]
    if not parts:
        feature.type = "string"
        feature.notes.append("no value in the sampled records: its type is a guess")
        return
    candidates = ["int", "float", "string", "bytes"]
    if any(str in p.kinds and not p.text for p in parts):
        candidates = ["string", "bytes"]  # typed sources: text stays text
    elif any(float in p.kinds for p in parts):
        candidates.remove("int")
    texts = [_texts(p) for p in parts if p.text and str in p.kinds]
    texts = [t for t in texts if len(t.values)]
    zero = _first_leading_zero(texts) if "int" in candidates else None
    if zero is not None:
        candidates = ["string", "bytes"]
        feature.notes.append(f"integers with leading zeros ({zero!r}) kept as text")
    for ftype in candidates:
        if _rejected(feature.name, ftype, parts)[0] == 0:
            feature.type, feature.canonical = ftype, _typed(feature.name, ftype, parts)
            break
    else:
        feature.skipped = "no feature type takes all of its sampled values"
        return
    if feature.type in ("string", "bytes") and "float" in candidates:
        if any(float in p.kinds and _holds_nan(p.values) for p in parts):
            feature.notes.append("holds NaN, which a float feature rejects: read as text")
        elif texts and all(_numeric_text(v) for v in _each(texts)):
            feature.notes.append("numbers beyond the int64 or float32 range: read as text")
        elif texts:
            _mostly_numbers(feature, texts)
    if feature.type == "bytes":
        feature.notes.append("not all UTF-8 text: read as bytes")


def _texts(part: Part) -> Part:
    """The text values of a part of a text source."""
    if isinstance(part.values, pa.Array):
        return part
    values = [v for v in part.values if isinstance(v, str)]
    return Part(values, True, frozenset({str}))


def _holds_nan(values: Any) -> bool:
    if isinstance(values, pa.Array):
        return pa.types.is_floating(values.type) and bool(pc.any(pc.is_nan(values)).as_py())
    return any(isinstance(v, float) and math.isnan(v) for v in values)


def _first_leading_zero(texts: list[Part]) -> str | None:
    """The first text that is an integer written with leading zeros (`007`), if any."""
    for part in texts:
        values = part.values
        if isinstance(values, pa.Array):
            trimmed = pc.ascii_trim_whitespace(values)  # ASCII whitespace, as SPACE
            found = values.filter(pc.match_substring_regex(trimmed, f"^{_LEADING_ZERO.pattern}$"))
            if len(found):
                return found[0].as_py()
        else:
            for v in values:
                if _LEADING_ZERO.fullmatch(v.strip(SPACE)):
                    return v
    return None


def _each(parts: list[Part]) -> Iterator[Any]:
    """The values of parts one by one, Arrow arrays a slice at a time (for an early stop)."""
    for part in parts:
        if isinstance(part.values, pa.Array):
            for start in range(0, len(part.values), _STEP):
                yield from part.values.slice(start, _STEP).to_pylist()
        else:
            yield from part.values


def _rejected(name: str, ftype: str, parts: list[Part], most: int = 0) -> tuple[int, Any]:
    """How many values of `parts` a scalar feature of type `ftype` rejects, by the Validator of
    the ETL, counted until there are more than `most`; and the first one rejected. Values are
    validated a slice at a time: a type that does not fit a column stops at its first slice."""
    validator = Validator([FeatureSpec(name, ftype, (), False)], [_SOURCE])
    count, first = 0, None
    for part in parts:
        for start, stop in _slices(len(part.values)):
            piece = part.values[start:stop]
            arrow = isinstance(piece, pa.Array)
            table = SourceColumns({name: piece}, part.text and arrow)
            _, reasons = validator.validate(len(piece), {_SOURCE: table})
            if reasons:
                if first is None:
                    first = piece[min(reasons)]
                    first = first.as_py() if arrow else first
                count += len(reasons)
                if count > most:
                    return count, first
    return count, first


def _slices(n: int) -> Iterator[tuple[int, int]]:
    """[start, stop) of slices of n values, growing from `_FIRST_STEP` to `_STEP`: a type that
    does not fit costs the reasons of a few values, each found by Python."""
    start, step = 0, _FIRST_STEP
    while start < n:
        yield start, min(n, start + step)
        start, step = start + step, min(_STEP, step * 4)


def _typed(name: str, ftype: str, parts: list[Part]) -> pa.ChunkedArray:
    """The values of `parts`, every one taken by type `ftype`, as that type: int64, float64 or
    binary (text as UTF-8), the Validator's values; vectorized where Arrow reads them alike."""
    kind = _ARROW_TYPES[ftype]
    spec = FeatureSpec(name, ftype, (), True)
    out = []
    for part in parts:
        try:
            out.append(_typed_fast(ftype, part, kind))
            continue
        except (pa.ArrowException, OverflowError, UnicodeEncodeError, TypeError):
            pass  # text Arrow reads otherwise (`+5`), mixed Python values: one by one
        values = part.values
        plain = values.to_pylist() if isinstance(values, pa.Array) else values
        out.append(pa.array([coerce_scalar(spec, v) for v in plain], kind))
    return pa.chunked_array(out, kind)


def _typed_fast(ftype: str, part: Part, kind: pa.DataType) -> pa.Array:
    values = part.values
    if not isinstance(values, pa.Array):
        raise TypeError("values of several kinds")
    if part.text and ftype in ("int", "float"):
        return pc.ascii_trim_whitespace(values).cast(kind)  # the Validator's own cast of text
    if ftype in ("int", "float") and not (
        pa.types.is_integer(values.type) or pa.types.is_floating(values.type)
    ):
        raise TypeError("not numbers")
    if ftype in ("string", "bytes") and not (
        pa.types.is_string(values.type) or pa.types.is_binary(values.type)
    ):
        raise TypeError("not text")  # numbers as text: as Python writes them
    return values.cast(kind)


def _mostly_numbers(feature: Feature, texts: list[Part]) -> None:
    """Notes a text feature whose values are numbers but for a few (a typo in the data)."""
    n = sum(len(p.values) for p in texts)
    if n - sum(detect.numbers(p.values) for p in texts) > n * MOSTLY:
        return  # more text than numbers by their syntax alone: no need to ask the Validator
    odd, first = _rejected(feature.name, "float", texts, most=int(n * MOSTLY))
    if odd <= n * MOSTLY:
        feature.notes.append(
            f"{n - odd:,} of {n:,} sampled values are numbers; with type "
            f"float the others ({first!r}, ...) would be rejected"
        )


def _numeric_text(text: str) -> bool:
    try:
        float(text.strip(SPACE))
    except ValueError:
        return False
    return True


def value_counts(values: pa.ChunkedArray, most: int) -> collections.Counter | None:
    """The distinct values and their counts; None when there are more than `most`."""
    counts: collections.Counter = collections.Counter()
    for chunk in values.chunks:
        for start in range(0, len(chunk), _STEP):
            found = pc.value_counts(chunk.slice(start, _STEP))
            pairs = zip(found.field("values").to_pylist(), found.field("counts").to_pylist())
            for value, count in pairs:
                counts[value] += count
            if len(counts) > most:
                return None
    return counts


def _values(feature: Feature) -> None:
    """Suggests `values:` for a string feature with few distinct values that repeat."""
    found = value_counts(feature.canonical, MAX_VALUES)
    n = len(feature.canonical)
    if not found or len(found) * 2 > n:
        return
    counts = collections.Counter({v.decode("utf-8"): c for v, c in found.items()})
    feature.values = sorted(counts)
    feature.values_doubt = doubt(feature, counts)


def doubt(feature: Feature, counts: collections.Counter) -> str | None:
    """Why the `values:` of these counts are to be written commented out; None: they are not."""
    n = sum(counts.values())
    once = sorted(v for v, c in counts.items() if c == 1)
    if not feature.whole:
        return "seen in a sample (not every record read): uncomment when these are all"
    if n < SURE_VALUES:
        return f"only {n} sampled values: uncomment when these are all"
    if once:
        return (
            f"{once[0]!r} is seen once in {n:,} sampled values (a typo, or one of many rare "
            "values?): uncomment when these are all"
        )
    return None


# --- dates -------------------------------------------------------------------------------


def _dates(feature: Feature) -> None:
    """Notes a string feature whose values are dates, naming how they are written: training
    reads YYYY-MM-DD (with a time or not) as dates, and any other way of writing them as text
    (a category, or left out when nearly unique), which a user would not guess from the config.
    Day first (31/12/2024) or month first (12/31/2024) is told by a value above 12 in one
    place; with none, the note says it cannot be told."""
    values = feature.canonical.slice(0, DATE_VALUES)
    n = len(values)
    if not n:
        return
    text = pc.cast(values.combine_chunks(), pa.string())
    iso = pc.sum(pc.match_substring_regex(text, _ISO_DATE)).as_py() or 0
    if iso >= DATE_SHARE * n:
        feature.notes.append(
            "dates written YYYY-MM-DD: training reads their year, month and day of the week"
        )
        return
    parts = pc.extract_regex(text, _NUMERIC_DATE)
    found = parts.filter(parts.is_valid())
    if len(found) < DATE_SHARE * n:
        return
    a, b = (pc.min_max(pc.cast(found.field(i), pa.int64())).as_py() for i in (0, 2))
    first, second = a["max"], b["max"]
    if min(a["min"], b["min"]) < 1 or max(first, second) > 31 or min(first, second) > 12:
        return  # not days and months
    seps = found.field(1).unique().to_pylist()
    sep = seps[0] if len(seps) == 1 else "/"
    if first > 12:
        written = f"day first (dd{sep}mm{sep}YYYY)"
    elif second > 12:
        written = f"month first (mm{sep}dd{sep}YYYY)"
    else:
        written = (
            f"dd{sep}mm{sep}YYYY or mm{sep}dd{sep}YYYY (no value above 12 tells the day from the "
            "month)"
        )
    example = text[0].as_py().strip(SPACE)
    feature.notes.append(
        f"dates written {written}, e.g. {example!r}: kept as text; training reads only "
        "YYYY-MM-DD as dates, so as written it is a category (left out when nearly unique): "
        "write the dates as YYYY-MM-DD to train on them"
    )


# --- key and label ------------------------------------------------------------------------
