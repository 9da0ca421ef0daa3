"""The evaluation of a trained model on a split, in the label's own units, beside the baseline.

After training, each evaluated split (eval, test) is read once more (every record that holds
the label, once, in file order). A classifier's predicted class (the most probable) is counted
against the true one: accuracy, per-class precision, recall and F1, the confusion matrix (rows
the true classes, columns the predicted ones, in the order of the label's classes), the classes
it never predicts, and the baseline's accuracy: always answering the majority class of train.
A regression's predictions are brought back to the label's units (trainer.keras.model.
to_label_units): MAE, RMSE and R², and the baseline's MAE and RMSE: always answering the train
mean.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from trainer.keras.model import to_label_units
from trainer.recipe.rules import Recipe
from trainer.recipe.words import CLASSIFICATION


def evaluate_split(model: tf_keras.Model, dataset: tf.data.Dataset, recipe: Recipe) -> dict:
    """{"summary": the split's metrics beside the baseline's, and for a classifier "classes":
    its `class_report`} of `model` over `dataset`'s batches of (model inputs, target): the
    class index of a classification, the label itself (not standardized) of a regression."""
    label = recipe.label
    predict = tf.function(lambda features: model(features, training=False))
    if recipe.task == CLASSIFICATION:
        assert label.classes is not None  # a classification's (trainer.recipe.label)
        classes = list(label.classes)
        n = len(classes)
        matrix = np.zeros((n, n), dtype=np.int64)
        loss = 0.0
        for features, targets in dataset:
            probabilities = predict(features).numpy().astype(np.float64)
            truth = targets.numpy().astype(np.int64)
            np.add.at(matrix, (truth, probabilities.argmax(axis=-1)), 1)
            chosen = probabilities[np.arange(len(truth)), truth]
            loss -= float(np.log(np.clip(chosen, 1e-7, 1.0)).sum())
        report = report_of(matrix, classes)
        records = int(matrix.sum())
        majority = classes.index(label.majority) if label.majority is not None else 0
        summary = {
            "records": records,
            "loss": loss / records if records else 0.0,
            "accuracy": report["accuracy"],
            "baseline_accuracy": float(matrix[majority].sum() / records) if records else 0.0,
            "macro_f1": report["macro_f1"],
        }
        report["never_predicted"] = [
            str(c) for i, c in enumerate(classes) if matrix[i].sum() and not matrix[:, i].sum()
        ]
        return {"summary": summary, "classes": report}
    scale, train_mean = label.scale, label.train_mean
    assert scale is not None and train_mean is not None  # a regression's (trainer.recipe.label)
    predicted, actual = [], []
    for features, targets in dataset:
        predicted.append(to_label_units(tf.reshape(predict(features), [-1]), scale).numpy())
        actual.append(targets.numpy())
    y_pred = np.concatenate(predicted).astype(np.float64) if predicted else np.zeros(0)
    y = np.concatenate(actual).astype(np.float64) if actual else np.zeros(0)
    return {"summary": regression_summary(y, y_pred, train_mean, scale)}


def regression_summary(y: np.ndarray, y_pred: np.ndarray, train_mean: float, scale) -> dict:
    """MAE, RMSE and R² of `y_pred` against `y`, and the baseline's (always `train_mean`)."""
    if not len(y):
        return {"records": 0}
    error = y_pred - y
    total = float(((y - y.mean()) ** 2).sum())
    learned = np.log(np.maximum(y, 1e-30)) if scale.log else y
    learned_pred = np.log(np.maximum(y_pred, 1e-30)) if scale.log else y_pred
    return {
        "records": int(len(y)),
        "loss": float(np.mean(((learned_pred - learned) / scale.std) ** 2)),
        "mae": float(np.abs(error).mean()),
        "rmse": float(np.sqrt((error**2).mean())),
        "r2": 1.0 - float((error**2).sum()) / total if total > 0 else 0.0,
        "baseline_mae": float(np.abs(y - train_mean).mean()),
        "baseline_rmse": float(np.sqrt(((y - train_mean) ** 2).mean())),
    }


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


# A model that learns more of train than it generalizes: train accuracy this far above eval's,
# or an eval MAE this many times train's (at the kept epoch).
OVERFIT_ACCURACY_GAP = 0.1
OVERFIT_MAE_RATIO = 1.5


def warnings_of(metrics: dict) -> list[str]:
    """What a reader of a run's metrics.json should not miss, one sentence each: a model not
    better than the baseline on a split, train and eval far apart (overfitting), classes the
    model never predicts."""
    found = []
    classification = metrics.get("task") == CLASSIFICATION
    for split in ("eval", "test"):
        scored = metrics.get(split) or {}
        if classification and "baseline_accuracy" in scored:
            if scored["accuracy"] <= scored["baseline_accuracy"]:
                found.append(
                    f"{split}: the model is not better than the baseline: accuracy "
                    f"{scored['accuracy']:.4f}, always answering the majority class "
                    f"{scored['baseline_accuracy']:.4f}"
                )
        elif "baseline_mae" in scored and scored["mae"] >= scored["baseline_mae"]:
            found.append(
                f"{split}: the model is not better than the baseline: MAE {scored['mae']:.4g}, "
                f"always answering the train mean {scored['baseline_mae']:.4g}"
            )
    train, held = metrics.get("train") or {}, metrics.get("eval") or {}
    if classification and "accuracy" in train and "accuracy" in held:
        if train["accuracy"] - held["accuracy"] > OVERFIT_ACCURACY_GAP:
            found.append(
                f"overfitting: train accuracy {train['accuracy']:.4f}, eval "
                f"{held['accuracy']:.4f}: the model learns the train records more than what "
                "generalizes (fewer inputs, --exclude-features, or more data)"
            )
    elif "mae" in train and "mae" in held and held["mae"] > OVERFIT_MAE_RATIO * train["mae"]:
        found.append(
            f"overfitting: train MAE {train['mae']:.4g}, eval {held['mae']:.4g}: the model "
            "learns the train records more than what generalizes (fewer inputs, "
            "--exclude-features, or more data)"
        )
    for split in ("eval", "test"):
        never = (metrics.get(f"{split}_classes") or {}).get("never_predicted") or []
        if never:
            hint = "" if metrics.get("class_weights") else " (--class-weight balanced)"
            found.append(
                f"{split}: the model never predicts {', '.join(repr(c) for c in never)}, "
                f"which {split} holds{hint}"
            )
            break
    return found
