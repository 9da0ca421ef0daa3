"""Your own training loop on shardflow's tuned input pipeline (`trainer.data`).

    python examples/custom_loop/train.py out/penguins [STEPS]

`trainer.data.make_dataset` gives the batches `shardflow train` feeds its model: interleaved
reads, vectorized parsing and the host preprocessing done (every feature a number), the label
encoded (a class index or a float). `trainer.data.model_spec` describes the inputs. Here a small
model of the inputs is trained with a GradientTape for STEPS steps, then evaluated on eval.
"""

import sys

import numpy as np
import tensorflow as tf
import tf_keras

from trainer import data


def main(dataset: str, steps: int = 200) -> dict:
    spec = data.model_spec(dataset)
    numbers = [n for n, f in spec.features.items() if f.kind in ("number", "presence")]
    categories = [n for n, f in spec.features.items() if f.kind == "category"]

    def features_of(batch: dict) -> tf.Tensor:
        parts = []
        for n in numbers:
            x = tf.reshape(batch[n], [tf.shape(batch[n])[0], -1])
            if n in spec.moments:  # a number: normalized with the moments of the train split
                m = spec.moments[n]
                mean = tf.constant(m.mean.reshape(-1), tf.float32)
                x = (x - mean) / tf.constant(np.sqrt(m.variance.reshape(-1) + 1e-6), tf.float32)
            parts.append(tf.cast(x, tf.float32))
        for n in categories:
            size = spec.features[n].vocabulary_size
            parts.append(tf.reshape(tf.one_hot(batch[n] % size, size), [-1, size]))
        return tf.concat(parts, axis=1)

    classification = spec.label.task == "classification"
    model = tf_keras.Sequential(
        [
            tf_keras.layers.Dense(32, activation="relu"),
            tf_keras.layers.Dense(spec.label.units),
        ]
    )
    loss_fn = (
        tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        if classification
        else tf_keras.losses.MeanSquaredError()
    )
    optimizer = tf_keras.optimizers.Adam(1e-2)

    @tf.function
    def step(batch, labels):
        with tf.GradientTape() as tape:
            outputs = model(features_of(batch), training=True)
            loss = loss_fn(labels, outputs if classification else tf.squeeze(outputs, -1))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    train = data.make_dataset(dataset, "train", 32, repeat=True, seed=0)
    for i, (batch, labels) in enumerate(train.take(steps)):
        loss = step(batch, labels)
        if i % 50 == 0:
            print(f"step {i}: loss {float(loss):.4f}")
    result = {"steps": steps, "train_loss": float(loss)}
    if classification:
        accuracy = tf_keras.metrics.SparseCategoricalAccuracy()
        for batch, labels in data.make_dataset(dataset, "eval", 64):
            accuracy.update_state(labels, model(features_of(batch), training=False))
        result["eval_accuracy"] = float(accuracy.result())
    print(result)
    return result


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 200)
