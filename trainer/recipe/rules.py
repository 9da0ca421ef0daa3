"""The recipe of a run: what each feature becomes (the rules of trainer.recipe.kinds and, for
the label, trainer.recipe.label) decided once, on the facts of the train split.

`TrainView.read` reads the train split once, as the rules see it: the free text marked
(`with_text`), the facts gathered (trainer.recipe.facts), a string label's classes taken from
them. `recipe_of` then makes the run's `Recipe` in one pass from that view: `decide` (each
feature's model inputs, or why it is left out; the label's task and classes or scale), then the
NUMBER inputs' moments (trainer.recipe.moments), exact from the facts where they can be, the
rest over the model inputs that the executor (the Keras wing, handed in as `sample`) makes of the
records the rules looked at. Every consumer reads that recipe: the host preprocessing
(trainer.keras.preprocess), the built-in model and a `--model-module` (trainer.keras.model), the
export and `shardflow predict`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import cast

from numpy.typing import ArrayLike

from trainer.config import ModelConfig
from trainer.dataset.manifest import InputFeature, Manifest, ManifestError
from trainer.recipe.facts import Evidence, gather
from trainer.recipe.kinds import decide_feature
from trainer.recipe.label import Label, decide_label, with_classes
from trainer.recipe.moments import measure
from trainer.recipe.words import (
    CATEGORY,
    CLASSIFICATION,
    IMAGE,
    NUMBER,
    TOKENS,
    ModelInput,
    Moments,
)

logger = logging.getLogger(__name__)

# The model inputs (as numpy arrays by name) that the executor makes of the records the rules
# looked at, in batches, for the recipe's inputs (trainer.keras.inputs hands them in).
Sample = Callable[["Recipe"], Iterable[Mapping[str, ArrayLike]]]


@dataclasses.dataclass(frozen=True)
class TrainView:
    """The train split as the rules see it, read once: the manifest with its free text marked
    and a string label's classes (from the data when the config lists none), the facts, and
    where the classes came from (`with_classes`)."""

    manifest: Manifest
    facts: Evidence
    classes_from: str | None

    @classmethod
    def read(
        cls, manifest: Manifest, text: Sequence[str] = (), skip_corrupt: bool = False
    ) -> TrainView:
        """The view of `manifest`'s train split; `text`: --text-features."""
        manifest = with_text(manifest, text)
        facts = gather(manifest, text=text, skip_corrupt=skip_corrupt)
        manifest, classes_from = with_classes(manifest, facts)
        return cls(manifest, facts, classes_from)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The model inputs of a run and why each other feature is left out; the label."""

    used: tuple[InputFeature, ...]
    inputs: tuple[ModelInput, ...]
    label: Label
    reasons: Mapping[str, str]  # feature left out -> why
    skipped: tuple[InputFeature, ...] = ()

    @property
    def task(self) -> str:
        return self.label.task

    def with_moments(self, moments: Mapping[str, Moments]) -> Recipe:
        """The recipe with the moments of its NUMBER inputs filled in."""
        inputs = tuple(
            dataclasses.replace(i, moments=moments[i.name]) if i.name in moments else i
            for i in self.inputs
        )
        return dataclasses.replace(self, inputs=inputs)

    def input_bytes(self) -> int | None:
        """The bytes of one record's model inputs and target (None: a list's length varies)."""
        if any(None in i.shape for i in self.inputs):
            return None
        return 8 + sum(4 * math.prod(cast("tuple[int, ...]", i.shape)) for i in self.inputs)

    def metrics(self) -> dict:
        """What metrics.json records of the recipe."""
        label = self.label
        out: dict[str, object] = {
            "label": label.name,
            "task": self.task,
            "model_inputs": [i.name for i in self.inputs],
            "not_model_inputs": dict(self.reasons),
            "features": self.describe(),
        }
        if self.task == CLASSIFICATION:
            classes, counts = label.classes, label.counts
            assert classes is not None and counts is not None  # a classification's (decide_label)
            out["classes"] = list(classes)
            if label.classes_from:
                out["classes_from"] = label.classes_from
            out["class_counts"] = {str(c): counts.get(str(c), 0) for c in classes}
            if label.weights is not None:
                out["class_weights"] = dict(zip(map(str, classes), label.weights))
        else:
            assert label.scale is not None  # a regression's (decide_label)
            out["label_scale"] = label.scale.to_dict()
            out["train_mean"] = label.train_mean
        return out

    def describe(self) -> dict:
        """Per feature, what it became (metrics.json `features`): its model inputs and how they
        are made, or why it is left out."""
        out: dict[str, dict] = {}
        for i in self.inputs:
            entry = out.setdefault(i.feature.name, {"inputs": []})
            entry["inputs"].append(i.name)
            what = _described(i)
            if what is None:
                continue
            entry["as"] = f"{entry['as']} and {what}" if "as" in entry else what
            if i.kind in (CATEGORY, TOKENS):
                entry.update(ids=i.ids, size=i.vocabulary_size)
                if i.width is not None:
                    entry["width"] = i.width
            elif i.kind == IMAGE:
                entry["image_size"] = list(i.shape)
        for name, why in self.reasons.items():
            out[name] = {"left_out": why}
        return out


def _described(i: ModelInput) -> str | None:
    """How a model input is made, in words (None: a presence input, or a date's next part)."""
    if i.part is not None:
        return "date parts" if i.part == "year" else None
    if i.kind == NUMBER:
        return "log number" if i.scale == "log" else "number"
    if i.kind in (CATEGORY, TOKENS):
        noun = "tokens" if i.kind == TOKENS else "category"
        return f"{'one-hot' if i.width is None else 'embedded'} {noun}"
    return "image" if i.kind == IMAGE else None


def decide(
    manifest: Manifest,
    facts: Evidence,
    features: Mapping[str, InputFeature],
    cfg: ModelConfig = ModelConfig(),
    *,
    exclude: Sequence[str] = (),
    include: Sequence[str] = (),
    transformed: bool = False,
    class_weight: str | None = None,
    classes_from: str | None = None,
) -> Recipe:
    """The recipe of a run: `features` are the model's features (the manifest's, or a
    tf.Transform's outputs when `transformed`), `facts` what the data holds; `classes_from`
    where a classification's classes came from (`with_classes`)."""
    label_name = manifest.label
    for flag, names in (("--exclude-features", exclude), ("--include-features", include)):
        unknown = [name for name in names if name not in features]
        if unknown:
            raise ManifestError(
                f"{flag}: no feature {unknown[0]!r} (features: {', '.join(sorted(features))})"
            )
        if label_name in names:
            raise ManifestError(f"{flag}: {label_name!r} is the label")
    assert label_name is not None  # check_dataset refuses a manifest without a label
    label = decide_label(facts, features[label_name], class_weight, classes_from)
    used, skipped, reasons, inputs = [], [], {}, []
    for feature in features.values():
        if feature.name == label_name:
            continue
        why, made = decide_feature(manifest, facts, feature, cfg, exclude, include, transformed)
        if why is not None:
            reasons[feature.name] = why
            skipped.append(feature)
            logger.info("not a model input: %s: %s", feature.name, why)
            continue
        used.append(made[0].feature)
        inputs.extend(made)
    if not inputs:
        raise ManifestError(
            "no feature can be a model input: "
            + "; ".join(f"{name}: {why}" for name, why in reasons.items())
        )
    return Recipe(tuple(used), tuple(inputs), label, reasons, tuple(skipped))


def recipe_of(
    view: TrainView,
    features: Mapping[str, InputFeature],
    cfg: ModelConfig,
    sample: Sample,
    *,
    exclude: Sequence[str] = (),
    include: Sequence[str] = (),
    transformed: bool = False,
    class_weight: str | None = None,
) -> Recipe:
    """The run's recipe in one pass over `view`: decided (`decide`), then the moments of its
    NUMBER inputs (trainer.recipe.moments.measure: `sample` is called only for those the facts
    do not hold)."""
    recipe = decide(
        view.manifest,
        view.facts,
        features,
        cfg,
        exclude=exclude,
        include=include,
        transformed=transformed,
        class_weight=class_weight,
        classes_from=view.classes_from,
    )
    moments = measure(recipe.inputs, view.facts.dataset, transformed, lambda: sample(recipe))
    return recipe.with_moments(moments)


def with_text(manifest: Manifest, names: Sequence[str]) -> Manifest:
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
