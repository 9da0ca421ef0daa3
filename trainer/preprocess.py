"""The host side of the model: everything that touches strings, before the device sees a batch.

A TPU cannot run string ops, and on a GPU a vocabulary lookup or a hash inside the model moves
every batch back to the host. So the model is split in two:

- the **host** preprocessing (`HostPreprocessing.model`, a tf_keras model of Keras'
  preprocessing layers and a few of ours) turns the dense inputs of
  `trainer.features.dense_inputs` into the model inputs the recipe decided (trainer.recipe):
  a category becomes the id of its value in its `values` or train vocabulary
  (StringLookup/IntegerLookup; 0 for another value), a string beyond the vocabulary size the id
  of its hash bucket (Hashing), a list of strings a row of such ids (0 for padding), free text
  (`--text-features`) the row of its words' ids (`words`), a date or timestamp its parts
  (`DateParts`), a skewed number its log (`LogScale`), numbers float32. It runs in the tf.data
  pipeline's parallel map, before prefetch (`trainer.dataset.Inputs`), and again in the
  exported `serving_default` signature before the model (`trainer.export`): one function for
  both, so training and serving cannot drift apart.
- the **device** model (`trainer.model.build_model`, or a model of your own) takes only those
  dense numeric tensors, described by `ModelInput`s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import tensorflow as tf
import tf_keras

from trainer.features import dtype_of, presence_key
from trainer.manifest import InputFeature


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
    what it is and how it is made were decided by `trainer.recipe`.

    `shape` is one example's (`None`: a variable-length list). A CATEGORY or TOKENS input:
    `vocabulary_size` bounds its ids, `ids` says how they were made (`vocabulary` lists the
    values of FROM_VOCABULARY ids), `padding` is the id past a TOKENS row's values, `width` the
    embedding's dimensions (None: one-hot). A NUMBER input: `scale` (`log`: log(1 + x /
    `log_unit`)), `part` (a date's part, or `present` for a date's presence), `bins` (the edges
    of its pieces, trainer.model.Numbers) and, once computed, its `moments` over the
    train split (trainer.dataset).
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

    def keras_input(self, name: str | None = None) -> tf.Tensor:
        """A tf_keras.Input for this model input (`name`: the layer's name, default `name`)."""
        return tf_keras.Input(shape=self.shape, dtype=self.dtype, name=name or self.name)

    @property
    def source(self) -> str:
        """The dense input (trainer.features.dense_inputs) it is made from."""
        if self.kind == PRESENCE and self.part is None:
            return presence_key(self.feature.name)
        return self.feature.name


class HostPreprocessing:
    """The host preprocessing of the model inputs `inputs` (trainer.recipe): `model` maps the
    dense inputs they are made from (keyed by name, as `dense_inputs` gives them) to the dict
    of `inputs`."""

    def __init__(self, inputs: Sequence[ModelInput]):
        self.inputs = list(inputs)
        self.model = _host_model(self.inputs)

    def __call__(self, dense: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return self.model({key: dense[key] for key in self.model.input})


def _host_model(inputs: Sequence[ModelInput]) -> tf_keras.Model:
    layers = tf_keras.layers
    names = LayerNames()
    raw: dict[str, tf.Tensor] = {}
    out: dict[str, tf.Tensor] = {}
    dates: dict[str, dict[str, tf.Tensor]] = {}

    def source(i: ModelInput) -> tf.Tensor:
        key = i.source
        if key not in raw:
            if key != i.feature.name:  # a numeric feature's presence, from dense_inputs
                raw[key] = tf_keras.Input(shape=(), dtype=tf.float32, name=names.unique(key))
            else:
                f = i.feature
                shape = (None,) if f.variable_length else tuple(f.shape)
                raw[key] = tf_keras.Input(shape=shape, dtype=dtype_of(f), name=names.unique(key))
        return raw[key]

    for i in inputs:
        f = i.feature
        x = source(i)
        base = names.unique(i.name)
        if i.part is not None:  # a date's parts and presence, parsed once per feature
            if f.name not in dates:
                dates[f.name] = DateParts(name=names.unique(f"{f.name}_date"))(x)
            out[i.name] = dates[f.name][i.part]
            continue
        if i.kind == PRESENCE:
            out[i.name] = x
            continue
        if i.kind == NUMBER:
            number = tf.cast(x, tf.float32)
            if i.scale == "log":
                assert i.log_unit is not None  # a log scale has its unit (trainer.recipe)
                number = LogScale(i.log_unit, name=names.unique(f"{base}_log"))(number)
            out[i.name] = number
            continue
        if i.kind == IMAGE:
            size = cast("tuple[int, int, int]", i.shape)  # an image's (height, width, channels)
            out[i.name] = DecodeImages(*size, name=names.unique(f"{base}_decode"))(x)
            continue
        if i.kind == CATEGORY:
            x = layers.Reshape((f.size,), name=names.unique(f"{base}_2d"))(x)
        if f.text:
            x = Words(name=names.unique(f"{base}_words"))(x)
        if i.ids == FROM_TRANSFORM:
            ids = x
        elif i.kind == TOKENS and i.ids in (FROM_VALUES, FROM_VOCABULARY):
            ids = layers.StringLookup(
                vocabulary=_vocabulary(i), mask_token="", name=names.unique(f"{base}_lookup")
            )(x)
        elif i.kind == TOKENS:
            ids = layers.Hashing(
                i.vocabulary_size, mask_value="", name=names.unique(f"{base}_hash")
            )(x)
        elif i.ids in (FROM_VALUES, FROM_VOCABULARY):
            lookup = layers.StringLookup if f.type == "string" else layers.IntegerLookup
            ids = lookup(vocabulary=_vocabulary(i), name=names.unique(f"{base}_lookup"))(x)
        else:
            ids = layers.Hashing(i.vocabulary_size, name=names.unique(f"{base}_hash"))(x)
        out[i.name] = tf.cast(ids, tf.int32)
    return tf_keras.Model(inputs=raw, outputs=out, name="host_preprocessing")


def _vocabulary(i: ModelInput) -> list:
    """The values whose ids a lookup gives, in id order (the config's `values`, or the
    vocabulary the recipe took from the data); "" is padding, never a value of a list."""
    listed = i.feature.values if i.ids == FROM_VALUES else i.vocabulary
    assert listed is not None  # FROM_VALUES ids have the feature's values, others a vocabulary
    values = list(listed)
    return [v for v in values if v != ""] if i.kind == TOKENS else values


class LogScale(tf_keras.layers.Layer):
    """x -> log(1 + max(x, 0) / unit): a skewed number on a log scale (trainer.recipe)."""

    def __init__(self, unit: float, **kwargs):
        kwargs["trainable"] = False
        super().__init__(**kwargs)
        self.unit = float(unit)

    def call(self, x):
        return tf.math.log1p(tf.maximum(x, 0.0) / self.unit)

    def get_config(self):
        return {**super().get_config(), "unit": self.unit}


# The parts of a date or timestamp (trainer.recipe), each a float32 number: the year with its
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


class DateParts(tf_keras.layers.Layer):
    """Date or timestamp strings [batch] to their parts (`date_parts`), on the host."""

    def __init__(self, **kwargs):
        kwargs["trainable"] = False
        super().__init__(**kwargs)

    def call(self, text):
        return date_parts(text)


def words(text: tf.Tensor) -> tf.RaggedTensor:
    """The words of free text [batch]: [batch, (words)], lower-cased, split at every run of
    characters that are neither letters nor digits ("Don't stop!" → don, t, stop), at most
    MAX_WORDS each. The vocabulary of a text feature is counted with it too
    (`trainer.facts`)."""
    lowered = tf.strings.lower(tf.reshape(text, [-1]), encoding="utf-8")
    spaced = tf.strings.regex_replace(lowered, r"[^\pL\pN]+", " ")
    return tf.strings.split(spaced)[:, :MAX_WORDS]


class Words(tf_keras.layers.Layer):
    """Free text [batch] to its words [batch, n], padded with "" (`words`). Runs on the host,
    in the input pipeline's parallel map and in the export."""

    def __init__(self, **kwargs):
        kwargs["trainable"] = False
        super().__init__(**kwargs)

    def call(self, text):
        return words(text).to_tensor(default_value="")


class DecodeImages(tf_keras.layers.Layer):
    """Encoded images [batch] (PNG, JPEG, GIF, BMP; "" for a missing one) to float32
    [batch, height, width, channels] in [0, 1]: decoded, resized (bilinear; a missing image is
    all zeros). Runs on the host, in the input pipeline's parallel map and in the export."""

    def __init__(self, height: int, width: int, channels: int, **kwargs):
        kwargs["trainable"] = False
        super().__init__(**kwargs)
        self.height, self.width, self.channels = height, width, channels

    def call(self, encoded):
        size = [self.height, self.width]

        def one(data: tf.Tensor) -> tf.Tensor:
            def decoded() -> tf.Tensor:
                image = tf.io.decode_image(data, self.channels, expand_animations=False)
                return tf.image.resize(tf.cast(image, tf.float32), size) / 255.0

            empty = tf.zeros([*size, self.channels], tf.float32)
            return tf.cond(tf.strings.length(data) > 0, decoded, lambda: empty)

        shape = tf.TensorSpec([*size, self.channels], tf.float32)
        return tf.map_fn(one, tf.reshape(encoded, [-1]), fn_output_signature=shape)

    def get_config(self):
        return {
            **super().get_config(),
            "height": self.height,
            "width": self.width,
            "channels": self.channels,
        }


class LayerNames:
    """Keras-safe, unique layer names derived from feature names."""

    def __init__(self, reserved: Iterable[str] = frozenset()) -> None:
        self._taken = set(reserved)

    @staticmethod
    def base(name: str) -> str:
        """`name` made Keras-safe (not yet unique)."""
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "feature"
        return base if base[0].isalpha() else "f_" + base

    def unique(self, name: str) -> str:
        base = self.base(name)
        candidate, i = base, 1
        while candidate in self._taken:
            i += 1
            candidate = f"{base}_{i}"
        self._taken.add(candidate)
        return candidate
