"""A wide & deep model of your own, for any tabular shardflow dataset.

    shardflow train --data out/penguins --model-dir model --model-module examples/tabular/model.py

`build_model(spec)` receives the model inputs (all numeric: the lookups and hashing ran on the
host) and returns an uncompiled tf_keras model; shardflow compiles it with the task's loss and
metric, trains, checkpoints and exports it like its built-in model (the export serves raw
tf.train.Examples). The wide part is a linear layer over the one-hot categories; the deep part
an MLP over the normalized numbers, the categories' embeddings and the averaged token
embeddings (an empty list averages to zeros).
"""


def build_model(spec):
    keras = spec.keras
    layers = keras.layers
    wide, deep = [], []
    for name, x in spec.inputs.items():
        feature = spec.features[name]
        key = name.replace("/", "_")
        if feature.kind == "number":
            moments = spec.moments[name]
            flat = layers.Reshape((-1,), name=f"{key}_flat")(x)
            deep.append(
                layers.Normalization(
                    mean=moments.mean.reshape(-1),
                    variance=moments.variance.reshape(-1),
                    name=f"{key}_norm",
                    dtype="float32",
                )(flat)
            )
        elif feature.kind == "presence":
            deep.append(layers.Reshape((1,), name=f"{key}_2d")(x))
        elif feature.kind == "category":
            size = feature.vocabulary_size
            # a transform output's missing id (-1) goes to the last slot
            ids = layers.Lambda(lambda t, s=size: t % s, name=f"{key}_ids")(x)
            wide.append(layers.Flatten()(layers.CategoryEncoding(size, "multi_hot")(ids)))
            deep.append(layers.Flatten()(layers.Embedding(size, 4, name=f"{key}_embed")(ids)))
        elif feature.kind == "tokens":
            shift = -feature.padding  # ids start after the padding id, which becomes 0
            ids = layers.Lambda(lambda t, s=shift: t + s, name=f"{key}_ids")(x)
            embedded = layers.Embedding(feature.vocabulary_size + shift, 4, name=f"{key}_embed")(
                ids
            )
            mean = layers.Lambda(_mean_of_tokens(keras.backend), name=f"{key}_mean")
            deep.append(mean([embedded, ids]))
    x = layers.Concatenate(name="deep_in")(deep) if len(deep) > 1 else deep[0]
    for units in (32, 16):
        x = layers.Dense(units, activation="relu")(x)
    if wide:
        x = layers.Concatenate(name="wide_and_deep")([x, *wide])
    activation = "softmax" if spec.label.task == "classification" else None
    outputs = layers.Dense(spec.label.units, activation=activation, dtype="float32")(x)
    return keras.Model(inputs=spec.inputs, outputs=outputs, name="wide_and_deep")


def _mean_of_tokens(backend):
    """The mean of a list's token embeddings, padding (id 0) left out; zeros for an empty list
    (a masked GlobalAveragePooling1D divides by zero there, and the loss becomes NaN)."""

    def mean(inputs):
        embedded, ids = inputs
        present = backend.expand_dims(backend.cast(backend.greater(ids, 0), "float32"), -1)
        count = backend.maximum(backend.sum(present, axis=1), 1.0)
        return backend.sum(embedded * present, axis=1) / count

    return mean
