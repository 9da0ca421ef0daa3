"""`shardflow train` (`python -m trainer.task`): flags, dataset check, strategy, train, export.

Trains the manifest's label on the `train` split with model.fit on a tf.distribute strategy,
validates on `eval` when the dataset has one, checkpoints every epoch so that a killed run (or a
rerun with more --epochs) resumes, writes MODEL_DIR/metrics.json and exports the serving
SavedModel to MODEL_DIR/export; the chief also keeps the per-epoch history (MODEL_DIR/history.csv,
appended to by resumed runs) and writes a self-contained HTML run report (MODEL_DIR/report.html,
trainer.report). A corrupt shard (a CRC or decompression error) fails the run with a message
naming the file; with --skip-corrupt the rest of each corrupt shard is skipped,
and the skipped records are counted in the log and metrics.json. With --profile-input it only
measures the input pipeline and the model step apart and prints the result as a JSON line. A
dataset with a tf.Transform output is read and served through that transform
(trainer.transform). On Vertex AI, the job's output locations apply: AIP_MODEL_DIR when there is
no --model-dir, AIP_CHECKPOINT_DIR for the checkpoints and AIP_TENSORBOARD_LOG_DIR for the
chief's TensorBoard logs (`output_dirs`). Exit status: 0 success, 2 for a bad command line or
dataset, 1 for a failed run.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import json
import logging
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import tensorflow as tf
import tf_keras

from trainer.export import export_model
from trainer.features import dense_inputs, label_encoder, label_task, parse_spec
from trainer.input import CACHES, DEFAULT_READ_BATCH, DEFAULT_SHUFFLE_BUFFER, make_dataset
from trainer.integrity import CorruptShard, find_corrupt
from trainer.manifest import (
    FeatureSpec,
    Manifest,
    ManifestError,
    join,
    load_manifest,
    missing_files,
    normalize_root,
)
from trainer.plan import InputFlags, InputPlan, plan_input
from trainer.model import ModelConfig, Moments, build_model, compute_moments, model_features
from trainer.report import HISTORY, HistoryLogger, summarize_manifest, write_report
from trainer.strategy import STRATEGIES, StrategyError, get_strategy, strategy_name
from trainer.transform import Transform, load_transform

# Named, not __name__: under `python -m trainer.task` __name__ is "__main__".
logger = logging.getLogger("trainer.task")

# Normalization moments come from the first MOMENT_BATCHES x MOMENT_BATCH_SIZE train examples.
MOMENT_BATCHES = 20
MOMENT_BATCH_SIZE = 256
PROFILE_WARMUP_BATCHES = 5


@dataclass(frozen=True)
class TrainConfig:
    """The validated command line of `shardflow train`."""

    data: str
    model_dir: str | None
    epochs: int
    batch_size: int
    strategy: str
    deterministic: bool
    seed: int
    profile_input: bool
    profile_batches: int
    steps_per_epoch: int | None
    model: ModelConfig
    skip_corrupt: bool = False
    input: InputFlags = InputFlags()
    checkpoint_every: int | None = None  # steps; None: at the end of every epoch
    tensorboard_profile: tuple[int, int] | None = None  # batches traced by the profiler
    checkpoint_dir: str | None = None  # None: MODEL_DIR/checkpoints
    logs_dir: str | None = None  # the chief's TensorBoard logs; None: MODEL_DIR/logs

    @property
    def checkpoints(self) -> str:
        """Where the resumable checkpoints go."""
        return self.checkpoint_dir or join(self.model_dir, "checkpoints")


@dataclass(frozen=True)
class OutputDirs:
    """Where a run writes, when the environment (Vertex AI) names the places."""

    model_dir: str | None
    checkpoint_dir: str | None
    logs_dir: str | None


def output_dirs(model_dir: str | None, environ: Mapping[str, str]) -> OutputDirs:
    """--model-dir, else AIP_MODEL_DIR; AIP_CHECKPOINT_DIR; AIP_TENSORBOARD_LOG_DIR.

    Vertex AI sets the three AIP_ variables under a custom job's base output directory
    (BASE/model/, BASE/checkpoints/, BASE/logs/); `shardflow launch-training` makes that
    directory the --model-dir it passes, so a job writes the usual MODEL_DIR layout.
    """

    def env(name: str) -> str | None:
        value = environ.get(name, "").strip()
        return normalize_root(value) if value else None

    return OutputDirs(
        model_dir=normalize_root(model_dir) if model_dir else env("AIP_MODEL_DIR"),
        checkpoint_dir=env("AIP_CHECKPOINT_DIR"),
        logs_dir=env("AIP_TENSORBOARD_LOG_DIR"),
    )


class UsageError(ValueError):
    """A flag value that is wrong for this dataset or machine (exit status 2)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `shardflow train`."""
    p = argparse.ArgumentParser(
        prog="shardflow train",
        description="Train and export a model on a shardflow dataset.",
    )
    p.add_argument("--data", required=True, metavar="DATASET_URI", help="dataset folder or gs://")
    p.add_argument(
        "--model-dir",
        metavar="URI",
        help="output folder (default: AIP_MODEL_DIR when set; required unless profiling)",
    )
    p.add_argument("--epochs", type=_positive, default=5, help="epochs to train in all (default 5)")
    p.add_argument("--batch-size", type=_positive, default=64, help="global batch (default 64)")
    p.add_argument(
        "--strategy", choices=STRATEGIES, default="auto", help="default: auto"
    )
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="same example order and op results on every run (slower input pipeline)",
    )
    p.add_argument("--seed", type=int, default=0, help="seeds shuffles and weights (default 0)")
    p.add_argument(
        "--learning-rate",
        type=_positive_float,
        default=ModelConfig.learning_rate,
        help=f"Adam learning rate (default {ModelConfig.learning_rate})",
    )
    p.add_argument(
        "--hidden-units",
        type=_units,
        default=ModelConfig.hidden_units,
        metavar="N,N,...",
        help="sizes of the hidden Dense layers (default "
        + ",".join(map(str, ModelConfig.hidden_units))
        + ")",
    )
    inputs = p.add_argument_group("input pipeline (defaults derived from the dataset)")
    inputs.add_argument(
        "--shuffle-buffer",
        type=_positive,
        help=f"records in the shuffle buffer (default {DEFAULT_SHUFFLE_BUFFER}, fewer for a "
        "smaller split or RAM budget)",
    )
    inputs.add_argument(
        "--read-batch",
        type=_positive,
        default=DEFAULT_READ_BATCH,
        help="consecutive records read and shuffled together (default "
        f"{DEFAULT_READ_BATCH}; 1 shuffles record by record)",
    )
    inputs.add_argument(
        "--cycle-length", type=_positive, help="shards read at once (default: one per core, >= 4)"
    )
    inputs.add_argument(
        "--block-length",
        type=_positive,
        default=1,
        help="runs of records taken from a shard in turn (default 1)",
    )
    inputs.add_argument(
        "--cache",
        nargs="?",
        const="memory",
        default="none",
        choices=CACHES,
        help="keep the serialized train split after the first epoch: in RAM (`--cache`, "
        "`--cache memory`; a local file when it would not fit half the RAM budget) or in a "
        "temporary local file (`--cache disk`); default none",
    )
    inputs.add_argument(
        "--input-ram-mb",
        type=_positive,
        help="RAM the input pipeline may buffer (default: a quarter of the machine's memory)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=_positive,
        metavar="STEPS",
        help="also checkpoint every STEPS training steps (default: at the end of each epoch)",
    )
    p.add_argument(
        "--profile-input",
        action="store_true",
        help="measure the input pipeline and the model step apart; print a JSON line; no training",
    )
    p.add_argument(
        "--profile-batches",
        type=_positive,
        default=50,
        help="batches timed by --profile-input (default 50)",
    )
    p.add_argument(
        "--tensorboard-profile",
        type=_batch_range,
        metavar="FIRST,LAST",
        help="trace training batches FIRST to LAST (counted from 1 at the start of this run) "
        "with TensorFlow's profiler into the TensorBoard logs (Profile tab: step time, the "
        "tf.data input pipeline, ops)",
    )
    p.add_argument(
        "--steps-per-epoch",
        type=_positive,
        help="default: ceil(train records / batch size)",
    )
    p.add_argument(
        "--skip-corrupt",
        action="store_true",
        help="skip the rest of a shard after a read error (CRC, truncation) instead of failing; "
        "the skipped records are counted in metrics.json",
    )
    return p


def parse_args(
    argv: list[str] | None, environ: Mapping[str, str] | None = None
) -> TrainConfig:
    """Parses the command line (and Vertex AI's AIP_ variables of `environ`, default
    os.environ); argparse exits with status 2 on a bad one."""
    parser = build_parser()
    args = parser.parse_args(argv)
    dirs = output_dirs(args.model_dir, os.environ if environ is None else environ)
    if not args.profile_input and not dirs.model_dir:
        parser.error("--model-dir is required unless --profile-input is given")
    return TrainConfig(
        data=args.data,
        model_dir=dirs.model_dir,
        epochs=args.epochs,
        batch_size=args.batch_size,
        strategy=args.strategy,
        deterministic=args.deterministic,
        seed=args.seed,
        profile_input=args.profile_input,
        profile_batches=args.profile_batches,
        steps_per_epoch=args.steps_per_epoch,
        model=ModelConfig(hidden_units=args.hidden_units, learning_rate=args.learning_rate),
        skip_corrupt=args.skip_corrupt,
        input=InputFlags(
            shuffle_buffer=args.shuffle_buffer,
            read_batch=args.read_batch,
            cycle_length=args.cycle_length,
            block_length=args.block_length,
            cache=args.cache,
            ram_budget_mb=args.input_ram_mb,
        ),
        checkpoint_every=args.checkpoint_every,
        tensorboard_profile=args.tensorboard_profile,
        checkpoint_dir=dirs.checkpoint_dir,
        logs_dir=dirs.logs_dir,
    )


def main(argv: list[str] | None = None) -> int:
    """Runs `shardflow train`; returns the exit status."""
    try:
        cfg = parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("trainer").setLevel(logging.INFO)
    try:
        manifest = load_manifest(cfg.data)
        check_dataset(manifest)
    except ManifestError as e:
        print(f"shardflow train: {e}", file=sys.stderr)
        return 2
    try:
        if cfg.profile_input:
            print(json.dumps(profile_input(cfg, manifest)), flush=True)
        else:
            train(cfg, manifest)
    except (UsageError, ManifestError) as e:
        print(f"shardflow train: {e}", file=sys.stderr)
        return 2
    except tf.errors.DataLossError as e:
        logger.debug("training failed", exc_info=True)
        print(f"shardflow train: {_corrupt_message(manifest, e)}", file=sys.stderr)
        return 1
    except (StrategyError, tf.errors.OpError) as e:
        logger.debug("training failed", exc_info=True)
        print(f"shardflow train: training failed: {_first_line(e)}", file=sys.stderr)
        return 1
    return 0


def check_dataset(manifest: Manifest) -> None:
    """Raises ManifestError unless the dataset can be trained on."""
    if manifest.label is None:
        raise ManifestError(f"{manifest.root}: the manifest has no label to train on")
    label_task(manifest.features[manifest.label])
    load_transform(manifest)
    if not manifest.has_split("train"):
        raise ManifestError(f"{manifest.root}: split 'train' has no files or no records")
    for split in ("train", "eval"):
        if manifest.has_split(split):
            missing = missing_files(manifest.split_files(split))
            if missing:
                raise ManifestError(
                    f"{manifest.root}: split {split!r}: {len(missing)} listed file(s) missing, "
                    f"e.g. {missing[0]}"
                )


@dataclass(frozen=True)
class Inputs:
    """How to read the dataset for the model: spec, preprocessing and label encoding.

    `features` are the model's features: the manifest's, or the transform's outputs.
    """

    manifest: Manifest
    spec: dict
    label: str
    features: Mapping[str, FeatureSpec]
    preprocess: Callable[[dict], dict]
    transform: Transform | None = None
    skip_corrupt: bool = False

    @classmethod
    def of(cls, manifest: Manifest, skip_corrupt: bool = False) -> Inputs:
        transform = load_transform(manifest)
        if transform is not None:
            return cls(
                manifest=manifest,
                spec=transform.read_spec(),
                label=manifest.label,
                features=transform.features,
                preprocess=transform.preprocess,
                transform=transform,
                skip_corrupt=skip_corrupt,
            )
        used, _ = model_features(manifest.features, manifest.label)
        return cls(
            manifest=manifest,
            spec=parse_spec(manifest, only=[f.name for f in used]),
            label=manifest.label,
            features=manifest.features,
            preprocess=functools.partial(dense_inputs, features=manifest.features),
            skip_corrupt=skip_corrupt,
        )

    def dataset(
        self, split: str, batch_size: int, *, encode_label: bool = True, **options
    ) -> tf.data.Dataset:
        return make_dataset(
            self.manifest.split_files(split),
            self.spec,
            self.manifest.compression_type,
            batch_size,
            split=split,
            label=self.label,
            preprocess=self.preprocess,
            label_fn=label_encoder(self.manifest.features[self.label]) if encode_label else None,
            skip_corrupt=self.skip_corrupt,
            **options,
        )

    def moments(self, batch_size: int) -> dict[str, Moments]:
        # The first batches in file order, so a resumed run normalizes exactly as before.
        sample = self.dataset(
            "train", batch_size, encode_label=False, shuffle=False, deterministic=True
        )
        used, _ = model_features(self.features, self.label)
        return compute_moments(sample, used, MOMENT_BATCHES)


class _Throughput(tf_keras.callbacks.Callback):
    """Times training steps, leaving out the first (tracing) step and validation."""

    def __init__(self) -> None:
        super().__init__()
        self.first_epoch: int | None = None
        self.initial_step: int | None = None  # the optimizer's steps when fit starts
        self.steps = 0
        self.seconds = 0.0
        self.epoch_steps = 0  # timed steps of the current epoch
        self.epoch_seconds = 0.0
        self._started = 0.0
        self._skip_next = True

    def on_train_begin(self, logs=None):
        # after BackupAndRestore (an earlier callback) restored a checkpoint
        self.initial_step = int(self.model.optimizer.iterations.numpy())

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
        self.steps += 1
        self.epoch_seconds += seconds
        self.epoch_steps += 1

    def epoch_examples_per_sec(self, batch_size: int) -> float:
        """Of the current epoch's timed steps; NaN when none was timed."""
        if not self.epoch_seconds:
            return math.nan
        return self.epoch_steps * batch_size / self.epoch_seconds


