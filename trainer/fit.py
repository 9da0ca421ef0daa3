"""The training loop of `shardflow train`: model.fit on a tf.distribute strategy.

Trains on the `train` split and validates on `eval` when the dataset has one. BackupAndRestore
checkpoints every epoch (or every --checkpoint-every steps) and keeps its checkpoint, so that a
killed run, or a rerun with more --epochs, resumes. The chief keeps the per-epoch history
(MODEL_DIR/history.csv, trainer.report) and, when tensorboard is installed, TensorBoard logs;
other workers write to a temporary folder of their own. `train` returns the trained model and
the run's metrics; exporting them is the caller's (trainer.task).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import math
import tempfile
import time
from dataclasses import dataclass

import tensorflow as tf
import tf_keras

from trainer.config import Accelerator, TrainConfig
from trainer.dataset import Inputs, resume_step, scan_corrupt, train_dataset
from trainer.errors import UsageError
from trainer.evaluate import class_report
from trainer.features import CLASSIFICATION
from trainer.integrity import CorruptShard
from trainer.model import build_model
from trainer.paths import join
from trainer.plan import InputPlan, plan_input
from trainer.report import HISTORY, HistoryLogger
from trainer.strategy import accelerator_settings, strategy_name
from trainer.usermodel import load_module

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Trained:
    """What a training run leaves for the export: the model, its metrics and where to write."""

    model: tf_keras.Model
    metrics: dict
    out_dir: str  # MODEL_DIR on the chief; a temporary folder on other workers
    chief: bool
    logs_dir: str | None  # None: no TensorBoard logs were written


def train(cfg: TrainConfig, strategy: tf.distribute.Strategy, inputs: Inputs) -> Trained:
    """Builds the model in `strategy`'s scope and fits it; returns it with the run's metrics."""
    _quiet_callback_timing()
    manifest = inputs.manifest
    replicas = strategy.num_replicas_in_sync
    if cfg.batch_size % replicas:
        raise UsageError(
            f"--batch-size: {cfg.batch_size} is not a multiple of the {replicas} replicas"
        )
    corrupt = scan_corrupt(manifest) if cfg.skip_corrupt else {}
    train_records = manifest.split_records("train") - sum(
        c.skipped for c in corrupt.get("train", [])
    )
    if train_records < 1:
        raise UsageError(f"{manifest.root}: split 'train': no readable records left")
    steps = cfg.steps_per_epoch or math.ceil(train_records / cfg.batch_size)

    moments = inputs.moments()
    accelerator = accelerator_settings(cfg.accelerator, strategy)
    logger.info("accelerator: %s", accelerator)
    module = load_module(cfg.model_module) if cfg.model_module else None
    with strategy.scope():
        model = build_model(
            inputs.model_spec, cfg.model, moments, inputs.host.inputs, accelerator, module
        )
    with _cache_folder(cfg) as cache_dir:
        plan = plan_input(manifest, cfg.input, "train", _input_pipelines(strategy), cache_dir)
        logger.info("train input: %s", plan.describe())
        trained = _fit(cfg, strategy, inputs, model, plan, steps, corrupt)
    trained.metrics.update(accelerator_fields(accelerator))
    trained.metrics["model"] = cfg.model_module or "built-in"
    if inputs.model_spec.task == CLASSIFICATION:
        classes = list(inputs.model_spec.label.values)
        trained.metrics["classes"] = classes
        if manifest.has_split("eval") and not isinstance(strategy, tf.distribute.TPUStrategy):
            # every eval record once, on this worker (no collective op: each worker alike)
            evaluation = inputs.dataset("eval", cfg.batch_size, shuffle=False, deterministic=True)
            trained.metrics["eval_classes"] = class_report(trained.model, evaluation, classes)
    return trained


def accelerator_fields(accelerator: Accelerator) -> dict:
    """The accelerator settings as metrics.json and --profile-input report them."""
    return {
        "jit_compile": accelerator.jit_compile,
        "mixed_precision": accelerator.mixed_precision,
        "steps_per_execution": accelerator.steps_per_execution,
    }


def _fit(
    cfg: TrainConfig,
    strategy: tf.distribute.Strategy,
    inputs: Inputs,
    model: tf_keras.Model,
    plan: InputPlan,
    steps: int,
    corrupt: dict[str, list[CorruptShard]],
) -> Trained:
    # A resumed run's input starts after the batches the killed run trained on: with
    # --deterministic it sees exactly the examples an uninterrupted run sees.
    done = resume_step(cfg.checkpoints)
    if done:
        logger.info("resuming after step %d: the input skips the %d batches trained on", done, done)

    def train_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        batch = ctx.get_per_replica_batch_size(cfg.batch_size)
        return train_dataset(inputs, cfg, plan, batch, ctx, skip_batches=done)

    eval_data, eval_steps = _eval_input(cfg, strategy, inputs)
    chief = _is_chief(strategy)
    out_dir = cfg.model_dir if chief else _worker_dir(cfg.model_dir, strategy)
    throughput = Throughput()
    callbacks, logs_dir = _callbacks(cfg, chief, out_dir, throughput)
    history = model.fit(
        strategy.distribute_datasets_from_function(train_fn),
        epochs=cfg.epochs,
        steps_per_epoch=steps,
        validation_data=eval_data,
        validation_steps=eval_steps,
        callbacks=callbacks,
        verbose=2,
    )
    last = {k: float(v[-1]) for k, v in history.history.items()}
    all_corrupt = [c for split in corrupt.values() for c in split]
    train_metrics = {k: v for k, v in last.items() if not k.startswith("val_")}
    eval_metrics = {k.removeprefix("val_"): v for k, v in last.items() if k.startswith("val_")}
    if not history.epoch and eval_data is not None:
        logger.info("All %d epochs were done by an earlier run; evaluating only", cfg.epochs)
        eval_metrics = model.evaluate(eval_data, steps=eval_steps, return_dict=True, verbose=0)
        eval_metrics = {k: float(v) for k, v in eval_metrics.items()}
    test_metrics = None
    if inputs.manifest.has_split("test") and not _lockstep(strategy):
        # the held-out split, once, after training (every record; not used to choose anything)
        test = inputs.dataset("test", cfg.batch_size, shuffle=False, deterministic=True)
        test_metrics = model.evaluate(test, return_dict=True, verbose=0)
        test_metrics = {k: float(v) for k, v in test_metrics.items()}

    metrics = {
        "train": train_metrics,
        "eval": eval_metrics,
        **({"test": test_metrics} if test_metrics is not None else {}),
        "examples_per_sec": (
            throughput.steps * cfg.batch_size / throughput.seconds if throughput.seconds else 0.0
        ),
        "epochs": cfg.epochs,
        "initial_epoch": (
            throughput.first_epoch if throughput.first_epoch is not None else cfg.epochs
        ),
        "steps_per_epoch": steps,
        "initial_step": (
            throughput.initial_step if throughput.initial_step is not None else cfg.epochs * steps
        ),
        "steps": int(model.optimizer.iterations.numpy()),
        "skipped_records": sum(c.skipped for c in all_corrupt),
        "corrupt_files": [c.path for c in all_corrupt],
        "batch_size": cfg.batch_size,
        "label": inputs.label,
        "task": inputs.model_spec.task,
        "model_inputs": [i.name for i in inputs.host.inputs],
        "not_model_inputs": dict(inputs.model_spec.reasons),
        "strategy": strategy_name(strategy),
        "replicas": strategy.num_replicas_in_sync,
        "dataset": inputs.manifest.root,
    }
    if len(inputs.manifest.parts) > 1:
        metrics["datasets"] = list(inputs.manifest.parts)
    return Trained(model=model, metrics=metrics, out_dir=out_dir, chief=chief, logs_dir=logs_dir)


def _eval_input(
    cfg: TrainConfig, strategy: tf.distribute.Strategy, inputs: Inputs
) -> tuple[object, int | None]:
    """The validation data for model.fit and its steps (None: the whole split); (None, None)
    without an eval split."""
    manifest = inputs.manifest
    if not manifest.has_split("eval"):
        return None, None
    if _lockstep(strategy):

        def eval_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
            return inputs.dataset(
                "eval",
                ctx.get_per_replica_batch_size(cfg.batch_size),
                shuffle=False,
                deterministic=cfg.deterministic,
                repeat=True,
                drop_remainder=True,
                input_context=ctx,
            )

        eval_steps = max(1, manifest.split_records("eval") // cfg.batch_size)
        return strategy.distribute_datasets_from_function(eval_fn), eval_steps
    # One worker: Keras splits each global batch across the local replicas and counts the
    # last, partial batch, so evaluation covers the split exactly once.
    eval_data = inputs.dataset(
        "eval", cfg.batch_size, shuffle=False, deterministic=cfg.deterministic
    )
    return eval_data, None


def _lockstep(strategy: tf.distribute.Strategy) -> bool:
    """Multi-worker and TPU replicas must step together: their eval repeats, takes whole batches
    and runs a fixed number of steps (the last partial batch is left out), and no worker
    evaluates a split alone."""
    return isinstance(
        strategy, (tf.distribute.MultiWorkerMirroredStrategy, tf.distribute.TPUStrategy)
    )


def _callbacks(
    cfg: TrainConfig, chief: bool, out_dir: str, throughput: Throughput
) -> tuple[list[tf_keras.callbacks.Callback], str | None]:
    """The callbacks of model.fit, and the TensorBoard log folder (None: no logs)."""
    callbacks = [
        # delete_checkpoint=False: a later run with more --epochs resumes instead of restarting.
        tf_keras.callbacks.BackupAndRestore(
            cfg.checkpoints,
            save_freq=cfg.checkpoint_every or "epoch",
            delete_checkpoint=False,
        ),
        throughput,
    ]
    if chief:
        # Before BackupAndRestore: a run killed between an epoch's row and its checkpoint redoes
        # the epoch and writes its row again (the report keeps the later one); never loses one.
        callbacks.insert(
            0,
            HistoryLogger(
                join(out_dir, HISTORY),
                functools.partial(throughput.epoch_examples_per_sec, cfg.batch_size),
            ),
        )
    # Only the chief writes to the job's log folder; other workers keep theirs in out_dir.
    logs_dir = cfg.logs_dir if chief and cfg.logs_dir else join(out_dir, "logs")
    if importlib.util.find_spec("tensorboard") is not None:
        profile = cfg.tensorboard_profile if chief and cfg.tensorboard_profile else 0
        callbacks.append(tf_keras.callbacks.TensorBoard(logs_dir, profile_batch=profile))
    else:
        # TensorFlow 2.21 no longer depends on tensorboard, and tf.summary needs it.
        logs_dir = None
        logger.warning("tensorboard is not installed: no TensorBoard logs are written")
    return callbacks, logs_dir


class _CallbackTiming(logging.Filter):
    """Drops Keras' "Callback method ... is slow compared to the batch time" warning. Keras
    times the batch hooks of the first 5 steps whenever a callback of its own making is in the
    list (ours are: Throughput, HistoryLogger); on a CPU those steps take milliseconds, warm-up
    included, and Keras' own TensorBoard callback (about 1 ms a step) sets it off. Nothing for
    the user to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is slow compared to the batch time" not in record.getMessage()


