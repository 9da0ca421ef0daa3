"""The recipe's words: what a label's task is, what a model input is, how its ids were made,
and the few functions that tell a feature's kind of values (`dtype_of`), its presence input,
a date's parts and free text's words. No Keras here: the recipe (trainer.recipe.rules) decides
in these words, the Keras wing (trainer.keras.preprocess, trainer.keras.model) builds them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from trainer.dataset.manifest import InputFeature, ManifestError
from transforms.contract.config import FEATURE_DTYPES, PRESENT_SUFFIX

CLASSIFICATION = "classification"

REGRESSION = "regression"


@dataclasses.dataclass(frozen=True)
class LabelScale:
    """A regression label as the model learns it: (f(y) - mean) / std, f the identity or log.
    Predictions are brought back to the label's units and kept within [low, high], the train
    labels' range widened by a tenth on each side (in the learned scale)."""

    mean: float
    std: float
    log: bool = False
    low: float = -math.inf  # bounds of the standardized prediction
    high: float = math.inf

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def dtype_of(feature: InputFeature) -> tf.DType:
    """The tensor dtype of a feature: int64, float32 or string."""
    return tf.as_dtype(FEATURE_DTYPES[feature.type])


def fill_value(feature: InputFeature) -> int | float | str:
    """What stands in for a missing value of an optional feature without default."""
    if feature.buckets is not None:
        return -1
    return "" if dtype_of(feature) == tf.string else 0


def presence_key(name: str) -> str:
    """The dense-input key of a feature's presence indicator."""
    return name + PRESENT_SUFFIX


def has_presence(feature: InputFeature) -> bool:
    """True for numeric fixed-shape features that may be missing (they get a presence input).

    Category ids (`buckets`) need none: a missing id is an id outside the buckets.
    """
    return (
        feature.type in ("int", "float")
        and feature.buckets is None
        and not feature.variable_length
        and not feature.always_full
    )


def label_task(feature: InputFeature) -> str:
    """`classification` (a string or int label with `values`) or `regression` (numeric). The
    label is a scalar; records without it (an optional label) are left out of training and
    evaluation (trainer.keras.input)."""
    if feature.shape != ():
        raise ManifestError(
            f"label {feature.name!r}: must be a scalar (shape []), got shape {list(feature.shape)}"
        )
    if feature.values is not None:
        return CLASSIFICATION
    if feature.type in ("int", "float"):
        return REGRESSION
    raise ManifestError(
        f"label {feature.name!r}: a {feature.type} label needs `values` (its classes) to be learned"
    )


@dataclass(frozen=True)
class Moments:
    """Mean and variance of a numeric feature, shaped like one example's value."""

    mean: np.ndarray
    variance: np.ndarray


# What a model input is (ModelInput.kind).
NUMBER = "number"  # float32 values of a numeric feature, shaped like the feature

PRESENCE = "presence"  # float32 [batch]: 1 where the numeric feature NAME has a value

CATEGORY = "category"  # int32 ids in [0, vocabulary_size), shaped [batch, size]

TOKENS = "tokens"  # int32 ids [batch, n] of a variable-length list or of free text's words, padded

IMAGE = "image"  # float32 [batch, height, width, channels] in [0, 1]: decoded, resized

# How the ids of a CATEGORY or TOKENS input were made (ModelInput.ids).
FROM_VALUES = "values"  # the index in the feature's `values`; 0: not one of them

FROM_HASH = "hash"  # a hash bucket of the string

FROM_VOCABULARY = "vocabulary"  # the index in the train split's most frequent values; 0/1: other

FROM_TRANSFORM = "transform"  # a tf.Transform output's ids; -1 (missing) is outside the range

MAX_WORDS = 256  # the words of a free-text value that are kept: its first ones


@dataclass(frozen=True)
class ModelInput:
    """One dense numeric tensor the device model receives, keyed by `name` in the batch dict;
    what it is and how it is made were decided by `trainer.recipe.rules`.

    `shape` is one example's (`None`: a variable-length list). A CATEGORY or TOKENS input:
    `vocabulary_size` bounds its ids, `ids` says how they were made (`vocabulary` lists the
    values of FROM_VOCABULARY ids), `padding` is the id past a TOKENS row's values, `width` the
    embedding's dimensions (None: one-hot). A NUMBER input: `scale` (`log`: log(1 + x /
    `log_unit`)), `part` (a date's part, or `present` for a date's presence), `bins` (the edges
    of its pieces, trainer.keras.layers.Numbers) and, once computed, its `moments` over the
    train split (trainer.recipe.moments).
    """

    name: str
    kind: str
    dtype: tf.DType
    shape: tuple[int | None, ...]
    feature: InputFeature
    vocabulary_size: int | None = None
    ids: str | None = None
    padding: int | None = None
    vocabulary: tuple | None = None
    width: int | None = None
    scale: str = "linear"
    log_unit: float | None = None
    part: str | None = None
    bins: tuple[float, ...] | None = None  # a number's quantile edges over train (its pieces)
    moments: Moments | None = None

    @property
    def source(self) -> str:
        """The dense input (trainer.keras.features.dense_inputs) it is made from."""
        if self.kind == PRESENCE and self.part is None:
            return presence_key(self.feature.name)
        return self.feature.name


