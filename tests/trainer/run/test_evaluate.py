"""Per-class evaluation (trainer/run/evaluate.py) and its place in the run report."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tests.trainer.run.test_report import HISTORY, METRICS
from trainer import data
from trainer.run.evaluate import class_report, report_of
from trainer.run.report import render


def test_report_of_a_known_matrix():
    matrix = np.array([[5, 1, 0], [2, 3, 1], [0, 0, 0]])  # rows: true, columns: predicted
    report = report_of(matrix, ["a", "b", "c"])
    a, b, c = (report["per_class"][k] for k in "abc")
    assert (a["precision"], a["recall"], a["support"]) == (5 / 7, 5 / 6, 6)
    assert a["f1"] == pytest.approx(2 * (5 / 7) * (5 / 6) / (5 / 7 + 5 / 6))
    assert (b["precision"], b["recall"], b["support"]) == (3 / 4, 3 / 6, 6)
    assert c == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}  # never seen
    assert report["accuracy"] == 8 / 12
    assert report["macro_f1"] == pytest.approx((a["f1"] + b["f1"] + 0.0) / 3)
    assert report["confusion_matrix"] == {"classes": ["a", "b", "c"], "matrix": matrix.tolist()}


def test_class_report_counts_every_eval_record_against_what_the_model_predicts(dataset):
    """A model that predicts class (year id - 1) % 3: the matrix must be that of the rows."""
    inputs = data.inputs(str(dataset.root))
    year = tf_keras.Input(shape=(1,), dtype=tf.int32, name="year")
    predicted = tf_keras.layers.Lambda(lambda ids: tf.one_hot((ids[:, 0] - 1) % 3, 3))(year)
    model = tf_keras.Model({"year": year}, predicted)
    classes = ["Adelie", "Chinstrap", "Gentoo"]
    years = [2007, 2008, 2009]  # the feature's values: ids 1, 2, 3

    report = class_report(model, inputs.dataset("eval", 16, shuffle=False), classes)

    expected = np.zeros((3, 3), dtype=int)
    for row in dataset.rows["eval"]:
        expected[classes.index(row["species"]), years.index(row["year"])] += 1
    assert report["confusion_matrix"]["matrix"] == expected.tolist()
    assert sum(c["support"] for c in report["per_class"].values()) == len(dataset.rows["eval"])


def test_the_run_report_shows_the_classes_and_the_confusion_matrix():
    matrix = np.array([[5, 1], [2, 3]])
    page = render({**METRICS, "eval_classes": report_of(matrix, ["cat", "<dog>"])}, HISTORY)
    assert "<h2>Evaluation by class</h2>" in page
    assert "<td>&lt;dog&gt;</td>" in page and '<th class="n">&lt;dog&gt;</th>' in page
    assert 'data-value="5"' in page and 'data-value="0.7142857142857143"' in page


def test_regression_summary_gives_mae_rmse_r2_and_the_baseline_of_the_train_mean():
    from trainer.recipe.words import LabelScale
    from trainer.run.evaluate import regression_summary

    y, predicted = np.array([1.0, 2.0, 3.0, 6.0]), np.array([1.5, 2.0, 2.0, 6.0])
    summary = regression_summary(y, predicted, train_mean=2.5, scale=LabelScale(2.5, 2.0))
    assert summary["records"] == 4
    assert summary["mae"] == pytest.approx(0.375)
    assert summary["rmse"] == pytest.approx(np.sqrt((0.25 + 0 + 1 + 0) / 4))
    assert summary["r2"] == pytest.approx(1 - 1.25 / ((y - y.mean()) ** 2).sum())
    assert summary["baseline_mae"] == pytest.approx((1.5 + 0.5 + 0.5 + 3.5) / 4)
    assert summary["baseline_rmse"] == pytest.approx(np.sqrt((2.25 + 0.25 + 0.25 + 12.25) / 4))
    assert summary["loss"] == pytest.approx(np.mean(((predicted - y) / 2.0) ** 2))


CLASSIFIED = {
    "task": "classification",
    "train": {"accuracy": 0.98, "loss": 0.1},
    "eval": {"accuracy": 0.95, "baseline_accuracy": 0.5, "loss": 0.2},
    "test": {"accuracy": 0.5, "baseline_accuracy": 0.5, "loss": 0.7},
    "test_classes": {"never_predicted": ["snow", "fog"]},
}


def test_warnings_name_a_model_no_better_than_its_baseline_and_a_class_never_predicted():
    from trainer.run.evaluate import warnings_of

    assert warnings_of(CLASSIFIED) == [
        "test: the model is not better than the baseline: accuracy 0.5000, always answering "
        "the majority class 0.5000",
        "test: the model never predicts 'snow', 'fog', which test holds (--class-weight balanced)",
    ]
    fine = {**CLASSIFIED, "test": CLASSIFIED["eval"], "test_classes": {}}
    assert warnings_of(fine) == []


def test_warnings_name_overfitting_by_the_task_s_metric():
    from trainer.run.evaluate import warnings_of

    overfit = {**CLASSIFIED, "train": {"accuracy": 0.99}, "eval": {"accuracy": 0.6},
               "test": {}, "test_classes": {}}  # fmt: skip
    (warning,) = warnings_of(overfit)
    assert warning.startswith("overfitting: train accuracy 0.9900, eval 0.6000")
    regression = {"task": "regression", "train": {"mae": 2.0},
                  "eval": {"mae": 4.0, "baseline_mae": 3.0}}  # fmt: skip
    assert [w.split(":")[0] for w in warnings_of(regression)] == ["eval", "overfitting"]


def test_the_run_report_shows_the_warnings_in_its_banner():
    page = render({**METRICS, "warnings": ["test: the model never predicts 'fog' <!>"]}, HISTORY)
    assert '<div class="banner" id="warnings">' in page
    assert "the model never predicts &#x27;fog&#x27; &lt;!&gt;" in page


def test_balanced_class_weights_come_with_each_training_example(dataset):
    inputs = data.inputs(str(dataset.root))
    from trainer.dataset.manifest import load_manifest
    from trainer.keras.inputs import Inputs

    weighted = Inputs.of(load_manifest(str(dataset.root)), class_weight="balanced")
    weights = np.array(weighted.recipe.label.weights)
    counts = weighted.recipe.label.counts
    classes = weighted.recipe.label.classes
    total = sum(counts.values())
    np.testing.assert_allclose(weights, [total / (3 * counts[c]) for c in classes])
    _, labels, given = next(iter(weighted.dataset("train", 32, shuffle=False, weighted=True)))
    np.testing.assert_allclose(given.numpy(), weights[labels.numpy()])
    assert len(next(iter(inputs.dataset("train", 32, shuffle=False, weighted=True)))) == 2
