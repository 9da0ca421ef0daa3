"""Per-class evaluation of a classifier: precision, recall, F1 and the confusion matrix.

After training, the eval split is read once more (every record once, in file order) and the
model's predicted class (the most probable) is counted against the true one. Rows of the
confusion matrix are the true classes, columns the predicted ones, in the order of the label's
classes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tf_keras


def class_report(
    model: tf_keras.Model, dataset: tf.data.Dataset, classes: Sequence[str | int]
) -> dict:
    """The per-class metrics and the confusion matrix of `model` over `dataset`'s batches of
    (model inputs, class index)."""
    n = len(classes)
    matrix = np.zeros((n, n), dtype=np.int64)
    predict = tf.function(lambda features: tf.argmax(model(features, training=False), axis=-1))
    for features, labels in dataset:
        predicted = predict(features).numpy()
        np.add.at(matrix, (labels.numpy().astype(np.int64), predicted), 1)
    return report_of(matrix, classes)


def report_of(matrix: np.ndarray, classes: Sequence[str | int]) -> dict:
    """Precision, recall, F1 and support per class, their macro average and the matrix."""
    per_class = {}
    for i, name in enumerate(classes):
        tp = int(matrix[i, i])
        predicted, actual = int(matrix[:, i].sum()), int(matrix[i, :].sum())
        precision = tp / predicted if predicted else 0.0
        recall = tp / actual if actual else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[str(name)] = {
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "support": actual,
        }
    total = int(matrix.sum())
    return {
        "per_class": per_class,
        "macro_f1": float(np.mean([c["f1"] for c in per_class.values()])) if per_class else 0.0,
        "accuracy": float(np.trace(matrix) / total) if total else 0.0,
        "confusion_matrix": {"classes": [str(c) for c in classes], "matrix": matrix.tolist()},
    }
