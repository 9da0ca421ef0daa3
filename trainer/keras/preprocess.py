"""The host side of the model: everything that touches strings, before the device sees a batch.

A TPU cannot run string ops, and on a GPU a vocabulary lookup or a hash inside the model moves
every batch back to the host. So the model is split in two:

- the **host** preprocessing (`HostPreprocessing.model`, a tf_keras model of Keras'
  preprocessing layers and a few of ours) turns the dense inputs of
  `trainer.keras.features.dense_inputs` into the model inputs the recipe decided
  (trainer.recipe.kinds): a category becomes the id of its value in its `values` or train vocabulary
  (StringLookup/IntegerLookup; 0 for another value), a string beyond the vocabulary size the id
  of its hash bucket (Hashing), a list of strings a row of such ids (0 for padding), free text
  (`--text-features`) the row of its words' ids (`words`), a date or timestamp its parts
  (`DateParts`), a skewed number its log (`LogScale`), numbers float32. It runs in the tf.data
  pipeline's parallel map, before prefetch (`trainer.keras.inputs.Inputs`), and again in the
  exported `serving_default` signature before the model (`trainer.run.export`): one function for
  both, so training and serving cannot drift apart.
- the **device** model (`trainer.keras.model.build_model`, or a model of your own) takes only those
  dense numeric tensors, described by `ModelInput`s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import cast

import tensorflow as tf
import tf_keras

from trainer.recipe.words import (
    CATEGORY,
    FROM_TRANSFORM,
    FROM_VALUES,
    FROM_VOCABULARY,
    IMAGE,
    NUMBER,
    PRESENCE,
    TOKENS,
    ModelInput,
    date_parts,
    dtype_of,
    words,
)


def keras_input(model_input: ModelInput, name: str | None = None) -> tf.Tensor:
    """A tf_keras.Input for a model input (`name`: the layer's name, default its own)."""
    return tf_keras.Input(
        shape=model_input.shape, dtype=model_input.dtype, name=name or model_input.name
    )


class HostPreprocessing:
    """The host preprocessing of the model inputs `inputs` (trainer.recipe.rules): `model` maps the
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
                assert i.log_unit is not None  # a log scale has its unit (trainer.recipe.kinds)
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
    """x -> log(1 + max(x, 0) / unit): a skewed number on a log scale (trainer.recipe.kinds)."""

    def __init__(self, unit: float, **kwargs):
        kwargs["trainable"] = False
        super().__init__(**kwargs)
        self.unit = float(unit)

    def call(self, x):
        return tf.math.log1p(tf.maximum(x, 0.0) / self.unit)

    def get_config(self):
        return {**super().get_config(), "unit": self.unit}


class DateParts(tf_keras.layers.Layer):
    """Date or timestamp strings [batch] to their parts (`date_parts`), on the host."""

    def __init__(self, **kwargs):
        kwargs["trainable"] = False
        super().__init__(**kwargs)

    def call(self, text):
        return date_parts(text)


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
