"""Builds the device model: dense numeric inputs, their encodings, then Dense layers.

The model takes the model inputs of the host preprocessing (`trainer.preprocess`: a dict of
numbers keyed by input name), never a string: it can run on a TPU and be compiled with XLA. It
is a tf_keras (Keras 2) model, not Keras 3, because tf.Transform's `transform_features_layer()`
is a tf_keras layer. Numeric features are normalized with moments computed from training
batches (`compute_moments`, passed to `build_model`); the ids of categories (a value's index in
`values`, or a hash bucket) are one-hot encoded (a single id of a small vocabulary) or embedded;
lists of ids are embedded and averaged. Category ids of a tf.Transform output
(`InputFeature.buckets`, e.g. a vocabulary with its OOV buckets) are one-hot encoded or embedded
with exactly `buckets` slots, lists of them averaged; an id outside the buckets (-1: missing)
encodes as zeros. An image (decoded and resized on the host) goes through a small
convolutional tower. Bytes features, images without `image_size` and numeric lists are not
model inputs.
"""

from __future__ import annotations

import contextlib
import logging
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf
import tf_keras

from trainer.config import Accelerator, ModelConfig
from trainer.features import CLASSIFICATION, REGRESSION, has_presence, label_task, presence_key
from trainer.manifest import InputFeature, ManifestError
from trainer.preprocess import (
    FROM_TRANSFORM,
    FROM_VALUES,
    IMAGE,
    NUMBER,
    PRESENCE,
    TOKENS,
    LayerNames,
    ModelInput,
    model_inputs,
)
from trainer.usermodel import build_user_model, user_spec

logger = logging.getLogger(__name__)

# How a model trains on CPUs: as written, in float32, one step per call.
CPU = Accelerator(jit_compile=False, mixed_precision="float32", steps_per_execution=1)


@dataclass(frozen=True)
class Moments:
    """Mean and variance of a numeric feature, shaped like one example's value."""

    mean: np.ndarray
    variance: np.ndarray


# Why a feature is not a model input (ModelSpec.reasons).
KEY = "the dataset's key (an id, not a property of the example)"
EXCLUDED = "--exclude-features"
NOT_AN_INPUT = {
    "image": "an image feature without image_size (declare [height, width] to learn from it)",
    "bytes": "a bytes feature",
    "list": "a list of numbers",
}


def model_features(
    features: Mapping[str, InputFeature],
    label: str | None,
    key: str | None = None,
    exclude: Sequence[str] = (),
) -> tuple[list[InputFeature], list[InputFeature], dict[str, str]]:
    """Splits the non-label features into (used as inputs, skipped, why each is skipped)."""
    used, skipped, reasons = [], [], {}
    for feature in features.values():
        if feature.name == label:
            continue
        numeric_list = (
            feature.variable_length and feature.type != "string" and feature.buckets is None
        )
        if feature.name in exclude:
            reasons[feature.name] = EXCLUDED
        elif feature.name == key:
            reasons[feature.name] = KEY
        elif feature.type == "image" and feature.image_size is not None and feature.shape == ():
            used.append(feature)
            continue
        elif feature.type in ("image", "bytes"):
            reasons[feature.name] = NOT_AN_INPUT[feature.type]
        elif numeric_list:
            reasons[feature.name] = NOT_AN_INPUT["list"]
        else:
            used.append(feature)
            continue
        skipped.append(feature)
    return used, skipped, reasons


@dataclass(frozen=True)
class ModelSpec:
    """What the model reads and predicts: the features that are model inputs (and those that
    are not, with the reason), the label and its task. Made once per run (`model_spec`) and
    passed down to the input pipeline, the model and the export."""

    used: tuple[InputFeature, ...]
    skipped: tuple[InputFeature, ...]
    label: InputFeature
    task: str  # features.CLASSIFICATION or features.REGRESSION
    reasons: Mapping[str, str] = field(default_factory=dict)  # skipped name -> why


