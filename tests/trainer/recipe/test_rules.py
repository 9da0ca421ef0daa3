"""The rules of trainer/recipe/rules.py and trainer/recipe/label.py: what each feature becomes, and
how the label is learned.

Each rule is checked on evidence made here (trainer.recipe.facts.Evidence), so that every
threshold is met on purpose: a nearly unique string, a date, a skewed number, an hour, a skewed
label.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from trainer.config import ModelConfig
from trainer.dataset.manifest import InputFeature, Manifest, ManifestError
from trainer.keras.features import label_encoder
from trainer.keras.model import to_label_units
from trainer.keras.preprocess import HostPreprocessing
from trainer.recipe.facts import Evidence, NumberSample, Strings, skewness
from trainer.recipe.kinds import NO_VALUE, ONE_VALUE, embedding_width, log_unit
from trainer.recipe.label import label_scale
from trainer.recipe.rules import decide
from trainer.recipe.words import CATEGORY, FROM_VOCABULARY, NUMBER, PRESENCE, date_parts
from transforms.contract import manifest as contract

RNG = np.random.default_rng(0)
N = 1000


def _facts(numbers=None, strings=None, counts=None) -> Evidence:
    return Evidence(
        train_records=N,
        sampled=N,
        numbers={
            k: NumberSample(np.asarray(v, np.float64).reshape(-1, 1), N)
            for k, v in (numbers or {}).items()
        },  # fmt: skip
        strings={k: Strings(c, N, N) for k, c in (strings or {}).items()},
        image_sizes={},
        label_missing={"train": 0},
        statistics=None,
        label_counts={"train": (counts or {"a": 600, "b": 300, "c": 100}, "records")},
    )


def _decide(features: dict[str, InputFeature], facts: Evidence, label="y", **options):
    features = {**features, "y": features.get("y", _LABEL)}
    written = contract.Manifest(name="t", features={}, splits={}, compression="none", label=label)
    manifest = Manifest(root="/data", written=written, features=features, splits={})
    return decide(manifest, facts, features, ModelConfig(), **options)


_LABEL = InputFeature(name="y", type="string", values=("a", "b", "c"))


def _string(name: str) -> InputFeature:
    return InputFeature(name=name, type="string")


def test_a_nearly_unique_string_is_left_out_with_its_reason_unless_included():
    names = {f"car {i}": 1 for i in range(900)} | {"ford pinto": 100}
    features = {"name": _string("name"), "x": InputFeature(name="x", type="float")}
    facts = _facts(numbers={"x": RNG.normal(size=N)}, strings={"name": names})

    recipe = _decide(features, facts)

    assert recipe.reasons == {
        "name": "nearly unique per record: 901 distinct values in 1,000 train values (1.1 "
        "records a value), an id or a name (--include-features name uses it)"
    }
    assert [i.name for i in recipe.inputs] == ["x"]
    assert recipe.metrics()["not_model_inputs"] == recipe.reasons
    included = _decide(features, facts, include=("name",))
    (name,) = [i for i in included.inputs if i.name == "name"]
    assert (name.kind, name.ids, name.vocabulary_size) == (CATEGORY, FROM_VOCABULARY, 902)
    assert name.vocabulary[0] == "ford pinto"  # most frequent first


def test_a_code_with_too_few_records_a_value_is_left_out_and_a_category_is_kept():
    # 400 distinct values, 2.5 records each: more than 100 and fewer than 20 records a value
    tails = {f"N{i:04d}": 2 if i % 2 else 3 for i in range(400)}
    # 30 values of 33 records: a category
    colours = {f"colour {i}": 33 for i in range(30)}
    features = {"tail": _string("tail"), "colour": _string("colour")}
    recipe = _decide(features, _facts(strings={"tail": tails, "colour": colours}))
    assert recipe.reasons["tail"].startswith("nearly unique per record: 400 distinct values")
    (colour,) = recipe.inputs
    assert (colour.kind, colour.vocabulary_size, colour.width) == (
        CATEGORY,
        31,
        embedding_width(31),
    )


def test_categories_of_few_values_are_one_hot_and_others_embedded_in_a_width_sized_to_them():
    few = {f"v{i}": 50 for i in range(16)}
    many = {f"w{i}": 20 for i in range(50)}
    features = {"few": _string("few"), "many": _string("many")}
    recipe = _decide(features, _facts(strings={"few": few, "many": many}))
    widths = {i.name: i.width for i in recipe.inputs}
    assert widths == {"few": None, "many": 14}  # 16 values one-hot; 51 ids: 1.6 * 51**0.56
    assert [embedding_width(n) for n in (2, 17, 100, 10_000)] == [2, 8, 21, 32]


def test_a_date_string_becomes_its_parts_and_a_constant_part_is_left_out():
    stamps = {f"2013-{m:02d}-{d:02d} {h:02d}:00:00": 1 for m in (1, 6) for d in (1, 15)
              for h in range(0, 24, 3)}  # fmt: skip
    days = {f"20{y:02d}-01-01": 10 for y in range(10, 20)}  # January 1st only: no month part
    features = {"when": _string("when"), "day": _string("day")}
    recipe = _decide(features, _facts(strings={"when": stamps, "day": days}))
    names = [i.name for i in recipe.inputs]
    assert names == [
        "when__year", "when__month_sin", "when__month_cos", "when__weekday_sin",
        "when__weekday_cos", "when__hour_sin", "when__hour_cos", "when__present",
        "day__year", "day__weekday_sin", "day__weekday_cos", "day__present",
    ]  # fmt: skip
    assert {i.kind for i in recipe.inputs} == {NUMBER, PRESENCE}
    assert recipe.describe()["when"]["as"] == "date parts"


def test_date_parts_are_the_year_and_the_cycles_of_month_weekday_and_hour():
    text = tf.constant(
        ["2013-01-01 06:00:00", "2013-01-01T06:00:00Z", "2012/07/02", "2024-02-29 18:30", "soon",
         ""]
    )  # fmt: skip
    parts = {k: v.numpy() for k, v in date_parts(text).items()}
    assert parts["present"].tolist() == [1, 1, 1, 1, 0, 0]
    np.testing.assert_allclose(parts["year"][0], 1970 + (15706 + 0.25) / 365.2425, rtol=1e-7)
    assert parts["year"][0] == parts["year"][1]  # the zone is read as written
    # 2013-01-01 was a Tuesday (Monday is 0): 1/7 of a turn; 06:00 a quarter of a day
    np.testing.assert_allclose(
        [parts["weekday_sin"][0], parts["weekday_cos"][0]],
        [math.sin(2 * math.pi / 7), math.cos(2 * math.pi / 7)],
        atol=1e-6,
    )
    np.testing.assert_allclose([parts["hour_sin"][0], parts["hour_cos"][0]], [1, 0], atol=1e-6)
    # July 2nd: half a year and a day from January 1st
    turn = 2 * math.pi * (6 + 1 / 31) / 12
    np.testing.assert_allclose(parts["month_cos"][2], math.cos(turn), atol=1e-6)
    assert all(parts[k][4] == 0 for k in parts)  # not a date: every part 0, not present


def test_a_skewed_positive_number_is_read_on_a_log_scale_and_a_symmetric_one_is_not():
    prices = RNG.lognormal(8, 1, size=N)
    heights = RNG.normal(170, 10, size=N)
    unit = log_unit(prices.reshape(-1, 1))
    assert unit == pytest.approx(np.median(prices))
    assert log_unit(heights.reshape(-1, 1)) is None
    assert log_unit((prices - 5000).reshape(-1, 1)) is None  # negative values: never
    features = {
        "price": InputFeature(name="price", type="float"),
        "height": InputFeature(name="height", type="float"),
    }
    recipe = _decide(features, _facts(numbers={"price": prices, "height": heights}))
    scales = {i.name: (i.scale, i.log_unit) for i in recipe.inputs}
    assert scales == {"price": ("log", unit), "height": ("linear", None)}
    host = HostPreprocessing(recipe.inputs)
    out = host({"price": tf.constant([unit, 0.0]), "height": tf.constant([170.0, 180.0])})
    np.testing.assert_allclose(out["price"], [math.log(2), 0.0], rtol=1e-6)


def test_a_number_without_values_or_with_one_is_left_out():
    features = {
        "empty": InputFeature(name="empty", type="float"),
        "same": InputFeature(name="same", type="int"),
    }
    facts = _facts(numbers={"empty": [], "same": [3] * N, "x": RNG.normal(size=N)})
    features["x"] = InputFeature(name="x", type="float")
    assert _decide(features, facts).reasons == {"empty": NO_VALUE, "same": ONE_VALUE}


def test_an_int_of_few_values_is_also_a_category():
    hours = RNG.integers(0, 24, size=N)
    counts = RNG.integers(0, 500, size=N)
    features = {
        "hour": InputFeature(name="hour", type="int"),
        "count": InputFeature(name="count", type="int"),
    }
    recipe = _decide(features, _facts(numbers={"hour": hours, "count": counts}))
    assert [i.name for i in recipe.inputs] == ["hour", "hour__value", "count"]
    (code,) = [i for i in recipe.inputs if i.name == "hour__value"]
    assert (code.kind, code.vocabulary, code.width) == (CATEGORY, tuple(range(24)), 10)
    ids = HostPreprocessing([code])({"hour": tf.constant([0, 23, 99], tf.int64)})["hour__value"]
    assert ids.numpy().tolist() == [[1], [24], [0]]  # 0: a value train never held


def test_a_skewed_positive_label_is_learned_on_a_log_scale_and_served_in_its_units():
    grams = RNG.lognormal(8, 0.8, size=N)
    scale = label_scale(grams)
    assert scale.log and skewness(grams) > 1
    assert scale.mean == pytest.approx(np.log(grams).mean())
    z = label_encoder(InputFeature(name="g", type="float"), scale)(
        tf.constant(grams[:5], tf.float32)
    )
    np.testing.assert_allclose(to_label_units(z, scale), grams[:5], rtol=1e-4)
    # beyond the train range widened by a tenth (in the learned scale), answers are held there
    assert float(to_label_units(tf.constant([100.0]), scale)[0]) < grams.max() * 10
    symmetric = label_scale(RNG.normal(20, 5, size=N))
    assert not symmetric.log and symmetric.std == pytest.approx(5, rel=0.1)
    assert not label_scale(RNG.normal(0, 1, size=N) ** 3).log  # negative values: never


def test_a_regression_label_records_its_scale_and_train_mean():
    mass = RNG.normal(4200, 800, size=N)
    features = {
        "x": InputFeature(name="x", type="float"),
        "y": InputFeature(name="y", type="float"),
    }
    recipe = _decide(features, _facts(numbers={"x": RNG.normal(size=N), "y": mass}))
    assert recipe.task == "regression"
    assert recipe.label.train_mean == pytest.approx(mass.mean())
    assert recipe.metrics()["label_scale"]["log"] is False


def test_balanced_class_weights_weigh_each_class_by_its_rarity():
    features = {"x": InputFeature(name="x", type="float")}
    facts = _facts(numbers={"x": RNG.normal(size=N)})
    recipe = _decide(features, facts, class_weight="balanced")
    assert recipe.label.weights == pytest.approx((1000 / 1800, 1000 / 900, 1000 / 300))
    assert recipe.metrics()["class_weights"]["c"] == pytest.approx(1000 / 300)
    assert _decide(features, facts).label.weights is None
    assert recipe.label.majority == "a"


def test_include_and_exclude_name_features():
    features = {"x": InputFeature(name="x", type="float")}
    facts = _facts(numbers={"x": RNG.normal(size=N)})
    with pytest.raises(ManifestError, match="--include-features: no feature 'z'"):
        _decide(features, facts, include=("z",))
    with pytest.raises(ManifestError, match="--include-features: 'y' is the label"):
        _decide(features, facts, include=("y",))


def test_on_enough_records_a_number_is_also_read_in_pieces_of_its_train_quantiles():
    import dataclasses

    from trainer.keras.layers import Numbers

    values = np.arange(5000, dtype=np.float64)
    features = {"x": InputFeature(name="x", type="float")}
    few = _decide(features, _facts(numbers={"x": values[:1000]}))
    assert few.inputs[0].bins is None  # 1,000 train records: no pieces
    many = _decide(features, dataclasses.replace(_facts(numbers={"x": values}), train_records=5000))
    (x,) = many.inputs
    assert x.bins == tuple(np.quantile(values, np.linspace(0, 1, 9)))  # 8 pieces
    # the model's number layer: one standardized column, then its pieces, 0 … 1 … 1 across the
    # edges; a second number with fewer pieces is padded with pieces that stay 0
    layer = Numbers(
        widths=[1, 1], mean=[0.0, 0.0], variance=[1.0, 1.0],
        edges=[[0.0, 10.0, 20.0, 40.0], [0.0, 1.0]], presence=[-1, -1],
    )  # fmt: skip
    x = tf.constant([[-5.0], [5.0], [25.0], [99.0]])
    out = layer([[x, tf.constant([[0.5]] * 4)], []]).numpy()
    np.testing.assert_allclose(
        out[:, 2:5], [[0, 0, 0], [0.5, 0, 0], [1, 1, 0.25], [1, 1, 1]]
    )  # the first number's pieces
    np.testing.assert_allclose(out[:, 5:], [[0.5, 0, 0]] * 4)  # one piece, then padding
