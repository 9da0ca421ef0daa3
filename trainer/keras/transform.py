"""The dataset's tf.Transform output, as the trainer reads, applies and exports it.

When the manifest declares a `transform`, the ETL analyzed the train split with tf.Transform and
wrote its output (transform_fn/, transformed_metadata/ and the raw metadata/) under the dataset.
The trainer then reads the shards with the transform's own specs: raw shards with its raw feature
spec, the label taken from that raw parse and every other feature passed through
`transform_features_layer()`; shards materialized as transformed examples with its transformed
feature spec, without the layer. The model's features are the transform's outputs, described
from `transformed_feature_spec()` (see `output_features`). The export reuses the same layer on
parsed raw examples, so training and serving apply one transform graph.

`tensorflow_transform` is imported only here and only when a dataset has a transform; importing
it does not import Apache Beam (only `tensorflow_transform.beam` does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from trainer.dataset.manifest import InputFeature, Manifest, ManifestError
from trainer.dataset.paths import join
from trainer.keras.features import dense_inputs
from trainer.recipe.words import dtype_of
from transforms.contract.manifest import TransformEntry

_TYPES = {tf.int64: "int", tf.float32: "float", tf.string: "string"}
Parsed = Mapping[str, tf.Tensor | tf.SparseTensor | tf.RaggedTensor]


@dataclass(frozen=True)
class Transform:
    """A loaded transform output and the model features it yields.

    `features` holds one InputFeature per transform output fed to the model (the label's output
    left out) plus the label as the manifest declares it: the label is never transformed.
    """

    spec: TransformEntry
    output: Any  # tensorflow_transform.TFTransformOutput
    raw_spec: dict
    transformed_spec: dict
    features: dict[str, InputFeature]
    label: str | None
    used: tuple[str, ...] = ()  # the outputs that are model inputs (trainer.recipe.rules)

    @property
    def materialized(self) -> bool:
        """True when the shards hold transformed examples."""
        return self.spec.materialize == "transformed"

    @property
    def layer(self) -> Any:
        """The transform as a tf_keras layer (one instance, shared by training and export)."""
        return self.output.transform_features_layer()

    def read_spec(self) -> dict:
        """The parse spec of the split shards, label included."""
        return dict(self.transformed_spec if self.materialized else self.raw_spec)

    def serving_spec(self) -> dict:
        """The parse spec of a served raw example: the raw spec without the label."""
        return {n: s for n, s in self.raw_spec.items() if n != self.label}

    def preprocess(self, parsed: Parsed) -> dict[str, tf.Tensor]:
        """Dense model inputs of a batch parsed with `read_spec`, the label removed."""
        transformed = parsed if self.materialized else self.layer(dict(parsed))
        return self.model_inputs(transformed)

    def model_inputs(self, transformed: Parsed) -> dict[str, tf.Tensor]:
        """The dense model inputs among the transform's outputs (see features.dense_inputs):
        those of `used` (trainer.recipe.rules), every output but the label's by default."""
        names = self.used or tuple(n for n in self.features if n != self.label)
        used = [self.features[n] for n in names]
        missing = [f.name for f in used if f.name not in transformed]
        if missing:
            raise ManifestError(
                f"{self.spec.path}: transform output(s) {', '.join(missing)} cannot be computed "
                f"without the label {self.label!r}, which served examples do not hold"
            )
        return dense_inputs({f.name: transformed[f.name] for f in used}, self.features)


def load_transform(manifest: Manifest) -> Transform | None:
    """The dataset's transform, or None when it has none; ManifestError if it cannot be read."""
    if manifest.transform is None:
        return None
    spec = manifest.transform
    try:
        import tensorflow_transform as tft
    except ImportError:
        raise ManifestError(
            f"{manifest.root}: the dataset has a tf.Transform output; reading it needs the "
            "tensorflow-transform package, which is not installed"
        ) from None
    for part in ("transform_fn", "transformed_metadata", "metadata"):
        if not tf.io.gfile.isdir(join(spec.path, part)):
            raise ManifestError(f"{spec.path}: not a complete tf.Transform output (no {part}/)")
    output = tft.TFTransformOutput(spec.path)
    raw_spec = output.raw_feature_spec()
    transformed_spec = output.transformed_feature_spec()
    label = manifest.label
    read = transformed_spec if spec.materialize == "transformed" else raw_spec
    kind = "transformed" if spec.materialize == "transformed" else "raw"
    if label is not None and label not in read:
        raise ManifestError(f"{spec.path}: the {kind} feature spec has no label {label!r}")
    features = output_features(
        transformed_spec, manifest.features, label, lambda name: _buckets(output, name)
    )
    return Transform(
        spec=spec,
        output=output,
        raw_spec=raw_spec,
        transformed_spec=transformed_spec,
        features=features,
        label=label,
    )


def output_features(
    transformed_spec: Mapping[str, Any],
    raw_features: Mapping[str, InputFeature],
    label: str | None,
    buckets: Callable[[str], int | None],
) -> dict[str, InputFeature]:
    """Describes each transform output (the label's left out) as a model feature.

    A float output is numeric; an int output with a known number of buckets is a category id
    (embedded, or one-hot, with exactly `buckets` slots), other ints are numeric; a string
    output is a category. A FixedLenFeature output has its spec's shape. A sparse output is
    variable-length, unless the raw feature of the same name and dtype is an optional
    fixed-shape one (a pass-through): it then keeps that shape and, if numeric, a presence
    input. An output of the same name and dtype as a raw feature keeps its type (image and
    bytes stay out of the model) and, unless it has buckets, its `values`.
    """
    features: dict[str, InputFeature] = {}
    for name, spec in transformed_spec.items():
        if name == label:
            continue
        kind = _TYPES.get(spec.dtype)
        if kind is None:
            raise ManifestError(
                f"transform output {name!r}: dtype {spec.dtype.name} is not int64, float32 "
                "or string"
            )
        raw = raw_features.get(name)
        if raw is not None and dtype_of(raw) != spec.dtype:
            raw = None
        slots = buckets(name) if kind == "int" else None
        values = raw.values if raw is not None and slots is None else None
        if isinstance(spec, tf.io.FixedLenFeature):
            shape, required = tuple(spec.shape), True
        elif isinstance(spec, tf.io.VarLenFeature) or (
            isinstance(spec, tf.io.RaggedFeature) and not spec.partitions
        ):
            passthrough = raw is not None and not raw.variable_length and not raw.always_full
            shape, required = (raw.shape if passthrough and raw is not None else (None,)), False
        else:
            raise ManifestError(
                f"transform output {name!r}: {type(spec).__name__} outputs are not supported "
                "(use dense or variable-length outputs)"
            )
        features[name] = InputFeature(
            name=name,
            type=raw.type if raw is not None else kind,
            shape=shape,
            required=required,
            values=values,
            buckets=slots,
        )
    if label is not None:
        features[label] = raw_features[label]
    return features


def _buckets(output: Any, name: str) -> int | None:
    try:
        return output.num_buckets_for_transformed_feature(name)
    except ValueError:  # no int domain starting at 0: not a category id
        return None
