"""facts.json as typed, frozen dataclasses: what a model is built from, counted by the ETL over
every record of each split (`transforms.facts`), read by the trainer and the readers.

Per split, per feature (the label too), by the feature's type:

    every feature   records, missing (records without a value), values
    string          vocabulary: every value while there are at most `vocabulary_cap`, else the
                    most frequent ones (ties by value, in byte order); counts: the records
                    holding each; distinct (exact); outside: the counts of the values beyond
                    the cap, added (for a scalar feature, the records whose value is not in
                    the vocabulary)
    int, float      finite (values that are finite), min, max, mean, std (exact); quantiles:
                    QUANTILES + 1 boundaries, at every 1/QUANTILES of the finite values (as
                    numpy's default `np.quantile`), exact while a number has at most 1,000
                    distinct values (`quantiles_exact`), else within `quantile_error` of the
                    value (relative); distinct (exact while few, else estimated, about 3%
                    off); value_counts while there are at most COUNTED_NUMBERS values

The label: its classes with their train records (None for a regression), the task and why, and
the task its values suggest when that differs (an int label with few values). Rows: over every
split, records whose content (every feature but the label and the key) and label repeat
another's, records whose content repeats with another label, and records whose row occurs in
more than one split.

`Facts.dumps()` is the file the ETL writes (keys sorted: the same bytes for the same data);
`Facts.loads()` checks a file and raises FactsError naming the field that is wrong. No Beam and
no TensorFlow here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from transforms.contract.layout import FACTS, FACTS_FORMAT_VERSION
from transforms.contract.statistics import StatisticsError
from transforms.contract.statistics import check as _check
from transforms.contract.statistics import count as _count
from transforms.contract.statistics import number as _number
from transforms.contract.statistics import optional as _optional

VOCABULARY_CAP = 100_000  # values a vocabulary keeps, by default
QUANTILES = 200  # quantile boundaries at every 0.5% of the values
QUANTILE_ERROR = 0.005  # relative error of a sketched quantile
COUNTED_NUMBERS = 100  # a number's value counts are listed while it has at most this many
CLASSIFICATION, REGRESSION = "classification", "regression"
REPEATED_SHARE = 0.01  # repeated rows of this share of the records or more are told to users


class FactsError(ValueError):
    """A facts.json that breaks the contract (its checks are statistics.json's, whose
    StatisticsError `Facts.from_json` gives as this)."""


@dataclass(frozen=True)
class Count:
    """A value (a number, or a string's text) and the records holding it."""

    value: Any
    count: int

    def to_json(self) -> list:
        return [self.value, self.count]

    @classmethod
    def from_json(cls, raw: Any, at: str) -> Count:
        _check(isinstance(raw, list) and len(raw) == 2, at, "must be a [value, count] pair")
        value, count = raw
        _check(
            isinstance(value, (str, int, float)) and not isinstance(value, bool),
            at,
            f"{value!r} is not a number or a text",
        )
        return cls(value, _count(count, at))


@dataclass(frozen=True)
class FeatureFacts:
    """One feature's facts in one split (the fields of its type; the others None)."""

    type: str
    records: int
    missing: int
    values: int
    distinct: int | None = None
    distinct_exact: bool | None = None
    # string
    vocabulary: tuple[str, ...] | None = None
    counts: tuple[int, ...] | None = None
    outside: int | None = None
    # int, float
    finite: int | None = None
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    quantiles: tuple[float, ...] | None = None
    quantiles_exact: bool | None = None
    value_counts: tuple[Count, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value is None:
                continue
            if name == "value_counts":
                value = [c.to_json() for c in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out

    @classmethod
    def from_json(cls, raw: Any, at: str) -> FeatureFacts:
        _check(isinstance(raw, dict), at, "must be an object")
        kind = raw.get("type")
        _check(isinstance(kind, str), f"{at}.type", f"{kind!r} is not a feature type")
        vocabulary = _optional(_texts, raw.get("vocabulary"), f"{at}.vocabulary")
        counts = _optional(_counts, raw.get("counts"), f"{at}.counts")
        _check(
            (vocabulary is None) == (counts is None)
            and (vocabulary is None or len(vocabulary) == len(counts or ())),
            f"{at}.counts",
            "must hold one count per vocabulary value",
        )
        exact = raw.get("distinct_exact")
        _check(exact is None or isinstance(exact, bool), f"{at}.distinct_exact", "not a boolean")
        qexact = raw.get("quantiles_exact")
        _check(qexact is None or isinstance(qexact, bool), f"{at}.quantiles_exact", "not a boolean")
        value_counts = raw.get("value_counts")
        if value_counts is not None:
            _check(isinstance(value_counts, list), f"{at}.value_counts", "must be a list")
        return cls(
            type=kind,
            records=_count(raw.get("records"), f"{at}.records"),
            missing=_count(raw.get("missing"), f"{at}.missing"),
            values=_count(raw.get("values"), f"{at}.values"),
            distinct=_optional(_count, raw.get("distinct"), f"{at}.distinct"),
            distinct_exact=exact,
            vocabulary=vocabulary,
            counts=counts,
            outside=_optional(_count, raw.get("outside"), f"{at}.outside"),
            finite=_optional(_count, raw.get("finite"), f"{at}.finite"),
            min=_optional(_number, raw.get("min"), f"{at}.min"),
            max=_optional(_number, raw.get("max"), f"{at}.max"),
            mean=_optional(_number, raw.get("mean"), f"{at}.mean"),
            std=_optional(_number, raw.get("std"), f"{at}.std"),
            quantiles=_optional(_numbers, raw.get("quantiles"), f"{at}.quantiles"),
            quantiles_exact=qexact,
            value_counts=None
            if value_counts is None
            else tuple(
                Count.from_json(c, f"{at}.value_counts[{i}]") for i, c in enumerate(value_counts)
            ),
        )


@dataclass(frozen=True)
class SplitFacts:
    """One split: its records, and each feature's facts (by feature name)."""

    records: int
    features: Mapping[str, FeatureFacts]

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "features": {name: f.to_json() for name, f in self.features.items()},
        }

    @classmethod
    def from_json(cls, raw: Any, at: str) -> SplitFacts:
        _check(isinstance(raw, dict), at, "must be an object")
        features = raw.get("features", {})
        _check(isinstance(features, dict), f"{at}.features", "must be an object")
        return cls(
            records=_count(raw.get("records"), f"{at}.records"),
            features={
                name: FeatureFacts.from_json(f, f"{at}.features.{name}")
                for name, f in features.items()
            },
        )


@dataclass(frozen=True)
class LabelFacts:
    """The label: its name, task (`classification` when it has classes, else `regression`)
    and why, its classes with their train records (a classification's; sorted by value unless
    the config lists them), and `suggested`: another task its train values suggest."""

    name: str
    task: str
    reason: str
    classes: tuple[Count, ...] | None
    suggested: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "task": self.task, "reason": self.reason}
        out["classes"] = None if self.classes is None else [c.to_json() for c in self.classes]
        if self.suggested is not None:
            out["suggested"] = self.suggested
        return out

    @classmethod
    def from_json(cls, raw: Any, at: str) -> LabelFacts:
        _check(isinstance(raw, dict), at, "must be an object")
        name, task, reason = raw.get("name"), raw.get("task"), raw.get("reason")
        _check(isinstance(name, str), f"{at}.name", f"{name!r} is not a feature name")
        _check(task in (CLASSIFICATION, REGRESSION), f"{at}.task", f"{task!r} is not a task")
        _check(isinstance(reason, str), f"{at}.reason", "must be a text")
        classes = raw.get("classes")
        _check(classes is None or isinstance(classes, list), f"{at}.classes", "must be a list")
        suggested = raw.get("suggested")
        _check(
            suggested in (None, CLASSIFICATION, REGRESSION),
            f"{at}.suggested",
            f"{suggested!r} is not a task",
        )
        return cls(
            name=name,
            task=task,
            reason=reason,
            classes=None
            if classes is None
            else tuple(Count.from_json(c, f"{at}.classes[{i}]") for i, c in enumerate(classes)),
            suggested=suggested,
        )


@dataclass(frozen=True)
class RowFacts:
    """Records that repeat, over every split: `repeated` copies (each after the first) of
    `repeated_rows` distinct rows; `conflicting` records in `conflicting_rows` contents that
    occur with several labels; `across_splits` records whose row occurs in several splits."""

    records: int = 0
    repeated: int = 0
    repeated_rows: int = 0
    conflicting: int = 0
    conflicting_rows: int = 0
    across_splits: int = 0

    def to_json(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, raw: Any, at: str) -> RowFacts:
        _check(isinstance(raw, dict), at, "must be an object")
        return cls(**{n: _count(raw.get(n, 0), f"{at}.{n}") for n in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Facts:
    """A dataset's facts.json."""

    vocabulary_cap: int
    splits: Mapping[str, SplitFacts]
    label: LabelFacts | None
    rows: RowFacts
    quantile_error: float = QUANTILE_ERROR
    format_version: int = FACTS_FORMAT_VERSION

    def feature(self, split: str, name: str) -> FeatureFacts | None:
        """A feature's facts in a split; None where the split or the feature has none."""
        found = self.splits.get(split)
        return None if found is None else found.features.get(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "vocabulary_cap": self.vocabulary_cap,
            "quantile_error": self.quantile_error,
            "splits": {name: s.to_json() for name, s in self.splits.items()},
            "label": None if self.label is None else self.label.to_json(),
            "rows": self.rows.to_json(),
        }

    def dumps(self) -> str:
        """The text of facts.json: keys sorted, compact, on one line (written by the json
        module's C encoder: an indented text of 100,000-word vocabularies would take seconds
        and hundreds of megabytes of pieces)."""
        text = json.dumps(self.to_json(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return text + "\n"

    @classmethod
    def from_json(cls, raw: Any, where: str = FACTS) -> Facts:
        try:
            _check(isinstance(raw, dict), "", "must be a JSON object")
            version = raw.get("format_version")
            _check(
                type(version) is int and version == FACTS_FORMAT_VERSION,
                "format_version",
                f"{version!r}, not {FACTS_FORMAT_VERSION}",
            )
            splits = raw.get("splits")
            _check(isinstance(splits, dict), "splits", "must be an object")
            label = raw.get("label")
            return cls(
                vocabulary_cap=_count(raw.get("vocabulary_cap"), "vocabulary_cap"),
                quantile_error=_number(raw.get("quantile_error"), "quantile_error"),
                splits={
                    name: SplitFacts.from_json(s, f"splits.{name}") for name, s in splits.items()
                },
                label=None if label is None else LabelFacts.from_json(label, "label"),
                rows=RowFacts.from_json(raw.get("rows", {}), "rows"),
                format_version=version,
            )
        except StatisticsError as e:
            raise FactsError(f"{where}: {e}") from None

    @classmethod
    def loads(cls, text: str | bytes, where: str = FACTS) -> Facts:
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise FactsError(f"{where}: not JSON ({e})") from None
        return cls.from_json(raw, where)


def _texts(raw: Any, at: str) -> tuple[str, ...]:
    _check(isinstance(raw, list) and all(isinstance(v, str) for v in raw), at, "must be texts")
    return tuple(raw)


def _counts(raw: Any, at: str) -> tuple[int, ...]:
    _check(isinstance(raw, list), at, "must be a list")
    if all(type(v) is int and v >= 0 for v in raw):  # a vocabulary's 100,000 counts at once
        return tuple(raw)
    return tuple(_count(v, f"{at}[{i}]") for i, v in enumerate(raw))  # names the first wrong


def _numbers(raw: Any, at: str) -> tuple[float, ...]:
    _check(isinstance(raw, list), at, "must be a list")
    return tuple(_number(v, f"{at}[{i}]") for i, v in enumerate(raw))
