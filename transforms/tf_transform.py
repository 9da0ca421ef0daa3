"""tf.Transform preprocessing: analyze the train split, write the transform, apply it.

The raw input of the transform is exactly what a serving client sends: the dataset's features,
label included, parsed with the spec `raw_feature_spec` derives from the config (FixedLenFeature
for features every example holds: required or defaulted, scalar or fixed shape; VarLenFeature for
optional features without default and variable-length lists). `preprocessing_fn` is built from
the config's declarative ops (`transform.features`) or loaded from the user's module
(`transform.module`); either way every output keeps its feature's name and the label passes
through unchanged.

`TransformFeatures` wires it into the ETL: the records of the `train` split (without the
duplicates of a key the writer drops, so the statistics are those of the written split) are
decoded into Arrow record batches with tfx-bsl's TFXIO decoder, `tft_beam.AnalyzeDataset`
computes the statistics, and STAGING/transform/ gets `transform_fn/`, `transformed_metadata/`
and the raw `metadata/`. With `materialize: transformed`, every chunk of every split is then
transformed by the written transform (the same parse and layer a serving model uses) and
re-encoded, keeping each record's split, order hash and key, so shards stay deterministic.

This module imports TensorFlow (seconds, hundreds of MB): `pipelines.etl` imports it only for
configs with a `transform`.

Longer than most modules because tf.Transform's analysis and its application (to the records
that the shards then hold) share the raw schema, the preprocessing function and the shard
routing; it is the one module of the ETL that imports TensorFlow, and only runs that need it
import it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from apache_beam.io.filesystems import FileSystems
from tensorflow_transform import schema_inference
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils
from tfx_bsl.coders import example_coder
from tfx_bsl.tfxio import tf_example_record

from transforms import encode
from transforms.contract.config import (
    FEATURE_DTYPES,
    TRAIN_SPLIT,
    DatasetSpec,
    FeatureSpec,
    TransformOp,
)
from transforms.contract.layout import TRANSFORM_DIR
from transforms.files import is_remote
from transforms.records import EncodedChunk
from transforms.shards import route_chunk, shard_counts, sorted_records

logger = logging.getLogger(__name__)

RAW_METADATA_DIR = tft.TFTransformOutput.RAW_METADATA_DIR  # "metadata"
TEMP_DIR = ".transform-tmp"  # under the staging folder; deleted before publication
BATCH_ROWS = 1024  # rows per record batch: bounds the memory of decoded images

_ZERO = {"int": 0, "float": 0.0, "string": b"", "bytes": b"", "image": b""}
_TYPE_NAMES = {tf.int64: "int", tf.float32: "float", tf.string: "string"}


class TransformError(ValueError):
    """The user's preprocessing cannot be used; the message names `transform.module`."""


def raw_feature_spec(features: tuple[FeatureSpec, ...]) -> dict[str, Any]:
    """The tf.io parse spec of the raw examples (what a serving client sends), label included."""
    spec: dict[str, Any] = {}
    for f in features:
        always_full = f.shape != (None,) and (f.required or f.default is not None)
        if always_full:
            spec[f.name] = tf.io.FixedLenFeature(list(f.shape), _dtype(f))
        else:
            spec[f.name] = tf.io.VarLenFeature(_dtype(f))
    return spec


def _dtype(feature: FeatureSpec) -> tf.DType:
    """The tensor dtype of a feature, the one the trainer parses it as."""
    return tf.as_dtype(FEATURE_DTYPES[feature.type])


def raw_schema(features: tuple[FeatureSpec, ...]):
    """The TFMD schema of the raw examples (written as OUTPUT/transform/metadata/)."""
    return schema_utils.schema_from_feature_spec(raw_feature_spec(features))


# ---------------------------------------------------------------------------------------------
# preprocessing_fn


