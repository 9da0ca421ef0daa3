"""The command line of `shardflow train`: its argparse parser and the checks of flag values.

No TensorFlow here (trainer.config holds the choices and defaults): `shardflow launch-training`
checks the arguments it passes on to the trainer with this parser, on a machine that may not
have TensorFlow. `parse_args` also reads Vertex AI's AIP_ output locations
(trainer.config.output_dirs).

Every number a flag takes is checked against its range here, before anything runs
(`transforms.ui.args.between`, `learning_rate`): a batch of a billion records, a learning rate of
inf or NaN, zero epochs are refused in one line naming the flag and the range. The readers
(trainer.readers) hold their arguments to the same bounds.

Longer than most modules because it is the whole command line of `shardflow train`: every flag
declared once, with its help and range, and read into a `TrainConfig`, in the one parser that
launch-training checks with and that `--help` reads without TensorFlow.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping

from trainer.config import (
    CACHES,
    CLASS_WEIGHTS,
    DEFAULT_READ_BATCH,
    DEFAULT_SHUFFLE_BUFFER,
    MAX_BATCH_SIZE,
    MAX_BLOCK_LENGTH,
    MAX_CYCLE_LENGTH,
    MAX_EPOCHS,
    MAX_INSPECT_TAKE,
    MAX_LAYERS,
    MAX_LEARNING_RATE,
    MAX_PROFILE_BATCHES,
    MAX_PROFILED_BATCHES,
    MAX_RAM_MB,
    MAX_READ_BATCH,
    MAX_SEED,
    MAX_SHUFFLE_BUFFER,
    MAX_STEPS,
    MAX_STEPS_PER_EXECUTION,
    MAX_UNITS,
    MAX_VOCABULARY_SIZE,
    PRECISIONS,
    STRATEGIES,
    AcceleratorFlags,
    InputFlags,
    ModelConfig,
    TrainConfig,
    output_dirs,
)
from transforms.ui.args import ArgumentParser, between


def learning_rate(text: str) -> float:
    """An argparse type: a finite number in (0, MAX_LEARNING_RATE]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and 0 < value <= MAX_LEARNING_RATE):
        raise argparse.ArgumentTypeError(
            f"{text} is not a finite number > 0 and <= {MAX_LEARNING_RATE:g}"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `shardflow train`."""
    p = ArgumentParser(
        prog="shardflow train",
        description="Train and export a model on a shardflow dataset.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  shardflow train --data out/penguins --model-dir model
  shardflow train --data out/penguins --model-dir model --epochs 10 --batch-size 64
  shardflow train --data out/penguins --profile-input
  shardflow train --data out/daily/{2026-11-01..2026-11-26} --model-dir gs://b/model
  shardflow train --data out/shapes --model-dir cnn --model-module examples/shapes/model.py
  shardflow train --data out/notes --model-dir m --text-features note --exclude-features id""",
    )
    p.add_argument(
        "--data",
        required=True,
        nargs="+",
        metavar="DATASET_URI",
        help="dataset folder or gs://; several are read as one, and {2026-11-01..2026-11-26} in "
        "a URI stands for one dataset per day",
    )
    p.add_argument(
        "--model-dir",
        metavar="URI",
        help="output folder (default: AIP_MODEL_DIR when set; required unless profiling)",
    )
    p.add_argument(
        "--epochs",
        type=between(1, MAX_EPOCHS),
        help="train exactly N epochs in all (default: until the validation loss stops "
        "improving, the best epoch's weights kept)",
    )
    p.add_argument(
        "--batch-size",
        type=between(1, MAX_BATCH_SIZE),
        help="global batch (default: sized to the train split, 32 to 512)",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start anew: delete what MODEL_DIR's run.json lists of an earlier run (checkpoints, "
        "export, history, metrics) before training; a folder shardflow did not make is refused, "
        "never cleared",
    )
    p.add_argument(
        "--class-weight",
        choices=CLASS_WEIGHTS,
        default="none",
        help="balanced: weigh each class by records / (classes x its records), so that rare "
        "classes count as much as frequent ones (default none)",
    )
    p.add_argument("--strategy", choices=STRATEGIES, default="auto", help="default: auto")
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="same example order and op results on every run (slower input pipeline)",
    )
    p.add_argument(
        "--seed",
        type=between(0, MAX_SEED),
        default=0,
        help="seeds shuffles and weights (default 0)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's native log lines (start-up notices, GPU probing), which the "
        "shardflow command keeps off stderr by default",
    )
    p.add_argument(
        "--vocabulary-size",
        type=between(0, MAX_VOCABULARY_SIZE),
        default=ModelConfig.vocabulary_size,
        metavar="N",
        help="a string list (shape [null], no values) or free text keeps its N most frequent "
        f"train tokens as its vocabulary; 0 hashes them (default {ModelConfig.vocabulary_size})",
    )
    p.add_argument(
        "--text-features",
        type=_names,
        default=(),
        metavar="A,B",
        help="scalar string features that are free text: split into words on the host, their "
        "embeddings averaged (default: a scalar string is one category)",
    )
    p.add_argument(
        "--learning-rate",
        type=learning_rate,
        default=ModelConfig.learning_rate,
        help=f"AdamW learning rate, cut on plateaus (default {ModelConfig.learning_rate})",
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
        type=between(1, MAX_SHUFFLE_BUFFER),
        help=f"records in the shuffle buffer (default {DEFAULT_SHUFFLE_BUFFER}, fewer for a "
        "smaller split or RAM budget)",
    )
    inputs.add_argument(
        "--read-batch",
        type=between(1, MAX_READ_BATCH),
        help="consecutive records read and shuffled together (default "
        f"{DEFAULT_READ_BATCH}, one per 2,000 records of a smaller train split; 1 shuffles "
        "record by record)",
    )
    inputs.add_argument(
        "--cycle-length",
        type=between(1, MAX_CYCLE_LENGTH),
        help="shards read at once (default: one per core, >= 4)",
    )
    inputs.add_argument(
        "--block-length",
        type=between(1, MAX_BLOCK_LENGTH),
        default=1,
        help="runs of records taken from a shard in turn (default 1)",
    )
    inputs.add_argument(
        "--cache",
        nargs="?",
        const="memory",
        default="auto",
        choices=CACHES,
        help="auto (default): keep the train split's model inputs, parsed and preprocessed, in "
        "RAM after the first epoch when they have fixed shapes and fit a quarter of the RAM "
        "budget; none; or keep the serialized train split: in RAM (`--cache`, `--cache "
        "memory`; a local file when it would not fit half the RAM budget) or in a temporary "
        "local file (`--cache disk`)",
    )
    inputs.add_argument(
        "--input-ram-mb",
        type=between(1, MAX_RAM_MB),
        help="RAM the input pipeline may buffer (default: a quarter of the machine's memory)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=between(1, MAX_STEPS),
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
        type=between(1, MAX_PROFILE_BATCHES),
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
        type=between(1, MAX_STEPS),
        help="default: ceil(train records / batch size)",
    )
    p.add_argument(
        "--model-module",
        metavar="FILE.py",
        help="your own model: a Python file (local or gs://) defining build_model(spec) that "
        "returns a tf_keras model (default: the built-in model)",
    )
    p.add_argument(
        "--exclude-features",
        type=_names,
        default=(),
        metavar="A,B",
        help="features that are not model inputs (the dataset's key never is one)",
    )
    p.add_argument(
        "--include-features",
        type=_names,
        default=(),
        metavar="A,B",
        help="features the rules leave out that are model inputs anyway (a nearly unique "
        "string: an id, a name)",
    )
    device = p.add_argument_group("accelerator (defaults chosen per strategy)")
    device.add_argument(
        "--jit-compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compile the train step with XLA (default: on with GPUs; a TPU always compiles)",
    )
    device.add_argument(
        "--mixed-precision",
        choices=PRECISIONS,
        help="compute in bfloat16 or float16, keep the weights and outputs in float32; float16 "
        "scales the loss (default: bfloat16 on a TPU, else float32)",
    )
    device.add_argument(
        "--steps-per-execution",
        type=between(1, MAX_STEPS_PER_EXECUTION),
        metavar="N",
        help="train steps run per call into the device (default: 32 on a TPU, else 1)",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="check only the size of each shard before training, not its sha256 against the "
        "manifest's (a read of every shard)",
    )
    p.add_argument(
        "--skip-corrupt",
        action="store_true",
        help="skip the rest of a shard after a read error (CRC, truncation) instead of failing; "
        "the skipped records are counted in metrics.json",
    )
    return p


