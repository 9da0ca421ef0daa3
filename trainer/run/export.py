"""Exports the trained model as a SavedModel that serves raw serialized tf.train.Example.

The `serving_default` signature takes `examples` (a 1-D string tensor of serialized Examples
with the raw features; the label is not needed), parses them with the manifest's spec minus the
label, densifies them with `trainer.keras.features.dense_inputs`, applies the host preprocessing of
`trainer.keras.preprocess` (lookups, hashing) and calls the model: training and serving share one
code path and cannot drift apart.
Classification returns `probabilities` [batch, classes] and `classes` [batch] (the predicted
value of the label's `values`); regression returns `predictions` [batch] in the label's own
units: the model predicts the standardized label (trainer.keras.features.LabelScale), which the
signature brings back (un-standardized, exponentiated on a log scale, kept within the train
range widened by a tenth: trainer.keras.model.to_label_units).

With a tf.Transform output, `examples` are parsed with the transform's raw feature spec (minus
the label) and go through its `transform_features_layer()` before the model. The layer is an
attribute of the exported module, so the transform graph and its assets (vocabulary files) are
saved inside the export, which no longer needs the dataset's transform/ folder. A second
signature, `transform_features`, takes the same `examples` and returns the dense model inputs
the transform yields: what the model sees, for checking training/serving skew.

What the outputs mean travels with the export in `assets.extra/label.json` (`LABEL_FILE`): the
label's name, the task, for classification the class names in the order of `probabilities`'
columns, for regression the label's scale; and the raw features the signature parses (`inputs`:
name, type and shape), which `shardflow predict` compares with a config's.
`trainer.keras.served` names them and reads the label file back (`served_label`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import tensorflow as tf
import tf_keras

from trainer.dataset.manifest import InputFeature
from trainer.keras.features import ParseSpec, dense_inputs, parse_spec
from trainer.keras.inputs import Inputs
from trainer.keras.model import to_label_units
from trainer.keras.served import LABEL_FILE, SIGNATURE, TRANSFORM_SIGNATURE
from trainer.keras.transform import Transform
from trainer.recipe.words import CLASSIFICATION, LabelScale, dtype_of

_EXAMPLES = tf.TensorSpec([None], tf.string, name="examples")


@dataclass(frozen=True)
class _Serving:
    # A plain object, so tf.Module does not wrap the spec's dicts and tuples for tracking.
    spec: ParseSpec
    features: dict[str, InputFeature]
    classes: tuple[str | int, ...] | None
    classes_dtype: tf.DType
    transform: Transform | None
    scale: LabelScale | None  # regression


class ServingModule(tf.Module):
    """Wraps the model with the raw-Example parsing (and transform) of the serving signature.

    `inputs` are those the model was trained on: the same model inputs, transform and label.
    """

    def __init__(self, model: tf_keras.Model, inputs: Inputs):
        super().__init__(name="shardflow_serving")
        self.model = model
        # Tracked as an attribute: saving keeps its vocabularies.
        self.host_preprocessing = inputs.host.model
        recipe, transform = inputs.recipe, inputs.transform
        label = recipe.label
        if transform is None:
            sources = {i.feature.name for i in recipe.inputs}
            spec = parse_spec(inputs.manifest, include_label=False, only=sources)
        else:
            # Tracked as an attribute: saving copies the transform graph and its assets.
            self.transform_layer = transform.layer
            spec = transform.serving_spec()
            self.transform_features = tf.function(self._model_inputs, input_signature=[_EXAMPLES])
        self._serving = _Serving(
            spec=spec,
            features=dict(inputs.manifest.features),
            classes=label.classes,
            classes_dtype=dtype_of(label.feature),
            transform=transform,
            scale=label.scale,
        )

    def _model_inputs(self, examples: tf.Tensor) -> dict[str, tf.Tensor]:
        """The model inputs of a batch of serialized raw tf.train.Example: parsed, densified
        (or transformed), then the host preprocessing, as in training."""
        serving = self._serving
        parsed = tf.io.parse_example(examples, serving.spec)
        if serving.transform is None:
            dense = dense_inputs(parsed, serving.features)
        else:
            dense = serving.transform.model_inputs(self.transform_layer(parsed))
        return self.host_preprocessing(dense)

    @tf.function(input_signature=[_EXAMPLES])
    def serve(self, examples: tf.Tensor) -> dict[str, tf.Tensor]:
        """Predictions for a batch of serialized raw tf.train.Example."""
        serving = self._serving
        outputs = self.model(self._model_inputs(examples), training=False)
        if serving.classes is None:
            if outputs.shape.rank == 2:  # a model of your own may predict [batch, 1]
                outputs = tf.squeeze(outputs, axis=-1)
            if serving.scale is not None:
                outputs = to_label_units(outputs, serving.scale)
            return {"predictions": outputs}
        classes = tf.constant(list(serving.classes), dtype=serving.classes_dtype)
        return {
            "probabilities": outputs,
            "classes": tf.gather(classes, tf.argmax(outputs, axis=-1)),
        }

    def signatures(self) -> Mapping[str, tf.types.experimental.ConcreteFunction]:
        """The signatures to export: serving_default, and transform_features with a transform."""
        signatures = {SIGNATURE: self.serve.get_concrete_function()}
        if self._serving.transform is not None:
            signatures[TRANSFORM_SIGNATURE] = self.transform_features.get_concrete_function()
        return signatures


def export_model(model: tf_keras.Model, inputs: Inputs, export_dir: str) -> str:
    """Writes the SavedModel of `model`, trained on `inputs`, to `export_dir`, replacing an
    earlier export; returns the path."""
    if tf.io.gfile.exists(export_dir):
        tf.io.gfile.rmtree(export_dir)
    module = ServingModule(model, inputs)
    tf.saved_model.save(module, export_dir, signatures=module.signatures())
    recipe = inputs.recipe
    label: dict[str, object] = {"name": recipe.label.name, "task": recipe.task}
    if recipe.task == CLASSIFICATION:
        assert recipe.label.classes is not None  # a classification's (trainer.recipe.label)
        label["classes"] = list(recipe.label.classes)
    else:
        assert recipe.label.scale is not None  # a regression's (trainer.recipe.label)
        label["scale"] = recipe.label.scale.to_dict()
    label["inputs"] = served_inputs(module._serving.spec, inputs.manifest.features)
    tf.io.gfile.makedirs(f"{export_dir}/{LABEL_FILE.rsplit('/', 1)[0]}")
    with tf.io.gfile.GFile(f"{export_dir}/{LABEL_FILE}", "w") as f:
        f.write(json.dumps(label, indent=1) + "\n")
    return export_dir


def served_inputs(spec: ParseSpec, features: Mapping[str, InputFeature]) -> dict:
    """The raw features a serving signature parses: name -> {"type", "shape"}."""
    out = {}
    for name in sorted(spec):
        feature = features.get(name)
        if feature is not None:
            out[name] = {"type": feature.type, "shape": list(feature.shape)}
    return out