def preprocessing_fn(dataset: DatasetSpec) -> Callable[[dict], dict]:
    """The dataset's preprocessing_fn: the declarative ops, or the user module's function.

    Outputs keep the raw feature names. The label is always output unchanged (added when the
    module's function leaves it out; a module that outputs something else under its name is
    refused).
    """
    spec = dataset.transform
    assert spec is not None  # called for a dataset with a transform only
    fn = _module_fn(spec.module) if spec.module is not None else _declarative_fn(dataset)
    label = dataset.label

    def wrapped(inputs: dict) -> dict:
        try:
            outputs = dict(fn(dict(inputs)))
        except TransformError:
            raise
        except Exception as e:
            if spec.module is None:
                raise
            raise TransformError(
                f"transform.module: preprocessing_fn failed: {type(e).__name__}: {e}"
            ) from e
        if label is not None:
            if label in outputs and outputs[label] is not inputs[label]:
                raise TransformError(
                    f"transform.module: preprocessing_fn outputs {label!r}, the label, which "
                    "passes through untransformed: leave it out of the outputs"
                )
            outputs[label] = inputs[label]
        return outputs

    return wrapped


def _module_fn(path: str) -> Callable[[dict], dict]:
    """`preprocessing_fn` of the user's Python file."""
    name = "shardflow_transform_" + hashlib.sha256(path.encode("utf-8")).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise TransformError(f"transform.module: {path!r} is not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    # no __pycache__ next to the user's file: a run writes only to OUTPUT and the temp location
    bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:
        raise TransformError(f"transform.module: importing {path!r} failed: {e}") from e
    finally:
        sys.dont_write_bytecode = bytecode
    fn = getattr(module, "preprocessing_fn", None)
    if not callable(fn):
        raise TransformError(f"transform.module: {path!r} defines no preprocessing_fn")
    return fn


def _declarative_fn(dataset: DatasetSpec) -> Callable[[dict], dict]:
    features = {f.name: f for f in dataset.features}
    assert dataset.transform is not None  # called for a dataset with a transform only
    ops = dataset.transform.features
    vocab_files = _vocabulary_files(
        [name for name, fops in ops.items() if fops[-1].name == "vocabulary"]
    )

    def fn(inputs: dict) -> dict:
        outputs = {}
        for name, x in inputs.items():
            fops = ops.get(name)
            if fops:
                outputs[name] = apply_ops(x, features[name], fops, vocab_files.get(name))
            else:
                outputs[name] = x
        return outputs

    return fn


def _vocabulary_files(names: list[str]) -> dict[str, str]:
    """A distinct, file-system-safe vocabulary file name per feature (the names are asset
    files of transform_fn/, read by the trainer through the transform)."""
    out: dict[str, str] = {}
    for name in names:
        base = "vocabulary_" + re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        file, n = base, 1
        while file in out.values():
            n += 1
            file = f"{base}_{n}"
        out[name] = file
    return out


def apply_ops(x, feature: FeatureSpec, ops: tuple[TransformOp, ...], vocab_file: str | None):
    """One feature's ops, in order.

    An optional feature without default parses as a SparseTensor; ops other than on a
    variable-length list first make it dense: missing values become the `fill_missing` value,
    or 0 / "" without one (the same filler the trainer uses for raw features). A
    variable-length feature stays sparse: the ops apply to its values.
    """
    if isinstance(x, tf.SparseTensor) and feature.shape != (None,):
        first = ops[0]
        fill = first.params["value"] if first.name == "fill_missing" else _ZERO[feature.type]
        size = math.prod(d for d in feature.shape if d is not None)  # fixed: all known
        dense = tft.sparse_tensor_to_dense_with_shape(x, [None, size], default_value=fill)
        x = tf.reshape(dense, [-1, *feature.shape])
    for op in ops:
        if op.name == "fill_missing":
            continue
        if op.name == "log1p":
            x = _map_values(tf.math.log1p, _as_float(x))
        elif op.name == "z_score":
            x = tft.scale_to_z_score(_as_float(x))
        elif op.name == "scale_to_0_1":
            x = tft.scale_to_0_1(_as_float(x))
        elif op.name == "bucketize":
            x = tft.bucketize(_as_float(x), op.params["num_buckets"])
        elif op.name == "vocabulary":
            x = tft.compute_and_apply_vocabulary(
                x,
                top_k=op.params["top_k"],
                frequency_threshold=op.params["frequency_threshold"],
                num_oov_buckets=op.params["num_oov_buckets"],
                vocab_filename=vocab_file,
            )
        elif op.name == "hash":
            x = _hash(x, op.params["buckets"])
        elif op.name == "decode_resize":
            x = _decode_resize(x, *op.params["size"])
        else:  # the config loader accepts only the ops above
            raise AssertionError(f"unknown op {op.name!r}")
    return x


def _map_values(fn: Callable[[tf.Tensor], tf.Tensor], x):
    if isinstance(x, tf.SparseTensor):
        return x.with_values(fn(x.values))
    return fn(x)


def _as_float(x):
    return _map_values(lambda v: tf.cast(v, tf.float32), x)


def _hash(x, buckets: int):
    """FarmHash64 of the value (as text for ints) modulo `buckets`, annotated with its range
    so `TFTransformOutput.num_buckets_for_transformed_feature` answers `buckets`."""
    if x.dtype != tf.string:
        x = _map_values(tf.strings.as_string, x)
    hashed = tft.hash_strings(x, buckets)
    values = hashed.values if isinstance(hashed, tf.SparseTensor) else hashed
    schema_inference.set_tensor_schema_override(
        values, tf.constant(0, tf.int64), tf.constant(buckets - 1, tf.int64)
    )
    return hashed


def _decode_resize(x: tf.Tensor, height: int, width: int) -> tf.Tensor:
    """Encoded images [batch] → float32 RGB [batch, height, width, 3] in [0, 1].

    Decoded as RGB (grayscale and alpha converted), scaled to [0, 1], resized bilinearly. A
    missing image (an empty value) becomes black.
    """

    def one(data: tf.Tensor) -> tf.Tensor:
        def decode() -> tf.Tensor:
            image = tf.io.decode_image(data, channels=3, expand_animations=False, dtype=tf.float32)
            return tf.image.resize(image, [height, width], method="bilinear")

        return tf.cond(
            tf.strings.length(data) > 0, decode, lambda: tf.zeros([height, width, 3], tf.float32)
        )

    return tf.map_fn(one, x, fn_output_signature=tf.TensorSpec([height, width, 3], tf.float32))


# ---------------------------------------------------------------------------------------------
# Beam


def train_chunk(chunk: EncodedChunk, train: int) -> Iterator[EncodedChunk]:
    """The records of a chunk that belong to the train split, as a chunk."""
    rows = np.flatnonzero(chunk.split == train)
    if not len(rows):
        return
    yield EncodedChunk(
        chunk.split[rows],
        chunk.order_hash[rows],
        chunk.keys.take(rows) if chunk.keys is not None else None,
        chunk.payload.take(pa.array(rows)),
    )


def _chunk_bytes(chunk: EncodedChunk) -> int:
    return chunk.approx_bytes()


def _group_counts(train_bytes: int, num_splits: int, shard_bytes: float) -> list[int]:
    """Groups per split for `route_chunk`, sized like shards (only the train split has data)."""
    return shard_counts({0: train_bytes}, 1, shard_bytes) * num_splits


class _DecodeExamplesFn(beam.DoFn):
    """Serialized raw examples → Arrow record batches of up to BATCH_ROWS rows (TFXIO layout)."""

    def __init__(self, schema: bytes):
        self._schema = schema

    def setup(self):
        self._decoder = example_coder.ExamplesToRecordBatchDecoder(self._schema)

    def process(self, payloads: pa.Array):
        for start in range(0, len(payloads), BATCH_ROWS):
            yield self._decoder.DecodeBatch(payloads.slice(start, BATCH_ROWS).to_pylist())


def transformed_features(feature_spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The transform's outputs described like the manifest's features (type, shape, required)."""
    out = {}
    for name, spec in sorted(feature_spec.items()):
        kind = _TYPE_NAMES.get(spec.dtype, spec.dtype.name)
        if isinstance(spec, tf.io.FixedLenFeature):
            out[name] = {"type": kind, "shape": list(spec.shape), "required": True}
        else:
            out[name] = {"type": kind, "shape": [None], "required": False}
    return out


def _remove_folder(folder: str) -> None:
    """Deletes a folder and everything under it (on object stores: every object under it)."""
    if is_remote(folder):
        objects = [m.path for m in FileSystems.match([folder + "/**"])[0].metadata_list]
        if objects:
            FileSystems.delete(objects)
    elif FileSystems.exists(folder):
        FileSystems.delete([folder])


def _finish(
    _, transform_dir: str, temp_dir: str, materialize: str, source: str, records: int, *signals
) -> dict[str, Any]:
    """Removes the analysis' temporary files; returns the manifest's `transform` section."""
    del signals  # side inputs only make this step wait for the writes
    _remove_folder(temp_dir)
    output = tft.TFTransformOutput(transform_dir)
    return {
        "path": TRANSFORM_DIR,
        "materialize": materialize,
        "preprocessing": source,
        "analyzed_split": TRAIN_SPLIT,
        "analyzed_records": records,
        "features": transformed_features(output.transformed_feature_spec()),
    }


class AnalyzeTransform(beam.PTransform):
    """Analyzes serialized raw examples (pa.BinaryArrays) and writes the transform.

    Writes `transform_dir`/transform_fn/, transformed_metadata/ and metadata/ (the raw schema);
    returns a one-element PCollection: the manifest's `transform` section, emitted once all of
    it is written.
    """

    def __init__(self, dataset: DatasetSpec, transform_dir: str, temp_dir: str):
        super().__init__()
        self._dataset = dataset
        self._dir = transform_dir
        self._temp_dir = temp_dir

    def expand(self, payloads):
        p = payloads.pipeline
        schema = raw_schema(self._dataset.features)
        tfxio = tf_example_record.TFExampleBeamRecord(
            physical_format="tfrecords_gzip", telemetry_descriptors=["shardflow"], schema=schema
        )
        batches = payloads | "DecodeExamples" >> beam.ParDo(
            _DecodeExamplesFn(schema.SerializeToString())
        )
        with tft_beam.Context(temp_dir=self._temp_dir):
            transform_fn = (batches, tfxio.TensorAdapterConfig()) | "Analyze" >> (
                tft_beam.AnalyzeDataset(preprocessing_fn(self._dataset))
            )
            written = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(self._dir)
        raw_written = dataset_metadata.DatasetMetadata(schema) | "WriteRawMetadata" >> (
            tft_beam.WriteMetadata(f"{self._dir}/{RAW_METADATA_DIR}", p)
        )
        records = (
            batches
            | "CountRows" >> beam.Map(lambda batch: batch.num_rows)
            | "SumRows" >> beam.CombineGlobally(sum)
        )
        spec = self._dataset.transform
        return (
            p
            | "Start" >> beam.Create([None])
            | "Finish"
            >> beam.Map(
                _finish,
                self._dir,
                self._temp_dir,
                spec.materialize,
                "module" if spec.module is not None else "features",
                beam.pvalue.AsSingleton(records),
                beam.pvalue.AsSingleton(written),
                beam.pvalue.AsSingleton(raw_written),
            )
        )


class TransformExamples:
    """Applies a written transform to serialized raw examples, as a serving model does: parse
    with the raw feature spec, then `transform_features_layer()`."""

    def __init__(self, transform_dir: str):
        output = tft.TFTransformOutput(transform_dir)
        layer = output.transform_features_layer()
        spec = output.raw_feature_spec()
        self.names = sorted(output.transformed_feature_spec())

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def apply(serialized):
            return layer(tf.io.parse_example(serialized, spec))

        self._apply = apply

    def __call__(self, payloads: pa.Array) -> pa.BinaryArray:
        """The transformed examples, serialized deterministically, one per input."""
        parts = []
        for start in range(0, len(payloads), BATCH_ROWS):
            block = payloads.slice(start, BATCH_ROWS)
            outputs = self._apply(tf.constant(block.to_pylist(), tf.string))
            columns = [_list_column(outputs[name], len(block)) for name in self.names]
            parts.append(encode.encode_columns(self.names, columns))
        return pa.concat_arrays(parts) if parts else pa.array([], pa.binary())


def _list_column(value, rows: int) -> pa.ListArray:
    """A batch output (dense, sparse or ragged) as one list of values per row."""
    if isinstance(value, tf.SparseTensor):
        values = value.values.numpy()
        counts = np.bincount(value.indices.numpy()[:, 0], minlength=rows)
    elif isinstance(value, tf.RaggedTensor):
        values = value.flat_values.numpy()
        splits = value.nested_row_splits[0].numpy()
        for inner in value.nested_row_splits[1:]:
            splits = inner.numpy()[splits]
        counts = np.diff(splits)
    else:
        dense = value.numpy()
        values = dense.reshape(-1)
        counts = np.full(rows, values.size // rows if rows else 0)
    offsets = np.zeros(rows + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), _arrow_values(values))


def _arrow_values(values: np.ndarray) -> pa.Array:
    if values.dtype == object or values.dtype.kind in "SU":
        return pa.array(values.tolist(), pa.binary())
    if values.dtype.kind == "f":
        return pa.array(values.astype(np.float32))
    if values.dtype.kind in "iub":
        return pa.array(values.astype(np.int64))
    raise TransformError(
        f"transform output of dtype {values.dtype} cannot be written to an example"
    )


class _TransformChunkFn(beam.DoFn):
    """Transforms a chunk's payloads; split, order hash, key and provenance stay the raw
    record's, so shard assignment and order do not change."""

    def __init__(self, transform_dir: str):
        self._dir = transform_dir
        self._transform: TransformExamples | None = None

    def process(self, chunk: EncodedChunk, written: dict):
        del written  # the side input only makes this step wait for the transform
        if self._transform is None:
            self._transform = TransformExamples(self._dir)
        yield EncodedChunk(
            chunk.split, chunk.order_hash, chunk.keys, self._transform(chunk.payload)
        )


class TransformFeatures(beam.PTransform):
    """Analyzes the written train split and writes STAGING/transform/.

    Returns (encoded, transform): the chunks to write (transformed with `materialize:
    transformed`, else the input), and a one-element PCollection with the manifest's
    `transform` section, ready once the transform is written.
    """

    def __init__(self, dataset: DatasetSpec, staging: str):
        super().__init__()
        self._dataset = dataset
        self._staging = staging

    def expand(self, encoded):
        dataset = self._dataset
        train = dataset.split_names.index(TRAIN_SPLIT)
        chunks = encoded | "SelectTrain" >> beam.FlatMap(train_chunk, train)
        if dataset.key is None:
            payloads = chunks | "TakePayloads" >> beam.Map(lambda c: c.payload)
        else:
            payloads = chunks | "DropDuplicates" >> _DropDuplicates(dataset)
        transform_dir = f"{self._staging}/{TRANSFORM_DIR}"
        facts = payloads | "AnalyzeTrain" >> AnalyzeTransform(
            dataset, transform_dir, f"{self._staging}/{TEMP_DIR}"
        )
        if dataset.transform.materialize == "transformed":
            encoded = encoded | "ApplyTransform" >> beam.ParDo(
                _TransformChunkFn(transform_dir), beam.pvalue.AsSingleton(facts)
            ).with_output_types(EncodedChunk)
        return encoded, facts


class _DropDuplicates(beam.PTransform):
    """The payloads of train chunks without the later duplicates of a key, by the writer's rule.

    Records are grouped as the writer groups them (a key's duplicates share an order hash, so
    they meet in one group) and `sorted_records` keeps the same record of each key as the
    written shard does.
    """

    def __init__(self, dataset: DatasetSpec):
        super().__init__()
        self._splits = len(dataset.splits)
        self._shard_bytes = dataset.output.shard_bytes

    def expand(self, chunks):
        counts = (
            chunks
            | "MeasureTrain" >> beam.Map(_chunk_bytes)
            | "SumTrainBytes" >> beam.CombineGlobally(sum)
            | "CountGroups" >> beam.Map(_group_counts, self._splits, self._shard_bytes)
        )
        return (
            chunks
            | "RouteTrain" >> beam.FlatMap(route_chunk, beam.pvalue.AsSingleton(counts))
            | "GroupTrain" >> beam.GroupByKey()
            | "SortAndDeduplicate" >> beam.Map(lambda group: sorted_records(group[1])[0])
        )
