"""Per-class evaluation (trainer/evaluate.py) and its place in the run report."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tests.trainer.test_report import HISTORY, METRICS
from trainer import data
from trainer.evaluate import class_report, report_of
from trainer.report import render


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
