"""The NUMBER inputs' normalization moments, the recipe's last step (trainer/recipe/moments.py)."""

import numpy as np

from trainer.dataset.facts import DatasetFacts, MeanStd
from trainer.dataset.manifest import load_manifest
from trainer.recipe.moments import measure, over_batches
from trainer.recipe.rules import TrainView, decide
from trainer.recipe.words import NUMBER


def _recipe(dataset):
    view = TrainView.read(load_manifest(str(dataset.root)))
    return view, decide(view.manifest, view.facts, view.manifest.features)


def _batches(inputs, rows: int = 64, seed: int = 3):
    rng = np.random.default_rng(seed)
    batch = {}
    for i in inputs:
        shape = (rows, *(3 if n is None else n for n in i.shape))
        batch[i.name] = rng.normal(size=shape) if i.kind == NUMBER else np.ones(shape)
    return [batch, {k: v[: rows // 2] * 2.0 for k, v in batch.items()}]


def test_without_facts_every_number_is_measured_over_the_sample_taken_once(dataset):
    view, recipe = _recipe(dataset)
    calls = []
    batches = _batches(recipe.inputs)

    def sample():
        calls.append(1)
        return iter(batches)

    moments = measure(recipe.inputs, None, False, sample)

    assert calls == [1]
    numbers = [i.name for i in recipe.inputs if i.kind == NUMBER]
    assert sorted(moments) == sorted(numbers) and "embedding" in numbers
    expected = over_batches(batches, recipe.inputs)
    for name in numbers:
        np.testing.assert_array_equal(moments[name].mean, expected[name].mean)
        np.testing.assert_array_equal(moments[name].variance, expected[name].variance)


def test_a_scalar_number_known_to_the_facts_takes_their_moments_and_no_sample_is_read(dataset):
    view, recipe = _recipe(dataset)
    flipper = [i for i in recipe.inputs if i.name == "flipper_mm"]
    known = DatasetFacts(
        split="train",
        features={},
        label=None,
        classes=None,
        vocabularies={},
        value_counts={},
        number_moments={"flipper_mm": MeanStd(201.5, 12.0)},
        number_quantiles={},
        bounds={"flipper_mm": (170.0, 231.0)},
    )

    def sample():
        raise AssertionError("the facts hold every moment: no record is read")

    moments = measure(flipper, known, False, sample)

    assert float(moments["flipper_mm"].mean) == 201.5
    assert float(moments["flipper_mm"].variance) == 144.0
    # a tf.Transform output is never the manifest's number: the facts do not describe it
    transformed = measure(flipper, known, True, lambda: iter(_batches(flipper)))
    assert transformed["flipper_mm"].mean != 201.5
