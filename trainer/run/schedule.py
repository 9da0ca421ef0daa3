"""How long and in what batches a run trains: the flags and the dataset's size resolved once
(`schedule`), for fit and for --profile-input; and the accelerator settings as metrics.json
reports them.

Without an eval split, every `HOLDOUT`-th record of each train file validates, when train has
at least MIN_HOLDOUT_RECORDS labelled records. The batch and the epochs' cap come from the
labelled train records (trainer.recipe.sizing.Sizing) unless the flags give them; a global batch
must be a multiple of the replicas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainer.config import Accelerator, TrainConfig
from trainer.keras.inputs import Inputs
from trainer.recipe.sizing import Sizing
from transforms.ui.errors import UsageError

HOLDOUT = 10  # without an eval split, every 10th train record of each file validates
MIN_HOLDOUT_RECORDS = 50  # ... when train has at least this many labelled records


@dataclass(frozen=True)
class Schedule:
    """How long and in what batches a run trains, flags and dataset size resolved."""

    batch_size: int  # global
    epochs: int  # forced (--epochs) or the cap of early stopping
    early_stopping: bool
    steps_per_epoch: int
    sizing: Sizing
    validation: str | None  # "eval", "holdout" (a slice of train) or None
    train_records: int  # the labelled train records an epoch reads (holdout left out)


def schedule(cfg: TrainConfig, inputs: Inputs, replicas: int = 1, skipped: int = 0) -> Schedule:
    """The run's schedule: `skipped` train records are lost to corrupt shards."""
    manifest = inputs.manifest
    labelled = inputs.labelled_records("train") - skipped
    if labelled < 1:
        what = "no readable records left" if skipped else "no records with the label"
        raise UsageError(f"{manifest.root}: split 'train': {what}")
    validation = None
    if manifest.has_split("eval") and inputs.labelled_records("eval") > 0:
        validation = "eval"
    elif labelled >= MIN_HOLDOUT_RECORDS:
        validation = "holdout"
        labelled -= -(-labelled // HOLDOUT)
    sizing = Sizing.of(labelled)
    batch = cfg.batch_size or -(-sizing.batch_size // replicas) * replicas
    if batch % replicas:
        raise UsageError(f"--batch-size: {batch} is not a multiple of the {replicas} replicas")
    return Schedule(
        batch_size=batch,
        epochs=cfg.epochs or sizing.max_epochs,
        early_stopping=cfg.epochs is None,
        steps_per_epoch=cfg.steps_per_epoch or math.ceil(labelled / batch),
        sizing=sizing,
        validation=validation,
        train_records=labelled,
    )


def accelerator_fields(accelerator: Accelerator) -> dict:
    """The accelerator settings as metrics.json and --profile-input report them."""
    return {
        "jit_compile": accelerator.jit_compile,
        "mixed_precision": accelerator.mixed_precision,
        "steps_per_execution": accelerator.steps_per_execution,
    }
