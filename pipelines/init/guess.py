"""The likely key and label of a config inferred from the records read (`pipelines.init.infer`
infers the features): a key is a feature named like one whose value differs in every sampled
record of every source; the label is a feature named like one (`label`, `target`, ...), else
one named like what public datasets predict (`species`, `income`, `median_house_value`), else a
column of few values at either end, commented out as a guess, or left unset with the reason.
An int label of two small values is suggested as two classes (`suggest_classes`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.init.infer import MAX_VALUES, Feature, doubt, is_empty_list, value_counts
from pipelines.init.sample import Sample

_KEY_NAMES = ("id", "key", "uid", "uuid", "guid")
_KEY_SUFFIXES = ("_id", "_key", "_uuid", "-id")
_LABEL_NAMES = ("label", "labels", "target", "class", "y", "outcome")
SMALL_CLASSES = (-1, 9)  # an int label of two values within these is suggested as two classes
FEW_UNLABELLED = 0.1  # a label missing in at most this share of sampled records is required
_LABEL_SUFFIXES = ("_label", "_target", "_class")
# Names of what public datasets are trained to predict (penguins' species, adult's income, ...),
# as whole names; and the last word of a number's name that says the same (median_house_value).
_TARGET_NAMES = (
    "species", "income", "price", "salary", "survived", "churn", "churned", "diagnosis",
    "quality", "sentiment", "rating", "fraud", "default", "defaulted", "response", "result",
    "category", "genre", "variety",
)  # fmt: skip
_TARGET_WORDS = ("price", "value", "cost", "revenue", "sales", "charges")


@dataclasses.dataclass
class Guess:
    """A suggested `key` or `label`: the feature, whether to write it uncommented, and why."""

    name: str | None
    sure: bool
    reason: str


def _is_key_name(name: str) -> bool:
    lower = name.lower()
    return lower in _KEY_NAMES or lower.endswith(_KEY_SUFFIXES) or bool(re.search("[a-z]Id$", name))


def _is_label_name(name: str) -> bool:
    lower = name.lower()
    return lower in _LABEL_NAMES or lower.endswith(_LABEL_SUFFIXES)


def _words(name: str) -> list[str]:
    """A column name's words, lower case: `MedianHouseValue`, `median-house value` → median,
    house, value."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def _is_target_name(f: Feature) -> bool:
    """Named like what a model is trained to predict: a whole name of _TARGET_NAMES (`income`,
    not `median_income`, a feature of the housing data), `is_` one of them, or a number whose
    last word is one of _TARGET_WORDS (`median_house_value`, `sale_price`)."""
    words = _words(f.name)
    if not words:
        return False
    named = "_".join(words[1:] if words[0] in ("is", "has") else words)  # is_fraud: fraud
    if named in _TARGET_NAMES:
        return True
    return f.type in ("int", "float") and words[-1] in _TARGET_WORDS


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
        repeats = len(f.canonical) - pc.count_distinct(f.canonical).as_py()
        if not f.required:
            reason = f"named like a key, but missing in {f.records - f.present:,} sampled records"
        elif repeats:
            where = " (values repeat across sources)" if _across_sources(f, samples) else ""
            reason = (
                f"named like a key, but {repeats:,} of {f.present:,} sampled records "
                f"{'repeats' if repeats == 1 else 'repeat'} an earlier value{where}: a key "
                "drops duplicate records"
            )
        elif f.name.lower() in _KEY_NAMES or all(s.whole for s in samples):
            return Guess(
                f.name,
                True,
                f"a different value in each of the {f.present:,} sampled records: duplicates of a "
                "key are dropped, and the split follows the key",
            )
        else:
            return Guess(
                f.name,
                False,
                f"a different value in each of the {f.present:,} sampled records, but the rest "
                "of the input was not read and a name like this may refer to another table: a "
                "key drops records sharing a value",
            )
        first_reason = first_reason or (f.name, reason)
    if first_reason is not None:
        return Guess(first_reason[0], False, first_reason[1])
    return Guess(None, False, "no feature named like a key (id, *_id, key) with unique values")


def _across_sources(feature: Feature, samples: list[Sample]) -> bool:
    """Whether a feature's values repeat only between sources (each source's are unique)."""
    holders = [s for s in samples if feature.name in s.names]
    if len(holders) < 2:
        return False
    start = 0
    for s in holders:
        n = sum(_count(values) for values, _ in s.parts(feature.name))
        own = feature.canonical.slice(start, n)
        if pc.count_distinct(own).as_py() != len(own):
            return False
        start += n
    return True


