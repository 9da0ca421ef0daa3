"""Batches of serialized tf.train.Example decoded into numpy arrays, a whole batch at a time.

One call of tfx-bsl's C++ `ExamplesToRecordBatchDecoder`, built with a schema derived from the
manifest's features (so every batch has the same columns and types, also when a feature is
missing from all its records), turns a batch into Arrow list columns; each column becomes numpy
through its flat values and lengths, with no Python work per record. The arrays are those of
the tf.data path's `trainer.keras.features.dense_inputs`:

- a feature always present (required, or with a default): [batch, *shape] (a scalar: [batch]);
  a record holding another number of values is an error, as for tf.io.parse_example;
- an optional fixed-shape feature without default: the same, a missing value filled with 0 or
  b"", and for a number its 0/1 presence as float32 `NAME__present`;
- a variable-length feature: [batch, longest list in the batch], padded, and its lengths as
  int64 `NAME__lengths` [batch];
- int64, float32, and bytes (a numpy object array) for strings, bytes and images.

With `encode`, a string feature with a vocabulary (trainer.dataset.facts) becomes int64
ids (1 + its index; 0 for another value, a missing one or padding) and the label the index of
its class (an unknown class is an error), looked up by Arrow over whole columns. An image with
an `image_size` is decoded and resized (trainer.readers.images) unless `decode_images` is off,
to float32 in [0, 1], or to uint8 pixels with `image_dtype="uint8"`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

from trainer.dataset.facts import DatasetFacts
from trainer.readers.images import DTYPES, ImageError, decode_images
from transforms.contract.config import PRESENT_SUFFIX
from transforms.contract.manifest import ManifestError, ManifestFeature

LENGTHS_SUFFIX = "__lengths"
_KINDS = {"int": schema_pb2.INT, "float": schema_pb2.FLOAT}
_DTYPES = {"int": np.int64, "float": np.float32}


class ExampleError(ValueError):
    """A record that does not hold what the manifest declares."""


def schema_of(features: Mapping[str, ManifestFeature]) -> bytes:
    """The serialized tensorflow_metadata Schema of the features: each one's kind of list."""
    schema = schema_pb2.Schema()
    for name, feature in features.items():
        column = schema.feature.add()
        column.name = name
        column.type = _KINDS.get(feature.type, schema_pb2.BYTES)
    return schema.SerializeToString()


