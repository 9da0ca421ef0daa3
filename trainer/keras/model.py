"""Builds the device model from the recipe's model inputs: their encodings, then an MLP.

The model takes the model inputs of the host preprocessing (`trainer.keras.preprocess`: a dict of
numbers keyed by input name), never a string: it can run on a TPU and be compiled with XLA. It
is a tf_keras (Keras 2) model, not Keras 3, because tf.Transform's `transform_features_layer()`
is a tf_keras layer. What each input is was decided by `trainer.recipe.rules`; here it is encoded:
a number standardized with its train moments (trainer.recipe.moments) and softly clipped to about
±3 deviations (x / sqrt(1 + (x/3)²): an outlier stays an outlier without swamping the layers),
beside its pieces between train quantiles (piecewise linear encoding, Gorishniy et al. 2022),
every number through one layer (`Numbers`), a missing one as zeros (at the mean); a
category one-hot encoded or embedded in the width the recipe chose; a list of ids embedded and
averaged; an image through a small convolutional tower. Ids of a
tf.Transform output (`InputFeature.buckets`) use exactly `buckets` slots, an id outside them
(-1: missing) encodes as zeros. The encodings, concatenated, go through Dense ReLU layers with
dropout (`--hidden-units`, `Sizing`), to softmax probabilities (classification) or one
standardized value (regression: the export restores the label's units, trainer.run.export).
Training uses AdamW; `Sizing` sizes the batch, the epochs and the regularization to the
dataset.
"""

from __future__ import annotations

import contextlib
import logging
import types
from typing import cast

import numpy as np
import tensorflow as tf
import tf_keras

from trainer.config import Accelerator, ModelConfig
from trainer.keras.layers import (
    IdEmbedding,
    MaskedMean,
    Numbers,
    OneHotIds,
    SeededDropout,
    moments_of,
)
from trainer.keras.preprocess import LayerNames, keras_input
from trainer.keras.usermodel import build_user_model, user_spec
from trainer.recipe.rules import Recipe
from trainer.recipe.sizing import Sizing
from trainer.recipe.words import (
    CLASSIFICATION,
    FROM_TRANSFORM,
    IMAGE,
    NUMBER,
    PRESENCE,
    REGRESSION,
    TOKENS,
    LabelScale,
    ModelInput,
)

logger = logging.getLogger(__name__)

# How a model trains on CPUs: as written, in float32, one step per call.
CPU = Accelerator(jit_compile=False, mixed_precision="float32", steps_per_execution=1)


def build_model(
    recipe: Recipe,
    cfg: ModelConfig,
    accelerator: Accelerator = CPU,
    module: types.ModuleType | None = None,
    sizing: Sizing | None = None,
    seed: int = 0,
) -> tf_keras.Model:
    """A compiled tf_keras model over the recipe's model inputs (their moments computed),
    predicting its label: the built-in model, or the one `module`'s build_model(spec) returns
    (trainer.keras.usermodel; compiled here unless it comes compiled).

    `accelerator`: the mixed-precision policy its layers compute in (the normalization and the
    output layer stay float32) and how the train step is compiled. `sizing`: its dropout and
    weight decay (default: none); `seed`: of the dropout masks. Classification outputs softmax
    probabilities over the label's classes (targets are class indices); regression outputs one
    standardized float per example (targets are standardized the same way:
    trainer.keras.features.label_encoder).
    """
    sizing = sizing or Sizing(batch_size=32, max_epochs=1, dropout=0.0, weight_decay=0.0)
    label = recipe.label
    with _policy(accelerator.policy):
        if module is None:
            model = _build(recipe, cfg, sizing.dropout, seed)
        else:
            model = build_user_model(
                module,
                user_spec(recipe.inputs, label.name, recipe.task, label.classes, label.scale),
            )
            if getattr(model, "_is_compiled", False):
                return model
    model.compile(
        optimizer=tf_keras.optimizers.AdamW(
            learning_rate=cfg.learning_rate, weight_decay=sizing.weight_decay
        ),
        loss=_LOSSES[recipe.task](),
        metrics=metrics_of(recipe),
        jit_compile=accelerator.jit_compile,
        steps_per_execution=accelerator.steps_per_execution,
    )
    return model


def metrics_of(recipe: Recipe) -> list[tf_keras.metrics.Metric]:
    """The metrics a model is compiled with: accuracy, or the MAE and RMSE of a regression in
    the label's own units."""
    if recipe.task == CLASSIFICATION:
        return [tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    scale = recipe.label.scale
    assert scale is not None  # a regression's label has its scale (trainer.recipe.label)
    return [LabelUnitsError(scale, squared=False, name="mae"), LabelUnitsError(scale, True, "rmse")]


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


def to_label_units(z: tf.Tensor, scale: LabelScale, clip: bool = True) -> tf.Tensor:
    """Standardized predictions (or, `clip` False, targets) in the label's units: clipped to the
    scale's bounds, un-standardized, exponentiated for a log scale."""
    z = tf.cast(z, tf.float32)
    if clip:
        z = tf.clip_by_value(z, scale.low, scale.high)
    value = z * scale.std + scale.mean
    return tf.exp(value) if scale.log else value


class LabelUnitsError(tf_keras.metrics.Metric):
    """The mean absolute error (or, `squared`, the root mean squared error) of standardized
    predictions, measured in the label's own units (`to_label_units`)."""

    def __init__(self, scale: LabelScale, squared: bool = False, name: str = "mae", **kwargs):
        super().__init__(name=name, **kwargs)
        self.scale, self.squared = scale, squared
        self.total = self.add_weight(name="total", initializer="zeros", dtype=tf.float64)
        self.count = self.add_weight(name="count", initializer="zeros", dtype=tf.float64)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = tf.reshape(y_pred, tf.shape(y_true))
        error = to_label_units(y_pred, self.scale) - to_label_units(y_true, self.scale, False)
        error = tf.cast(tf.square(error) if self.squared else tf.abs(error), tf.float64)
        weight = (
            tf.ones_like(error)
            if sample_weight is None
            else tf.cast(tf.reshape(sample_weight, tf.shape(error)), tf.float64)
        )
        self.total.assign_add(tf.reduce_sum(error * weight))
        self.count.assign_add(tf.reduce_sum(weight))

    def result(self):
        mean = tf.math.divide_no_nan(self.total, self.count)
        return tf.cast(tf.sqrt(mean) if self.squared else mean, tf.float32)

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale.to_dict(), "squared": self.squared}


