"""What the data holds, gathered once per run for the rules of `trainer.recipe.rules`.

Three sources, read before training:

- the dataset's facts (`facts.json`, counted exactly by the ETL over every record of each
  split; read through `trainer.dataset.facts`, the rule the PyTorch and JAX readers read too):
  every string's values with the records holding each (its vocabulary, most frequent first),
  its distinct values, the label's classes and missing records in every split, each number's
  exact moments, bounds, quantiles and (while it has few) values;
- the dataset's statistics (`statistics.json`): the records missing each feature;
- one pass over the train split (`RULE_SAMPLE` records at most, the first in file order,
  which is the order of the records' hashes: a uniform sample of the split, the same on a rerun
  or a resumed run): what the facts do not hold, the shape of every number's values (its skew,
  and whether it reads better as a log), the words of free text (`--text-features`), and the
  sizes of the first `IMAGE_SAMPLE` images of an image feature without `image_size`.

A dataset written before facts.json existed is read as before: strings' values counted in the
same pass, and a string label's classes from the statistics when they list every value, else
from one pass over the whole train split's labels (`label_counts`); the other splits' labels are
checked the same way. With `--skip-corrupt`, a read error ends its file, as in training
(trainer.keras.input).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping

import numpy as np
import tensorflow as tf

from trainer.dataset.facts import DatasetFacts
from trainer.dataset.manifest import InputFeature, Manifest, load_facts, load_statistics
from trainer.recipe.words import dtype_of, words
from transforms.contract.statistics import FeatureStatistics, Statistics

logger = logging.getLogger(__name__)

RULE_SAMPLE = 100_000  # the first train records, in file order, the rules look at
IMAGE_SAMPLE = 1_000  # ... and the first ones whose images are decoded for their size
STATISTICS = "statistics"  # counts taken from statistics.json (metrics.json's "from")
RECORDS = "records"  # counts taken from a pass over the records
FACTS = "facts"  # counts taken from facts.json
_BATCH = 4096


@dataclasses.dataclass(frozen=True)
class NumberSample:
    """The values of a numeric feature in the sampled train records that hold one:
    float64 [records with a value, size]."""

    values: np.ndarray
    records: int  # sampled records

    @property
    def missing(self) -> int:
        return self.records - len(self.values)


@dataclasses.dataclass(frozen=True)
class Strings:
    """The counts of a string feature's values (of a list's tokens, of free text's words) in the
    sampled train records."""

    counts: Mapping[str, int]
    records: int  # sampled records
    present: int  # of them, records holding at least one value
    total: int | None = None  # values (None: those counted); facts count some beyond `counts`

    @property
    def values(self) -> int:
        return sum(self.counts.values()) if self.total is None else self.total

    def by_count(self) -> list[str]:
        """The values, most frequent first (ties by value)."""
        return sorted(self.counts, key=lambda v: (-self.counts[v], v))


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What the rules of trainer.recipe.rules decide from. `train_records` and `label_missing` are
    exact (facts.json or statistics.json, else counted), and so are `strings` and `dataset`
    when the dataset has facts; `numbers` describe the sampled train records."""

    train_records: int
    sampled: int
    numbers: Mapping[str, NumberSample]
    strings: Mapping[str, Strings]
    image_sizes: Mapping[str, frozenset]  # image feature -> the (height, width, channels) seen
    label_missing: Mapping[str, int]  # split -> its records without the label
    statistics: Statistics | None  # statistics.json (None: none, or several datasets as one)
    # a classification label: split -> (its records per value, where they came from); train
    # always, the other splits when the config lists no classes (trainer.recipe.rules checks them)
    label_counts: Mapping[str, tuple[dict[str, int], str]] = dataclasses.field(default_factory=dict)
    dataset: DatasetFacts | None = None  # the train split's facts (None: a dataset without)

    def distinct(self, name: str, split: str = "train") -> tuple[int, bool] | None:
        """The distinct values of a string feature in `split` and whether the count is exact,
        from the facts or the statistics; None without them."""
        if split == "train" and self.dataset is not None and name in self.dataset.distinct_values:
            return self.dataset.distinct_values[name], True
        stats = _feature(self.statistics, split, name)
        if stats is None or stats.distinct is None:
            return None
        return stats.distinct, bool(stats.distinct_exact)


