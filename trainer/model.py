"""Builds the tf_keras model from the manifest's features: preprocessing layers, then Dense layers.

The model takes the dense inputs of `trainer.features.dense_inputs` (a dict keyed by feature
name) so the same preprocessing runs in training and in the exported serving signature. It is
a tf_keras (Keras 2) model, not Keras 3, because tf.Transform's `transform_features_layer()` is a
tf_keras layer. Numeric features are normalized with moments computed from training batches
(`compute_moments`, passed to `build_model`); strings and ints with `values` go through a lookup,
other strings through hashing; string lists are embedded and averaged. Category ids of a
tf.Transform output (`InputFeature.buckets`, e.g. a vocabulary with its OOV buckets) are one-hot
encoded or embedded with exactly `buckets` slots, lists of them averaged; an id outside the
buckets (-1: missing) encodes as zeros. Image and bytes features and numeric lists are not model
inputs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
import tf_keras

from trainer.config import ModelConfig
from trainer.features import (
    CLASSIFICATION,
    dtype_of,
    has_presence,
    label_task,
    presence_key,
)
from trainer.manifest import InputFeature

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Moments:
    """Mean and variance of a numeric feature, shaped like one example's value."""

    mean: np.ndarray
    variance: np.ndarray


def model_features(
    features: Mapping[str, InputFeature], label: str | None
) -> tuple[list[InputFeature], list[InputFeature]]:
    """Splits the non-label features into (used as inputs, skipped)."""
    used, skipped = [], []
    for feature in features.values():
        if feature.name == label:
            continue
        numeric_list = (
            feature.variable_length and feature.type != "string" and feature.buckets is None
        )
        if feature.type in ("image", "bytes") or numeric_list:
            skipped.append(feature)
        else:
            used.append(feature)
    return used, skipped


@dataclass(frozen=True)
class ModelSpec:
    """What the model reads and predicts: the features that are model inputs (and those that
    are not), the label and its task. Made once per run (`model_spec`) and passed down to the
    input pipeline, the model and the export."""

    used: tuple[InputFeature, ...]
    skipped: tuple[InputFeature, ...]
    label: InputFeature
    task: str  # features.CLASSIFICATION or features.REGRESSION


def model_spec(features: Mapping[str, InputFeature], label: str) -> ModelSpec:
    """The ModelSpec of `features` predicting `label`; ManifestError for a label that cannot be
    learned."""
    used, skipped = model_features(features, label)
    return ModelSpec(
        used=tuple(used),
        skipped=tuple(skipped),
        label=features[label],
        task=label_task(features[label]),
    )


def is_numeric(feature: InputFeature) -> bool:
    """True for int/float features fed as normalized numbers (not categories)."""
    return (
        feature.type in ("int", "float")
        and feature.values is None
        and feature.buckets is None
        and not feature.variable_length
    )


def compute_moments(
    dataset: tf.data.Dataset, features: Sequence[InputFeature], batches: int
) -> dict[str, Moments]:
    """Mean and variance of each numeric feature over the first `batches` batches.

    `dataset` yields dense inputs (optionally with a label); missing values, told by the
    presence input, are left out.
    """
    numeric = [f for f in features if is_numeric(f)]
    # per feature: [count, sum, sum of squares], one entry per value of an example
    sums = {f.name: np.zeros((3, f.size)) for f in numeric}
    for element in dataset.take(batches):
        inputs = element[0] if isinstance(element, tuple) else element
        for f in numeric:
            values = inputs[f.name].numpy().astype(np.float64).reshape(-1, f.size)
            if has_presence(f):
                weight = inputs[presence_key(f.name)].numpy().astype(np.float64)[:, None]
            else:
                weight = np.ones((values.shape[0], 1))
            sums[f.name] += [
                np.broadcast_to(weight, values.shape).sum(axis=0),
                (values * weight).sum(axis=0),
                (values * values * weight).sum(axis=0),
            ]
    moments = {}
    for f in numeric:
        count, total, squares = sums[f.name]
        count = np.maximum(count, 1.0)
        mean = total / count
        variance = np.maximum(squares / count - mean * mean, 0.0)
        moments[f.name] = Moments(mean=mean.reshape(f.shape), variance=variance.reshape(f.shape))
    return moments


