"""The training loop of `shardflow train`: model.fit on a tf.distribute strategy.

Trains on the `train` split and validates on `eval` (or, without one, on a slice of train held
out: every `HOLDOUT`-th record of each file). By default the run is sized to the data
(trainer.recipe.sizing.Sizing: the batch, the epochs' cap, dropout) and trains until the validation
loss stops improving: the learning rate is cut by `PLATEAU_FACTOR` after `PLATEAU_EPOCHS`
epochs without improvement, training stops after `PATIENCE` such epochs, and the weights of the
best epoch are kept (`BestEpoch`). `--epochs N` trains exactly N epochs instead (still keeping
the best). BackupAndRestore checkpoints every epoch (or every --checkpoint-every steps) and
keeps its checkpoint, so that a killed run resumes (its patience starts afresh). The chief
keeps the per-epoch history beside its checkpoint (`history_file`; trainer.task publishes it as
MODEL_DIR/history.csv) and, when tensorboard is installed, TensorBoard logs; other workers
write to a temporary folder of their own. After training every evaluated split is scored in the
label's units beside the baseline (trainer.run.evaluate). A step whose loss is NaN or infinite
stops the run (`TrainingDiverged`, naming the epoch and step) before anything is saved of it.
`train` returns the trained model and the run's metrics; exporting them is the caller's
(trainer.task).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import tensorflow as tf
import tf_keras

from trainer.config import TrainConfig
from trainer.dataset.paths import join
from trainer.keras.input import INPUTS, reads_whole_split
from trainer.keras.inputs import Inputs, resume_step, scan_corrupt, train_dataset
from trainer.keras.integrity import CorruptShard, DatasetWatch
from trainer.keras.model import build_model
from trainer.keras.plan import InputPlan, plan_input
from trainer.keras.usermodel import load_module
from trainer.recipe.words import CLASSIFICATION
from trainer.run.callbacks import (
    BestEpoch,
    PauseAfterCheckpoint,
    StopOnNonFiniteLoss,
    Throughput,
    quiet_callback_timing,
)
from trainer.run.evaluate import evaluate_split
from trainer.run.report import HISTORY, HistoryLogger
from trainer.run.schedule import HOLDOUT, Schedule, accelerator_fields, schedule
from trainer.run.strategy import (
    accelerator_settings,
    input_pipelines,
    is_chief,
    strategy_name,
    worker_dir,
)
from transforms.ui.safe import masked

logger = logging.getLogger(__name__)


# Early stopping: epochs without a better validation loss before the learning rate is cut, by
# how much, and before training stops.
PLATEAU_EPOCHS, PLATEAU_FACTOR, PATIENCE = 5, 0.3, 16


@dataclass(frozen=True)
class Trained:
    """What a training run leaves for the export: the model, its metrics and where to write."""

    model: tf_keras.Model
    metrics: dict
    out_dir: str  # MODEL_DIR on the chief; a temporary folder on other workers
    chief: bool
    logs_dir: str | None  # None: no TensorBoard logs were written


def train(
    cfg: TrainConfig,
    strategy: tf.distribute.Strategy,
    inputs: Inputs,
    pause: Callable[[str], None] | None = None,
) -> Trained:
    """Builds the model in `strategy`'s scope and fits it; returns it with the run's metrics.
    TrainingDiverged when the loss becomes NaN or infinite. `pause`, for tests, is called with
    "checkpoint" after each training step's checkpoint (trainer.task.POINTS)."""
    quiet_callback_timing()
    manifest = inputs.manifest
    corrupt = scan_corrupt(manifest) if cfg.skip_corrupt else {}
    skipped = sum(c.skipped for c in corrupt.get("train", []))
    plan = schedule(cfg, inputs, strategy.num_replicas_in_sync, skipped)
    accelerator = accelerator_settings(cfg.accelerator, strategy)
    logger.info("accelerator: %s", accelerator)
    logger.info(
        "training on %d records in batches of %d: %s", plan.train_records, plan.batch_size,
        f"until the validation loss stops improving (at most {plan.epochs} epochs)"
        if plan.early_stopping else f"{plan.epochs} epochs",
    )  # fmt: skip
    module = load_module(cfg.model_module) if cfg.model_module else None
    with strategy.scope():
        model = build_model(inputs.recipe, cfg.model, accelerator, module, plan.sizing, cfg.seed)
    pipelines = input_pipelines(strategy)
    with _cache_folder(cfg) as cache_dir:
        input_plan = plan_input(
            manifest,
            cfg.input,
            "train",
            # each pipeline reads the whole split when the reader says so (trainer.keras.input)
            1 if reads_whole_split(cfg.deterministic, pipelines) else pipelines,
            cache_dir,
            inputs.recipe.input_bytes(),
        )
        logger.info("train input: %s", input_plan.describe())
        trained = _fit(cfg, strategy, inputs, model, input_plan, plan, corrupt, pause)
    trained.metrics.update(accelerator_fields(accelerator))
    trained.metrics["model"] = cfg.model_module or "built-in"
    if not isinstance(strategy, tf.distribute.TPUStrategy):
        # every record of each evaluated split once, on this worker (no collective op: each
        # worker alike), in the label's units, beside the baseline
        for split in ("eval", "test"):
            if manifest.has_split(split) and inputs.labelled_records(split) > 0:
                data = inputs.dataset(
                    split,
                    plan.batch_size,
                    shuffle=False,
                    deterministic=True,
                    encode_label=inputs.recipe.task == CLASSIFICATION,
                )
                scored = evaluate_split(trained.model, data, inputs.recipe)
                trained.metrics.setdefault(split, {}).update(scored.pop("summary"))
                if scored:
                    trained.metrics[f"{split}_classes"] = scored["classes"]
    return trained


