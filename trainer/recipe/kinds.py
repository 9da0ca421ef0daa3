"""What each kind of feature becomes in the model: the rules, in one place (the label's:
trainer.recipe.label; the run's recipe that applies them: trainer.recipe.rules).

docs/trainer.md ("What each feature becomes") states the same rules with these thresholds:

- the outputs of a tf.Transform are taken as the transform made them (numbers standardized, ids
  embedded, another string hashed): the rules below are for the manifest's own features;
- the dataset's `key`, `--exclude-features` and bytes features are not model inputs; an image
  is one with its `image_size`, or the one size every sampled train image has;
- a **number** with no value in train, or one value only, is left out; a number whose train
  values are all >= 0 and skewed (skewness over `SKEW`) is read on a log scale,
  log(1 + x / m) with m the median of its positive values, when that lowers its skew; every
  number is then standardized with its train moments (trainer.keras.model), and a scalar one, when
  train holds at least `PIECES_FROM` labelled records, is also read in `PIECES` pieces between
  its train quantiles (piecewise linear, so that the model can bend its effect where the data
  does; on fewer records the pieces overfit); an int that every record
  holds, with `CODE_VALUES` (3 to 32) distinct train values (an hour, a month, a count), is
  also a category (`NAME__value`), so that each value can have its own effect;
- a **string** whose train values parse as dates or timestamps (`DATE_SHARE` of them)
  becomes its parts: the fractional year, the month and the day of the week as cycles (sine,
  cosine), the hour as a cycle when the values hold a time of day, and whether it was given;
- a string that is nearly unique per record is left out, with its reason: more than
  `UNIQUE_MIN` distinct values that are at least `UNIQUE_SHARE` of its values (an id, a name, a
  free-form text), or more than `SPARSE_MIN` distinct values with fewer than `SPARSE_RECORDS`
  records each on average (a code an embedding cannot learn from so few examples);
  `--include-features` takes it anyway;
- any other string is a category: its train values, most frequent first, up to
  `--vocabulary-size` (a value outside them is one "other" id); hashed only when it has more
  distinct values than that. A category of at most `ModelConfig.one_hot_max` (16) values is
  one-hot encoded, a larger one embedded in `embedding_width(n)` dimensions (at most
  `ModelConfig.embedding_dim`, 32);
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf

from trainer.config import ModelConfig
from trainer.dataset.manifest import InputFeature, Manifest
from trainer.recipe.facts import Evidence, skewness
from trainer.recipe.label import SKEW
from trainer.recipe.words import (
    CATEGORY,
    DATE_PARTS,
    FROM_HASH,
    FROM_TRANSFORM,
    FROM_VALUES,
    FROM_VOCABULARY,
    IMAGE,
    NUMBER,
    PRESENCE,
    TOKENS,
    ModelInput,
    date_parts,
    has_presence,
    is_date,
    presence_key,
)

logger = logging.getLogger(__name__)

_F32 = tf.float32

DATE_SHARE = 0.95  # of a string's sampled train values that must parse as dates
UNIQUE_MIN, UNIQUE_SHARE = 20, 0.5  # nearly unique: > 20 distinct, >= half of the values
SPARSE_MIN, SPARSE_RECORDS = 100, 20  # > 100 distinct with < 20 records a value on average
CODE_VALUES = (3, 32)  # an int with this many distinct train values is also a category
PIECES = 8  # a number is also read in this many pieces of its train quantiles ...
PIECES_FROM = 2_000  # ... when train has at least this many labelled records
CODE_SUFFIX = "__value"  # ... whose model input is NAME__value

# Why a feature is not a model input (Recipe.reasons).
KEY = "the dataset's key (an id, not a property of the example)"
EXCLUDED = "--exclude-features"
NOT_AN_INPUT = {
    "image": "an image feature without image_size, and its train images differ in size "
    "(declare image_size: [height, width] to learn from it)",
    "bytes": "a bytes feature",
    "list": "a list of numbers",
    "images": "a list of images",
}
NO_VALUE = "no value in the train split"
ONE_VALUE = "the same value in every train record"


def embedding_width(ids: int, most: int = ModelConfig.embedding_dim) -> int:
    """Dimensions of a category's embedding: 1.6 * ids^0.56 (at least 2), at most `most`."""
    return int(min(most, max(2, round(1.6 * ids**0.56))))


