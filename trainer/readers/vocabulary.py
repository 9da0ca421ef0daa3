"""What a model needs besides the records, from the manifest and statistics.json: the label's
classes, each string feature's vocabulary and each number's moments.

The rules are the tf.data path's (`trainer.label`, `trainer.recipe`): a label's classes are its
`values`, or, for a string label without them, the distinct values of the train split, sorted
(from the statistics, where they count every value). A string feature's vocabulary is its
`values`, or its train values by count (ties by value: the same list on every run) where the
statistics list them all, else the most frequent ones they list. A number's moments are its
train mean and standard deviation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainer.readers.dataset import Dataset
from transforms.contract.statistics import FeatureStatistics

TRAIN = "train"
NUMBERS = ("int", "float")
STRINGS = ("string",)


@dataclass(frozen=True)
class Moments:
    """A numeric feature's train mean and standard deviation (std 1.0 for a constant)."""

    mean: float
    std: float


@dataclass(frozen=True)
class DatasetInfo:
    """The label (its name, and a classification's classes: None for a regression or a string
    label whose classes are unknown), the vocabularies of string features and the moments of
    numeric ones."""

    label: str | None
    classes: tuple[str | int, ...] | None
    vocabularies: Mapping[str, tuple[str, ...]]
    moments: Mapping[str, Moments]

    @classmethod
    def of(cls, dataset: Dataset) -> DatasetInfo:
        vocabularies, moments = {}, {}
        for name, feature in dataset.features.items():
            stats = _train(dataset, name)
            if feature.type in STRINGS and name != dataset.label:
                words = feature.values if feature.values is not None else _by_count(stats)
                if words:
                    vocabularies[name] = tuple(str(w) for w in words)
            elif feature.type in NUMBERS and stats is not None and stats.mean is not None:
                std = stats.std if stats.std else 1.0
                moments[name] = Moments(float(stats.mean), float(std))
        return cls(
            label=dataset.label,
            classes=_classes(dataset),
            vocabularies=vocabularies,
            moments=moments,
        )


def _classes(dataset: Dataset) -> tuple[str | int, ...] | None:
    if dataset.label is None:
        return None
    feature = dataset.features[dataset.label]
    if feature.values is not None:
        return tuple(feature.values)
    stats = _train(dataset, dataset.label)
    if feature.type not in STRINGS or stats is None or stats.counts is None:
        return None
    return tuple(sorted(str(c.value) for c in stats.counts))


def _by_count(stats: FeatureStatistics | None) -> tuple[str, ...]:
    if stats is None:
        return ()
    listed = stats.counts if stats.counts is not None else stats.top or ()
    ranked = sorted(listed, key=lambda c: (-c.count, str(c.value)))
    return tuple(str(c.value) for c in ranked if str(c.value) != "")


def _train(dataset: Dataset, name: str) -> FeatureStatistics | None:
    stats = dataset.statistics
    return None if stats is None else stats.feature(TRAIN, name)