def _build(recipe: Recipe, cfg: ModelConfig, dropout: float, seed: int = 0) -> tf_keras.Model:
    reserved = {"concat", "probabilities", "prediction", "numbers"}
    reserved |= {f"hidden_{i}" for i in range(len(cfg.hidden_units))}
    reserved |= {f"dropout_{i}" for i in range(len(cfg.hidden_units))}
    names = LayerNames(reserved)
    inputs: dict[str, tf.Tensor] = {}
    encoded = []
    # Every number and presence input goes through one layer (`Numbers`): a layer per feature
    # would make a model of thousands of layers, slow to build, trace and save.
    numbers: list[tuple[tf.Tensor, ModelInput]] = []
    presences: dict[str, tf.Tensor] = {}  # feature name → its presence input
    for model_input in recipe.inputs:
        base = names.unique(model_input.name)
        x = inputs[model_input.name] = keras_input(model_input, base)
        if model_input.kind == NUMBER:
            numbers.append((x, model_input))
        elif model_input.kind == PRESENCE:
            presences[model_input.feature.name] = x
        else:
            encoded.append(_encode(model_input, x, base, names))
    if numbers or presences:
        present = list(presences)
        block = Numbers(
            widths=[int(np.prod(cast("tuple[int, ...]", mi.shape))) for _, mi in numbers],
            mean=[float(v) for _, mi in numbers for v in np.reshape(moments_of(mi).mean, [-1])],
            variance=[
                float(v) for _, mi in numbers for v in np.reshape(moments_of(mi).variance, [-1])
            ],
            edges=[None if mi.bins is None else list(mi.bins) for _, mi in numbers],
            presence=[
                present.index(mi.feature.name) if mi.feature.name in presences else -1
                for _, mi in numbers
            ],
            name="numbers",
            dtype="float32",  # raw values (a year, a price) do not fit bfloat16's 8 bits
        )
        encoded.insert(0, block([[x for x, _ in numbers], [presences[n] for n in present]]))

    x = encoded[0] if len(encoded) == 1 else tf_keras.layers.Concatenate(name="concat")(encoded)
    for i, units in enumerate(cfg.hidden_units):
        x = tf_keras.layers.Dense(units, activation="relu", name=f"hidden_{i}")(x)
        if dropout:
            x = SeededDropout(dropout, seed=seed * 16 + i, name=f"dropout_{i}")(x)
    if recipe.task == CLASSIFICATION:
        classes = recipe.label.classes
        assert classes is not None  # a classification's (trainer.recipe.label)
        outputs = tf_keras.layers.Dense(
            len(classes), activation="softmax", name="probabilities", dtype="float32"
        )(x)
    else:
        prediction = tf_keras.layers.Dense(1, name="prediction", dtype="float32")(x)
        outputs = tf.squeeze(prediction, axis=-1)
    return tf_keras.Model(inputs=inputs, outputs=outputs, name="shardflow")


def _encode(model_input: ModelInput, x: tf.Tensor, base: str, names: LayerNames) -> tf.Tensor:
    """The encoding of one model input as a [batch, width] float tensor."""
    layers = tf_keras.layers
    size, width = model_input.vocabulary_size, model_input.width

    def name(suffix: str) -> str:
        return names.unique(f"{base}_{suffix}")

    if model_input.kind == IMAGE:  # a small convolutional tower, pooled to a vector
        x = layers.Conv2D(16, 3, strides=2, activation="relu", name=name("conv_1"))(x)
        x = layers.Conv2D(32, 3, strides=2, activation="relu", name=name("conv_2"))(x)
        return layers.GlobalAveragePooling2D(name=name("pool"))(x)
    assert size is not None  # a CATEGORY or TOKENS input bounds its ids (trainer.recipe.kinds)
    if model_input.ids == FROM_TRANSFORM:  # -1 (missing) or any id outside the range: zeros
        if model_input.kind == TOKENS:
            assert width is not None  # a TOKENS input is always embedded
            return IdEmbedding(size, width, mean=True, name=name("embed"))(x)
        if width is None:
            return OneHotIds(size, name=name("one_hot"))(x)
        embedded = IdEmbedding(size, width, name=name("embed"))(x)
        return layers.Flatten(name=name("flat"))(embedded)
    if model_input.kind == TOKENS:  # ids with 0 for padding, embedded, averaged
        embedded = layers.Embedding(size, width, name=name("embed"))(x)
        return MaskedMean(name=name("mean"))([embedded, x])
    if width is None:
        return OneHotIds(size, name=name("one_hot"))(x)  # id 0: a value not in the list
    embedded = layers.Embedding(size, width, name=name("embed"))(x)
    return layers.Flatten(name=name("flat"))(embedded)
