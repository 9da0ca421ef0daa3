"""What MODEL_DIR holds of an earlier run: resumed, refused, or cleared with `--fresh`.

A run writes `MODEL_DIR/run.json` before it trains: the fingerprint of what it trains (the
datasets and their shards' checksums, the model inputs the recipe made, the label, the model
and its sizes) and, once training ends, `complete` with the epochs trained. The next run with
the same --model-dir:

- with the same fingerprint, resumes an interrupted run from its checkpoint, and finds a
  complete one done (nothing to train unless `--epochs` asks for more than it trained);
- with another fingerprint (other data, a re-run ETL with other records, another recipe or
  model), or checkpoints without a run.json, is refused with one line naming what differs and
  `--fresh`: a checkpoint of another model cannot be restored into this one;
- with `--fresh`, starts anew: the earlier run's checkpoints, export, history, metrics, report
  and TensorBoard logs are deleted first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging

import tensorflow as tf

from trainer.config import TrainConfig
from trainer.dataset import Inputs
from trainer.paths import join
from transforms.ui.errors import UsageError

logger = logging.getLogger(__name__)

RUN_FILE = "run.json"
# What --fresh deletes of an earlier run in MODEL_DIR (the checkpoints may be elsewhere).
OUTPUTS = ("export", "history.csv", "metrics.json", "report.html", "logs", RUN_FILE)


@dataclasses.dataclass(frozen=True)
class Earlier:
    """What MODEL_DIR says of the run before: nothing (`fingerprint` None), or its fingerprint
    and, once it ended, the epochs it trained."""

    fingerprint: dict | None = None
    complete: bool = False
    epochs_trained: int = 0


def fingerprint(cfg: TrainConfig, inputs: Inputs) -> dict:
    """What a checkpoint of this run belongs to; two runs that may share one have equal ones."""
    manifest, recipe = inputs.manifest, inputs.recipe
    shards = sorted(
        (split, f.path.rsplit("/", 1)[-1], f.sha256 or str(f.records))
        for split, info in manifest.splits.items()
        for f in info.files
    )
    model_inputs = [
        [
            i.name,
            i.kind,
            list(i.shape),
            i.vocabulary_size,
            i.width,
            i.ids,
            i.scale,
            i.part,
            i.bins is not None,
        ]
        for i in recipe.inputs
    ]
    label = recipe.label
    return {
        "datasets": list(manifest.parts or (manifest.root,)),
        "data": hashlib.sha256(json.dumps(shards).encode()).hexdigest(),
        "model_inputs": model_inputs,
        "label": {
            "name": label.name,
            "task": recipe.task,
            "classes": [str(c) for c in label.classes] if label.classes else None,
        },
        "model": cfg.model_module or "built-in",
        "hidden_units": list(cfg.model.hidden_units),
    }


def read(cfg: TrainConfig) -> Earlier:
    """The earlier run's record in MODEL_DIR; UsageError when there are checkpoints but no
    record of what they belong to."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    path = join(cfg.model_dir, RUN_FILE)
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            try:
                found = json.loads(f.read())
            except json.JSONDecodeError:
                found = {}
        if isinstance(found, dict) and isinstance(found.get("fingerprint"), dict):
            return Earlier(
                found["fingerprint"],
                bool(found.get("complete")),
                int(found.get("epochs_trained") or 0),
            )
    if _has_checkpoint(cfg.checkpoints):
        raise UsageError(
            f"--model-dir {cfg.model_dir}: holds checkpoints of a run that says nothing of what "
            "it trained: rerun with --fresh to start anew, or choose another --model-dir"
        )
    return Earlier()


def claim(cfg: TrainConfig, inputs: Inputs, chief: bool) -> Earlier:
    """Makes MODEL_DIR this run's: cleared with --fresh, refused (UsageError, one line) when an
    earlier run there trained something else; returns what the earlier run left."""
    mine = fingerprint(cfg, inputs)
    if cfg.fresh:
        if chief:
            clear(cfg)
        earlier = Earlier()
    else:
        earlier = read(cfg)
        if earlier.fingerprint is not None and earlier.fingerprint != mine:
            what = _difference(earlier.fingerprint, mine)
            raise UsageError(
                f"--model-dir {cfg.model_dir}: holds a run of {what}: rerun with --fresh to "
                "start anew, or choose another --model-dir"
            )
    if chief:
        record(cfg, mine, complete=earlier.complete, epochs_trained=earlier.epochs_trained)
    return earlier


def record(cfg: TrainConfig, mine: dict, complete: bool, epochs_trained: int) -> None:
    """Writes MODEL_DIR/run.json."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    tf.io.gfile.makedirs(cfg.model_dir)
    body = {"fingerprint": mine, "complete": complete, "epochs_trained": epochs_trained}
    with tf.io.gfile.GFile(join(cfg.model_dir, RUN_FILE), "w") as f:
        f.write(json.dumps(body, indent=1, sort_keys=True) + "\n")


def clear(cfg: TrainConfig) -> None:
    """Deletes what an earlier run left in MODEL_DIR and its checkpoints (--fresh)."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    for path in [join(cfg.model_dir, name) for name in OUTPUTS] + [cfg.checkpoints]:
        if not tf.io.gfile.exists(path):
            continue
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)
    logger.info("--fresh: cleared what an earlier run left in %s", cfg.model_dir)


def _has_checkpoint(folder: str) -> bool:
    return tf.io.gfile.exists(folder) and any(names for _, _, names in tf.io.gfile.walk(folder))


def _difference(theirs: dict, mine: dict) -> str:
    """The first thing two fingerprints differ in, in words."""
    if theirs.get("datasets") != mine["datasets"]:
        return f"other data ({', '.join(theirs.get('datasets') or ['?'])})"
    if theirs.get("data") != mine["data"]:
        return "other records of this dataset (its shards changed since: a new ETL run?)"
    if theirs.get("label") != mine["label"]:
        return f"another label ({(theirs.get('label') or {}).get('name')!r})"
    if theirs.get("model") != mine["model"] or theirs.get("hidden_units") != mine["hidden_units"]:
        return f"another model ({theirs.get('model')}, hidden units {theirs.get('hidden_units')})"
    ours = {i[0]: i for i in mine["model_inputs"]}
    old = {i[0]: i for i in theirs.get("model_inputs") or []}
    changed = sorted(n for n in ours.keys() | old.keys() if ours.get(n) != old.get(n))
    return f"other model inputs ({', '.join(changed[:5]) or '?'})"