def decide_feature(
    manifest: Manifest,
    facts: Evidence,
    f: InputFeature,
    cfg: ModelConfig,
    exclude: Sequence[str],
    include: Sequence[str],
    transformed: bool,
) -> tuple[str | None, list[ModelInput]]:
    """(why it is left out, None) or (None, its model inputs)."""
    if f.name in exclude:
        return EXCLUDED, []
    if f.name == manifest.key:
        return KEY, []
    if f.type == "bytes":
        return NOT_AN_INPUT["bytes"], []
    if f.type == "image":
        return _image(f, facts)
    if f.buckets is not None:  # ids of a tf.Transform output
        if f.variable_length:
            return None, [_ids(f, TOKENS, f.buckets, FROM_TRANSFORM, cfg, padding=-1)]
        return None, [_ids(f, CATEGORY, f.buckets, FROM_TRANSFORM, cfg)]
    if f.variable_length and f.type != "string":
        return NOT_AN_INPUT["list"], []
    if f.type in ("int", "float") and f.values is None:
        return _number(f, facts, transformed, cfg)
    if f.values is not None and f.variable_length:  # ids from 2; 0: padding, 1: another value
        listed = [v for v in f.values if v != ""]
        return None, [_ids(f, TOKENS, len(listed) + 2, FROM_VALUES, cfg, padding=0)]
    if f.values is not None:  # ids from 1; 0: another value
        return None, [_ids(f, CATEGORY, len(f.values) + 1, FROM_VALUES, cfg)]
    if f.text or f.variable_length:  # free text, or a list of strings: tokens
        return None, [_tokens(f, facts, cfg)]
    if transformed:  # a string output of a tf.Transform: the transform chose what it is
        return None, [_ids(f, CATEGORY, cfg.hash_bins, FROM_HASH, cfg)]
    return _string(f, facts, cfg, f.name in include)


def _number(f: InputFeature, facts: Evidence, transformed: bool, cfg: ModelConfig) -> tuple:
    numbers = facts.numbers.get(f.name)
    known = facts.dataset if not transformed else None
    scale, unit = "linear", None
    if known is not None:  # the whole split's values, from the facts
        bounds = known.bounds.get(f.name)
        if bounds is None:
            return NO_VALUE, []
        if bounds[0] == bounds[1]:
            return ONE_VALUE, []
    if numbers is not None and not transformed:
        values = numbers.values
        if len(values) == 0:
            return NO_VALUE, []
        if np.all(values == values[0]) and known is None:
            return ONE_VALUE, []
        unit = log_unit(values)  # the shape of the values: from the sample
        if known is not None and known.bounds[f.name][0] < 0:
            unit = None  # a negative value the sample missed: no log scale
        scale = "log" if unit is not None else "linear"
    bins = None
    labelled = facts.train_records - facts.label_missing.get("train", 0)
    if numbers is not None and not transformed and f.size == 1 and labelled >= PIECES_FROM:
        boundaries = known.number_quantiles.get(f.name) if known is not None else None
        if boundaries:  # the facts' quantiles at every 1/PIECES of the values
            step = (len(boundaries) - 1) // PIECES
            at = np.asarray(boundaries[::step], np.float64)
            bins = edges_of(np.log1p(at / unit) if unit else at)
        else:
            bins = quantile_edges(np.log1p(numbers.values / unit) if unit else numbers.values)
    made = [
        ModelInput(f.name, NUMBER, _F32, tuple(f.shape), f, scale=scale, log_unit=unit, bins=bins)
    ]
    if numbers is not None and not transformed and f.type == "int" and f.size == 1:
        if f.always_full:
            listed = known.number_values.get(f.name) if known is not None else None
            distinct = np.asarray(listed) if listed is not None else np.unique(numbers.values)
            if CODE_VALUES[0] <= len(distinct) <= CODE_VALUES[1]:
                # an hour, a month, a count of cylinders: also each value's own id, so that
                # the model can give every value its own effect
                made.append(
                    _ids(
                        f,
                        CATEGORY,
                        len(distinct) + 1,
                        FROM_VOCABULARY,
                        cfg,
                        vocabulary=tuple(int(v) for v in distinct),
                        name=f"{f.name}{CODE_SUFFIX}",
                    )
                )
    if has_presence(f):
        made.append(ModelInput(presence_key(f.name), PRESENCE, _F32, (), f))
    return None, made


def quantile_edges(values: np.ndarray, pieces: int = PIECES) -> tuple[float, ...] | None:
    """The edges of `pieces` pieces of a number holding as many train values each (fewer where
    values repeat); None when fewer than two pieces are left."""
    return edges_of(np.quantile(values.reshape(-1), np.linspace(0.0, 1.0, pieces + 1)))


def edges_of(quantiles: np.ndarray) -> tuple[float, ...] | None:
    """The distinct edges of pieces between quantiles; None when fewer than two pieces."""
    edges = np.unique(quantiles)
    return tuple(float(e) for e in edges) if len(edges) >= 3 else None


def log_unit(values: np.ndarray) -> float | None:
    """m when `values` (all >= 0, skewed) are less skewed as log(1 + x / m), m the median of the
    positive values; else None."""
    flat = values.reshape(-1)
    if flat.min() < 0 or skewness(flat) <= SKEW:
        return None
    positive = flat[flat > 0]
    if not len(positive):
        return None
    unit = float(np.median(positive))
    return unit if abs(skewness(np.log1p(flat / unit))) < skewness(flat) else None


