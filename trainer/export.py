"""Exports the trained model as a SavedModel that serves raw serialized tf.train.Example.

The `serving_default` signature takes `examples` (a 1-D string tensor of serialized Examples
with the raw features; the label is not needed), parses them with the manifest's spec minus the
label, densifies them with `trainer.features.dense_inputs` and calls the model, whose first
layers do the preprocessing: training and serving share one code path and cannot drift apart.
Classification returns `probabilities` [batch, classes] and `classes` [batch] (the predicted
value of the label's `values`); regression returns `predictions` [batch].
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf
import tf_keras

from trainer.features import (
    CLASSIFICATION,
    ParseSpec,
    dense_inputs,
    dtype_of,
    label_task,
    parse_spec,
)
from trainer.manifest import FeatureSpec, Manifest
from trainer.model import model_features

SIGNATURE = "serving_default"


@dataclass(frozen=True)
class _Serving:
    # A plain object, so tf.Module does not wrap the spec's dicts and tuples for tracking.
    spec: ParseSpec
    features: dict[str, FeatureSpec]
    classes: tuple[str | int, ...] | None
    classes_dtype: tf.DType


class ServingModule(tf.Module):
    """Wraps the model with the raw-Example parsing of the serving signature."""

    def __init__(self, model: tf_keras.Model, manifest: Manifest):
        super().__init__(name="shardflow_serving")
        self.model = model
        used, _ = model_features(manifest.features, manifest.label)
        label = manifest.features[manifest.label]
        self._serving = _Serving(
            spec=parse_spec(manifest, include_label=False, only=[f.name for f in used]),
            features={f.name: f for f in used},
            classes=label.values if label_task(label) == CLASSIFICATION else None,
            classes_dtype=dtype_of(label),
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(self, examples: tf.Tensor) -> dict[str, tf.Tensor]:
        """Predictions for a batch of serialized raw tf.train.Example."""
        serving = self._serving
        parsed = tf.io.parse_example(examples, serving.spec)
        outputs = self.model(dense_inputs(parsed, serving.features), training=False)
        if serving.classes is None:
            return {"predictions": outputs}
        classes = tf.constant(list(serving.classes), dtype=serving.classes_dtype)
        return {
            "probabilities": outputs,
            "classes": tf.gather(classes, tf.argmax(outputs, axis=-1)),
        }


def export_model(model: tf_keras.Model, manifest: Manifest, export_dir: str) -> str:
    """Writes the SavedModel to `export_dir`, replacing an earlier export; returns the path."""
    if tf.io.gfile.exists(export_dir):
        tf.io.gfile.rmtree(export_dir)
    module = ServingModule(model, manifest)
    tf.saved_model.save(
        module, export_dir, signatures={SIGNATURE: module.serve.get_concrete_function()}
    )
    return export_dir
