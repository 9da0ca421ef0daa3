"""Predictions of an exported model, as JSON lines; and `shardflow predict --data`, which serves
examples of a dataset split.

`ServedModel` loads `MODEL_DIR/export` as any serving system would (`tf.saved_model.load`,
signature `serving_default`) and turns its outputs for serialized raw tf.train.Example records
into one JSON-ready answer per record: for classification the predicted `class` and
`probabilities`, an object from class name to probability (the class names come with the export,
`trainer.keras.served.LABEL_FILE`); for regression the `prediction`.

With `--data`, the records are the first `--take` of a split (they still hold the label, which
the signature ignores): each line holds the record's `key` (when the dataset's key is a
feature), its true `label` and the answer. A dataset whose shards hold transformed examples
(manifest `transform.materialize: transformed`) has no raw examples to serve. New raw records in
a source format are `deploy.predict`'s business (`shardflow predict --config C --input FILE`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

import tensorflow as tf

from trainer.dataset.manifest import ManifestError, load_manifest, read_file
from trainer.keras.served import SIGNATURE, served_label
from trainer.recipe.words import CLASSIFICATION
from transforms.ui.safe import shown

BATCH = 256  # records per call of the signature
MAX_PREDICT_TAKE = 1_000_000  # --take: the examples are held in memory, and printed


class PredictError(Exception):
    """A model directory that cannot serve (one line for the user)."""


class ServedModel:
    """The export of a model directory, answering for serialized raw tf.train.Examples."""

    def __init__(self, model_dir: str):
        export = f"{model_dir.rstrip('/')}/export"
        if not tf.io.gfile.exists(f"{export}/saved_model.pb"):
            raise PredictError(f"no export/ in {model_dir!r} (train a model there first)")
        self._signature = tf.saved_model.load(export).signatures[SIGNATURE]
        try:
            label = served_label(export) or _label_from_metrics(model_dir)
        except (ManifestError, ValueError) as e:  # a label file that is no JSON, or no file
            raise PredictError(f"{export}: its label file cannot be read: {e}") from None
        self.task = label["task"]
        self.classes = list(label["classes"]) if self.task == CLASSIFICATION else None
        # the raw features the export parses: name -> {"type", "shape"} (older exports: None)
        self.inputs: dict | None = label.get("inputs")

    def mismatch(self, features: dict[str, tuple[str, tuple]]) -> str | None:
        """What makes records of `features` (name -> (type, shape), a config's) unservable:
        the features the model reads that they type otherwise or lack; None when they fit."""
        if self.inputs is None:
            return None
        typed, missing = [], []
        for name, wanted in sorted(self.inputs.items()):
            have = features.get(name)
            if have is None:
                missing.append(name)
            elif have[0] != wanted["type"] or list(have[1]) != list(wanted["shape"]):
                typed.append(
                    f"{name!r} is {_typed(have[0], have[1])} there, "
                    f"{_typed(wanted['type'], wanted['shape'])} in the model"
                )
        if missing:
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            typed.append(f"it lacks {', '.join(map(repr, missing[:5]))}{more}")
        return "; ".join(typed) or None

    def __call__(self, serialized: Sequence[bytes]) -> list[dict[str, Any]]:
        """One answer per record, in order."""
        answers = []
        for start in range(0, len(serialized), BATCH):
            batch = tf.constant(list(serialized[start : start + BATCH]), tf.string)
            answers += self._answers(self._signature(examples=batch))
        return answers

    def _answers(self, outputs: dict[str, tf.Tensor]) -> list[dict[str, Any]]:
        if self.classes is None:
            return [{"prediction": _round(float(v))} for v in outputs["predictions"].numpy()]
        names = [str(c) for c in self.classes]
        answers = []
        for row in outputs["probabilities"].numpy().tolist():
            best = max(range(len(row)), key=row.__getitem__)
            answers.append(
                {
                    "class": self.classes[best],
                    "probabilities": {n: _round(p) for n, p in zip(names, row)},
                }
            )
        return answers


def _typed(kind: str, shape) -> str:
    return kind if not list(shape) else f"{kind} of shape {list(shape)}"


def _label_from_metrics(model_dir: str) -> dict:
    """The label of an export written without its label file, from the run's metrics.json."""
    path = f"{model_dir.rstrip('/')}/metrics.json"
    try:
        metrics = json.loads(read_file(path, 64 << 20, None, "a training run"))
        return {"task": metrics["task"], "classes": metrics.get("classes")}
    except (tf.errors.OpError, ValueError, KeyError):
        raise PredictError(
            f"{model_dir!r}: the export names no classes and there is no readable metrics.json"
        ) from None


def _round(value: float) -> float:
    return round(value, 6)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shardflow predict", description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="MODEL_DIR of `shardflow train`")
    p.add_argument("--data", required=True, help="dataset folder or gs:// prefix")
    add_split_flags(p)
    return p


def add_split_flags(p: argparse.ArgumentParser) -> None:
    """The flags of the --data mode besides --data."""
    p.add_argument("--split", default="test", help="split to take examples from (default: test)")
    p.add_argument("--take", type=int, default=5, help="number of examples (default: 5)")


def predict_split(model_dir: str, data: str, split: str, take: int) -> int:
    """Prints the answers for the first `take` examples of a dataset split; the exit status."""
    if not 1 <= take <= MAX_PREDICT_TAKE:
        print(
            f"shardflow predict: --take: {take} is not from 1 to {MAX_PREDICT_TAKE:,} (the "
            "examples to serve, held in memory)",
            file=sys.stderr,
        )
        return 2
    try:
        manifest = load_manifest(data)
        files = manifest.split_files(split)
    except ManifestError as e:
        print(shown(f"shardflow predict: {e}"), file=sys.stderr)
        return 2
    if manifest.transform is not None and manifest.transform.materialize == "transformed":
        print(
            shown(
                f"shardflow predict: {data}: the shards hold transformed examples; "
                "the model serves raw ones"
            ),
            file=sys.stderr,
        )
        return 2
    try:
        model = ServedModel(model_dir)
    except PredictError as e:
        print(shown(f"shardflow predict: {e}"), file=sys.stderr)
        return 2
    from trainer.dataset.framing import CorruptShardError
    from trainer.inspect import as_values, first_records  # --data alone reads examples back
    from trainer.readers.decode import ExampleError

    try:
        serialized = first_records(manifest, files, take)
        examples = as_values(manifest, serialized)
    except (CorruptShardError, ExampleError) as e:
        print(shown(f"shardflow predict: {e}"), file=sys.stderr)
        return 2 if isinstance(e, ExampleError) else 1
    if not serialized:
        print(f"shardflow predict: split {split!r} is empty", file=sys.stderr)
        return 2
    for example, answer in zip(examples, model(serialized)):
        row = {}
        if manifest.key in manifest.features:
            row["key"] = example.get(manifest.key)
        if manifest.label:
            row["label"] = example.get(manifest.label)
        print(shown(json.dumps({**row, **answer}, ensure_ascii=False), json=True))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return predict_split(args.model_dir, args.data, args.split, args.take)
