"""Schema validation and type coercion of one record against the dataset's features.

A record is a mapping of source name to that source's fields (one entry for a union, one per
joined source for a join). `Validator.validate` returns the typed value list of every feature or
raises `RecordError` whose `reason` names the feature and what is wrong, without the offending
value, so that reasons aggregate into the manifest's `rejected.reasons` counts.
"""

from __future__ import annotations

import io
import math
from typing import Any, Iterable, Mapping

from transforms.spec import FeatureSpec


class RecordError(ValueError):
    """An expected data error: the record is rejected with `reason`, the job goes on."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def coerce_scalar(feature: FeatureSpec, value: Any) -> Any:
    """One value to the feature's Python type: int, float, or bytes for string/bytes/image."""
    t = feature.type
    if t == "int":
        if isinstance(value, bool):
            raise RecordError(f"{feature.name}: not an integer")
        if isinstance(value, int):
            result = value
        elif isinstance(value, float) and value.is_integer():
            result = int(value)
        elif isinstance(value, str):
            try:
                result = int(value.strip())
            except ValueError:
                raise RecordError(f"{feature.name}: not an integer") from None
        else:
            raise RecordError(f"{feature.name}: not an integer")
        if not -(2**63) <= result < 2**63:
            raise RecordError(f"{feature.name}: integer out of int64 range")
        return result
    if t == "float":
        if isinstance(value, bool):
            raise RecordError(f"{feature.name}: not a number")
        if isinstance(value, (int, float)):
            result = float(value)
        elif isinstance(value, str):
            try:
                result = float(value)
            except ValueError:
                raise RecordError(f"{feature.name}: not a number") from None
        else:
            raise RecordError(f"{feature.name}: not a number")
        if math.isnan(result):
            raise RecordError(f"{feature.name}: not a number")
        return result
    if t == "string":
        if isinstance(value, str):
            return value.encode("utf-8")
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
        result = value.encode("utf-8")
    else:
        raise RecordError(f"{feature.name}: not bytes")
    if t == "image":
        _check_image(feature.name, result)
    return result


def _check_image(name: str, data: bytes) -> None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise RecordError(f"{name}: not a decodable image") from None


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
        if any(v not in allowed for v in items):
            raise RecordError(f"{feature.name}: not one of the allowed values")
    return items


def _allowed(feature: FeatureSpec) -> frozenset:
    if feature.type == "string":
        return frozenset(v.encode("utf-8") for v in feature.values)
    return frozenset(feature.values)


class Validator:
    """Turns records into typed feature lists, or raises RecordError.

    Built once per DoFn; holds per-feature lookups so the per-record loop does no planning.
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

    @property
    def features(self) -> tuple[FeatureSpec, ...]:
        return self._features

    def validate(self, record: Mapping[str, Mapping[str, Any]]) -> list[list[Any]]:
        """The typed value list of every feature, in feature order; missing optionals filled."""
        out = []
        for feature, candidates in zip(self._features, self._candidates):
            value, source = None, None
            for src, field in candidates:
                part = record.get(src)
                if part is not None:
                    value = part.get(field)
                    if value is not None:
                        source = src
                        break
            if value is None:
                if feature.required:
                    raise RecordError(f"{feature.name}: missing required value")
                out.append(list(feature.default) if feature.default is not None else [])
                continue
            out.append(coerce_feature(feature, value, self._list_delimiters.get(source)))
        return out