def _count(values: Any) -> int:
    """The present values of a part (a scalar feature's: an empty list is a missing value)."""
    if isinstance(values, pa.Array):
        return len(values) - values.null_count
    return sum(v is not None and not is_empty_list(v) for v in values)


def suggest_classes(features: list[Feature], label: Guess) -> None:
    """Gives a sure int label of two small values (0 and 1, 1 and 2, -1 and 1) `values:`, its
    classes, so that training treats it as a classification, not a regression; commented out
    on the rules of a string's values (not every record read, few records, a value seen once)."""
    found = [f for f in features if f.name == label.name and label.sure]
    if not found or found[0].type != "int" or found[0].shape != ():
        return
    f = found[0]
    counts = value_counts(f.canonical, 2)
    low, high = SMALL_CLASSES
    if counts is None or len(counts) != 2 or not all(low <= v <= high for v in counts):
        return
    f.values = sorted(counts)
    f.values_doubt = doubt(f, counts)
    f.notes.append("two classes: with `values` training classifies; without, it fits a regression")


def guess_label(features: list[Feature], key: Guess) -> Guess:
    """The label, by the column's name first, then by its role; unset (`name` None) with the
    reason when nothing points to one column. In order:

    - named like a label (label, target, class, y, outcome, *_label, ...): sure;
    - named like what datasets predict (species, income, price, *_price, *_value, ...): sure
      when one column is; none when several are (which one is for the user to say);
    - else the last column, or the first, when it has few distinct values that repeat (a
      class): a guess, written commented out; none when both are like that.

    Key-like columns (id, *_id, the key) are never the label."""
    candidates = [
        f
        for f in features
        if f.type in ("int", "float", "string")
        and f.shape == ()
        and f.name != key.name
        and not _is_key_name(f.name)
    ]
    named = [f for f in candidates if _is_label_name(f.name)]
    if named:
        return _named_label(named, "named like a label")
    likely = [f for f in candidates if _is_target_name(f)]
    if len(likely) == 1:
        return _named_label(
            likely, "named like what a model predicts, and no column is named label or target"
        )
    if likely:
        return Guess(
            None,
            False,
            f"unset: {_listed(likely)} are each named like what a model predicts; write the one "
            "it predicts",
        )
    return _label_by_role(candidates)


def _named_label(named: list[Feature], why: str) -> Guess:
    """The first of the features named like a label: sure, unless many records lack it."""
    f = named[0]
    others = f" (so are {', '.join(g.name for g in named[1:])})" if named[1:] else ""
    if not f.required:
        lacking = f.records - f.present
        missing = f"missing in {lacking:,} of {f.records:,} sampled records"
        if lacking > FEW_UNLABELLED * f.records:
            return Guess(f.name, False, f"{why}{others}, but {missing}")
        # a few records without it: the label, required, so that the ETL rejects them
        f.required = True
        f.notes.append(f"the label: required ({missing}, which the ETL rejects)")
    return Guess(f.name, True, f"{why}{others}")


def _label_by_role(candidates: list[Feature]) -> Guess:
    """A guess from the columns' places: the last (else the first) with few repeated values."""
    none = (
        "unset: no column is named like a label (label, target, class, y, species, price, ...) "
        "and neither the first nor the last column holds a few repeated values; write the "
        "feature the model predicts"
    )
    if not candidates:
        return Guess(None, False, none)
    ends = [candidates[-1]] if len(candidates) == 1 else [candidates[-1], candidates[0]]
    few = [(f, n) for f in ends if f.required and (n := _few_values(f)) is not None]
    if len(few) == 2:
        (last, n_last), (first, n_first) = few
        return Guess(
            None,
            False,
            f"unset: the first column {first.name!r} ({n_first} values) and the last "
            f"{last.name!r} ({n_last} values) could each be a class; write the one the model "
            "predicts",
        )
    if not few:
        return Guess(None, False, none)
    f, n = few[0]
    where = "last" if f is candidates[-1] else "first"
    return Guess(
        f.name,
        False,
        f"a guess: the {where} column, with {n} distinct values; uncomment it, or write the "
        "feature the model predicts",
    )


def _few_values(f: Feature) -> int | None:
    """How many distinct values a string or int feature has, when few that repeat (a class)."""
    if f.type == "string":
        return None if f.values is None else len(f.values)
    if f.type != "int":
        return None
    found = value_counts(f.canonical, MAX_VALUES)
    if not found or len(found) * 2 > len(f.canonical):
        return None
    return len(found)


def _listed(features: list[Feature]) -> str:
    names = [repr(f.name) for f in features]
    return ", ".join(names[:-1]) + f" and {names[-1]}"