def _quiet_callback_timing() -> None:
    keras_log = logging.getLogger("tensorflow")
    if not any(isinstance(f, _CallbackTiming) for f in keras_log.filters):
        keras_log.addFilter(_CallbackTiming())


class Throughput(tf_keras.callbacks.Callback):
    """Times training steps, leaving out the first (tracing) step and validation."""

    def __init__(self) -> None:
        super().__init__()
        # It reads no logs: Keras may pass them on as tensors, not converted to numbers at
        # every batch's end for this callback.
        self._supports_tf_logs = True
        self.first_epoch: int | None = None
        self.initial_step: int | None = None  # the optimizer's steps when fit starts
        self.steps = 0
        self.seconds = 0.0
        self.epoch_steps = 0  # timed steps of the current epoch
        self.epoch_seconds = 0.0
        self._started = 0.0
        self._skip_next = True
        self._steps_per_call = 1

    def on_train_begin(self, logs=None):
        # after BackupAndRestore (an earlier callback) restored a checkpoint
        self.initial_step = int(self.model.optimizer.iterations.numpy())
        # with steps_per_execution N, Keras calls the batch callbacks once every N steps
        steps_per_execution = getattr(self.model, "_steps_per_execution", None)
        self._steps_per_call = (
            1 if steps_per_execution is None else int(steps_per_execution.numpy())
        )

    def on_epoch_begin(self, epoch, logs=None):
        if self.first_epoch is None:
            self.first_epoch = epoch
        self.epoch_steps, self.epoch_seconds = 0, 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self._started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self._skip_next:
            self._skip_next = False
            return
        seconds = time.perf_counter() - self._started
        self.seconds += seconds
        self.steps += self._steps_per_call
        self.epoch_seconds += seconds
        self.epoch_steps += self._steps_per_call

    def epoch_examples_per_sec(self, batch_size: int) -> float:
        """Of the current epoch's timed steps; NaN when none was timed."""
        if not self.epoch_seconds:
            return math.nan
        return self.epoch_steps * batch_size / self.epoch_seconds


@contextlib.contextmanager
def _cache_folder(cfg: TrainConfig):
    """A temporary local folder for a file cache of the input, removed after the run."""
    if cfg.input.cache == "none":
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="shardflow-cache-") as folder:
        yield folder


def _input_pipelines(strategy: tf.distribute.Strategy) -> int:
    """Input pipelines (one per worker) that share the shards."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return 1
    cluster = resolver.cluster_spec().as_dict()
    return max(1, len(cluster.get("worker", ())) + len(cluster.get("chief", ())))


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def _worker_dir(model_dir: str, strategy: tf.distribute.Strategy) -> str:
    # Non-chief workers must still write (saving is collective) but to a place of their own,
    # outside MODEL_DIR: a local temporary folder, removed at the end.
    resolver = strategy.cluster_resolver
    return tempfile.mkdtemp(prefix=f"shardflow-{resolver.task_type}-{resolver.task_id}-")
