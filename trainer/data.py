"""The Python API of the trainer's input: the tuned tf.data pipeline for your own training loop.

    from trainer import data

    ds = data.make_dataset("out/penguins", "train", batch_size=64, repeat=True)
    for features, labels in ds.take(100):
        ...  # features: dict of numeric tensors (the host preprocessing done); labels: class
             # indices (classification) or floats (regression)

    spec = data.model_spec("out/penguins")  # what `--model-module`'s build_model(spec) gets

It is the pipeline `shardflow train` feeds its model (trainer/keras/input.py: interleaved reads,
runs of records, vectorized parsing, the host preprocessing of trainer/keras/preprocess.py,
prefetch), with the same recipe (trainer/recipe/rules.py: the label's classes or scale, what each
feature becomes) and model inputs. For a regression the labels are standardized as the model learns
them (`model_spec(...).label.scale`).
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from trainer.config import ModelConfig
from trainer.dataset.manifest import load_manifest
from trainer.keras.inputs import Inputs, check_dataset
from trainer.keras.usermodel import ModelSpec, user_spec


def inputs(
    dataset_uri: str, *, exclude_features: Sequence[str] = (), model: ModelConfig = ModelConfig()
) -> Inputs:
    """How the trainer reads the dataset at `dataset_uri` (see trainer.keras.inputs.Inputs)."""
    manifest = load_manifest(dataset_uri)
    check_dataset(manifest)
    return Inputs.of(manifest, model=model, exclude=exclude_features)


def make_dataset(
    dataset_uri: str,
    split: str = "train",
    batch_size: int = 64,
    *,
    shuffle: bool | None = None,
    repeat: bool = False,
    seed: int = 0,
    deterministic: bool = False,
    drop_remainder: bool = False,
    exclude_features: Sequence[str] = (),
    model: ModelConfig = ModelConfig(),
) -> tf.data.Dataset:
    """Batches of (model inputs, label) of `split`; shuffled by default for `train` only."""
    read = inputs(dataset_uri, exclude_features=exclude_features, model=model)
    return read.dataset(
        split,
        batch_size,
        shuffle=split == "train" if shuffle is None else shuffle,
        repeat=repeat,
        seed=seed,
        deterministic=deterministic,
        drop_remainder=drop_remainder,
    )


def model_spec(
    dataset_uri: str, *, exclude_features: Sequence[str] = (), model: ModelConfig = ModelConfig()
) -> ModelSpec:
    """The spec a `--model-module`'s build_model(spec) receives for this dataset."""
    read = inputs(dataset_uri, exclude_features=exclude_features, model=model)
    label = read.recipe.label
    return user_spec(read.recipe.inputs, label.name, read.recipe.task, label.classes, label.scale)
