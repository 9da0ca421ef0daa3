"""statistics.json as typed, frozen dataclasses: the ETL builds `Statistics`, its readers read one.

A dataset's statistics hold, per split, its record count and, per feature, what its values
were: counts (records, missing, values), and by the feature's type

    int, float      min, max, mean, std (of the finite values; null without any), histogram
                    (bars of [low, high] and counts); `distinct` while the exact values were
                    counted, and their `counts` while there are at most a few (drift and skew
                    compare them as exact masses)
    string          distinct (exact, or estimated beyond 10,000: `distinct_exact`), the most
                    frequent values (`top`), the lengths in bytes (min, max, mean); all values'
                    `counts` while there are few enough
    bytes, image    the sizes in bytes (min, max, mean)

`Statistics.to_json()` is the file the ETL writes (the keys a type has, sorted when written);
`Statistics.from_json()` checks a file and raises StatisticsError naming the field that is
wrong (`statistics.json: splits.train.features.age.min: ...`). What the ETL wrote reads back
equal to itself, and writes back the same. No Beam and no TensorFlow here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from transforms.contract.layout import STATISTICS, STATISTICS_FORMAT_VERSION

NUMBER_TYPES = ("int", "float")
TEXT_TYPES = ("string",)


class StatisticsError(ValueError):
    """A statistics.json that breaks the contract."""


@dataclass(frozen=True)
class Bar:
    """One histogram bar: the values in [low, high] (the last bar's high included)."""

    low: float
    high: float
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "count": self.count}

    @classmethod
    def from_json(cls, raw: Any, at: str) -> Bar:
        check(isinstance(raw, dict), at, "must be an object")
        return cls(
            low=number(raw.get("low"), f"{at}.low"),
            high=number(raw.get("high"), f"{at}.high"),
            count=count(raw.get("count"), f"{at}.count"),
        )


@dataclass(frozen=True)
class ValueCount:
    """A value (a number, or a string's text) and the times it occurred."""

    value: Any
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "count": self.count}

    @classmethod
    def from_json(cls, raw: Any, at: str) -> ValueCount:
        check(isinstance(raw, dict) and "value" in raw, at, "must be a {value, count} object")
        value = raw["value"]
        check(
            isinstance(value, (str, int, float)) and not isinstance(value, bool),
            f"{at}.value",
            f"{value!r} is not a number or a text",
        )
        return cls(value=value, count=count(raw.get("count"), f"{at}.count"))


@dataclass(frozen=True)
class Sizes:
    """Lengths (strings) or sizes (bytes, images) in bytes; None without any value."""

    min: int | None = None
    max: int | None = None
    mean: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"min": self.min, "max": self.max, "mean": self.mean}

    @classmethod
    def from_json(cls, raw: Any, at: str) -> Sizes:
        check(isinstance(raw, dict), at, "must be an object")
        return cls(
            min=optional(count, raw.get("min"), f"{at}.min"),
            max=optional(count, raw.get("max"), f"{at}.max"),
            mean=optional(number, raw.get("mean"), f"{at}.mean"),
        )


@dataclass(frozen=True)
class FeatureStatistics:
    """One feature's statistics in one split (the fields of its type; the others None)."""

    type: str
    records: int
    missing: int
    missing_rate: float
    values: int
    # int, float
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    histogram: tuple[Bar, ...] | None = None
    # int, float (while counted) and string
    distinct: int | None = None
    counts: tuple[ValueCount, ...] | None = None
    # string
    distinct_exact: bool | None = None
    top: tuple[ValueCount, ...] | None = None
    length: Sizes | None = None
    # bytes, image
    size: Sizes | None = None

    @property
    def is_number(self) -> bool:
        return self.type in NUMBER_TYPES

    @property
    def is_text(self) -> bool:
        return self.type in TEXT_TYPES

    def count_of(self) -> dict[Any, int] | None:
        """{value: count} of every value, where they were all counted; else None."""
        if self.counts is None:
            return None
        return {c.value: c.count for c in self.counts}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "records": self.records,
            "missing": self.missing,
            "missing_rate": self.missing_rate,
            "values": self.values,
        }
        if self.is_number:
            out.update(
                min=self.min,
                max=self.max,
                mean=self.mean,
                std=self.std,
                histogram=[b.to_json() for b in self.histogram or ()],
            )
            if self.distinct is not None:
                out["distinct"] = self.distinct
        elif self.is_text:
            out.update(
                distinct=self.distinct,
                distinct_exact=self.distinct_exact,
                top=[v.to_json() for v in self.top or ()],
                length=(self.length or Sizes()).to_json(),
            )
        else:
            out["size"] = (self.size or Sizes()).to_json()
        if self.counts is not None:
            out["counts"] = [v.to_json() for v in self.counts]
        return out

    @classmethod
    def from_json(cls, raw: Any, at: str) -> FeatureStatistics:
        check(isinstance(raw, dict), at, "must be an object")
        kind = raw.get("type")
        check(isinstance(kind, str), f"{at}.type", f"{kind!r} is not a feature type")
        common = cls(
            type=kind,
            records=count(raw.get("records"), f"{at}.records"),
            missing=count(raw.get("missing"), f"{at}.missing"),
            missing_rate=number(raw.get("missing_rate"), f"{at}.missing_rate"),
            values=count(raw.get("values"), f"{at}.values"),
            counts=optional(_value_counts, raw.get("counts"), f"{at}.counts"),
        )
        if kind in NUMBER_TYPES:
            return replace(
                common,
                min=optional(number, raw.get("min"), f"{at}.min"),
                max=optional(number, raw.get("max"), f"{at}.max"),
                mean=optional(number, raw.get("mean"), f"{at}.mean"),
                std=optional(number, raw.get("std"), f"{at}.std"),
                histogram=_bars(raw.get("histogram", []), f"{at}.histogram"),
                distinct=optional(count, raw.get("distinct"), f"{at}.distinct"),
            )
        if kind in TEXT_TYPES:
            exact = raw.get("distinct_exact")
            check(isinstance(exact, bool), f"{at}.distinct_exact", f"{exact!r} is not a boolean")
            return replace(
                common,
                distinct=count(raw.get("distinct"), f"{at}.distinct"),
                distinct_exact=exact,
                top=_value_counts(raw.get("top", []), f"{at}.top"),
                length=Sizes.from_json(raw.get("length", {}), f"{at}.length"),
            )
        return replace(common, size=Sizes.from_json(raw.get("size", {}), f"{at}.size"))


