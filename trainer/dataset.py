"""The dataset as the model reads it: the checks before a run, the model inputs and the readers.

`check_dataset` refuses a dataset that cannot be trained on (exit status 2). `Inputs` decides,
once per run, what the model reads: the parse spec, the preprocessing (the manifest's features,
or a tf.Transform output: trainer.transform, then the host preprocessing of trainer.preprocess:
the model receives numbers only), the features that are model inputs and the label's task;
everything downstream (moments, model, fit, profile, export) takes them from it. `scan_corrupt`
finds the shards that --skip-corrupt skips, and `corrupt_message` names them when a read fails.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import tensorflow as tf

from trainer.config import ModelConfig, TrainConfig
from trainer.errors import first_line
from trainer.features import dense_inputs, label_encoder, label_task, parse_spec
from trainer.input import make_dataset
from trainer.integrity import CorruptShard, find_corrupt
from trainer.manifest import InputFeature, Manifest, ManifestError, missing_files
from trainer.model import ModelSpec, Moments, compute_moments, model_spec
from trainer.paths import join
from trainer.plan import InputPlan
from trainer.preprocess import HostPreprocessing
from trainer.transform import Transform, load_transform

logger = logging.getLogger(__name__)

# Normalization moments come from the first MOMENT_BATCHES x MOMENT_BATCH_SIZE train examples.
MOMENT_BATCHES = 20
MOMENT_BATCH_SIZE = 256


def check_dataset(manifest: Manifest) -> None:
    """Raises ManifestError unless the dataset can be trained on."""
    if manifest.label is None:
        raise ManifestError(f"{manifest.root}: the manifest has no label to train on")
    label = manifest.features[manifest.label]
    if label.type != "string" or label.values is not None:  # else: classes from the data
        label_task(label)
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

    `features` are the model's features: the manifest's, or the transform's outputs;
    `model_spec` says which of them are model inputs and what the label's task is, decided here
    once for the run and passed on to the model and the export.
    """

    manifest: Manifest
    spec: dict
    label: str
    features: Mapping[str, InputFeature]
    model_spec: ModelSpec
    preprocess: Callable[[dict], dict]  # a parsed batch -> the model inputs (on the host)
    host: HostPreprocessing
    transform: Transform | None = None
    skip_corrupt: bool = False

    @classmethod
    def of(
        cls,
        manifest: Manifest,
        skip_corrupt: bool = False,
        model: ModelConfig = ModelConfig(),
        exclude: Sequence[str] = (),
    ) -> Inputs:
        """The inputs of `manifest`; ManifestError for a label that cannot be learned. `model`
        sets the host preprocessing (hash buckets); the dataset's key and the features of
        `exclude` are not model inputs."""
        label = manifest.label
        transform = load_transform(manifest)
        if transform is not None:
            spec = model_spec(transform.features, label, manifest.key, exclude)
            host = HostPreprocessing(spec.used, model)
            return cls(
                manifest=manifest,
                spec=transform.read_spec(),
                label=label,
                features=transform.features,
                model_spec=spec,
                preprocess=_then(transform.preprocess, host),
                host=host,
                transform=transform,
                skip_corrupt=skip_corrupt,
            )
        spec = model_spec(manifest.features, label, manifest.key, exclude)
        host = HostPreprocessing(spec.used, model)
        return cls(
            manifest=manifest,
            spec=parse_spec(manifest, only=[f.name for f in spec.used]),
            label=label,
            features=manifest.features,
            model_spec=spec,
            preprocess=_then(functools.partial(dense_inputs, features=manifest.features), host),
            host=host,
            skip_corrupt=skip_corrupt,
        )

    def dataset(
        self, split: str, batch_size: int, *, encode_label: bool = True, **options
    ) -> tf.data.Dataset:
        """Batches of (model inputs, label) of `split`; `options` go to make_dataset."""
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

    def moments(self, batch_size: int = MOMENT_BATCH_SIZE) -> dict[str, Moments]:
        """Normalization moments of the numeric model inputs."""
        # The first batches in file order, so a resumed run normalizes exactly as before.
        sample = self.dataset(
            "train", batch_size, encode_label=False, shuffle=False, deterministic=True
        )
        return compute_moments(sample, self.model_spec.used, MOMENT_BATCHES)


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
) -> tf.data.Dataset:
    """The repeated, shuffled training input, as configured by the flags; `skip_batches`:
    the steps a resumed run has already trained on (`resume_step`)."""
    return inputs.dataset(
        "train",
        batch_size,
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
