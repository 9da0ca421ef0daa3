"""Schema validation and type coercion of one record against the dataset's features.

A record is a mapping of source name to that source's fields (one entry for a union, one per
joined source for a join). `Validator.validate` returns the typed value list of every feature or
raises `RecordError` whose `reason` names the feature and what is wrong, without the offending
value, so that reasons aggregate into the manifest's `rejected.reasons` counts. A value outside
a feature's `values` is the one reason that shows it: the reason's text names the allowed values
(the first MAX_ALLOWED_SHOWN, then `… N more`), the same for every value, and the value itself,
as `shown_value` writes it (cut at MAX_VALUE_CHARS, escaped like a Python literal: safe to print
on a terminal), travels beside it (`transforms.records.Reason`) to the rejected record's `value`.

Numbers given as text have one syntax, whichever path (Python or Arrow) reads them, with
optional ASCII whitespace (space, tab, CR, LF, VT, FF) around them:
- `int`: an optional sign and ASCII digits, `[+-]?[0-9]+` (`007` is 7); no digit separators
  (`1_000`), no other digits (full-width `１２`, Arabic-Indic `٣`), no exponent or fraction.
  Beyond int64: `integer out of int64 range`.
- `float`: an optional sign and ASCII decimal or scientific notation (`1`, `1.`, `.5`, `-1.5e3`),
  or `inf` / `infinity` in any case; everything else (`nan`, `1_000.5`, `0x10`) is `not a
  number`. A value is written as float32: a finite value that float32 would turn into infinity
  (magnitude at least 3.4028235677973366e38, e.g. `1e39`) is rejected as `outside float32
  range`, and a nonzero one it would turn into zero (magnitude at most 2**-150, about 7.0e-46,
  e.g. `1e-50`) as `too small for float32 (would be 0)`. Subnormal float32 values (down to
  about 1.4e-45) are kept. The same bounds apply to JSON numbers and typed (Parquet, ...)
  columns.
- Infinity (`inf`, `-Infinity`, a JSON `Infinity`, an inf in a Parquet, Avro or SQL float column)
  is rejected as `not a finite number (inf)` / `(-inf)` unless the feature allows it
  (`allow: [infinity]`, `FeatureSpec.allow`): a label or input holding one trains a model whose
  loss is NaN. NaN is never a value (`not a number`).

Longer than most modules because validation has one rule per value and two paths that must
agree word for word: whole columns through pyarrow compute, and single values through
`coerce_scalar` (a test compares them value by value).
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.contract.config import INFINITY, FeatureSpec
from transforms.encode import ARROW_TYPES
from transforms.records import Reason, RecordError


class SourceColumns(NamedTuple):
    """One source's fields for a batch of records: name → values aligned with the records."""

    columns: Mapping[str, list[Any] | pa.Array]
    text: bool = False  # every value is a str (or None): no per-value type inspection needed


# The number syntax of the module docstring. Python's int() and float() take more (digit
# separators, any Unicode digit, Unicode spaces): only text matching these is given to them.
SPACE = " \t\n\r\v\f"
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NONZERO_MANTISSA = re.compile(r"[^eE]*[1-9]")
_INF_TEXT = re.compile(r"[+-]?inf(?:inity)?", re.IGNORECASE)
_INT64_DIGITS = 19  # more significant digits than this is beyond int64 (and int()'s own limit)
# float32 rounds to nearest, ties to even: from halfway between its largest value and 2**128 a
# value becomes infinity; at or below half its smallest subnormal (2**-149), zero.
FLOAT32_OVERFLOW = 3.4028235677973366e38
FLOAT32_UNDERFLOW = 2.0**-150
MAX_VALUE_CHARS = 40  # of a value shown in a reason or beside it: values come from data
MAX_ALLOWED_SHOWN = 8  # allowed values a reason lists; the rest are counted
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.+-]+")  # an allowed value listed without quotes


