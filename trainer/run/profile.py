"""`shardflow train --profile-input`: the input pipeline and the model step, timed apart.

Reads --profile-batches training batches as the run would (after a few warm-up batches), then
fits the model on one batch held in memory for as many steps; both in examples per second. The
input is the bottleneck when it is the slower of the two. The model step runs with the
accelerator settings of the run (XLA, mixed precision, steps per execution), reported with it.
The host preprocessing (lookups, hashing, the words of free text, image decoding and resizing:
`trainer.keras.preprocess`) is timed alone too, on one parsed batch held in memory and mapped with
the pipeline's parallelism: `host_examples_per_sec`, the input's ceiling when nothing else costs,
and with images the decode and resize rate. Nothing is trained or written.
"""

from __future__ import annotations

import time

import tensorflow as tf

from trainer.config import TrainConfig
from trainer.keras.inputs import Inputs, train_dataset
from trainer.keras.model import build_model
from trainer.keras.plan import plan_input
from trainer.keras.usermodel import load_module
from trainer.recipe.words import IMAGE
from trainer.run.callbacks import Throughput
from trainer.run.schedule import accelerator_fields, schedule
from trainer.run.strategy import accelerator_settings

PROFILE_WARMUP_BATCHES = 5


def profile_input(cfg: TrainConfig, inputs: Inputs) -> dict:
    """Measures the input pipeline alone and the model step alone, in examples per second.

    Seeding is the caller's (trainer.task), as for a training run."""
    plan = plan_input(inputs.manifest, cfg.input, "train")
    sized = schedule(cfg, inputs)
    batch_size = sized.batch_size
    iterator = iter(train_dataset(inputs, cfg, plan, batch_size))
    input_seconds = _drain_seconds(iterator, cfg.profile_batches)

    host_rate = _host_rate(inputs, batch_size, cfg.profile_batches)
    accelerator = accelerator_settings(cfg.accelerator, tf.distribute.get_strategy())
    module = load_module(cfg.model_module) if cfg.model_module else None
    model = build_model(inputs.recipe, cfg.model, accelerator, module, sized.sizing)
    one_batch = tf.data.Dataset.from_tensors(next(iterator)).repeat()
    model.fit(one_batch, epochs=1, steps_per_epoch=PROFILE_WARMUP_BATCHES, verbose=0)
    throughput = Throughput()
    model.fit(
        one_batch,
        epochs=1,
        steps_per_epoch=cfg.profile_batches + 1,
        callbacks=[throughput],
        verbose=0,
    )
    input_rate = round(cfg.profile_batches * batch_size / input_seconds, 1)
    model_rate = round(throughput.steps * batch_size / throughput.seconds, 1)
    return {
        "input_examples_per_sec": input_rate,
        # serialized (uncompressed) example bytes per second
        "input_mb_per_sec": round(input_rate * plan.record_bytes / 2**20, 2),
        "model_examples_per_sec": model_rate,
        "input_bound": input_rate < model_rate,
        "host_examples_per_sec": host_rate,
        "images": sorted({i.name for i in inputs.host.inputs if i.kind == IMAGE}),
        "batch_size": batch_size,
        "batches": cfg.profile_batches,
        "task": inputs.recipe.task,
        "input": plan.describe(),
        **accelerator_fields(accelerator),
    }


def _host_rate(inputs: Inputs, batch_size: int, batches: int) -> float:
    """Examples per second through the host preprocessing alone (densify, transform, lookups,
    decoding), on the first train batch, parsed once and held in memory, mapped in parallel."""
    files = inputs.manifest.split_files("train")
    records = tf.data.TFRecordDataset(files, compression_type=inputs.manifest.compression_type)
    serialized = next(iter(records.batch(batch_size)))
    parsed = tf.io.parse_example(serialized, inputs.spec)
    parsed.pop(inputs.label, None)
    rows = int(serialized.shape[0])
    mapped = (
        tf.data.Dataset.from_tensors(parsed)
        .repeat()
        .map(inputs.preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
        .prefetch(tf.data.AUTOTUNE)
    )
    return round(batches * rows / _drain_seconds(iter(mapped), batches), 1)


def _drain_seconds(iterator, batches: int) -> float:
    """Seconds to pull `batches` batches from `iterator`, after PROFILE_WARMUP_BATCHES."""

    @tf.function
    def drain(n: tf.Tensor) -> None:
        # Pulling batches inside a tf.function keeps Python out of the measured time.
        for _ in tf.range(n):
            next(iterator)

    drain(tf.constant(PROFILE_WARMUP_BATCHES))
    started = time.perf_counter()
    drain(tf.constant(batches))
    return time.perf_counter() - started