def _fit(
    cfg: TrainConfig,
    strategy: tf.distribute.Strategy,
    inputs: Inputs,
    model: tf_keras.Model,
    input_plan: InputPlan,
    plan: Schedule,
    corrupt: dict[str, list[CorruptShard]],
    pause: Callable[[str], None] | None = None,
) -> Trained:
    # A resumed run's input starts after the batches the killed run trained on: with
    # --deterministic it sees exactly the examples an uninterrupted run sees.
    done = resume_step(cfg.checkpoints)
    if done:
        logger.info("resuming after step %d: the input skips the %d batches trained on", done, done)
    holdout = (HOLDOUT, False) if plan.validation == "holdout" else None

    def train_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        batch = ctx.get_per_replica_batch_size(plan.batch_size)
        return train_dataset(
            inputs, cfg, input_plan, batch, ctx, skip_batches=done, holdout=holdout
        )

    eval_data, eval_steps = _validation_input(
        plan, strategy, inputs, cfg.deterministic, input_plan.cache == INPUTS
    )
    chief = is_chief(strategy)
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    out_dir = cfg.model_dir if chief else worker_dir(cfg.model_dir, strategy)
    throughput = Throughput()
    monitor = "val_loss" if eval_data is not None else "loss"
    best = BestEpoch(monitor, PATIENCE if plan.early_stopping else None)
    callbacks, logs_dir = _callbacks(cfg, chief, out_dir, throughput, plan.batch_size)
    if pause is not None:
        callbacks.append(PauseAfterCheckpoint(pause))
    # First: a step whose loss is not finite stops the run before a callback saves or logs it.
    callbacks.insert(0, StopOnNonFiniteLoss(cfg.model.learning_rate))
    if plan.early_stopping:
        callbacks.append(
            tf_keras.callbacks.ReduceLROnPlateau(
                monitor,
                factor=PLATEAU_FACTOR,
                patience=PLATEAU_EPOCHS,
                min_lr=cfg.model.learning_rate / 100,
            )
        )
    callbacks.append(best)
    # the dataset must stay the one the run started with (an etl --overwrite would swap it)
    callbacks.append(DatasetWatch(inputs.manifest.roots))
    history = model.fit(
        strategy.distribute_datasets_from_function(train_fn),
        epochs=plan.epochs,
        steps_per_epoch=plan.steps_per_epoch,
        validation_data=eval_data,
        validation_steps=eval_steps,
        callbacks=callbacks,
        verbose=2,
    )
    kept = best.kept(history.history)
    all_corrupt = [c for split in corrupt.values() for c in split]
    train_metrics = {k: v for k, v in kept.items() if not k.startswith("val_")}
    eval_metrics = {k.removeprefix("val_"): v for k, v in kept.items() if k.startswith("val_")}
    if not history.epoch and eval_data is not None:
        logger.info("All %d epochs were done by an earlier run; evaluating only", plan.epochs)
        eval_metrics = model.evaluate(eval_data, steps=eval_steps, return_dict=True, verbose=0)
        eval_metrics = {k: float(v) for k, v in eval_metrics.items()}
    metrics = {
        "train": train_metrics,
        "eval": eval_metrics,
        "examples_per_sec": (
            throughput.steps * plan.batch_size / throughput.seconds if throughput.seconds else 0.0
        ),
        "epochs": plan.epochs,
        # the epochs the model has trained in all, earlier runs included
        "epochs_trained": (
            throughput.last_epoch + 1 if throughput.last_epoch is not None else plan.epochs
        ),
        "best_epoch": best.best_epoch + 1 if best.best_epoch is not None else None,
        "early_stopping": plan.early_stopping,
        "stopped_early": best.stopped,
        "validation": plan.validation,
        "initial_epoch": (
            throughput.first_epoch if throughput.first_epoch is not None else plan.epochs
        ),
        "steps_per_epoch": plan.steps_per_epoch,
        "initial_step": (
            throughput.initial_step
            if throughput.initial_step is not None
            else plan.epochs * plan.steps_per_epoch
        ),
        "steps": int(model.optimizer.iterations.numpy()),
        "skipped_records": sum(c.skipped for c in all_corrupt),
        "corrupt_files": [c.path for c in all_corrupt],
        "batch_size": plan.batch_size,
        "learning_rate": float(cfg.model.learning_rate),
        "dropout": plan.sizing.dropout,
        "weight_decay": plan.sizing.weight_decay,
        "train_records": plan.train_records,
        "records_without_label": dict(inputs.recipe.label.missing),
        **inputs.recipe.metrics(),
        **(
            {"class_weight": cfg.class_weight or "none"}
            if inputs.recipe.task == CLASSIFICATION
            else {}
        ),
        "strategy": strategy_name(strategy),
        "replicas": strategy.num_replicas_in_sync,
        "dataset": masked(inputs.manifest.root),
    }
    if len(inputs.manifest.parts) > 1:
        metrics["datasets"] = list(inputs.manifest.roots)
    return Trained(model=model, metrics=metrics, out_dir=out_dir, chief=chief, logs_dir=logs_dir)