def coerce_scalar(feature: FeatureSpec, value: Any) -> Any:
    """One value to the feature's Python type: int, float, or bytes for string/bytes/image."""
    t = feature.type
    if t == "int":
        return _coerce_int(feature.name, value)
    if t == "float":
        return _coerce_float(feature, value)
    if t == "string":
        if isinstance(value, str):
            try:
                return value.encode("utf-8")
            except UnicodeEncodeError:
                raise RecordError(
                    f"{feature.name}: not valid text in the source's encoding"
                ) from None
        if isinstance(value, bool):
            return b"true" if value else b"false"
        if isinstance(value, (int, float)):
            return str(value).encode("utf-8")
        if isinstance(value, bytes):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                raise RecordError(f"{feature.name}: not valid UTF-8") from None
            return value
        raise RecordError(f"{feature.name}: not a string")
    # bytes and image
    if isinstance(value, bytes):
        result = value
    elif isinstance(value, str):
        # surrogateescape gives back the bytes a reader could not decode (\udc80-\udcff); any
        # other lone surrogate (a JSON "\ud800") stands for no bytes at all
        try:
            result = value.encode("utf-8", errors="surrogateescape")
        except UnicodeEncodeError:
            raise RecordError(f"{feature.name}: not valid text in the source's encoding") from None
    else:
        raise RecordError(f"{feature.name}: not bytes")
    if t == "image":
        _check_image(feature.name, result)
    return result


def _coerce_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise RecordError(f"{name}: not an integer")
    if isinstance(value, int):
        result = value
    elif isinstance(value, float) and value.is_integer():
        result = int(value)
    elif isinstance(value, str):
        text = value.strip(SPACE)
        if not _INT_TEXT.fullmatch(text):
            raise RecordError(f"{name}: not an integer")
        if len(text.lstrip("+-").lstrip("0")) > _INT64_DIGITS:
            raise RecordError(f"{name}: integer out of int64 range")
        result = int(text)
    else:
        raise RecordError(f"{name}: not an integer")
    if not -(2**63) <= result < 2**63:
        raise RecordError(f"{name}: integer out of int64 range")
    return result


def _coerce_float(feature: FeatureSpec, value: Any) -> float:
    name = feature.name
    if isinstance(value, bool):
        raise RecordError(f"{name}: not a number")
    if isinstance(value, (int, float)):
        try:
            result = float(value)
        except OverflowError:  # a JSON integer beyond float64
            raise RecordError(f"{name}: outside float32 range") from None
    elif isinstance(value, str):
        text = value.strip(SPACE)
        if _DECIMAL_TEXT.fullmatch(text):
            result = float(text)
            if math.isinf(result):  # decimal text beyond float64, e.g. 1e400
                raise RecordError(f"{name}: outside float32 range")
            if result == 0.0 and _NONZERO_MANTISSA.match(text):  # under float64's, e.g. 1e-400
                raise RecordError(f"{name}: too small for float32 (would be 0)")
        elif _INF_TEXT.fullmatch(text):
            result = float(text)
        else:
            raise RecordError(f"{name}: not a number")
    else:
        raise RecordError(f"{name}: not a number")
    if math.isnan(result):
        raise RecordError(f"{name}: not a number")
    if math.isinf(result) and INFINITY not in feature.allow:
        raise RecordError(not_finite(feature, result))
    magnitude = abs(result)
    if FLOAT32_OVERFLOW <= magnitude < math.inf:
        raise RecordError(f"{name}: outside float32 range")
    if 0 < magnitude <= FLOAT32_UNDERFLOW:
        raise RecordError(f"{name}: too small for float32 (would be 0)")
    return result


def not_finite(feature: FeatureSpec, value: float) -> str:
    """The reason of an infinity in a float feature that does not allow one."""
    return f"{feature.name}: not a finite number ({'-inf' if value < 0 else 'inf'})"


def _check_image(name: str, data: bytes) -> None:
    # The images source's own check (one pixel limit, the same reasons); imported here because
    # transforms.imaging imports this module.
    from transforms.imaging import decode

    decode(data, name).close()