# The parts of a date or timestamp (trainer.recipe.kinds), each a float32 number: the year with its
# fraction, the month, the day of the week and the hour as cycles (so December is next to
# January, Sunday to Monday, 23:00 to 00:00).
DATE_PARTS = (
    "year",
    "month_sin",
    "month_cos",
    "weekday_sin",
    "weekday_cos",
    "hour_sin",
    "hour_cos",
)

# A date (2026-11-27, 2026/11/27) with an optional time (T or a space; seconds, fractions) and
# zone (Z, UTC, +01:00: ignored, the clock time is read as it is written).
DATE_PATTERN = (
    r"\s*(\d{4})[-/](\d{1,2})[-/](\d{1,2})"
    r"(?:[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:[.,]\d+)?)?)?"
    r"\s*(?:Z|UTC|[+-]\d{2}(?::?\d{2})?)?\s*"
)


def date_parts(text: tf.Tensor) -> dict[str, tf.Tensor]:
    """The DATE_PARTS of date or timestamp strings [batch] (or [batch, 1]), and `present`: 1
    where the value is a valid date, else 0 (and every part 0)."""
    text = tf.reshape(text, [-1])
    ok = tf.strings.regex_full_match(text, DATE_PATTERN)
    fields = tf.strings.regex_replace(text, "^" + DATE_PATTERN + "$", r"\1|\2|\3|\4|\5|\6|")
    fields = tf.where(ok, fields, "1970|1|1|0|0|0|")
    split = tf.strings.split(fields, sep="|").to_tensor(default_value="", shape=[None, 7])
    split = tf.where(split[:, :6] == "", "0", split[:, :6])
    n = tf.strings.to_number(split, tf.int64)
    y, m, d, hh, mm = (n[:, i] for i in range(5))
    ok = ok & (m >= 1) & (m <= 12) & (d >= 1) & (d <= 31) & (hh < 24) & (mm < 60)
    # days since 1970-01-01 in the proleptic Gregorian calendar (H. Hinnant's days_from_civil)
    shifted = y - tf.cast(m <= 2, tf.int64)
    era = tf.math.floordiv(shifted, 400)
    year_of_era = shifted - era * 400
    day_of_year = (153 * tf.math.floormod(m + 9, 12) + 2) // 5 + d - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    days = era * 146097 + day_of_era - 719468
    hour = tf.cast(hh, tf.float64) + tf.cast(mm, tf.float64) / 60.0
    year = 1970.0 + (tf.cast(days, tf.float64) + hour / 24.0) / 365.2425
    turn = 2.0 * np.pi
    month = turn * (tf.cast(m - 1, tf.float64) + tf.cast(d - 1, tf.float64) / 31.0) / 12.0
    weekday = turn * tf.cast(tf.math.floormod(days + 3, 7), tf.float64) / 7.0  # Monday: 0
    hour = turn * hour / 24.0
    parts = {
        "year": year,
        "month_sin": tf.sin(month),
        "month_cos": tf.cos(month),
        "weekday_sin": tf.sin(weekday),
        "weekday_cos": tf.cos(weekday),
        "hour_sin": tf.sin(hour),
        "hour_cos": tf.cos(hour),
    }
    valid = tf.cast(ok, tf.float64)
    out = {name: tf.cast(value * valid, tf.float32) for name, value in parts.items()}
    out["present"] = tf.cast(valid, tf.float32)
    return out


def is_date(text: Sequence[str]) -> np.ndarray:
    """For each string, whether it is a date or timestamp `date_parts` reads."""
    if not len(text):
        return np.zeros(0, bool)
    return date_parts(tf.constant(list(text), tf.string))["present"].numpy() > 0


def words(text: tf.Tensor) -> tf.RaggedTensor:
    """The words of free text [batch]: [batch, (words)], lower-cased, split at every run of
    characters that are neither letters nor digits ("Don't stop!" → don, t, stop), at most
    MAX_WORDS each. The vocabulary of a text feature is counted with it too
    (`trainer.recipe.facts`)."""
    lowered = tf.strings.lower(tf.reshape(text, [-1]), encoding="utf-8")
    spaced = tf.strings.regex_replace(lowered, r"[^\pL\pN]+", " ")
    return tf.strings.split(spaced)[:, :MAX_WORDS]