@dataclass(frozen=True)
class SplitStatistics:
    """One split: its records, and each feature's statistics (by feature name)."""

    records: int
    features: Mapping[str, FeatureStatistics]

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "features": {name: s.to_json() for name, s in self.features.items()},
        }

    @classmethod
    def from_json(cls, raw: Any, at: str) -> SplitStatistics:
        check(isinstance(raw, dict), at, "must be an object")
        features = raw.get("features", {})
        check(isinstance(features, dict), f"{at}.features", "must be an object")
        return cls(
            records=count(raw.get("records"), f"{at}.records"),
            features={
                name: FeatureStatistics.from_json(s, f"{at}.features.{name}")
                for name, s in features.items()
            },
        )


@dataclass(frozen=True)
class Statistics:
    """A dataset's statistics.json: each split's (by split name, in split order)."""

    splits: Mapping[str, SplitStatistics]
    format_version: int = STATISTICS_FORMAT_VERSION

    def feature(self, split: str, name: str) -> FeatureStatistics | None:
        """A feature's statistics in a split; None where the split or the feature has none."""
        found = self.splits.get(split)
        return None if found is None else found.features.get(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "splits": {name: s.to_json() for name, s in self.splits.items()},
        }

    def dumps(self) -> str:
        """The text of statistics.json (keys sorted, indented by one)."""
        return json.dumps(self.to_json(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, raw: Any, where: str = STATISTICS) -> Statistics:
        """Checks a decoded statistics.json; raises StatisticsError naming `where` and the
        field that is wrong."""
        try:
            check(isinstance(raw, dict), "", "must be a JSON object")
            version = raw.get("format_version")
            check(
                type(version) is int and version == STATISTICS_FORMAT_VERSION,
                "format_version",
                f"{version!r}, not {STATISTICS_FORMAT_VERSION}",
            )
            splits = raw.get("splits")
            check(isinstance(splits, dict), "splits", "must be an object")
            return cls(
                splits={
                    name: SplitStatistics.from_json(s, f"splits.{name}")
                    for name, s in splits.items()
                },
                format_version=version,
            )
        except StatisticsError as e:
            raise StatisticsError(f"{where}: {e}") from None

    @classmethod
    def loads(cls, text: str | bytes, where: str = STATISTICS) -> Statistics:
        """Reads the text of a statistics.json; raises StatisticsError when it is not JSON or
        breaks the contract."""
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise StatisticsError(f"{where}: not JSON ({e})") from None
        return cls.from_json(raw, where)


def check(ok: bool, at: str, problem: str) -> None:
    if not ok:
        raise StatisticsError(f"{at}: {problem}" if at else problem)


def count(value: Any, at: str) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    check(ok, at, f"{value!r} is not a non-negative integer")
    return value


def number(value: Any, at: str) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    check(ok, at, f"{value!r} is not a number")
    return value


def optional(read, value: Any, at: str):
    return None if value is None else read(value, at)


def _value_counts(raw: Any, at: str) -> tuple[ValueCount, ...]:
    check(isinstance(raw, list), at, "must be a list")
    return tuple(ValueCount.from_json(v, f"{at}[{i}]") for i, v in enumerate(raw))


def _bars(raw: Any, at: str) -> tuple[Bar, ...]:
    check(isinstance(raw, list), at, "must be a list")
    return tuple(Bar.from_json(b, f"{at}[{i}]") for i, b in enumerate(raw))
