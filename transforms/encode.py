"""Encodes typed feature columns into serialized `tf.train.Example` bytes, deterministically.

The C++ encoder of tfx_bsl (`RecordBatchToExamplesEncoder`) does the per-value work, but it writes
the feature map in an order that changes from process to process, so its multi-column output is
not byte-stable across runs. We encode one column at a time (a one-entry map has one order), strip
each column's outer `Example` header and join the columns per row in sorted name order with Arrow
compute, then add one `Example` header per row. The result equals
`Example.SerializeToString(deterministic=True)` and needs no TensorFlow import.
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from tfx_bsl.coders import example_coder

ARROW_TYPES = {
    "int": pa.int64(),
    "float": pa.float32(),
    "string": pa.binary(),
    "bytes": pa.binary(),
    "image": pa.binary(),
}
# Headers `0x0a varint(n)` for n below 2**14 (examples up to 16 KiB), looked up with `take`.
_SMALL = 1 << 14


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


_HEADERS = pa.array([b"\n" + _varint(n) for n in range(_SMALL)], pa.binary())


def _header_size(total: int) -> int:
    """Size of the `0x0a varint(n)` header of a message whose whole encoding is `total` bytes."""
    size = 2
    while total - size >= 1 << (7 * (size - 1)):
        size += 1
    return size


def _strip_headers(encoded: pa.BinaryArray) -> pa.Array:
    """Drops the outer `0x0a varint(len)` of each value (vectorized per header size)."""
    lengths = pc.binary_length(encoded)
    lo, hi = pc.min_max(lengths).values()
    lo_size, hi_size = _header_size(lo.as_py()), _header_size(hi.as_py())
    result = pc.binary_slice(encoded, lo_size, hi.as_py())
    for size in range(lo_size + 1, hi_size + 1):
        # Values with a longer header: total length at or above the first total that needs it.
        first_total = (1 << (7 * (size - 2))) + size
        mask = pc.greater_equal(lengths, first_total)
        result = pc.if_else(mask, pc.binary_slice(encoded, size, hi.as_py()), result)
    return result


def encode_columns(names: Sequence[str], columns: Sequence[pa.Array]) -> list[bytes]:
    """Serialized examples, one per row, with the features `names` holding `columns`.

    Every column is a list array (list<int64|float32|binary>) without nulls: a missing value is an
    empty list, which the encoder writes as an empty list of the feature's kind.
    """
    if not names:
        raise ValueError("an example needs at least one feature")
    order = sorted(range(len(names)), key=lambda i: names[i])
    bodies = []
    for i in order:
        batch = pa.RecordBatch.from_arrays([columns[i]], [names[i]])
        single = pa.array(example_coder.RecordBatchToExamples(batch), pa.binary())
        bodies.append(_strip_headers(single))
    body = pc.binary_join_element_wise(*bodies, b"") if len(bodies) > 1 else bodies[0]
    lengths = pc.binary_length(body)
    if pc.max(lengths).as_py() < _SMALL:
        return pc.binary_join_element_wise(_HEADERS.take(lengths), body, b"").to_pylist()
    return [b"\n" + _varint(len(b)) + b for b in body.to_pylist()]


def to_list_array(feature_type: str, rows: Sequence[Sequence]) -> pa.Array:
    """A list array of the feature's Arrow type from per-row value lists."""
    return pa.array(rows, pa.list_(ARROW_TYPES[feature_type]))