def gather(
    manifest: Manifest,
    *,
    text: Iterable[str] = (),
    skip_corrupt: bool = False,
    sample: int = RULE_SAMPLE,
) -> Evidence:
    """The facts of `manifest`'s train split: its statistics and one pass over at most `sample`
    of its first records. `text`: the scalar strings read as free text (their words are
    counted)."""
    statistics = None if len(manifest.parts) > 1 else load_statistics(manifest.root)
    known = _dataset_facts(manifest, statistics)
    text = set(text)
    features = [f for f in manifest.features.values() if f.type in ("int", "float", "string")]
    if manifest.transform is not None and manifest.transform.materialize == "transformed":
        # the shards hold the transform's outputs, described by the transform, not these
        features = [f for f in features if f.name == manifest.label]
    counted: dict[str, Strings] = {}
    if known is not None:  # the strings' values are known: only free text is counted
        counted = {
            f.name: _strings_of(known, f.name)
            for f in features
            if f.type == "string" and f.name not in text and f.name != manifest.label
        }
        features = [f for f in features if f.name not in counted]
    numbers: dict[str, list[np.ndarray]] = {
        f.name: [] for f in features if f.type != "string" and not f.variable_length
    }
    strings: dict[str, collections.Counter[str]] = {
        f.name: collections.Counter() for f in features if f.type == "string"
    }
    present = dict.fromkeys(strings, 0)
    sampled = 0
    for batch in _batches(manifest, "train", features, text, skip_corrupt, sample):
        sampled += len(next(iter(batch.values()))[1]) if batch else 0
        for name, (values, lengths) in batch.items():
            if name in numbers:  # the records that hold all `size` values of the feature
                size = manifest.features[name].size
                full = np.repeat(lengths == size, lengths)
                if full.any():
                    numbers[name].append(values[full].astype(np.float64).reshape(-1, size))
            else:
                present[name] += int(np.count_nonzero(lengths))
                unique, n = np.unique(values, return_counts=True)
                strings[name].update(dict(zip((v.decode() for v in unique), n.tolist())))
    sizes: dict[str, set[tuple[int, ...]]] = {}
    unsized = [
        f for f in manifest.features.values()
        if f.type == "image" and f.image_size is None and f.shape == ()
    ]  # fmt: skip
    if unsized and (manifest.transform is None or manifest.transform.materialize == "raw"):
        for batch in _batches(manifest, "train", unsized, set(), skip_corrupt, IMAGE_SAMPLE):
            for name, (values, _) in batch.items():
                sizes.setdefault(name, set()).update(_image_sizes(values))
    label = manifest.label
    counts = {}
    if label and (manifest.features[label].type == "string" or manifest.features[label].values):
        for split in sorted(manifest.splits):
            needed = split == "train" or manifest.features[label].values is None
            if needed and manifest.has_split(split):
                found = _label_counts_of(manifest, split, known)
                counts[split] = (
                    found
                    if found is not None
                    else label_counts(manifest, split, statistics, skip_corrupt)
                )
    return Evidence(
        train_records=manifest.split_records("train") if manifest.has_split("train") else 0,
        sampled=sampled,
        numbers={
            n: NumberSample(
                np.concatenate(v) if v else np.zeros((0, manifest.features[n].size)), sampled
            )
            for n, v in numbers.items()
        },
        strings={n: Strings(dict(c), sampled, present[n]) for n, c in strings.items()} | counted,
        image_sizes={n: frozenset(s) for n, s in sizes.items()},
        label_missing=_label_missing(manifest, statistics, skip_corrupt) if label else {},
        statistics=statistics,
        label_counts=counts,
        dataset=known,
    )


def _dataset_facts(manifest: Manifest, statistics: Statistics | None) -> DatasetFacts | None:
    """The train split's facts (trainer.dataset.facts), None for a dataset without facts (or
    one of several without)."""
    parts = load_facts(manifest)
    if not parts or any(p is None for p in parts) or not manifest.has_split("train"):
        return None
    return DatasetFacts.of(manifest, "train", facts=parts, statistics=statistics)


def _strings_of(known: DatasetFacts, name: str) -> Strings:
    """A string feature's train values, with the records holding each, from the facts."""
    ranked = known.ranked.get(name, {})
    return Strings(
        dict(ranked),
        known.records,
        known.present.get(name, 0),
        total=known.totals.get(name, 0),
    )


def _label_counts_of(
    manifest: Manifest, split: str, known: DatasetFacts | None
) -> tuple[dict[str, int], str] | None:
    """The label's values in `split` with their records, from the facts; None without them."""
    if known is None or manifest.label is None:
        return None
    found = known.label_counts.get(split)
    return None if found is None else (dict(found), FACTS)