def parse_args(argv: list[str] | None, environ: Mapping[str, str] | None = None) -> TrainConfig:
    """Parses the command line (and Vertex AI's AIP_ variables of `environ`, default
    os.environ); argparse exits with status 2 on a bad one."""
    parser = build_parser()
    args = parser.parse_args(argv)
    dirs = output_dirs(args.model_dir, os.environ if environ is None else environ)
    if not args.profile_input and not dirs.model_dir:
        parser.error("--model-dir is required unless --profile-input is given")
    return TrainConfig(
        data=args.data[0],
        more_data=tuple(args.data[1:]),
        model_dir=dirs.model_dir,
        epochs=args.epochs,
        batch_size=args.batch_size,
        strategy=args.strategy,
        deterministic=args.deterministic,
        seed=args.seed,
        profile_input=args.profile_input,
        profile_batches=args.profile_batches,
        steps_per_epoch=args.steps_per_epoch,
        model=ModelConfig(
            hidden_units=args.hidden_units,
            learning_rate=args.learning_rate,
            vocabulary_size=args.vocabulary_size,
            text_features=args.text_features,
        ),
        skip_corrupt=args.skip_corrupt,
        verify=not args.no_verify,
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
        exclude_features=args.exclude_features,
        include_features=args.include_features,
        class_weight=None if args.class_weight == "none" else args.class_weight,
        fresh=args.fresh,
        model_module=args.model_module,
        accelerator=AcceleratorFlags(
            jit_compile=args.jit_compile,
            mixed_precision=args.mixed_precision,
            steps_per_execution=args.steps_per_execution,
        ),
    )