def model_spec(
    features: Mapping[str, InputFeature],
    label: str,
    key: str | None = None,
    exclude: Sequence[str] = (),
) -> ModelSpec:
    """The ModelSpec of `features` predicting `label`, leaving out the dataset's `key` and the
    features of `exclude`; ManifestError for a label that cannot be learned or an excluded
    name that is no feature."""
    unknown = [name for name in exclude if name not in features]
    if unknown:
        raise ManifestError(
            f"--exclude-features: no feature {unknown[0]!r} (features: "
            f"{', '.join(sorted(features))})"
        )
    if label in exclude:
        raise ManifestError(f"--exclude-features: {label!r} is the label")
    used, skipped, reasons = model_features(features, label, key, exclude)
    return ModelSpec(
        used=tuple(used),
        skipped=tuple(skipped),
        label=features[label],
        task=label_task(features[label]),
        reasons=reasons,
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
    spec: ModelSpec,
    cfg: ModelConfig,
    moments: Mapping[str, Moments],
    host_inputs: Sequence[ModelInput] | None = None,
    accelerator: Accelerator = CPU,
    module: types.ModuleType | None = None,
) -> tf_keras.Model:
    """A compiled tf_keras model over the model inputs of `spec.used`, predicting `spec.label`:
    the built-in model, or the one `module`'s build_model(spec) returns (trainer.usermodel;
    compiled here unless it comes compiled).

    `host_inputs`: those the host preprocessing gives (`Inputs.host.inputs`); by default, those
    of `cfg`. `accelerator`: the mixed-precision policy its layers compute in (the
    normalization and the output layer stay float32) and how the train step is compiled.
    Classification outputs softmax probabilities over the label's `values` (targets are
    class indices); regression outputs one float per example (targets are floats).
    """
    if host_inputs is None:
        host_inputs = model_inputs(spec.used, cfg)
    with _policy(accelerator.policy):
        if module is None:
            model = _build(spec, cfg, moments, host_inputs)
        else:
            label = spec.label
            model = build_user_model(
                module, user_spec(host_inputs, moments, label.name, spec.task, label.values)
            )
            if getattr(model, "_is_compiled", False):
                return model
    model.compile(
        optimizer=tf_keras.optimizers.Adam(learning_rate=cfg.learning_rate),
        loss=_LOSSES[spec.task](),
        metrics=[_METRICS[spec.task]()],
        jit_compile=accelerator.jit_compile,
        steps_per_execution=accelerator.steps_per_execution,
    )
    return model


@contextlib.contextmanager
def _policy(name: str):
    """For the block: layers made compute in `name` (a Keras mixed-precision policy)."""
    previous = tf_keras.mixed_precision.global_policy()
    tf_keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        tf_keras.mixed_precision.set_global_policy(previous)


_LOSSES = {
    CLASSIFICATION: tf_keras.losses.SparseCategoricalCrossentropy,
    REGRESSION: tf_keras.losses.MeanSquaredError,
}
_METRICS = {
    CLASSIFICATION: lambda: tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
    REGRESSION: lambda: tf_keras.metrics.MeanAbsoluteError(name="mae"),
}