def build_model(
    spec: ModelSpec, cfg: ModelConfig, moments: Mapping[str, Moments]
) -> tf_keras.Model:
    """A compiled tf_keras model over `spec.used`, predicting `spec.label`.

    Classification outputs softmax probabilities over the label's `values` (targets are class
    indices); regression outputs one float per example (targets are floats).
    """
    if spec.skipped:
        logger.info(
            "Not model inputs (image, bytes or numeric lists): %s",
            ", ".join(f.name for f in spec.skipped),
        )
    if not spec.used:
        raise ValueError("no feature can be a model input")

    reserved = {"concat", "probabilities", "prediction"}
    names = _LayerNames(reserved | {f"hidden_{i}" for i in range(len(cfg.hidden_units))})
    inputs: dict[str, tf.Tensor] = {}
    encoded = []
    for feature in spec.used:
        base = names.unique(feature.name)
        shape = (None,) if feature.variable_length else feature.shape
        x = inputs[feature.name] = tf_keras.Input(shape=shape, dtype=dtype_of(feature), name=base)
        value = _encode(feature, x, base, cfg, moments, names)
        if has_presence(feature):
            key = presence_key(feature.name)
            present = inputs[key] = tf_keras.Input(
                shape=(), dtype=tf.float32, name=names.unique(key)
            )
            present = tf_keras.layers.Reshape((1,), name=names.unique(f"{key}_2d"))(present)
            if is_numeric(feature):
                # A missing value sits at the mean (0 once normalized), not at its filler 0 (far
                # off for a feature like a year): the presence input says it is missing.
                value = tf_keras.layers.Multiply(name=names.unique(f"{base}_if_present"))(
                    [value, present]
                )
            encoded += [value, present]
        else:
            encoded.append(value)

    x = encoded[0] if len(encoded) == 1 else tf_keras.layers.Concatenate(name="concat")(encoded)
    for i, units in enumerate(cfg.hidden_units):
        x = tf_keras.layers.Dense(units, activation="relu", name=f"hidden_{i}")(x)
    if spec.task == CLASSIFICATION:
        outputs = tf_keras.layers.Dense(
            len(spec.label.values), activation="softmax", name="probabilities"
        )(x)
        loss = tf_keras.losses.SparseCategoricalCrossentropy()
        metrics = [tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    else:
        outputs = tf.squeeze(tf_keras.layers.Dense(1, name="prediction")(x), axis=-1)
        loss = tf_keras.losses.MeanSquaredError()
        metrics = [tf_keras.metrics.MeanAbsoluteError(name="mae")]
    model = tf_keras.Model(inputs=inputs, outputs=outputs, name="shardflow")
    model.compile(
        optimizer=tf_keras.optimizers.Adam(learning_rate=cfg.learning_rate),
        loss=loss,
        metrics=metrics,
    )
    return model


class MaskedMean(tf_keras.layers.Layer):
    """Mean of embeddings [batch, n, dim] over positions whose id [batch, n] is not 0."""

    def call(self, inputs):
        embedded, ids = inputs
        mask = tf.expand_dims(tf.cast(tf.not_equal(ids, 0), embedded.dtype), -1)
        total = tf.reduce_sum(embedded * mask, axis=1)
        # An empty list averages to zeros instead of 0/0.
        return total / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)


class IdEmbedding(tf_keras.layers.Embedding):
    """An Embedding of category ids in [0, input_dim); any other id (-1: missing) embeds as zeros.

    [batch, n] ids give [batch, n, dim], or with `mean=True` the mean [batch, dim] over the valid
    ids (zeros when there is none).
    """

    def __init__(self, input_dim: int, output_dim: int, mean: bool = False, **kwargs):
        super().__init__(input_dim, output_dim, **kwargs)
        self.mean = mean

    def call(self, inputs):
        ids = tf.cast(inputs, tf.int64)
        valid = tf.logical_and(ids >= 0, ids < self.input_dim)
        embedded = super().call(tf.where(valid, ids, tf.zeros_like(ids)))
        mask = tf.expand_dims(tf.cast(valid, embedded.dtype), -1)
        if not self.mean:
            return embedded * mask
        return tf.reduce_sum(embedded * mask, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)

    def compute_output_shape(self, input_shape):
        shape = super().compute_output_shape(input_shape)
        return tf.TensorShape([shape[0], shape[-1]]) if self.mean else shape

    def get_config(self):
        return {**super().get_config(), "mean": self.mean}


