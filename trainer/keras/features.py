"""Derives the tf.Example parse spec and the dense model inputs from the manifest's features.

The manifest is the only place features are declared: this module turns each declaration into a
`tf.io` feature spec and turns a parsed batch into dense tensors. Features that are always full
(required, or optional with a `default`) parse as FixedLenFeature. Optional features without a
default hold an empty list when missing, and variable-length ([null]) features hold any number of
values: both parse as RaggedFeature and are densified here, missing values filled with 0 or "".
A missing numeric value also yields a 0/1 presence input, `NAME__present`, so the model can tell
a filled-in 0 from a real one. Sparse tensors (tf.Transform's variable-length outputs) are
densified the same way; a missing category id of a transform output is filled with -1, an id
outside its buckets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np
import tensorflow as tf

from trainer.dataset.manifest import InputFeature, Manifest, ManifestError
from trainer.recipe.words import (
    REGRESSION,
    LabelScale,
    dtype_of,
    fill_value,
    has_presence,
    label_task,
    presence_key,
)

ParseSpec = dict[str, tf.io.FixedLenFeature | tf.io.RaggedFeature]


def parse_spec(
    manifest: Manifest, include_label: bool = True, *, only: Iterable[str] | None = None
) -> ParseSpec:
    """The tf.io.parse_example spec of the manifest's features.

    `only` restricts the non-label features to those names; the label is kept iff
    `include_label`.
    """
    keep = None if only is None else set(only)
    spec: ParseSpec = {}
    for name, feature in manifest.features.items():
        if name == manifest.label:
            if not include_label:
                continue
        elif keep is not None and name not in keep:
            continue
        if feature.always_full:
            spec[name] = tf.io.FixedLenFeature(list(feature.shape), dtype_of(feature))
        else:
            spec[name] = tf.io.RaggedFeature(dtype=dtype_of(feature), row_splits_dtype=tf.int64)
    return spec


def dense_inputs(
    parsed: Mapping[str, tf.Tensor | tf.RaggedTensor | tf.SparseTensor],
    features: Mapping[str, InputFeature],
) -> dict[str, tf.Tensor]:
    """Turns a batch parsed with `parse_spec` into dense tensors keyed by input name.

    Fixed shapes become [batch, *shape] (a scalar is [batch]); variable-length features become
    [batch, longest list in the batch], padded with 0 or "" (-1 for category ids). Sparse
    [batch, n] values are read as ragged ones. See `has_presence`.
    """
    out: dict[str, tf.Tensor] = {}
    for name, value in parsed.items():
        feature = features[name]
        if isinstance(value, tf.SparseTensor):
            value = tf.RaggedTensor.from_sparse(value)
        if not isinstance(value, tf.RaggedTensor):
            out[name] = value
            continue
        fill = tf.constant(fill_value(feature), dtype=value.dtype)
        if feature.variable_length:
            out[name] = value.to_tensor(default_value=fill)
            continue
        dense = value.to_tensor(default_value=fill, shape=[None, feature.size])
        out[name] = tf.reshape(dense, [-1, *feature.shape])
        if has_presence(feature):
            key = presence_key(name)
            if key in features:
                raise ManifestError(f"feature {key!r} clashes with the presence input of {name!r}")
            out[key] = tf.cast(value.row_lengths() > 0, tf.float32)
    return out


def label_encoder(
    feature: InputFeature, scale: LabelScale | None = None
) -> Callable[[tf.Tensor], tf.Tensor]:
    """Maps a [batch] label tensor to the training target.

    Classification: the index of the value in `values` (int32); an unknown label fails the
    step. Regression: the value as float32, standardized with `scale` (trainer.recipe.label.
    LabelScale: (y - mean) / std, of log(y) on a log scale, a value <= 0 taken as the smallest
    positive float32) when given.
    """
    if label_task(feature) == REGRESSION:
        if scale is None:
            return lambda y: tf.cast(y, tf.float32)

        def standardize(y: tf.Tensor) -> tf.Tensor:
            y = tf.cast(y, tf.float32)
            y = tf.math.log(tf.maximum(y, np.finfo(np.float32).tiny)) if scale.log else y
            return (y - scale.mean) / scale.std

        return standardize
    assert feature.values is not None  # a classification's classes (label_task)
    classes = tf.constant(list(feature.values), dtype=dtype_of(feature))
    name = feature.name

    def encode(y: tf.Tensor) -> tf.Tensor:
        # An equality table instead of a lookup table: no resource to place on each device,
        # and label vocabularies are small.
        matches = tf.equal(tf.expand_dims(y, -1), classes)
        known = tf.debugging.assert_equal(
            tf.reduce_all(tf.reduce_any(matches, axis=-1)),
            True,
            # No quotes in the message: TensorFlow escapes them in the error it raises.
            message=f"label {name}: a value is not one of the manifest values",
        )
        with tf.control_dependencies([known]):
            return tf.argmax(tf.cast(matches, tf.int32), axis=-1, output_type=tf.int32)

    return encode