def _build(
    spec: ModelSpec,
    cfg: ModelConfig,
    moments: Mapping[str, Moments],
    host_inputs: Sequence[ModelInput],
) -> tf_keras.Model:
    for name, why in spec.reasons.items():
        logger.info("not a model input: %s: %s", name, why)
    if not spec.used:
        raise ValueError("no feature can be a model input")

    reserved = {"concat", "probabilities", "prediction"}
    names = LayerNames(reserved | {f"hidden_{i}" for i in range(len(cfg.hidden_units))})
    inputs: dict[str, tf.Tensor] = {}
    encoded = []
    values: dict[str, tf.Tensor] = {}  # a numeric feature's encoding, until its presence comes
    for model_input in host_inputs:
        base = names.unique(model_input.name)
        x = inputs[model_input.name] = model_input.keras_input(base)
        if model_input.kind != PRESENCE:
            values[model_input.feature.name] = _encode(model_input, x, base, cfg, moments, names)
            encoded.append(values[model_input.feature.name])
            continue
        present = tf_keras.layers.Reshape((1,), name=names.unique(f"{base}_2d"))(x)
        feature = model_input.feature
        if is_numeric(feature):
            # A missing value sits at the mean (0 once normalized), not at its filler 0 (far
            # off for a feature like a year): the presence input says it is missing.
            encoded[-1] = tf_keras.layers.Multiply(
                name=names.unique(f"{names.base(feature.name)}_if_present")
            )([values[feature.name], present])
        encoded.append(present)

    x = encoded[0] if len(encoded) == 1 else tf_keras.layers.Concatenate(name="concat")(encoded)
    for i, units in enumerate(cfg.hidden_units):
        x = tf_keras.layers.Dense(units, activation="relu", name=f"hidden_{i}")(x)
    if spec.task == CLASSIFICATION:
        outputs = tf_keras.layers.Dense(
            len(spec.label.values), activation="softmax", name="probabilities", dtype="float32"
        )(x)
    else:
        prediction = tf_keras.layers.Dense(1, name="prediction", dtype="float32")(x)
        outputs = tf.squeeze(prediction, axis=-1)
    return tf_keras.Model(inputs=inputs, outputs=outputs, name="shardflow")


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
    model_input: ModelInput,
    x: tf.Tensor,
    base: str,
    cfg: ModelConfig,
    moments: Mapping[str, Moments],
    names: LayerNames,
) -> tf.Tensor:
    """The encoding of one numeric model input as a [batch, width] float tensor."""
    layers = tf_keras.layers
    feature, size = model_input.feature, model_input.vocabulary_size

    def name(suffix: str) -> str:
        return names.unique(f"{base}_{suffix}")

    if model_input.kind == IMAGE:  # a small convolutional tower, pooled to a vector
        x = layers.Conv2D(16, 3, strides=2, activation="relu", name=name("conv_1"))(x)
        x = layers.Conv2D(32, 3, strides=2, activation="relu", name=name("conv_2"))(x)
        return layers.GlobalAveragePooling2D(name=name("pool"))(x)
    if model_input.kind == NUMBER:
        if feature.name not in moments:
            raise ValueError(f"feature {feature.name!r}: no normalization moments given")
        m = moments[feature.name]
        flat = layers.Reshape((feature.size,), name=name("2d"))(x)
        # float32 whatever the policy: raw values (a year, a price) do not fit bfloat16's 8 bits
        return layers.Normalization(
            mean=np.reshape(m.mean, [-1]),
            variance=np.reshape(m.variance, [-1]),
            name=name("norm"),
            dtype="float32",
        )(flat)
    if model_input.ids == FROM_TRANSFORM:  # -1 (missing) or any id outside the range: zeros
        if model_input.kind == TOKENS:
            return IdEmbedding(size, cfg.embedding_dim, mean=True, name=name("embed"))(x)
        if feature.size == 1 and size <= cfg.one_hot_max:
            return OneHotIds(size, name=name("one_hot"))(x)
        embedded = IdEmbedding(size, cfg.embedding_dim, name=name("embed"))(x)
        return layers.Flatten(name=name("flat"))(embedded)
    if model_input.kind == TOKENS:  # ids with 0 for padding, embedded, averaged
        embedded = layers.Embedding(size, cfg.embedding_dim, name=name("embed"))(x)
        return MaskedMean(name=name("mean"))([embedded, x])
    if model_input.ids == FROM_VALUES and feature.size == 1 and size - 1 <= cfg.one_hot_max:
        return OneHotIds(size, name=name("one_hot"))(x)  # id 0: a value not in `values`
    embedded = layers.Embedding(size, cfg.embedding_dim, name=name("embed"))(x)
    return layers.Flatten(name=name("flat"))(embedded)