def _batch_range(text: str) -> tuple[int, int]:
    try:
        first, last = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIRST,LAST (e.g. 5,8)") from None
    if not 1 <= first <= last <= MAX_STEPS:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= FIRST <= LAST <= {MAX_STEPS:,}")
    if last - first >= MAX_PROFILED_BATCHES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: traces more than {MAX_PROFILED_BATCHES:,} batches (LAST - FIRST + 1)"
        )
    return first, last


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _units(text: str) -> tuple[int, ...]:
    try:
        units = tuple(int(u) for u in text.split(",") if u.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list") from None
    if any(not 1 <= u <= MAX_UNITS for u in units):
        raise argparse.ArgumentTypeError(f"{text!r}: each size must be in 1..{MAX_UNITS:,}")
    if len(units) > MAX_LAYERS:
        raise argparse.ArgumentTypeError(f"{text!r}: more than {MAX_LAYERS} layers")
    return units


def inspect_parser() -> argparse.ArgumentParser:
    """The argument parser of `shardflow inspect` (here, beside the trainer's: `--help` answers
    without importing TensorFlow)."""
    p = ArgumentParser(
        prog="shardflow inspect",
        description="What a dataset holds: its manifest, statistics and first examples.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  shardflow inspect out/penguins
  shardflow inspect out/penguins --split eval --take 3 --stats
  shardflow inspect gs://bucket/datasets/penguins --split all --take 0""",
    )
    p.add_argument("dataset", metavar="DATASET_URI", help="dataset folder or gs:// prefix")
    p.add_argument(
        "--split",
        default="train",
        help="split to show statistics and examples of, or 'all' for every split (default: train)",
    )
    p.add_argument(
        "--take",
        type=between(0, MAX_INSPECT_TAKE),
        default=5,
        help=f"number of examples to show, 0 to {MAX_INSPECT_TAKE:,} (default: 5)",
    )
    p.add_argument(
        "--stats",
        action="store_true",
        help="print the per-feature statistics of the split from DATASET/statistics.json",
    )
    return p