def _batches(
    manifest: Manifest,
    split: str,
    features: list[InputFeature],
    text: set[str],
    skip_corrupt: bool,
    limit: int | None,
):
    """Batches of {feature: (flat values, values per record)} of the split's first `limit`
    records (all with None), read in file order."""
    spec = {
        f.name: tf.io.RaggedFeature(
            tf.string if f.type == "image" else dtype_of(f), row_splits_dtype=tf.int64
        )
        for f in features
    }
    if not spec or not manifest.has_split(split):
        return

    def columns(serialized: tf.Tensor) -> dict:
        parsed = tf.io.parse_example(serialized, spec)
        out = {}
        for name, value in parsed.items():
            if name in text:  # free text: its words, still one row per record
                value = words(value.flat_values)
            out[name] = (value.flat_values, value.row_lengths())
        return out

    records = read_records(manifest, split, skip_corrupt)
    if limit is not None:
        records = records.take(limit)
    batches = records.batch(_BATCH).map(columns, num_parallel_calls=tf.data.AUTOTUNE)
    yield from batches.as_numpy_iterator()


def read_records(manifest: Manifest, split: str, skip_corrupt: bool) -> tf.data.Dataset:
    """The split's serialized records in file order; with `skip_corrupt`, a read error ends
    its file, as in training."""

    def read(path: tf.Tensor) -> tf.data.Dataset:
        records = tf.data.TFRecordDataset(path, compression_type=manifest.compression_type)
        return records.ignore_errors() if skip_corrupt else records

    files = tf.data.Dataset.from_tensor_slices(manifest.split_files(split))
    return files.interleave(read, cycle_length=1)


def _image_sizes(encoded: np.ndarray) -> set:
    """The (height, width, channels) of encoded images."""
    sizes = set()
    for data in encoded:
        if not data:
            continue
        try:
            shape = tf.io.decode_image(data, expand_animations=False).shape
        except tf.errors.InvalidArgumentError:
            continue  # not an image TensorFlow decodes: the run will say so when it reads it
        sizes.add(tuple(int(d) for d in shape))
    return sizes


def label_counts(
    manifest: Manifest, split: str, statistics: Statistics | None, skip_corrupt: bool = False
) -> tuple[dict[str, int], str]:
    """The label's values in `split` with their record counts, and where they came from:
    the split's statistics when they list every value, else its records."""
    assert manifest.label is not None  # gather calls it only for a manifest with a label
    return value_counts(manifest, manifest.label, split, statistics, skip_corrupt)


def value_counts(
    manifest: Manifest,
    name: str,
    split: str,
    statistics: Statistics | None,
    skip_corrupt: bool = False,
) -> tuple[dict[str, int], str]:
    """The values of string feature `name` in `split` with their counts (of values: a list
    counts each of its values), from the statistics when they list every value, else from one
    pass over the split's records; and which of the two."""
    stats = _feature(statistics, split, name)
    if stats is not None and stats.distinct_exact and len(stats.top or ()) == stats.distinct:
        return {t.value: t.count for t in stats.top or ()}, STATISTICS
    if stats is not None and stats.is_number and stats.counts is not None:
        # a number's every value is counted while it has few (transforms.stats)
        return {_text(c.value): c.count for c in stats.counts}, STATISTICS
    feature = manifest.features[name]
    counts: collections.Counter = collections.Counter()
    for batch in _batches(manifest, split, [feature], set(), skip_corrupt, None):
        unique, n = np.unique(batch[name][0], return_counts=True)
        counts.update(dict(zip((_text(v) for v in unique), n.tolist())))
    return dict(counts), RECORDS


def _text(value) -> str:
    """A counted value as the key of its count: a string's text, a number's digits."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _label_missing(
    manifest: Manifest, statistics: Statistics | None, skip_corrupt: bool
) -> dict[str, int]:
    """Per split, the records without a label: none when the label is always full; else from
    the statistics, or counted."""
    assert manifest.label is not None  # gather calls it only for a manifest with a label
    label = manifest.features[manifest.label]
    out = {}
    for split in sorted(manifest.splits):
        if not manifest.has_split(split) or label.always_full:
            out[split] = 0
            continue
        stats = _feature(statistics, split, label.name)
        if stats is not None:
            out[split] = stats.missing
            continue
        missing = 0
        for batch in _batches(manifest, split, [label], set(), skip_corrupt, None):
            missing += int(np.count_nonzero(batch[label.name][1] == 0))
        out[split] = missing
    return out


def _feature(statistics: Statistics | None, split: str, name: str) -> FeatureStatistics | None:
    """A feature's statistics in a split; None without statistics, or without its own there."""
    return None if statistics is None else statistics.feature(split, name)


def skewness(values: np.ndarray) -> float:
    """The sample skewness (Fisher-Pearson) of `values`; 0 for constant values."""
    centred = values.astype(np.float64) - values.mean()
    std = math.sqrt(float(np.mean(centred**2)))
    return float(np.mean(centred**3)) / std**3 if std > 0 else 0.0