def _string(f: InputFeature, facts: Evidence, cfg: ModelConfig, include: bool) -> tuple:
    strings = facts.strings.get(f.name)
    if strings is None or not strings.counts:
        if include:  # hashed, as nothing is known of its values
            return None, [_ids(f, CATEGORY, cfg.hash_bins, FROM_HASH, cfg)]
        return NO_VALUE, []
    counted = strings.by_count()
    if f.size == 1 and date_share(strings.counts) >= DATE_SHARE:
        return None, _date(f, facts)
    if len(strings.counts) == 1 and not include:
        return ONE_VALUE, []
    distinct = _distinct(f, facts, strings)
    values = strings.values
    nearly_unique = (distinct > UNIQUE_MIN and distinct >= UNIQUE_SHARE * values) or (
        distinct > SPARSE_MIN and distinct * SPARSE_RECORDS > values
    )
    if nearly_unique and not include:
        per_value = values / max(1, distinct)
        return (
            f"nearly unique per record: {distinct:,} distinct values in {values:,} train "
            f"values ({per_value:.1f} records a value), an id or a name "
            f"(--include-features {f.name} uses it)"
        ), []
    if cfg.vocabulary_size and distinct <= cfg.vocabulary_size:
        vocabulary = tuple(counted[: cfg.vocabulary_size])
        return None, [
            _ids(f, CATEGORY, len(vocabulary) + 1, FROM_VOCABULARY, cfg, vocabulary=vocabulary)
        ]
    buckets = cfg.vocabulary_size or cfg.hash_bins
    return None, [_ids(f, CATEGORY, buckets, FROM_HASH, cfg)]


def _distinct(f: InputFeature, facts: Evidence, strings) -> int:
    """The distinct train values of a string: the statistics' count when they have one (exact,
    or estimated beyond 10,000), else those of the sampled records."""
    found = facts.distinct(f.name)
    return found[0] if found is not None else len(strings.counts)


def _tokens(f: InputFeature, facts: Evidence, cfg: ModelConfig) -> ModelInput:
    """A list of strings or free text: its tokens' (words') ids, embedded and averaged."""
    strings = facts.strings.get(f.name)
    counted = [t for t in strings.by_count() if t != ""] if strings is not None else []
    if cfg.vocabulary_size and counted:
        vocabulary = tuple(counted[: cfg.vocabulary_size])
        return _ids(
            f, TOKENS, len(vocabulary) + 2, FROM_VOCABULARY, cfg, padding=0, vocabulary=vocabulary
        )
    return _ids(f, TOKENS, cfg.hash_bins + 1, FROM_HASH, cfg, padding=0)


def date_share(counts: Mapping[str, int]) -> float:
    """The share of the counted values that parse as dates or timestamps."""
    values = list(counts)
    total = sum(counts.values())
    dated = sum(counts[v] for v, ok in zip(values, is_date(values)) if ok)
    return dated / total if total else 0.0


def _date(f: InputFeature, facts: Evidence) -> list[ModelInput]:
    """The parts of a date or timestamp string, each a number, and its presence; a part that is
    the same in every train value (dates of January 1st only) is left out."""
    distinct = [
        v
        for v, ok in zip(facts.strings[f.name].counts, is_date(list(facts.strings[f.name].counts)))
        if ok
    ]
    parts = {k: v.numpy() for k, v in date_parts(tf.constant(distinct, tf.string)).items()}
    made = []
    for part in DATE_PARTS:
        values = parts[part]
        if part == "year" or not np.allclose(values, values[0]):
            made.append(ModelInput(f"{f.name}__{part}", NUMBER, _F32, (), f, part=part))
    made.append(ModelInput(presence_key(f.name), PRESENCE, _F32, (), f, part="present"))
    return made


def _image(f: InputFeature, facts: Evidence) -> tuple:
    if f.shape != ():
        return NOT_AN_INPUT["images"], []
    size = f.image_size
    if size is None:
        seen = facts.image_sizes.get(f.name) or frozenset()
        if len(seen) != 1:
            return NOT_AN_INPUT["image"], []
        size = next(iter(seen))
        logger.info(
            "feature %r: every sampled train image is %dx%d with %d channel(s): learned at "
            "that size (image_size)", f.name, *size,
        )  # fmt: skip
        f = dataclasses.replace(f, image_size=tuple(size))
    return None, [ModelInput(f.name, IMAGE, _F32, tuple(size), f)]


def _ids(
    f: InputFeature,
    kind: str,
    size: int,
    ids: str,
    cfg: ModelConfig,
    padding: int | None = None,
    vocabulary: tuple | None = None,
    name: str | None = None,
) -> ModelInput:
    shape = (None,) if kind == TOKENS else (f.size,)
    # the values and an "other" id (a tf.Transform's ids: its buckets) one-hot, if few
    values = size if ids == FROM_TRANSFORM else size - 1
    one_hot = kind == CATEGORY and f.size == 1 and values <= cfg.one_hot_max
    return ModelInput(
        name or f.name,
        kind,
        tf.int32,
        shape,
        f,
        vocabulary_size=size,
        ids=ids,
        padding=padding,
        vocabulary=vocabulary,
        width=None if one_hot else embedding_width(size, cfg.embedding_dim),
    )
