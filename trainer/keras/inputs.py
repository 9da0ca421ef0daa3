"""The dataset as the model reads it: the checks before a run, the model inputs and the readers.

`check_dataset` refuses a dataset that cannot be trained on (exit status 2). `Inputs.of` makes,
once per run, everything the model reads: the facts of the data (trainer.recipe.facts), the recipe
(trainer.recipe.rules: what each feature becomes, the label's classes or scale), the parse spec, the
preprocessing (the manifest's features, or a tf.Transform output: trainer.keras.transform, then the
host preprocessing of trainer.keras.preprocess: the model receives numbers only) and the moments of
the numbers; everything downstream (model, fit, profile, export, predict) takes them from it.
`scan_corrupt` finds the shards that --skip-corrupt skips, and `corrupt_message` names them
when a read fails.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import tensorflow as tf

from trainer.config import ModelConfig, TrainConfig
from trainer.dataset.manifest import InputFeature, Manifest, ManifestError, missing_files
from trainer.dataset.paths import join
from trainer.errors import first_line, type_mismatch
from trainer.keras.features import dense_inputs, label_encoder, parse_spec
from trainer.keras.input import input_batches
from trainer.keras.integrity import CorruptShard, find_corrupt
from trainer.keras.plan import InputPlan
from trainer.keras.preprocess import HostPreprocessing
from trainer.keras.transform import Transform, load_transform
from trainer.recipe.facts import RULE_SAMPLE
from trainer.recipe.rules import Recipe, TrainView, recipe_of
from trainer.recipe.words import label_task

logger = logging.getLogger(__name__)

# Normalization moments of a number read as it is come from the facts (every train record);
# those of derived inputs (a log scale, date parts) and of datasets without facts from the
# first RULE_SAMPLE train examples, in file order (so a resumed run normalizes exactly as
# before), the records the recipe's rules looked at.
MOMENT_BATCH_SIZE = 1024


def check_dataset(manifest: Manifest) -> None:
    """Raises ManifestError unless the dataset can be trained on."""
    if manifest.label is None:
        raise ManifestError(f"{manifest.root}: the manifest has no label to train on")
    label = manifest.features[manifest.label]
    if label.type != "string" or label.values is not None:  # else: classes from the data
        label_task(label)
    if not label.always_full and manifest.transform is not None:
        raise ManifestError(
            f"label {label.name!r}: optional (required: false) in a dataset with a tf.Transform: "
            "declare it required, so that the ETL rejects the records without it"
        )
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
    """How to read the dataset for the model: the recipe, the parse spec, the preprocessing
    and the label encoding.

    `features` are the model's features: the manifest's, or the transform's outputs; the
    `recipe` says which of them are model inputs and how each is made, and what the label is,
    decided here once for the run and passed on to the model and the export.
    """

    manifest: Manifest
    spec: dict
    label: str
    features: Mapping[str, InputFeature]
    recipe: Recipe
    preprocess: Callable[[dict], dict]  # a parsed batch -> the model inputs (on the host)
    host: HostPreprocessing
    transform: Transform | None = None
    skip_corrupt: bool = False
    notes: tuple[str, ...] = ()  # what the dataset's facts say a user should know (warnings)

    @classmethod
    def of(
        cls,
        manifest: Manifest,
        skip_corrupt: bool = False,
        model: ModelConfig = ModelConfig(),
        exclude: Sequence[str] = (),
        include: Sequence[str] = (),
        class_weight: str | None = None,
    ) -> Inputs:
        """The inputs of `manifest`: its facts gathered, the recipe decided (`model`: the
        vocabulary size and hash buckets; `exclude`/`include`: the features left out or taken
        anyway; `class_weight`), the moments of the numbers computed. ManifestError for a
        label that cannot be learned or a name that is no feature. Reads the train split:
        in a run, after the strategy is made (a multi-worker strategy must be made before
        TensorFlow runs anything)."""
        view = TrainView.read(manifest, model.text_features, skip_corrupt)
        transform = load_transform(view.manifest)

        made: list[Inputs] = []  # the reading of the recipe's inputs, made once

        def reading(recipe: Recipe) -> Inputs:
            if not made:
                made.append(cls._reading(view, transform, recipe, skip_corrupt))
            # the preprocessing reads no moment: only the recipe differs once they are in
            return dataclasses.replace(made[0], recipe=recipe)

        recipe = recipe_of(
            view,
            transform.features if transform is not None else view.manifest.features,
            model,
            lambda recipe: reading(recipe).sample(),
            exclude=exclude,
            include=include,
            transformed=transform is not None,
            class_weight=class_weight,
        )
        return reading(recipe)

    @classmethod
    def _reading(
        cls,
        view: TrainView,
        transform: Transform | None,
        recipe: Recipe,
        skip_corrupt: bool,
    ) -> Inputs:
        """The inputs that read `recipe`'s model inputs from the dataset of `view`."""
        manifest = view.manifest
        host = HostPreprocessing(recipe.inputs)
        if transform is not None:
            transform = dataclasses.replace(transform, used=tuple(f.name for f in recipe.used))
            spec = transform.read_spec()
            preprocess = _then(transform.preprocess, host)
        else:
            sources = {i.feature.name for i in recipe.inputs}
            spec = parse_spec(manifest, only=sources)
            preprocess = _then(functools.partial(dense_inputs, features=manifest.features), host)
        assert manifest.label is not None  # check_dataset refuses a manifest without a label
        known = view.facts.dataset
        return cls(
            manifest=manifest,
            spec=spec,
            label=manifest.label,
            features=transform.features if transform is not None else manifest.features,
            recipe=recipe,
            preprocess=preprocess,
            host=host,
            transform=transform,
            skip_corrupt=skip_corrupt,
            notes=tuple(known.notes()) if known is not None else (),
        )

    def dataset(
        self,
        split: str,
        batch_size: int,
        *,
        encode_label: bool = True,
        weighted: bool = False,
        **options,
    ) -> tf.data.Dataset:
        """Batches of (model inputs, label) of `split` (with `weighted` and class weights:
        (model inputs, label, weight)); records without the label are left out; `options` go to
        input_batches."""
        label = self.recipe.label
        return input_batches(
            self.manifest.split_files(split),
            self.spec,
            self.manifest.compression_type,
            batch_size,
            split=split,
            label=self.label,
            preprocess=self.preprocess,
            label_fn=label_encoder(label.feature, label.scale) if encode_label else None,
            skip_corrupt=self.skip_corrupt,
            labelled_only=not label.feature.always_full,
            class_weights=label.weights if weighted and encode_label else None,
            **options,
        )

    def labelled_records(self, split: str) -> int:
        """The records of `split` that hold the label (all of them for a required label)."""
        if not self.manifest.has_split(split):
            return 0
        return self.manifest.split_records(split) - self.recipe.label.missing.get(split, 0)

    def sample(self) -> Iterator[Mapping[str, tf.Tensor]]:
        """The model inputs of the train records the recipe's rules looked at (the first
        RULE_SAMPLE, in file order: a resumed run normalizes exactly as before), in batches
        (eager tensors: the moments take the arrays of their NUMBER inputs only): what the
        moments not in the facts are measured over (trainer.recipe.moments)."""
        sample = self.dataset(
            "train", MOMENT_BATCH_SIZE, encode_label=False, shuffle=False, deterministic=True
        )
        taken = sample.take(-(-RULE_SAMPLE // MOMENT_BATCH_SIZE))
        return (element[0] if isinstance(element, tuple) else element for element in taken)


def _then(first: Callable[[dict], dict], host: HostPreprocessing) -> Callable[[dict], dict]:
    def preprocess(parsed: dict) -> dict:
        return host(first(parsed))

    return preprocess


def scan_corrupt(manifest: Manifest, log: bool = True) -> dict[str, list[CorruptShard]]:
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


_MISMATCH = re.compile(
    r"Key: (?P<key>.+?), Index: \d+\.\s+Data types don't match\. "
    r"(?:Data type: (?P<held>\w+) but expected type: (?P<want>\w+)"
    r"|Expected type: (?P<want2>\w+), Actual type: (?P<held2>\w+))"
)


def mismatch_message(manifest: Manifest, e: tf.errors.OpError) -> str | None:
    """One line for a shard whose values are of another type than the manifest says (the
    manifest was edited, or does not belong to these shards); None for any other error."""
    match = _MISMATCH.search(getattr(e, "message", None) or str(e))
    if match is None:
        return None
    return type_mismatch(manifest, match["key"], match["held"] or match["held2"])


def corrupt_message(manifest: Manifest, e: tf.errors.DataLossError) -> str:
    """One line naming the corrupt shard(s) behind a read error."""
    corrupt = [c for split in scan_corrupt(manifest, log=False).values() for c in split]
    if not corrupt:
        return f"training failed: {first_line(e)}"
    first = corrupt[0]
    more = f" (and {len(corrupt) - 1} more corrupt shard(s))" if len(corrupt) > 1 else ""
    return (
        f"corrupt shard {first.path}: only {first.readable} of its {first.listed} records "
        f"can be read ({first_line(e)}){more}; rerun with --skip-corrupt to train without "
        "the unreadable records"
    )


def train_dataset(
    inputs: Inputs,
    cfg: TrainConfig,
    plan: InputPlan,
    batch_size: int,
    input_context: tf.distribute.InputContext | None = None,
    skip_batches: int = 0,
    holdout: tuple[int, bool] | None = None,
) -> tf.data.Dataset:
    """The repeated, shuffled training input, as configured by the flags; `skip_batches`:
    the steps a resumed run has already trained on (`resume_step`); `holdout`: the records
    left out for validation (trainer.keras.input.input_batches)."""
    return inputs.dataset(
        "train",
        batch_size,
        weighted=True,
        holdout=holdout,
        seed=cfg.seed,
        deterministic=cfg.deterministic,
        repeat=True,
        drop_remainder=True,
        input_context=input_context,
        skip_batches=skip_batches,
        **plan.dataset_options(),
    )


# Where BackupAndRestore keeps the optimizer's step count in its checkpoint.
_STEP_KEY = "model/optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"


def resume_step(checkpoint_dir: str) -> int:
    """The training steps done by the run whose checkpoint in `checkpoint_dir` (Keras
    BackupAndRestore's) the next run resumes from; 0 without one. The input's position is no
    extra state: it is this step count."""
    path = tf.train.latest_checkpoint(join(checkpoint_dir, "chief"))
    if path is None:
        return 0
    reader = tf.train.load_checkpoint(path)
    return int(reader.get_tensor(_STEP_KEY)) if reader.has_tensor(_STEP_KEY) else 0
