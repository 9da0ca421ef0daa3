"""A string label without `values` takes its classes from the data, and a string list or free
text its vocabulary (`with_vocabularies`, at the end).

The classes are the label's distinct values in the train split, sorted: from the train split's
statistics (DATASET/statistics.json, which the ETL counts exactly) when they list every value,
else from one pass over the train split's labels. A value that another split (eval, test) holds
and train does not is an error before training: the model could never predict it, and
evaluating on it would fail the step. The classes are written into the manifest's label, so
the model, the label encoding, the export's `classes` output and metrics.json all take them
from there.
"""

from __future__ import annotations

import collections
import dataclasses
import logging

import numpy as np
import tensorflow as tf

from trainer.config import ModelConfig
from trainer.manifest import Manifest, ManifestError, load_statistics
from trainer.preprocess import words

logger = logging.getLogger(__name__)

STATISTICS = "statistics"  # where the classes came from (metrics.json's "classes_from")
RECORDS = "records"
CONFIG = "config"
_SCAN_BATCH = 4096
# Tokens kept per string list by default (--vocabulary-size): the most frequent of train.
VOCABULARY_SIZE = ModelConfig.vocabulary_size


def with_label_classes(
    manifest: Manifest, skip_corrupt: bool = False
) -> tuple[Manifest, str | None]:
    """The manifest with its string label's classes filled in from the data, and where they
    came from; unchanged (with CONFIG, or None without a string label) when the label already
    has `values` or is not a string."""
    name = manifest.label
    label = manifest.features.get(name) if name else None
    if label is None or label.type != "string":
        return manifest, None
    if label.values is not None:
        return manifest, CONFIG
    if not manifest.has_split("train"):
        return manifest, None  # check_dataset says what is wrong
    # the statistics of one dataset do not count the labels of several read as one
    statistics = None if len(manifest.parts) > 1 else load_statistics(manifest.root)
    counts, source = label_counts(manifest, "train", statistics, skip_corrupt)
    if not counts:
        raise ManifestError(f"label {name!r}: the train split holds no value of it")
    classes = tuple(sorted(counts))
    for split in sorted(manifest.splits):
        if split == "train" or not manifest.has_split(split):
            continue
        found, _ = label_counts(manifest, split, statistics, skip_corrupt)
        unknown = {v: n for v, n in found.items() if v not in counts}
        if unknown:
            value, records = sorted(unknown.items())[0]
            raise ManifestError(
                f"label {name!r}: split {split!r} holds {value!r} ({records} records)"
                f"{f' and {len(unknown) - 1} more value(s)' if len(unknown) > 1 else ''}, which "
                "the train split does not: the model cannot learn a class it never sees; add "
                "train examples of it, or list the label's `values` in the config"
            )
    logger.info(
        "label %r: %d classes from the train split's %s: %s",
        name, len(classes), source, ", ".join(classes),
    )  # fmt: skip
    features = dict(manifest.features)
    features[name] = dataclasses.replace(label, values=classes)
    return dataclasses.replace(manifest, features=features), source


def label_counts(
    manifest: Manifest, split: str, statistics: dict | None, skip_corrupt: bool = False
) -> tuple[dict[str, int], str]:
    """The label's values in `split` with their record counts, and where they came from:
    the split's statistics when they list every value, else its records."""
    return value_counts(manifest, manifest.label, split, statistics, skip_corrupt)


def value_counts(
    manifest: Manifest, name: str, split: str, statistics: dict | None, skip_corrupt: bool = False
) -> tuple[dict[str, int], str]:
    """The values of string feature `name` in `split` with their counts (of values: a list
    counts each of its values), from the statistics when they list every value, else from the
    records; and which of the two."""
    stats = (statistics or {}).get("splits", {}).get(split, {}).get("features", {}).get(name)
    if stats and stats.get("distinct_exact") and len(stats.get("top", [])) == stats.get("distinct"):
        return {t["value"]: t["count"] for t in stats["top"]}, STATISTICS
    return _scan(manifest, name, split, skip_corrupt), RECORDS


