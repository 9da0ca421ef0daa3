"""The typed settings of a training run: the validated flags of `shardflow train`.

Plain frozen dataclasses and the flags' choices and defaults, without TensorFlow, so that the
flag parser (trainer.flags) and `shardflow launch-training` can use them on a machine that only
submits jobs. The modules that act on a setting (trainer.keras.input, trainer.keras.plan,
trainer.keras.model, trainer.run.strategy) import it from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainer.dataset.paths import join, normalize_root

STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")
CACHES = ("auto", "none", "memory", "disk")
CLASS_WEIGHTS = ("none", "balanced")
PRECISIONS = ("float32", "bfloat16", "float16")
DEFAULT_SHUFFLE_BUFFER = 10_000
DEFAULT_READ_BATCH = 32

# The ranges of the flags' numbers (trainer.flags) and of the readers' arguments: far beyond any
# real run, well short of what would exhaust memory or never end.
MAX_EPOCHS = 100_000
MAX_STEPS = 10**9  # steps per epoch, checkpoint interval, a profiled batch's number
MAX_BATCH_SIZE = 1 << 20  # records in one batch (global)
MAX_SHUFFLE_BUFFER = 1 << 26  # records
MAX_READ_BATCH = 1 << 16  # records
MAX_CYCLE_LENGTH = 1024  # shards read at once
MAX_BLOCK_LENGTH = 1 << 16  # records
MAX_RAM_MB = 1 << 24  # 16 TiB
MAX_PROFILE_BATCHES = 100_000
MAX_PROFILED_BATCHES = 1000  # batches one --tensorboard-profile traces
MAX_STEPS_PER_EXECUTION = 10_000
MAX_VOCABULARY_SIZE = 10_000_000
MAX_UNITS = 1 << 16  # of one hidden layer
MAX_LAYERS = 100
MAX_LEARNING_RATE = 100.0
MAX_SEED = 2**32 - 1  # numpy's seeds
MAX_INSPECT_TAKE = 10_000  # examples `inspect` shows
MAX_WORKERS = 1024  # loader workers of a reader
MAX_WORLD_SIZE = 1 << 16  # ranks (processes) reading one dataset


@dataclass(frozen=True)
class ModelConfig:
    """Model hyperparameters (trainer.recipe.rules and trainer.keras.model say how each is used)."""

    hidden_units: tuple[int, ...] = (256, 256)
    learning_rate: float = 1e-3
    embedding_dim: int = (
        32  # the widest embedding of a category (trainer.recipe.kinds.embedding_width)
    )
    hash_bins: int = 1000
    one_hot_max: int = 16  # categories of up to this many values are one-hot, larger embedded
    vocabulary_size: int = 10_000  # values (tokens) of a string kept from train; 0: hash them
    text_features: tuple[str, ...] = ()  # scalar strings read as free text: their words


@dataclass(frozen=True)
class AcceleratorFlags:
    """How the train step runs on the device; None: the strategy's default
    (`trainer.run.strategy.accelerator_settings`)."""

    jit_compile: bool | None = None
    mixed_precision: str | None = None  # one of PRECISIONS
    steps_per_execution: int | None = None


@dataclass(frozen=True)
class Accelerator:
    """The settings a run uses, the flags' and the strategy's defaults resolved."""

    jit_compile: bool
    mixed_precision: str  # one of PRECISIONS
    steps_per_execution: int

    @property
    def policy(self) -> str:
        """The Keras mixed-precision policy name."""
        return "float32" if self.mixed_precision == "float32" else f"mixed_{self.mixed_precision}"


@dataclass(frozen=True)
class InputFlags:
    """The input flags of `shardflow train`; None: derive from the dataset."""

    shuffle_buffer: int | None = None
    read_batch: int | None = None  # None: trainer.keras.plan.default_read_batch
    cycle_length: int | None = None
    block_length: int = 1
    cache: str = "auto"  # auto | none | memory | disk (trainer.keras.plan)
    ram_budget_mb: int | None = None


@dataclass(frozen=True)
class TrainConfig:
    """The validated command line of `shardflow train`."""

    data: str
    model_dir: str | None
    epochs: int | None  # None: until the validation loss stops improving (trainer.run.fit)
    batch_size: int | None  # None: sized to the dataset (trainer.recipe.sizing.Sizing)
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
    accelerator: AcceleratorFlags = AcceleratorFlags()
    exclude_features: tuple[str, ...] = ()  # features that are not model inputs
    model_module: str | None = None  # a file defining build_model(spec); None: the built-in
    more_data: tuple[str, ...] = ()  # --data's further datasets, read with `data` as one
    include_features: tuple[str, ...] = ()  # features the rules leave out, taken anyway
    class_weight: str | None = None  # "balanced": classes weighed by their train records
    fresh: bool = False  # start anew, whatever MODEL_DIR holds
    verify: bool = True  # check every shard's sha256 against the manifest's before training

    @property
    def datasets(self) -> tuple[str, ...]:
        """Every dataset of --data, date ranges not yet expanded (trainer.dataset.union)."""
        return (self.data, *self.more_data)

    @property
    def checkpoints(self) -> str:
        """Where the resumable checkpoints go."""
        if self.checkpoint_dir:
            return self.checkpoint_dir
        # parse_args requires MODEL_DIR unless --profile-input, which writes no checkpoints
        assert self.model_dir is not None
        return join(self.model_dir, "checkpoints")


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
