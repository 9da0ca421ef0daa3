"""What a model folder's checkpoint belongs to: the fingerprint of a run (the datasets and their
shards' checksums, the model inputs the recipe made, the label, the model and its sizes), kept
in MODEL_DIR/run.json (trainer.run.modeldir). Two runs that may share a checkpoint have equal
fingerprints; `difference` says in words what differs when they do not.
"""

from __future__ import annotations

import hashlib
import json

from trainer.config import TrainConfig
from trainer.keras.inputs import Inputs


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
        "datasets": list(manifest.roots),
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


def difference(theirs: dict, mine: dict) -> str:
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
