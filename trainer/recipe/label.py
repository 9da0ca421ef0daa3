"""How the label is learned: its task, a classification's classes and weights, a regression's
scale. The rules, decided once per run from the facts of `trainer.recipe.facts` (docs/trainer.md,
"The label"):

- a classification's classes come from the label's `values`, or for a string label without
  them from the train split (`with_classes`: its distinct values, sorted; a value another split
  holds and train does not is an error); `--class-weight balanced` weighs each class by
  records / (classes x its records);
- a regression's label is standardized with its train mean and deviation (`LabelScale`), on a
  log scale when it is strictly positive, skewed (skewness over `SKEW`) and the log lowers the
  skew; the model learns the standardized value and the export answers in the label's units.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import numpy as np

from trainer.dataset.manifest import InputFeature, Manifest, ManifestError
from trainer.recipe.facts import Evidence, skewness
from trainer.recipe.words import CLASSIFICATION, REGRESSION, LabelScale, label_task

logger = logging.getLogger(__name__)

SKEW = 1.0  # a number or label more skewed than this is tried on a log scale
CONFIG = "config"  # a label's classes listed in the config (metrics.json "classes_from")


@dataclasses.dataclass(frozen=True)
class Label:
    """The label: its feature, task, a classification's classes with their train counts and
    weights, a regression's scale and the train mean (the baseline's prediction)."""

    feature: InputFeature
    task: str
    counts: Mapping[str, int] | None = None  # classification: train records per class
    weights: tuple[float, ...] | None = None  # --class-weight balanced: per class
    scale: LabelScale | None = None  # regression
    train_mean: float | None = None  # regression: what the baseline predicts
    classes_from: str | None = None  # classification: config, facts, statistics or records
    missing: Mapping[str, int] = dataclasses.field(default_factory=dict)  # split -> unlabelled

    @property
    def name(self) -> str:
        return self.feature.name

    @property
    def classes(self) -> tuple | None:
        return self.feature.values if self.task == CLASSIFICATION else None

    @property
    def majority(self) -> str | int | None:
        """The most frequent train class (ties: the first in `classes`): the baseline."""
        counts, classes = self.counts, self.feature.values
        if not counts:
            return None
        assert classes is not None  # counts are a classification's, whose classes are listed
        return max(classes, key=lambda c: counts.get(str(c), 0))


def decide_label(
    facts: Evidence,
    feature: InputFeature,
    class_weight: str | None = None,
    classes_from: str | None = None,
) -> Label:
    """The label's task and, from the train split, its classes and their counts (a
    classification) or its scale (a regression)."""
    task = label_task(feature)
    if task == REGRESSION:
        numbers = facts.numbers.get(feature.name)
        values = numbers.values.reshape(-1) if numbers is not None else np.zeros(0)
        if not len(values):
            raise ManifestError(f"label {feature.name!r}: the train split holds no value of it")
        return Label(
            feature,
            task,
            scale=label_scale(values),
            train_mean=float(values.mean()),
            missing=dict(facts.label_missing),
        )
    counts = dict(facts.label_counts.get("train", ({}, None))[0])
    weights = None
    if class_weight == "balanced":
        classes = feature.values
        assert classes is not None  # a classification's classes (label_task)
        total, k = sum(counts.values()), len(classes)
        weights = tuple(
            total / (k * counts[str(c)]) if counts.get(str(c)) else 0.0 for c in classes
        )
    return Label(
        feature,
        task,
        counts=counts,
        weights=weights,
        classes_from=classes_from,
        missing=dict(facts.label_missing),
    )


def label_scale(values: np.ndarray) -> LabelScale:
    """How a regression label is standardized: on a log scale when it is strictly positive,
    skewed (skewness over SKEW) and less skewed as a log; else as it is."""
    values = values.astype(np.float64)
    log = bool(
        values.min() > 0
        and skewness(values) > SKEW
        and abs(skewness(np.log(values))) < skewness(values)
    )
    learned = np.log(values) if log else values
    mean, std = float(learned.mean()), float(learned.std())
    std = std if std > 0 else 1.0
    z = (learned - mean) / std
    margin = 0.1 * float(z.max() - z.min())
    return LabelScale(mean, std, log, float(z.min()) - margin, float(z.max()) + margin)


def with_classes(manifest: Manifest, facts: Evidence) -> tuple[Manifest, str | None]:
    """The manifest with a string label's classes, when the config lists none, taken from the
    data: its train values, sorted (a value that another split holds and train does not is an
    error); and where the classes came from (`config`, `facts`, `statistics`, `records`; None for a
    label that has no classes)."""
    name = manifest.label
    label = manifest.features.get(name) if name else None
    if not name or label is None or (label.type != "string" and label.values is None):
        return manifest, None
    if label.values is not None:
        return manifest, CONFIG
    counts, source = facts.label_counts.get("train", ({}, None))
    if not counts:
        raise ManifestError(f"label {name!r}: the train split holds no value of it")
    for split, (found, _) in sorted(facts.label_counts.items()):
        if split == "train":
            continue
        unknown = {v: n for v, n in found.items() if v not in counts}
        if unknown:
            value, records = sorted(unknown.items())[0]
            raise ManifestError(
                f"label {name!r}: split {split!r} holds {value!r} ({records} records)"
                f"{f' and {len(unknown) - 1} more value(s)' if len(unknown) > 1 else ''}, which "
                "the train split does not: the model cannot learn a class it never sees; add "
                "train examples of it, or list the label's `values` in the config"
            )
    classes = tuple(sorted(counts))
    logger.info(
        "label %r: %d classes from the train split's %s: %s",
        name, len(classes), source, ", ".join(classes),
    )  # fmt: skip
    features = dict(manifest.features)
    features[name] = dataclasses.replace(label, values=classes)
    return dataclasses.replace(manifest, features=features), source
