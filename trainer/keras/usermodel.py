"""Bring your own model: `shardflow train --model-module my_model.py`.

The file (a local path or gs://) defines `build_model(spec)` and returns a Keras model (tf_keras,
Keras 2: the Keras of tf.Transform's serving layer, `spec.keras`) that takes the dict of
`spec.inputs` (or some of them) and returns, for a classification, the probabilities of
`spec.label.classes` [batch, classes] (softmax), for a regression the standardized prediction
[batch] or [batch, 1] (see `label.scale`). `spec` is a `ModelSpec`:

- `inputs`: name -> a fresh `keras.Input` of each model input, already numeric (the host
  preprocessing of trainer.keras.preprocess did the lookups and hashing);
- `features`: name -> its `trainer.keras.preprocess.ModelInput` (kind, dtype, shape, vocabulary
size);
- `moments`: name -> mean and variance of each NUMBER input over the train split, to normalize
  with (a skewed number arrives on its log scale, a date as its parts: trainer.recipe.kinds);
- `label`: name, task (`classification` or `regression`), classes and, for a regression,
  `scale`: the model predicts the standardized label, (y - scale.mean) / scale.std (of log(y)
  when `scale.log`), which the export turns back into the label's units;
- `keras`: the Keras module to build with.

A model returned uncompiled is compiled like the built-in one (Adam at `--learning-rate`, the
task's loss and metric, the accelerator settings); a compiled model is kept as it is. Built in
the strategy's scope and under the run's mixed-precision policy; everything else (input
pipeline, checkpoints, export serving raw examples, report) is the same as for the built-in
model.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import tensorflow as tf
import tf_keras

from trainer.dataset.manifest import ManifestError, read_file
from trainer.keras.preprocess import LayerNames, keras_input
from trainer.recipe.words import ModelInput
from transforms.ui.errors import UsageError

MODULE_NAME = "shardflow_user_model"


@dataclass(frozen=True)
class LabelSpec:
    """What the model predicts."""

    name: str
    task: str  # "classification" or "regression"
    classes: tuple[str | int, ...] | None  # classification: the class of each output unit
    scale: object | None = None  # regression: trainer.recipe.label.LabelScale

    @property
    def units(self) -> int:
        """Output units: one per class, or 1 for a regression."""
        return len(self.classes) if self.classes else 1


@dataclass(frozen=True)
class ModelSpec:
    """What `build_model(spec)` of a model module receives (see the module's docstring)."""

    inputs: dict[str, tf.Tensor]
    features: dict[str, ModelInput]
    moments: Mapping[str, object]
    label: LabelSpec
    keras: types.ModuleType


def user_spec(
    inputs: Sequence[ModelInput],
    label: str,
    task: str,
    classes: Sequence[str | int] | None,
    scale: object | None = None,
) -> ModelSpec:
    """The spec a model module's `build_model` receives, with fresh Keras Inputs; `inputs` are
    the recipe's, their moments computed."""
    return ModelSpec(
        inputs={i.name: keras_input(i, LayerNames.base(i.name)) for i in inputs},
        features={i.name: i for i in inputs},
        moments={i.name: i.moments for i in inputs if i.moments is not None},
        label=LabelSpec(label, task, tuple(classes) if classes is not None else None, scale),
        keras=tf_keras,
    )


def load_module(path: str) -> types.ModuleType:
    """The model module at `path` (local or gs://); UsageError naming what is wrong."""
    if not tf.io.gfile.exists(path):
        raise UsageError(f"--model-module: no file {path}")
    try:
        source = read_file(path, 16 << 20, None, "a model's author").decode("utf-8")
    except (ManifestError, UnicodeDecodeError) as e:
        raise UsageError(f"--model-module: {e}") from None
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = path
    try:
        exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - the user's own code
    except Exception as e:
        raise UsageError(f"--model-module {path}: {type(e).__name__}: {e}") from e
    if not callable(getattr(module, "build_model", None)):
        raise UsageError(f"--model-module {path}: defines no build_model(spec) function")
    return module


def build_user_model(module: types.ModuleType, spec: ModelSpec) -> tf_keras.Model:
    """Calls the module's build_model(spec) and checks what it returns."""
    path = getattr(module, "__file__", MODULE_NAME)
    try:
        model = module.build_model(spec)
    except Exception as e:
        raise UsageError(
            f"--model-module {path}: build_model(spec) failed: {type(e).__name__}: {e}"
        ) from e
    if not isinstance(model, tf_keras.Model):
        kind = type(model).__module__ + "." + type(model).__name__
        hint = (
            " (a Keras 3 model? build with spec.keras, which is tf_keras)"
            if "keras" in kind
            else ""
        )
        raise UsageError(
            f"--model-module {path}: build_model(spec) returned a {kind}, not a tf_keras "
            f"Model{hint}"
        )
    unknown = sorted(set(_input_names(model)) - set(spec.inputs))
    if unknown:
        raise UsageError(
            f"--model-module {path}: the model takes input(s) {', '.join(unknown)} that are not "
            f"model inputs (spec.inputs: {', '.join(spec.inputs)})"
        )
    return model


def _input_names(model: tf_keras.Model) -> list[str]:
    inputs = model.input if isinstance(model.input, dict) else None
    return list(inputs) if inputs is not None else []