def _validation_input(
    plan: Schedule,
    strategy: tf.distribute.Strategy,
    inputs: Inputs,
    deterministic: bool,
    cached: bool = False,
) -> tuple[object, int | None]:
    """The validation data for model.fit and its steps (None: the whole split); (None, None)
    without validation. `cached`: its model inputs are kept in RAM after the first epoch, like
    the train split's."""
    if plan.validation is None:
        return None, None
    split = "eval" if plan.validation == "eval" else "train"
    holdout = None if plan.validation == "eval" else (HOLDOUT, True)
    if _lockstep(strategy):

        def eval_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
            return inputs.dataset(
                split,
                ctx.get_per_replica_batch_size(plan.batch_size),
                shuffle=False,
                deterministic=deterministic,
                repeat=True,
                drop_remainder=True,
                input_context=ctx,
                holdout=holdout,
                cache=INPUTS if cached else False,
            )

        records = (
            inputs.labelled_records("eval")
            if split == "eval"
            else inputs.labelled_records("train") - plan.train_records
        )
        eval_steps = max(1, records // plan.batch_size)
        return strategy.distribute_datasets_from_function(eval_fn), eval_steps
    # One worker: Keras splits each global batch across the local replicas and counts the
    # last, partial batch, so evaluation covers the split exactly once.
    eval_data = inputs.dataset(
        split,
        plan.batch_size,
        shuffle=False,
        deterministic=deterministic,
        holdout=holdout,
        cache=INPUTS if cached else False,
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
    cfg: TrainConfig, chief: bool, out_dir: str, throughput: Throughput, batch_size: int
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
        # The rows go beside the checkpoint they belong to, not to MODEL_DIR: history.csv there
        # is published whole with the export (trainer.task), never left half a run's.
        history = history_file(cfg)
        published = join(out_dir, HISTORY)
        if (
            not tf.io.gfile.exists(history)
            and tf.io.gfile.exists(published)
            and resume_step(cfg.checkpoints)
        ):
            # a model folder of before: its rows were kept in MODEL_DIR only
            tf.io.gfile.copy(published, history)
        callbacks.insert(
            0,
            HistoryLogger(
                history,
                functools.partial(throughput.epoch_examples_per_sec, batch_size),
            ),
        )
    # Only the chief writes to the job's log folder; other workers keep theirs in out_dir.
    logs_dir: str | None = cfg.logs_dir if chief and cfg.logs_dir else join(out_dir, "logs")
    if importlib.util.find_spec("tensorboard") is not None:
        profile = cfg.tensorboard_profile if chief and cfg.tensorboard_profile else 0
        callbacks.append(tf_keras.callbacks.TensorBoard(logs_dir, profile_batch=profile))
    else:
        # TensorFlow 2.21 no longer depends on tensorboard, and tf.summary needs it.
        logs_dir = None
        logger.warning("tensorboard is not installed: no TensorBoard logs are written")
    return callbacks, logs_dir


def history_file(cfg: TrainConfig) -> str:
    """Where the chief appends the per-epoch history while it trains: beside its checkpoint
    (BackupAndRestore's `chief` folder, trainer.keras.inputs.resume_step)."""
    return join(join(cfg.checkpoints, "chief"), HISTORY)


@contextlib.contextmanager
def _cache_folder(cfg: TrainConfig):
    """A temporary local folder for a file cache of the input, removed after the run."""
    if cfg.input.cache == "none":
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="shardflow-cache-") as folder:
        yield folder