def _scan(
    manifest: Manifest, name: str, split: str, skip_corrupt: bool, text: bool = False
) -> dict[str, int]:
    """Counts a string feature's values (with `text`, the words of its values) over the split's
    records (one pass, it parsed alone); with `skip_corrupt`, a read error ends its file, as in
    training (trainer.input)."""
    spec = {name: tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64)}

    def values(batch: tf.Tensor) -> tf.Tensor:
        found = tf.io.parse_example(batch, spec)[name].flat_values
        return words(found).flat_values if text else found

    def read(path: tf.Tensor) -> tf.data.Dataset:
        records = tf.data.TFRecordDataset(path, compression_type=manifest.compression_type)
        return records.ignore_errors() if skip_corrupt else records

    files = tf.data.Dataset.from_tensor_slices(manifest.split_files(split))
    records = files.interleave(read, cycle_length=1)
    batches = records.batch(_SCAN_BATCH).map(values, num_parallel_calls=tf.data.AUTOTUNE)
    counts: collections.Counter = collections.Counter()
    for values in batches.as_numpy_iterator():
        unique, n = np.unique(values, return_counts=True)
        counts.update(dict(zip((v.decode() for v in unique), n.tolist())))
    return dict(counts)


def from_data(
    manifest: Manifest, model: ModelConfig = ModelConfig(), skip_corrupt: bool = False
) -> tuple[Manifest, dict]:
    """The manifest with what the data and `model` decide: the features read as free text, a
    string label's classes and the vocabularies of string lists and free text; and what
    metrics.json says of them (`classes_from`, `vocabularies`). They may read the train split:
    in a run, after the strategy is made (a multi-worker strategy must be made before
    TensorFlow runs anything)."""
    manifest = with_text(manifest, model.text_features)
    manifest, classes_from = with_label_classes(manifest, skip_corrupt)
    manifest, vocabularies = with_vocabularies(manifest, model.vocabulary_size, skip_corrupt)
    described = {"classes_from": classes_from} if classes_from else {}
    return manifest, described | ({"vocabularies": vocabularies} if vocabularies else {})


def with_text(manifest: Manifest, names: tuple[str, ...]) -> Manifest:
    """The manifest with the features `names` (--text-features) marked as free text: each must
    be a scalar string without `values` that is neither the label nor the key."""
    flag = "--text-features"
    if names and manifest.transform is not None:
        raise ManifestError(
            f"{flag}: the dataset has a tf.Transform, whose outputs the model reads"
        )
    features = dict(manifest.features)
    for name in names:
        f = features.get(name)
        if f is None:
            raise ManifestError(f"{flag}: no feature {name!r} (features: {', '.join(features)})")
        if name in (manifest.label, manifest.key):
            raise ManifestError(
                f"{flag}: {name!r} is the {'label' if name == manifest.label else 'key'}"
            )
        if f.type != "string" or f.shape != () or f.values is not None:
            what = f"has values {list(f.values)}" if f.values is not None else f"is {f.type}"
            shape = f" of shape {list(f.shape)}" if f.shape != () else ""
            raise ManifestError(
                f"{flag}: {name!r} {what}{shape}; free text is a scalar string without values"
            )
        features[name] = dataclasses.replace(f, text=True)
    return dataclasses.replace(manifest, features=features) if names else manifest


def with_vocabularies(
    manifest: Manifest, size: int = VOCABULARY_SIZE, skip_corrupt: bool = False
) -> tuple[Manifest, dict[str, dict]]:
    """The manifest with a vocabulary for each string list without `values` (shape [null], not
    the label) and each free-text feature: its `size` most frequent tokens (words of free text)
    in the train split (ties by token), from the statistics when they list every token of a
    list, else from one pass over the records. Returns it and {feature: {"size", "tokens",
    "from"}} for metrics.json; unchanged with size 0 (hashing)."""
    if size <= 0 or not manifest.has_split("train") or manifest.transform is not None:
        return manifest, {}
    lists = [
        f for f in manifest.features.values()
        if f.text or (f.type == "string" and f.variable_length and f.values is None
                      and f.name != manifest.label)
    ]  # fmt: skip
    if not lists:
        return manifest, {}
    statistics = None if len(manifest.parts) > 1 else load_statistics(manifest.root)
    features, described = dict(manifest.features), {}
    for feature in lists:
        if feature.text:
            counts, source = (
                _scan(manifest, feature.name, "train", skip_corrupt, text=True),
                RECORDS,
            )
        else:
            counts, source = value_counts(manifest, feature.name, "train", statistics, skip_corrupt)
        counts.pop("", None)
        if not counts:  # no token in train (or none readable): hashed, as without a vocabulary
            continue
        kept = sorted(counts, key=lambda token: (-counts[token], token))[:size]
        features[feature.name] = dataclasses.replace(feature, vocabulary=tuple(kept))
        described[feature.name] = {"size": len(kept), "tokens": len(counts), "from": source}
        logger.info(
            "feature %r: a vocabulary of %d of its %d tokens, from the train split's %s",
            feature.name, len(kept), len(counts), source,
        )  # fmt: skip
    return dataclasses.replace(manifest, features=features), described