class OneHotIds(tf_keras.layers.Layer):
    """One-hot [batch, depth] of [batch, 1] category ids; an id outside [0, depth) gives zeros."""

    def __init__(self, depth: int, **kwargs):
        super().__init__(**kwargs)
        self.depth = depth

    def call(self, inputs):
        return tf.one_hot(tf.cast(inputs[:, 0], tf.int64), self.depth, dtype=tf.float32)

    def get_config(self):
        return {**super().get_config(), "depth": self.depth}


def _encode(
    feature: InputFeature,
    x: tf.Tensor,
    base: str,
    cfg: ModelConfig,
    moments: Mapping[str, Moments],
    names: _LayerNames,
) -> tf.Tensor:
    """The encoding of one feature's Keras input as a [batch, width] float tensor."""
    layers = tf_keras.layers

    def name(suffix: str) -> str:
        return names.unique(f"{base}_{suffix}")

    if feature.buckets is not None:  # category ids of a transform output
        if feature.variable_length:
            return IdEmbedding(feature.buckets, cfg.embedding_dim, mean=True, name=name("embed"))(x)
        ids = layers.Reshape((feature.size,), name=name("2d"))(x)
        if feature.size == 1 and feature.buckets <= cfg.one_hot_max:
            return OneHotIds(feature.buckets, name=name("one_hot"))(ids)
        embedded = IdEmbedding(feature.buckets, cfg.embedding_dim, name=name("embed"))(ids)
        return layers.Flatten(name=name("flat"))(embedded)

    if feature.variable_length:  # a string list: ids with 0 for padding, embedded, averaged
        if feature.values is not None:
            vocabulary = [v for v in feature.values if v != ""]
            ids = layers.StringLookup(vocabulary=vocabulary, mask_token="", name=name("lookup"))(x)
            bins = len(vocabulary) + 2  # mask, OOV
        else:
            ids = layers.Hashing(cfg.hash_bins + 1, mask_value="", name=name("hash"))(x)
            bins = cfg.hash_bins + 1
        embedded = layers.Embedding(bins, cfg.embedding_dim, name=name("embed"))(ids)
        return MaskedMean(name=name("mean"))([embedded, ids])

    flat = layers.Reshape((feature.size,), name=name("2d"))(x)
    if is_numeric(feature):
        if feature.name not in moments:
            raise ValueError(f"feature {feature.name!r}: no normalization moments given")
        m = moments[feature.name]
        floats = tf.cast(flat, tf.float32)
        return layers.Normalization(
            mean=np.reshape(m.mean, [-1]),
            variance=np.reshape(m.variance, [-1]),
            name=name("norm"),
        )(floats)

    if feature.values is not None:
        one_hot = feature.size == 1 and len(feature.values) <= cfg.one_hot_max
        lookup = layers.StringLookup if feature.type == "string" else layers.IntegerLookup
        ids = lookup(
            vocabulary=list(feature.values),
            output_mode="one_hot" if one_hot else "int",
            name=name("lookup"),
        )(flat)
        if one_hot:
            return ids
        bins = len(feature.values) + 1  # OOV
    else:
        ids = layers.Hashing(cfg.hash_bins, name=name("hash"))(flat)
        bins = cfg.hash_bins
    embedded = layers.Embedding(bins, cfg.embedding_dim, name=name("embed"))(ids)
    return layers.Flatten(name=name("flat"))(embedded)


class _LayerNames:
    """Keras-safe, unique layer names derived from feature names."""

    def __init__(self, reserved: set[str]) -> None:
        self._taken = set(reserved)

    def unique(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "feature"
        if not base[0].isalpha():
            base = "f_" + base
        candidate, i = base, 1
        while candidate in self._taken:
            i += 1
            candidate = f"{base}_{i}"
        self._taken.add(candidate)
        return candidate
