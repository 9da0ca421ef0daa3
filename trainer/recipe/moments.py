"""The normalization moments of the NUMBER model inputs: the recipe's last decision.

A scalar number read as it is takes its train mean and variance from the dataset's facts
(`from_facts`: exact, over the whole split, as the PyTorch and JAX readers read them). Every
other NUMBER input (a log-scaled number, a date's part, a fixed-shape list, a tf.Transform
output) is measured over the model inputs the host preprocessing makes of the train records
the recipe's rules looked at (`over_batches`: count, sum and sum of squares per value, values
that are missing left out as their presence input tells). No Keras: the Keras wing hands the
batches in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import cast

import numpy as np
from numpy.typing import ArrayLike

from trainer.dataset.facts import DatasetFacts
from trainer.recipe.words import NUMBER, PRESENCE, ModelInput, Moments


def measure(
    inputs: Sequence[ModelInput],
    known: DatasetFacts | None,
    transformed: bool,
    sample: Callable[[], Iterable[Mapping[str, ArrayLike]]],
) -> dict[str, Moments]:
    """The moments of every NUMBER input: from the facts (`known`) where they are exact
    (`from_facts`), the others over the batches of model inputs `sample()` gives
    (`over_batches`); `sample` is not called when the facts hold them all."""
    exact = from_facts(inputs, known, transformed)
    rest = [i for i in inputs if i.name not in exact]
    if not any(i.kind == NUMBER for i in rest):
        return exact
    return over_batches(sample(), rest) | exact


def from_facts(
    inputs: Sequence[ModelInput], known: DatasetFacts | None, transformed: bool
) -> dict[str, Moments]:
    """The moments of the scalar numbers read as they are (no log, no date part, no tf.Transform
    output), from the facts: their train mean and variance; none without facts."""
    if known is None or transformed:
        return {}
    return {
        i.name: Moments(
            mean=np.full(i.shape, known.number_moments[i.name].mean),
            variance=np.full(i.shape, _variance(known, i.name)),
        )
        for i in inputs
        if i.kind == NUMBER
        and i.scale == "linear"
        and i.part is None
        and i.shape == ()
        and i.name in known.number_moments
    }


def over_batches(
    batches: Iterable[Mapping[str, ArrayLike]], inputs: Sequence[ModelInput]
) -> dict[str, Moments]:
    """Mean and variance of each NUMBER input over `batches` (model inputs by name: arrays, or
    anything numpy reads as one), keyed by input name; values that are missing, as the
    feature's presence input tells, are left out."""
    numeric = [i for i in inputs if i.kind == NUMBER]
    presence = {i.feature.name: i.name for i in inputs if i.kind == PRESENCE}
    # a NUMBER input's shape is fixed: trainer.recipe.kinds leaves lists of numbers out
    shape = {i.name: cast("tuple[int, ...]", i.shape) for i in numeric}
    size = {name: int(np.prod(s)) for name, s in shape.items()}
    # per input: [count, sum, sum of squares], one entry per value of an example
    sums = {i.name: np.zeros((3, size[i.name])) for i in numeric}
    for batch in batches:
        for i in numeric:
            values = np.asarray(batch[i.name], np.float64).reshape(-1, size[i.name])
            if i.feature.name in presence:
                weight = np.asarray(batch[presence[i.feature.name]], np.float64)[:, None]
            else:
                weight = np.ones((values.shape[0], 1))
            sums[i.name] += [
                np.broadcast_to(weight, values.shape).sum(axis=0),
                (values * weight).sum(axis=0),
                (values * values * weight).sum(axis=0),
            ]
    moments = {}
    for i in numeric:
        count, total, squares = sums[i.name]
        count = np.maximum(count, 1.0)
        mean = total / count
        variance = np.maximum(squares / count - mean * mean, 0.0)
        moments[i.name] = Moments(
            mean=mean.reshape(shape[i.name]), variance=variance.reshape(shape[i.name])
        )
    return moments


def _variance(known: DatasetFacts, name: str) -> float:
    """A number's train variance (0 for a constant: its facts' std of 1.0 is the readers')."""
    low, high = known.bounds[name]
    return 0.0 if low == high else known.number_moments[name].std ** 2