def train(cfg: TrainConfig, manifest: Manifest) -> dict:
    """Trains, evaluates and exports; returns the metrics written to metrics.json."""
    tf_keras.utils.set_random_seed(cfg.seed)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    strategy = get_strategy(cfg.strategy)
    replicas = strategy.num_replicas_in_sync
    if cfg.batch_size % replicas:
        raise UsageError(
            f"--batch-size: {cfg.batch_size} is not a multiple of the {replicas} replicas"
        )
    inputs = Inputs.of(manifest, skip_corrupt=cfg.skip_corrupt)
    label_task(manifest.features[manifest.label])  # a label that cannot be learned fails here
    corrupt = _scan_corrupt(manifest) if cfg.skip_corrupt else {}
    train_records = manifest.split_records("train") - sum(
        c.skipped for c in corrupt.get("train", [])
    )
    if train_records < 1:
        raise UsageError(f"{manifest.root}: split 'train': no readable records left")
    steps = cfg.steps_per_epoch or math.ceil(train_records / cfg.batch_size)

    moments = inputs.moments(MOMENT_BATCH_SIZE)
    with strategy.scope():
        model = build_model(inputs.features, manifest.label, cfg.model, moments)
    with _cache_folder(cfg) as cache_dir:
        plan = plan_input(manifest, cfg.input, "train", _input_pipelines(strategy), cache_dir)
        logger.info("train input: %s", plan.describe())
        return _fit_and_export(cfg, manifest, strategy, inputs, model, plan, steps, corrupt)


