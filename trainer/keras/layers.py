"""The device model's own layers (trainer.keras.model builds the model of them): every number
input at once (`Numbers`: standardized with its train moments, softly clipped, and cut into the
pieces of its train quantiles), a category's ids one-hot (`OneHotIds`) or embedded
(`IdEmbedding`, ids outside the range as zeros; `MaskedMean` for a list of ids), and a dropout
whose masks a resumed run draws again (`SeededDropout`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras

from trainer.recipe.words import ModelInput, Moments


class SeededDropout(tf_keras.layers.Layer):
    """Dropout whose masks are drawn from the seed and a count of training calls kept with the
    model's weights (so in its checkpoints): a resumed run draws exactly the masks of an
    uninterrupted one, which Keras' Dropout (a random state outside the checkpoint) does not.
    Replicas draw the global batch's mask and keep their own rows of it."""

    def __init__(self, rate: float, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.rate, self.seed = float(rate), int(seed)

    def build(self, input_shape):
        self.calls = self.add_weight(
            name="calls",
            shape=(),
            dtype=tf.int64,
            initializer="zeros",
            trainable=False,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
        super().build(input_shape)

    def call(self, x, training=None):
        if not training or not self.rate:
            return x
        count = self.calls.assign_add(1)
        # The mask of the global batch, of which this replica keeps its rows: replicas that
        # split a batch draw the masks one device draws for it (with --deterministic, a
        # multi-worker run trains as the same run on one device would).
        replica = tf.distribute.get_replica_context()
        index, replicas = (0, 1) if replica is None else (
            replica.replica_id_in_sync_group, replica.num_replicas_in_sync
        )  # fmt: skip
        seed = tf.stack([tf.cast(self.seed * 4096, tf.int64), count])
        shape = tf.shape(x)
        rows = shape[0]
        drawn = tf.random.stateless_uniform(
            tf.concat([[rows * replicas], shape[1:]], axis=0), seed=seed
        )
        keep = drawn[index * rows : (index + 1) * rows] >= self.rate
        return tf.where(keep, x / tf.cast(1.0 - self.rate, x.dtype), tf.zeros_like(x))

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}


def moments_of(model_input: ModelInput) -> Moments:
    if model_input.moments is None:
        raise ValueError(f"model input {model_input.name!r}: no normalization moments given")
    return model_input.moments


class Numbers(tf_keras.layers.Layer):
    """Every number input of the model at once, as [batch, columns] float32: each standardized
    with its train moments and softly clipped (x / sqrt(1 + (x/3)²): the identity near 0,
    bounded by ±3), then the pieces of the numbers that have quantile `edges` (piece j of e_0 <
    … < e_n is clip((x - e_j) / (e_{j+1} - e_j), 0, 1)), both zero where the feature's
    presence input says the value is missing (it sits at the mean, not at its filler), then the
    presence inputs themselves.

    `widths`: the values of each number input (1 for a scalar); `mean`, `variance`: one per
    value; `edges`: per input, None or its edges; `presence`: per input, the index of its
    feature's presence input, or -1.
    """

    def __init__(self, widths, mean, variance, edges, presence, **kwargs):
        super().__init__(**kwargs)
        self.widths = [int(w) for w in widths]
        self.mean = [float(v) for v in mean]
        self.variance = [float(v) for v in variance]
        self.edges = [None if e is None else [float(v) for v in e] for e in edges]
        self.presence = [int(p) for p in presence]
        columns = np.repeat(np.arange(len(self.widths)), self.widths)  # input of each column
        self._column_presence = np.asarray(self.presence, np.int64)[columns]
        binned = [i for i, e in enumerate(self.edges) if e is not None]
        starts = np.concatenate([[0], np.cumsum(self.widths)])[:-1].astype(np.int64)
        self._binned = starts[binned] if binned else np.zeros([0], np.int64)
        self._binned_presence = np.asarray([self.presence[i] for i in binned], np.int64)
        pieces = max((len(self.edges[i]) - 1 for i in binned), default=0)
        low = np.zeros([len(binned), pieces], np.float32)
        width = np.full([len(binned), pieces], np.inf, np.float32)  # padding: always 0
        for row, i in enumerate(binned):
            e = np.asarray(self.edges[i], np.float32)
            low[row, : len(e) - 1], width[row, : len(e) - 1] = e[:-1], np.diff(e)
        self._low, self._width = low, width

    def call(self, inputs):
        numbers, presences = inputs
        batch = tf.shape(numbers[0] if numbers else presences[0])[0]
        flat = [
            tf.reshape(tf.cast(x, tf.float32), [batch, w]) for x, w in zip(numbers, self.widths)
        ]
        present = [tf.reshape(tf.cast(p, tf.float32), [batch, 1]) for p in presences]
        out = []
        if flat:
            x = tf.concat(flat, axis=1)
            # as Keras' Normalization: (x - mean) / max(std, epsilon)
            std = tf.maximum(tf.sqrt(tf.constant(self.variance)), tf_keras.backend.epsilon())
            z = (x - tf.constant(self.mean)) / std
            clipped = z * tf.math.rsqrt(1.0 + tf.square(z / 3.0))
            # present[-1]: ones, for the numbers of features without a presence input
            mask = tf.concat([*present, tf.ones([batch, 1])], axis=1)
            clipped *= tf.gather(mask, _or_last(self._column_presence, len(present)), axis=1)
            out.append(clipped)
            if len(self._binned):
                values = tf.gather(x, self._binned, axis=1)[:, :, None]
                pieces = tf.clip_by_value((values - self._low) / self._width, 0.0, 1.0)
                kept = tf.gather(mask, _or_last(self._binned_presence, len(present)), axis=1)
                pieces *= kept[:, :, None]
                out.append(tf.reshape(pieces, [batch, pieces.shape[1] * pieces.shape[2]]))
        out.extend(present)
        return out[0] if len(out) == 1 else tf.concat(out, axis=1)

    def get_config(self):
        return {
            **super().get_config(),
            "widths": self.widths,
            "mean": self.mean,
            "variance": self.variance,
            "edges": self.edges,
            "presence": self.presence,
        }


def _or_last(indices: np.ndarray, last: int) -> np.ndarray:
    """Indices with -1 (none) replaced by `last`."""
    return np.where(indices < 0, last, indices)


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
