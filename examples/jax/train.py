"""A JAX training loop (plain jax, no framework) on a shardflow dataset with images: the shapes
sample.

    python examples/shapes/generate.py               # writes examples/shapes/pictures/
    shardflow etl --config examples/shapes/shapes.yaml --output out/shapes
    python examples/jax/train.py out/shapes [--steps 300] [--batch-size 32]

`trainer.readers.jax_batches` reads the dataset without TensorFlow: an endless iterator (when
shuffling) of dicts of arrays, this process's share of the records (jax.process_index() of
jax.process_count()), the next batches already on the device. The images arrive decoded and
resized to the manifest's `image_size`, float32 in [0, 1]; the label is its class index. A
two-layer network on the pooled pixels learns the class with Adam, written out in jax.numpy,
for STEPS steps; then it is evaluated on eval. The last line printed is a JSON summary. A
resumed run passes the steps it has done as `start_step` and gets the batches that follow.
"""

from __future__ import annotations

import argparse
import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np

from trainer.readers import jax_batches


def image_feature(batch: dict) -> str:
    """The name of the first image input of a batch ([batch, height, width, channels])."""
    for name, value in batch.items():
        if value.ndim == 4:
            return name
    raise SystemExit("this example needs an image feature with an image_size")


def features(images: jax.Array) -> jax.Array:
    """Pixels pooled 4×4: [batch, height/4 * width/4 * channels]."""
    b, h, w, c = images.shape
    pooled = images.reshape(b, h // 4, 4, w // 4, 4, c).mean(axis=(2, 4))
    return pooled.reshape(b, -1)


def init(key: jax.Array, inputs: int, classes: int, hidden: int = 64) -> dict:
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (inputs, hidden)) * jnp.sqrt(2.0 / inputs),
        "b1": jnp.zeros(hidden),
        "w2": jax.random.normal(k2, (hidden, classes)) * jnp.sqrt(1.0 / hidden),
        "b2": jnp.zeros(classes),
    }


def logits(params: dict, x: jax.Array) -> jax.Array:
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def loss(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    log_p = jax.nn.log_softmax(logits(params, x))
    return -jnp.take_along_axis(log_p, y[:, None], axis=1).mean()


@jax.jit
def step(params: dict, moments: dict, t: jax.Array, x: jax.Array, y: jax.Array):
    """One Adam step (learning rate 1e-2)."""
    value, grads = jax.value_and_grad(loss)(params, x, y)
    b1, b2, lr = 0.9, 0.999, 1e-2
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, moments["m"], grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, moments["v"], grads)
    scale = lr * jnp.sqrt(1 - b2**t) / (1 - b1**t)
    params = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return params, {"m": m, "v": v}, value


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    batches = jax_batches(args.data, "train", args.batch_size, seed=args.seed)
    label, classes = batches.info.label, batches.info.classes
    if label is None or classes is None:
        raise SystemExit("this example needs a classification label")
    first = next(batches)
    image = image_feature(first)
    params = init(jax.random.PRNGKey(args.seed), features(first[image]).shape[1], len(classes))
    moments = {"m": jax.tree.map(jnp.zeros_like, params), "v": jax.tree.map(jnp.zeros_like, params)}

    losses = []
    for t, batch in enumerate(itertools.chain([first], batches), start=1):
        y = jnp.asarray(batch[label], jnp.int32)
        params, moments, value = step(params, moments, jnp.float32(t), features(batch[image]), y)
        losses.append(float(value))
        if t % 50 == 0:
            print(f"step {t}: loss {losses[-1]:.4f}")
        if t == args.steps:
            break

    right = total = 0
    for batch in jax_batches(args.data, "eval", 64, shuffle=False, deterministic=True):
        predicted = np.asarray(logits(params, features(batch[image])).argmax(1))
        right += int((predicted == np.asarray(batch[label])).sum())
        total += len(predicted)
    summary = {
        "steps": len(losses),
        "first_loss": losses[0],
        "last_loss": sum(losses[-10:]) / len(losses[-10:]),
        "eval_accuracy": right / max(total, 1),
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