def _fit_and_export(cfg, manifest, strategy, inputs, model, plan, steps, corrupt) -> dict:
    replicas = strategy.num_replicas_in_sync
    task = label_task(manifest.features[manifest.label])
    # Multi-worker and TPU replicas must step together: their eval repeats, takes whole batches
    # and runs a fixed number of steps (the last partial batch is left out).
    lockstep = isinstance(
        strategy, (tf.distribute.MultiWorkerMirroredStrategy, tf.distribute.TPUStrategy)
    )

    def train_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        batch = ctx.get_per_replica_batch_size(cfg.batch_size)
        return _train_dataset(inputs, cfg, plan, batch, ctx)

    eval_data, eval_steps = None, None
    if manifest.has_split("eval") and lockstep:

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

        eval_data = strategy.distribute_datasets_from_function(eval_fn)
        eval_steps = max(1, manifest.split_records("eval") // cfg.batch_size)
    elif manifest.has_split("eval"):
        # One worker: Keras splits each global batch across the local replicas and counts the
        # last, partial batch, so evaluation covers the split exactly once.
        eval_data = inputs.dataset(
            "eval", cfg.batch_size, shuffle=False, deterministic=cfg.deterministic
        )

    chief = _is_chief(strategy)
    out_dir = cfg.model_dir if chief else _worker_dir(cfg.model_dir, strategy)
    throughput = _Throughput()
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

    metrics = {
        "train": train_metrics,
        "eval": eval_metrics,
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
        "label": manifest.label,
        "task": task,
        "strategy": strategy_name(strategy),
        "replicas": replicas,
        "dataset": manifest.root,
    }
    export_dir = export_model(model, manifest, join(out_dir, "export"), inputs.transform)
    if chief:
        with tf.io.gfile.GFile(join(out_dir, "metrics.json"), "w") as f:
            f.write(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        print(f"model exported to {export_dir}")
        print(f"metrics written to {join(out_dir, 'metrics.json')}")
        report = write_report(out_dir, metrics, summarize_manifest(manifest))
        print(f"run report written to {report} (per-epoch history in {join(out_dir, HISTORY)})")
        print(f"checkpoints in {cfg.checkpoints}")
        if logs_dir:
            print(f"TensorBoard logs in {logs_dir}")
    else:
        tf.io.gfile.rmtree(out_dir)
    return metrics


def profile_input(cfg: TrainConfig, manifest: Manifest) -> dict:
    """Measures the input pipeline alone and the model step alone, in examples per second."""
    tf_keras.utils.set_random_seed(cfg.seed)
    inputs = Inputs.of(manifest, skip_corrupt=cfg.skip_corrupt)
    plan = plan_input(manifest, cfg.input, "train")
    ds = _train_dataset(inputs, cfg, plan, cfg.batch_size)
    iterator = iter(ds)

    @tf.function
    def drain(n: tf.Tensor) -> None:
        # Pulling batches inside a tf.function keeps Python out of the measured time.
        for _ in tf.range(n):
            next(iterator)

    drain(tf.constant(PROFILE_WARMUP_BATCHES))
    started = time.perf_counter()
    drain(tf.constant(cfg.profile_batches))
    input_seconds = time.perf_counter() - started

    moments = inputs.moments(MOMENT_BATCH_SIZE)
    model = build_model(inputs.features, manifest.label, cfg.model, moments)
    one_batch = tf.data.Dataset.from_tensors(next(iterator)).repeat()
    model.fit(one_batch, epochs=1, steps_per_epoch=PROFILE_WARMUP_BATCHES, verbose=0)
    throughput = _Throughput()
    model.fit(
        one_batch, epochs=1, steps_per_epoch=cfg.profile_batches + 1, callbacks=[throughput],
        verbose=0,
    )
    input_rate = round(cfg.profile_batches * cfg.batch_size / input_seconds, 1)
    model_rate = round(throughput.steps * cfg.batch_size / throughput.seconds, 1)
    return {
        "input_examples_per_sec": input_rate,
        # serialized (uncompressed) example bytes per second
        "input_mb_per_sec": round(input_rate * plan.record_bytes / 2**20, 2),
        "model_examples_per_sec": model_rate,
        "input_bound": input_rate < model_rate,
        "batch_size": cfg.batch_size,
        "batches": cfg.profile_batches,
        "task": label_task(manifest.features[manifest.label]),
        "input": plan.describe(),
    }


def _scan_corrupt(manifest: Manifest, log: bool = True) -> dict[str, list[CorruptShard]]:
    """The corrupt shards of train and eval; with `log`, each is logged with what it loses."""
    corrupt = {}
    for split in ("train", "eval"):
        if not manifest.has_split(split):
            continue
        corrupt[split] = find_corrupt(manifest.splits[split].files, manifest.compression_type)
        for c in corrupt[split] if log else []:
            logger.warning(
                "split %r: corrupt shard %s: skipping %d of its %d records (%d readable)",
                split, c.path, c.skipped, c.listed, c.readable,
            )  # fmt: skip
    skipped = sum(c.skipped for split in corrupt.values() for c in split)
    if skipped and log:
        logger.warning("--skip-corrupt: %d records skipped in all", skipped)
    return corrupt


def _corrupt_message(manifest: Manifest, e: tf.errors.DataLossError) -> str:
    """One line naming the corrupt shard(s) behind a read error."""
    corrupt = [c for split in _scan_corrupt(manifest, log=False).values() for c in split]
    if not corrupt:
        return f"training failed: {_first_line(e)}"
    first = corrupt[0]
    more = f" (and {len(corrupt) - 1} more corrupt shard(s))" if len(corrupt) > 1 else ""
    return (
        f"corrupt shard {first.path}: only {first.readable} of its {first.listed} records "
        f"can be read ({_first_line(e)}){more}; rerun with --skip-corrupt to train without "
        "the unreadable records"
    )


def _train_dataset(
    inputs: Inputs,
    cfg: TrainConfig,
    plan: InputPlan,
    batch_size: int,
    input_context: tf.distribute.InputContext | None = None,
) -> tf.data.Dataset:
    """The repeated, shuffled training input, as configured by the flags."""
    return inputs.dataset(
        "train",
        batch_size,
        seed=cfg.seed,
        deterministic=cfg.deterministic,
        repeat=True,
        drop_remainder=True,
        input_context=input_context,
        **plan.dataset_options(),
    )


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


def _first_line(e: BaseException) -> str:
    """The line of a (TensorFlow) error that says what went wrong, without the graph context."""
    text = (getattr(e, "message", None) or str(e)).strip()
    noise = ("Graph execution error", "Detected at node", "<stack traces unavailable>")
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line[0].isspace() and not line.startswith(noise)
    ]
    line = lines[-1] if lines else text.splitlines()[0] if text else ""
    # tf.data prefixes the op's message with the transformation and iterator it ran in; eager
    # ops wrap it in "{{function_node ...}} MESSAGE [Op:NAME] name: ".
    if "assertion failed: " in line:
        line = line[line.index("assertion failed: ") :]
    line = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", line)
    line = re.sub(r"\s*\[Op:\w+\]( name: ?\S*)?$", "", line)
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _batch_range(text: str) -> tuple[int, int]:
    try:
        first, last = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIRST,LAST (e.g. 5,8)") from None
    if not 1 <= first <= last:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= FIRST <= LAST")
    return first, last


def _units(text: str) -> tuple[int, ...]:
    try:
        units = tuple(int(u) for u in text.split(",") if u.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list") from None
    if any(u < 1 for u in units):
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be positive")
    return units


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(status)
