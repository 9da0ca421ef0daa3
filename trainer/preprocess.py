"""The host side of the model: everything that touches strings, before the device sees a batch.

A TPU cannot run string ops, and on a GPU a vocabulary lookup or a hash inside the model moves
every batch back to the host. So the model is split in two:

- the **host** preprocessing (`HostPreprocessing.model`, a tf_keras model of Keras'
  preprocessing layers) turns the dense inputs of `trainer.features.dense_inputs` into numbers:
  a string or int with `values` becomes the id of its value (StringLookup/IntegerLookup; 0 for a
  value not in the list), any other string the id of its hash bucket (Hashing), a list of
  strings a row of such ids (0 for padding), free text (`--text-features`) the row of its
  words' ids (`words`), numbers float32. It runs in the tf.data pipeline's
  parallel map, before prefetch (`trainer.dataset.Inputs`), and again in the exported
  `serving_default` signature before the model (`trainer.export`): one function for both, so
  training and serving cannot drift apart.
- the **device** model (`trainer.model.build_model`, or a model of your own) takes only those
  dense numeric tensors, described by `ModelInput`s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import tensorflow as tf
import tf_keras

from trainer.config import ModelConfig
from trainer.features import dtype_of, has_presence, presence_key
from trainer.manifest import InputFeature

# What a model input is (ModelInput.kind).
NUMBER = "number"  # float32 values of a numeric feature, shaped like the feature
PRESENCE = "presence"  # float32 [batch]: 1 where the numeric feature NAME has a value
CATEGORY = "category"  # int32 ids in [0, vocabulary_size), shaped [batch, size]
TOKENS = "tokens"  # int32 ids [batch, n] of a variable-length list or of free text's words, padded
IMAGE = "image"  # float32 [batch, height, width, channels] in [0, 1]: decoded, resized

# How the ids of a CATEGORY or TOKENS input were made (ModelInput.ids).
FROM_VALUES = "values"  # the index in the feature's `values`; 0: not one of them
FROM_HASH = "hash"  # a hash bucket of the string
FROM_VOCABULARY = "vocabulary"  # the index in the train split's most frequent tokens; 1: other
FROM_TRANSFORM = "transform"  # a tf.Transform output's ids; -1 (missing) is outside the range

MAX_WORDS = 256  # the words of a free-text value that are kept: its first ones


@dataclass(frozen=True)
class ModelInput:
    """One dense numeric tensor the device model receives, keyed by `name` in the batch dict.

    `shape` is one example's (`None`: a variable-length list); `vocabulary_size` bounds the ids
    of a CATEGORY or TOKENS input; `padding` is the id that fills a TOKENS row past its values.
    """

    name: str
    kind: str
    dtype: tf.DType
    shape: tuple[int | None, ...]
    feature: InputFeature
    vocabulary_size: int | None = None
    ids: str | None = None
    padding: int | None = None

    def keras_input(self, name: str | None = None) -> tf.Tensor:
        """A tf_keras.Input for this model input (`name`: the layer's name, default `name`)."""
        return tf_keras.Input(shape=self.shape, dtype=self.dtype, name=name or self.name)


def model_inputs(used: Sequence[InputFeature], cfg: ModelConfig) -> list[ModelInput]:
    """The device inputs made from the features `used` as model inputs, in their order (a
    numeric feature's presence input right after it)."""
    out = []
    for f in used:
        if f.buckets is not None:  # ids of a tf.Transform output
            if f.variable_length:
                out.append(_ids(f, TOKENS, f.buckets, FROM_TRANSFORM, padding=-1))
            else:
                out.append(_ids(f, CATEGORY, f.buckets, FROM_TRANSFORM))
        elif f.text:  # free text: its words
            if f.vocabulary is not None:
                size = len(_vocabulary(f)) + 2
                out.append(_ids(f, TOKENS, size, FROM_VOCABULARY, padding=0))
            else:
                out.append(_ids(f, TOKENS, cfg.hash_bins + 1, FROM_HASH, padding=0))
        elif f.variable_length:  # a list of strings
            if f.values is not None:
                out.append(_ids(f, TOKENS, len(_vocabulary(f)) + 2, FROM_VALUES, padding=0))
            elif f.vocabulary is not None:
                size = len(_vocabulary(f)) + 2
                out.append(_ids(f, TOKENS, size, FROM_VOCABULARY, padding=0))
            else:
                out.append(_ids(f, TOKENS, cfg.hash_bins + 1, FROM_HASH, padding=0))
        elif f.type == "image":
            out.append(ModelInput(f.name, IMAGE, tf.float32, tuple(f.image_size), f))
        elif f.type in ("int", "float") and f.values is None:
            out.append(ModelInput(f.name, NUMBER, tf.float32, tuple(f.shape), f))
        elif f.values is not None:
            out.append(_ids(f, CATEGORY, len(f.values) + 1, FROM_VALUES))
        else:
            out.append(_ids(f, CATEGORY, cfg.hash_bins, FROM_HASH))
        if has_presence(f):
            out.append(ModelInput(presence_key(f.name), PRESENCE, tf.float32, (), f))
    return out


def _ids(f: InputFeature, kind: str, size: int, ids: str, padding: int | None = None):
    shape = (None,) if kind == TOKENS else (f.size,)
    return ModelInput(f.name, kind, tf.int32, shape, f, size, ids, padding)


def _vocabulary(feature: InputFeature) -> list:
    words = feature.values if feature.values is not None else feature.vocabulary
    return [v for v in words if v != ""]


class HostPreprocessing:
    """The host preprocessing of the features `used` as model inputs: `model` maps their dense
    inputs (keyed by name, as `dense_inputs` gives them) to the dict of `inputs`."""

    def __init__(self, used: Sequence[InputFeature], cfg: ModelConfig):
        self.inputs = model_inputs(used, cfg)
        self.model = _host_model(self.inputs, cfg)

    def __call__(self, dense: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return self.model({i.name: dense[i.name] for i in self.inputs})


def _host_model(inputs: Sequence[ModelInput], cfg: ModelConfig) -> tf_keras.Model:
    layers = tf_keras.layers
    names = LayerNames()
    raw, out = {}, {}
    for i in inputs:
        f = i.feature
        base = names.unique(i.name)
        if i.kind == PRESENCE:
            out[i.name] = raw[i.name] = tf_keras.Input(shape=(), dtype=tf.float32, name=base)
            continue
        shape = (None,) if f.variable_length else tuple(f.shape)
        x = raw[i.name] = tf_keras.Input(shape=shape, dtype=dtype_of(f), name=base)
        if i.kind == NUMBER:
            out[i.name] = tf.cast(x, tf.float32)
            continue
        if i.kind == IMAGE:
            out[i.name] = DecodeImages(*i.shape, name=names.unique(f"{base}_decode"))(x)
            continue
        if i.kind == CATEGORY:
            x = layers.Reshape((f.size,), name=names.unique(f"{base}_2d"))(x)
        if f.text:
            x = Words(name=names.unique(f"{base}_words"))(x)
        if i.ids == FROM_TRANSFORM:
            ids = x
        elif i.kind == TOKENS and i.ids in (FROM_VALUES, FROM_VOCABULARY):
            vocabulary = _vocabulary(f)
            ids = layers.StringLookup(
                vocabulary=vocabulary, mask_token="", name=names.unique(f"{base}_lookup")
            )(x)
        elif i.kind == TOKENS:
            ids = layers.Hashing(
                cfg.hash_bins + 1, mask_value="", name=names.unique(f"{base}_hash")
            )(x)
        elif i.ids == FROM_VALUES:
            lookup = layers.StringLookup if f.type == "string" else layers.IntegerLookup
            ids = lookup(vocabulary=list(f.values), name=names.unique(f"{base}_lookup"))(x)
        else:
            ids = layers.Hashing(cfg.hash_bins, name=names.unique(f"{base}_hash"))(x)
        out[i.name] = tf.cast(ids, tf.int32)
    return tf_keras.Model(inputs=raw, outputs=out, name="host_preprocessing")


def words(text: tf.Tensor) -> tf.RaggedTensor:
    """The words of free text [batch]: [batch, (words)], lower-cased, split at every run of
    characters that are neither letters nor digits ("Don't stop!" → don, t, stop), at most
    MAX_WORDS each. The vocabulary of a text feature is counted with it too
    (`trainer.classes`)."""
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

    def __init__(self, reserved: set[str] = frozenset()) -> None:
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