def coerce_feature(
    feature: FeatureSpec, value: Any, list_delimiter: str | None = None
) -> list[Any]:
    """A present value to the feature's list of typed values, checked against shape and range.

    `list_delimiter` splits a text cell into a list (CSV sources) for non-scalar features.
    """
    if feature.is_scalar:
        if isinstance(value, (list, tuple)):
            if len(value) != 1:
                raise RecordError(f"{feature.name}: expected one value, got a list")
            value = value[0]
        items = [coerce_scalar(feature, value)]
    else:
        if isinstance(value, str) and list_delimiter is not None:
            value = value.split(list_delimiter) if value else []
        elif not isinstance(value, (list, tuple)):
            raise RecordError(f"{feature.name}: expected a list")
        items = [coerce_scalar(feature, v) for v in value]
        n = feature.shape[0]
        if n is not None and len(items) != n:
            raise RecordError(f"{feature.name}: expected {n} values")
    if feature.min is not None and any(v < feature.min for v in items):
        raise RecordError(f"{feature.name}: below min {feature.min:g}")
    if feature.max is not None and any(v > feature.max for v in items):
        raise RecordError(f"{feature.name}: above max {feature.max:g}")
    if feature.values is not None:
        allowed = _allowed(feature)
        for v in items:
            if v not in allowed:
                raise RecordError(Reason(not_allowed(feature), shown_value(v)))
    return items


def not_allowed(feature: FeatureSpec) -> str:
    """The reason of a value outside the feature's `values`, naming them (the first
    MAX_ALLOWED_SHOWN, then how many more): `species: not one of the allowed values [Adelie,
    Chinstrap, Gentoo]`. A value is listed as it is when plain (letters, digits, `_.+-`), else
    as `shown_value` writes it."""
    values = feature.values or ()
    listed = [_listed(v) for v in values[:MAX_ALLOWED_SHOWN]]
    if len(values) > MAX_ALLOWED_SHOWN:
        listed.append(f"… {len(values) - MAX_ALLOWED_SHOWN} more")
    return f"{feature.name}: not one of the allowed values [{', '.join(listed)}]"


def _listed(value: Any) -> str:
    text = str(value)
    plain = _PLAIN_VALUE.fullmatch(text) is not None and len(text) <= MAX_VALUE_CHARS
    return text if plain else shown_value(value)