class Decoder:
    """Decodes batches of serialized examples into dicts of numpy arrays (the module's doc).

    Picklable, and usable from several threads: the C++ decoder, which holds state while it
    decodes (and lets other threads run meanwhile), is made per thread, where it first decodes
    (in a loader worker, in its process)."""

    def __init__(
        self,
        features: Mapping[str, ManifestFeature],
        info: DatasetFacts | None = None,
        *,
        encode: bool = True,
        decode_images: bool = True,
        image_dtype: str = "float32",
    ):
        self.features = dict(features)
        self.info = info
        self.encode = encode and info is not None
        self.decode_images = decode_images
        if image_dtype not in DTYPES:
            raise ValueError(f"image_dtype {image_dtype!r} is not one of {', '.join(DTYPES)}")
        self.image_dtype = image_dtype
        # the image features this decoder decodes: their (image_size, dtype)
        self.images: dict[str, tuple[tuple[int, int, int], str]] = {
            name: (feature.image_size, image_dtype)
            for name, feature in self.features.items()
            if decode_images and feature.type == "image" and feature.image_size
        }
        self._schema = schema_of(self.features)
        self._local = threading.local()
        self._lookups = _lookups(info) if self.encode and info else {}
        for name, feature in self.features.items():
            for key in (name + PRESENT_SUFFIX, name + LENGTHS_SUFFIX):
                if key in self.features:
                    raise ManifestError(f"feature {key!r} clashes with an input of {name!r}")

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_local"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _local=threading.local())

    def images_into(
        self, name: str, encoded: np.ndarray, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Image feature `name`'s encoded images [batch] decoded (into `out`, when given)."""
        size, dtype = self.images[name]
        try:
            return decode_images(encoded.reshape(-1), size, dtype, out=out)
        except ImageError as e:
            raise ExampleError(f"feature {name!r}: {e}") from None

    def __call__(self, records: Sequence[bytes], images: bool = True) -> dict[str, np.ndarray]:
        """The batch's arrays; with `images` off, the images stay encoded ([batch] bytes), to
        be decoded where they are to go (`images_into`)."""
        decoder = getattr(self._local, "decoder", None)
        if decoder is None:
            decoder = self._local.decoder = ExamplesToRecordBatchDecoder(self._schema)
        try:
            batch = decoder.DecodeBatch(list(records))
        except RuntimeError as e:  # the C++ decoder's: a wrong kind of list, not an Example
            raise ExampleError(f"a record cannot be decoded as the manifest declares: {e}") from e
        out: dict[str, np.ndarray] = {}
        for name, feature in self.features.items():
            out.update(self._column(name, feature, batch.column(name), images))
        return out

    def _column(
        self, name: str, feature: ManifestFeature, column: pa.Array, images: bool = True
    ) -> dict:
        values, lengths = _flat(column)
        info = self.info if self.encode else None
        fill: Any = b"" if feature.type not in _DTYPES else 0
        if info is not None and name == info.label and info.classes is not None:
            flat, fill = self._classes(name, values), -1
        elif info is not None and name in info.vocabularies:
            flat, fill = looked_up(self._lookups[name], values) + 1, 0
        else:
            flat = values.to_numpy(zero_copy_only=False)
            if feature.type in _DTYPES:
                flat = flat.astype(_DTYPES[feature.type], copy=False)
        if feature.shape == (None,):
            width = int(lengths.max()) if len(lengths) else 0
            return {name: dense(flat, lengths, width, fill), name + LENGTHS_SUFFIX: lengths}
        size = math.prod(d or 0 for d in feature.shape)  # fixed: no None
        full = feature.required or feature.default is not None
        if full and not (lengths == size).all():
            row = int(np.argmax(lengths != size))
            raise ExampleError(
                f"feature {name!r}: record {row} of the batch holds {lengths[row]} values where "
                f"the manifest declares shape {list(feature.shape)} (always present)"
            )
        rows = dense(flat, lengths, size, fill)
        out = {name: rows.reshape(len(lengths), *feature.shape)}
        if name in self.images:
            if images:
                out[name] = self.images_into(name, rows[:, 0])
        elif not full and feature.type in _DTYPES and fill != -1:
            out[name + PRESENT_SUFFIX] = (lengths > 0).astype(np.float32)
        return out

    def _classes(self, name: str, values: pa.Array) -> np.ndarray:
        ids = looked_up(self._lookups[name], values)
        if (ids < 0).any():
            unknown = values[int(np.argmax(ids < 0))].as_py()
            raise ExampleError(f"label {name!r}: {unknown!r} is not one of its classes")
        return ids


def _lookups(info: DatasetFacts) -> dict[str, dict[Any, int]]:
    """The index `encode` gives each value, per feature: the label's classes and each string
    feature's vocabulary (the first index of a value listed twice), keyed as the columns'
    values read back (bytes, or ints for an int label). Made once: a vocabulary may hold
    100,000 values, and hashing it again for every batch cost more than decoding the batch."""
    lookups = {
        name: _indexed(w.encode() for w in words) for name, words in info.vocabularies.items()
    }
    if info.label is not None and info.classes is not None:
        lookups[info.label] = _indexed(
            c if isinstance(c, int) else str(c).encode() for c in info.classes
        )
    return lookups


def _indexed(values: Iterable[Any]) -> dict[Any, int]:
    index: dict[Any, int] = {}
    for i, value in enumerate(values):
        index.setdefault(value, i)
    return index


def looked_up(lookup: Mapping[Any, int], values: pa.Array) -> np.ndarray:
    """Each value's index in `lookup` (int64), -1 for a value not in it: the batch's distinct
    values looked up once each, then spread by the batch's dictionary indices."""
    encoded = values.dictionary_encode(null_encoding="encode")  # a null: None, not found
    distinct = encoded.dictionary.to_pylist()
    ids = np.fromiter((lookup.get(v, -1) for v in distinct), np.int64, len(distinct))
    return ids[encoded.indices.to_numpy(zero_copy_only=False)]


def _flat(column: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A list column's values and each row's number of them (0 for a missing one), read from
    its offsets."""
    offsets = np.asarray(column.offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    if column.null_count:
        lengths[column.is_null().to_numpy(zero_copy_only=False)] = 0
        return column.flatten(), lengths
    return column.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0])), lengths


def dense(values: np.ndarray, lengths: np.ndarray, width: int, fill: Any) -> np.ndarray:
    """Rows of `lengths` values taken from the flat `values` as [rows, width]: each row's first
    `width` values, the rest filled with `fill`."""
    rows = len(lengths)
    whole = lengths == width
    if len(values) == int(whole.sum()) * width:  # each row full or missing
        if whole.all():
            return values.reshape(rows, width)
        out = np.full((rows, width), fill, dtype=values.dtype)
        out[whole] = values.reshape(-1, width)
        return out
    out = np.full((rows, width), fill, dtype=values.dtype)
    row = np.repeat(np.arange(rows), lengths)
    starts = np.cumsum(lengths) - lengths
    col = np.arange(len(values)) - np.repeat(starts, lengths)
    keep = col < width
    out[row[keep], col[keep]] = values[keep]
    return out