def shown_value(value: Any) -> str:
    """A typed value as a rejection shows it: text (bytes as UTF-8) cut at MAX_VALUE_CHARS
    (ending in `…`) and written as a Python literal, which escapes what a terminal would act on
    (control characters, direction marks); a number as it is."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "backslashreplace")
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        value = value[: MAX_VALUE_CHARS - 1] + "…"
    return repr(value)


def _allowed(feature: FeatureSpec) -> frozenset:
    values = feature.values or ()
    if feature.type == "string":
        return frozenset(v.encode("utf-8") for v in values)
    return frozenset(values)


_NUMBER_PATTERNS = {
    # Text the vectorized cast may take (after trimming ASCII whitespace, as `SPACE`); anything
    # else gets the Python path and its reasons: the inf spellings, and text that is no number.
    "int": f"^{_INT_TEXT.pattern}$",
    "float": f"^{_DECIMAL_TEXT.pattern}$",
}
_VALUE_TYPES = {"int": pa.int64(), "float": pa.float64(), "string": pa.binary()}
_EXACT: dict[str, set[type]] = {"int": {int}, "float": {int, float}, "string": {str}}


class Validator:
    """Types and checks records a batch at a time, column by column.

    Scalar int, float and string columns are converted and checked with Arrow compute; values the
    vectorized path cannot take (odd text, mixed JSON types) go through `coerce_feature`, which
    also gives every reason. A record's reason is that of its first failing feature.
    """

    def __init__(
        self,
        features: Iterable[FeatureSpec],
        source_order: Iterable[str],
        list_delimiters: Mapping[str, str] | None = None,
    ):
        self._features = tuple(features)
        sources = tuple(source_order)
        self._list_delimiters = dict(list_delimiters or {})
        # For each feature: the (source, field) candidates to take its value from, in order.
        self._candidates = [
            ((f.source, f.field_name),) if f.source else tuple((s, f.name) for s in sources)
            for f in self._features
        ]

    def validate(
        self, n: int, tables: Mapping[str, SourceColumns]
    ) -> tuple[list[pa.Array], dict[int, str]]:
        """(one list array per feature over the `n` records, {record index: reason} of rejects).

        `tables` maps a source name to its fields as columns aligned with the records (None where
        a record has no value from that source). Rejected records hold an empty list in every
        column; drop them before use.
        """
        reasons: dict[int, str] = {}
        columns = []
        for feature, candidates in zip(self._features, self._candidates):
            values, sources, text = _resolve(n, tables, candidates)
            if feature.is_scalar and not text:
                values = _scalar_values(values)
            if feature.is_scalar and feature.type in _VALUE_TYPES:
                array = _scalar_column(feature, values, text, reasons)
                columns.append(_as_lists(feature, array, reasons))
            else:
                columns.append(self._python_column(feature, values, sources, reasons))
        return columns, reasons

    def _python_column(self, feature, values, sources, reasons) -> pa.Array:
        rows = []
        default = list(feature.default) if feature.default is not None else []
        for i, value in enumerate(_pylist(values)):
            if value is None:
                if feature.required:
                    reasons.setdefault(i, f"{feature.name}: missing required value")
                rows.append(default)
                continue
            try:
                rows.append(coerce_feature(feature, value, self._list_delimiters.get(sources[i])))
            except RecordError as e:
                reasons.setdefault(i, e.reason)
                rows.append([])
        return pa.array(rows, pa.list_(ARROW_TYPES[feature.type]))


def _resolve(
    n: int, tables: Mapping[str, SourceColumns], candidates
) -> tuple[list[Any], list[str | None], bool]:
    """The raw values of one feature in every record, the source of each, whether all are text."""
    found = []
    for src, field in candidates:
        table = tables.get(src)
        if table is not None and field in table.columns:
            found.append((src, table.columns[field], table.text))
    if not found:
        return [None] * n, [None] * n, True
    if len(found) == 1:
        src, values, text = found[0]
        return values, [src] * n, text
    values, sources = [], []
    for row in zip(*(_pylist(column) for _, column, _ in found)):
        for (src, _, _), value in zip(found, row):
            if value is not None:
                values.append(value)
                sources.append(src)
                break
        else:
            values.append(None)
            sources.append(None)
    return values, sources, all(text for _, _, text in found)


def _scalar_values(values: list[Any] | pa.Array) -> list[Any] | pa.Array:
    """The values of a scalar feature with lists unwrapped: a one-element list is its element,
    an empty list a missing value (how a tf.train.Example holds a scalar, and how a missing one
    is written); a longer list stays, to be rejected."""
    if isinstance(values, pa.Array):
        if not (pa.types.is_list(values.type) or pa.types.is_large_list(values.type)):
            return values
        values = values.to_pylist()
    if not any(isinstance(v, (list, tuple)) for v in values):
        return values
    return [
        (v[0] if len(v) == 1 else v if v else None) if isinstance(v, (list, tuple)) else v
        for v in values
    ]


def _pylist(values: list[Any] | pa.Array) -> list[Any]:
    return values.to_pylist() if isinstance(values, pa.Array) else values


def _scalar_column(
    feature: FeatureSpec, values: list[Any], text: bool, reasons: dict[int, str]
) -> pa.Array:
    """The typed values of a scalar feature (null where missing or invalid); records reasons."""
    t = feature.type
    if isinstance(values, pa.Array) and not text:
        array = _typed_arrow(t, values)  # typed columns (Parquet, ...) need no per-value look
        if array is not None:
            if t == "string":
                array = array.cast(pa.binary())
            if t == "float":
                array = _check_float32(feature, array, reasons)
            _check_ranges(feature, array, reasons)
            return array
    kinds: set[type]
    if text:
        kinds = {str}
    else:
        values = _pylist(values)
        kinds = {type(v) for v in values}
        kinds.discard(type(None))
    array = None
    if kinds <= {str} and t in _NUMBER_PATTERNS:
        array = _parse_numbers(feature, values, reasons)
    elif kinds <= _EXACT[t]:
        try:
            if isinstance(values, pa.Array):  # Arrow text from the CSV reader
                array = values
            else:
                array = pa.array(values, pa.string() if t == "string" else _VALUE_TYPES[t])
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, UnicodeEncodeError):
            array = None
        if array is not None and t == "float" and pc.any(pc.is_nan(array)).as_py():
            array = None
    if array is None:
        array = _python_scalars(feature, values, reasons)
    if t == "string":
        array = array.cast(pa.binary())
    if t == "float":
        array = _check_float32(feature, array, reasons)
    _check_ranges(feature, array, reasons)
    return array


def _check_float32(feature: FeatureSpec, array: pa.Array, reasons: dict[int, str]) -> pa.Array:
    """The float64 values with those float32 cannot hold (they would become infinity or zero)
    and the infinities the feature does not allow as nulls, their records' reasons recorded; the
    vector form of `_coerce_float`'s bounds."""
    magnitude = pc.abs(array)
    checks = [
        (
            pc.and_(pc.greater_equal(magnitude, FLOAT32_OVERFLOW), pc.is_finite(array)),
            f"{feature.name}: outside float32 range",
        ),
        (
            pc.and_(pc.greater(magnitude, 0), pc.less_equal(magnitude, FLOAT32_UNDERFLOW)),
            f"{feature.name}: too small for float32 (would be 0)",
        ),
    ]
    if INFINITY not in feature.allow:
        checks += [
            (pc.equal(array, math.inf), not_finite(feature, math.inf)),
            (pc.equal(array, -math.inf), not_finite(feature, -math.inf)),
        ]
    bad = None
    for mask, reason in checks:
        mask = pc.fill_null(mask, False)
        if pc.any(mask).as_py():
            for i in pc.indices_nonzero(mask).to_pylist():
                reasons.setdefault(i, reason)
            bad = mask if bad is None else pc.or_(bad, mask)
    if bad is None:
        return array
    return pc.if_else(bad, pa.scalar(None, array.type), array)


def _typed_arrow(t: str, values: pa.Array) -> pa.Array | None:
    """A typed Arrow column as the feature's value type, when that is lossless; else None.

    Integers to int; integers and floats (never NaN) to float; text to string. Anything else
    (floats to int, bools, binary, out-of-range unsigned) takes the Python path and its reasons.
    """
    kind = values.type
    try:
        if t == "int" and pa.types.is_integer(kind):
            return values.cast(pa.int64())
        if t == "float" and (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            array = values.cast(pa.float64())
            return None if pc.any(pc.is_nan(array)).as_py() else array
        if t == "string" and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            return values.cast(pa.string())
    except (pa.ArrowInvalid, OverflowError):
        return None
    return None


def _parse_numbers(feature, values, reasons) -> pa.Array:
    try:
        if not isinstance(values, pa.Array):
            values = pa.array(values, pa.string())
        text = pc.ascii_trim_whitespace(values)  # only ASCII, as the Python path's SPACE
    except UnicodeEncodeError:  # undecodable input bytes: let Python give the reasons
        return _python_scalars(feature, values, reasons)
    ok = pc.fill_null(pc.match_substring_regex(text, _NUMBER_PATTERNS[feature.type]), True)
    odd = [i for i, good in enumerate(ok.to_pylist()) if not good] if not pc.all(ok).as_py() else []
    clean = pc.if_else(ok, text, pa.scalar(None, pa.string())) if odd else text
    try:
        array = clean.cast(_VALUE_TYPES[feature.type])
    except (pa.ArrowInvalid, OverflowError):
        return _python_scalars(feature, values, reasons)
    if feature.type == "float":
        # Only decimal text was cast: an infinity here is a number beyond float64 (1e400).
        over = pc.fill_null(pc.is_inf(array), False)
        if pc.any(over).as_py():
            for i in pc.indices_nonzero(over).to_pylist():
                reasons.setdefault(i, f"{feature.name}: outside float32 range")
            array = pc.if_else(over, pa.scalar(None, array.type), array)
        # A zero from nonzero digits is a number under float64's smallest (1e-400).
        under = pc.fill_null(
            pc.and_(pc.equal(array, 0.0), pc.match_substring_regex(clean, r"^[^eE]*[1-9]")),
            False,
        )
        if pc.any(under).as_py():
            for i in pc.indices_nonzero(under).to_pylist():
                reasons.setdefault(i, f"{feature.name}: too small for float32 (would be 0)")
            array = pc.if_else(under, pa.scalar(None, array.type), array)
    if not odd:
        return array
    fixed = array.to_pylist()
    values = _pylist(values)
    for i in odd:
        try:
            fixed[i] = coerce_feature(feature, values[i])[0]
        except RecordError as e:
            reasons.setdefault(i, e.reason)
    return pa.array(fixed, _VALUE_TYPES[feature.type])


def _python_scalars(feature, values, reasons) -> pa.Array:
    out: list[Any] = []
    for i, value in enumerate(_pylist(values)):
        if value is None:
            out.append(None)
            continue
        try:
            out.append(coerce_feature(feature, value)[0])
        except RecordError as e:
            reasons.setdefault(i, e.reason)
            out.append(None)
    arrow_type = pa.binary() if feature.type == "string" else _VALUE_TYPES[feature.type]
    return pa.array(out, arrow_type)


def _check_ranges(feature: FeatureSpec, array: pa.Array, reasons: dict[int, str]) -> None:
    checks = []
    # a float feature's int bound may lie beyond int64, which Arrow takes only as a float
    bound = float if pa.types.is_floating(array.type) else (lambda b: b)
    if feature.min is not None:
        low = bound(feature.min)
        checks.append((pc.less(array, low), f"{feature.name}: below min {feature.min:g}"))
    if feature.max is not None:
        high = bound(feature.max)
        checks.append((pc.greater(array, high), f"{feature.name}: above max {feature.max:g}"))
    for mask, reason in checks:
        mask = pc.fill_null(mask, False)
        if pc.any(mask).as_py():
            for i in pc.indices_nonzero(mask).to_pylist():
                reasons.setdefault(i, reason)
    if feature.values is not None:
        allowed = pa.array(sorted(_allowed(feature)), array.type)
        outside = pc.invert(pc.is_in(array, value_set=allowed))
        bad = pc.fill_null(pc.and_(pc.is_valid(array), outside), False)
        if pc.any(bad).as_py():
            text = not_allowed(feature)
            shown: dict[Any, Reason] = {}  # one Reason per distinct value
            for i, value in zip(pc.indices_nonzero(bad).to_pylist(), array.filter(bad).to_pylist()):
                if i not in reasons:
                    if value not in shown:
                        shown[value] = Reason(text, shown_value(value))
                    reasons[i] = shown[value]


def _as_lists(feature: FeatureSpec, array: pa.Array, reasons: dict[int, str]) -> pa.Array:
    """Scalars as one-element lists; a missing value becomes the default or an empty list."""
    if array.null_count:
        if feature.required:
            for i in pc.indices_nonzero(pc.is_null(array)).to_pylist():
                reasons.setdefault(i, f"{feature.name}: missing required value")
        if feature.default is not None:
            array = pc.fill_null(array, pa.scalar(feature.default[0], array.type))
    if feature.type == "float":
        array = array.cast(pa.float32(), safe=False)
    if not array.null_count:
        offsets = pa.array(np.arange(len(array) + 1, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, array)
    valid = pc.cast(pc.is_valid(array), pa.int32())
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(valid)])
    return pa.ListArray.from_arrays(offsets, array.drop_null())
