"""TFRecord framing, compression, shard sizing, canonical order and duplicate dropping."""

import gzip
import struct
import zlib

import pytest

from transforms.sink.write import (
    RecordFileWriter,
    ShardPart,
    frame_records,
    route_chunk,
    shard_counts,
    sorted_records,
)


def _read_frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack("<Q", data[pos : pos + 8])
        out.append(data[pos + 12 : pos + 12 + n])
        pos += 12 + n + 4
    return out


def test_frame_matches_the_tfrecord_format():
    # Known-good framing, as written by TensorFlow's TFRecordWriter (lengths repeat: cached
    # headers).
    tf = pytest.importorskip("tensorflow")
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.tfrecord")
        payloads = [b"abc", b"", b"abc", b"\x00" * 70000]
        with tf.io.TFRecordWriter(path) as w:
            for p in payloads:
                w.write(p)
        with open(path, "rb") as f:
            assert f.read() == frame_records(payloads)


@pytest.mark.parametrize(
    "compression, decompress",
    [("gzip", gzip.decompress), ("zlib", zlib.decompress), ("none", lambda b: b)],
)
def test_writer_compresses_and_reports_size_and_checksum(tmp_path, compression, decompress):
    import hashlib

    path = str(tmp_path / "s.tfrecord")
    w = RecordFileWriter(path, compression)
    w.write([b"one", b"two" * 1000])
    w.write([b""])
    facts = w.close()
    data = open(path, "rb").read()
    assert facts == {"records": 3, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert _read_frames(decompress(data)) == [b"one", b"two" * 1000, b""]


def test_compression_level_trades_size_for_speed(tmp_path):
    data = [b"%d some repetitive text %d" % (i, i % 7) for i in range(5000)]
    sizes = {}
    for level in (1, 9):
        w = RecordFileWriter(str(tmp_path / f"l{level}.gz"), "gzip", level)
        w.write(data)
        sizes[level] = w.close()["bytes"]
        assert _read_frames(gzip.decompress(open(tmp_path / f"l{level}.gz", "rb").read())) == data
    assert sizes[9] < sizes[1]


def test_identical_records_give_identical_gzip_bytes(tmp_path):
    outs = []
    for i in range(2):
        path = str(tmp_path / f"s{i}.gz")
        w = RecordFileWriter(path, "gzip")
        w.write([b"x" * 100])
        w.close()
        outs.append(open(path, "rb").read())
    assert outs[0] == outs[1]


def test_shard_counts_follow_bytes_and_never_drop_to_zero():
    assert shard_counts({0: 250, 2: 100}, 3, 100.0) == [3, 1, 1]


def _sorted(parts):
    payloads, duplicates = sorted_records(parts)
    return payloads.to_pylist(), duplicates


def test_sorted_records_order_is_independent_of_part_order_and_drops_later_duplicates():
    p1 = ShardPart([5, 1], ["k5", "k1"], [(0, "f", 3), (0, "f", 1)], [b"e", b"a"])
    p2 = ShardPart([5, 3], ["k5", "k3"], [(0, "f", 0), (1, "g", 0)], [b"e-first", b"c"])
    assert _sorted([p1, p2]) == ([b"a", b"c", b"e-first"], 1)
    assert _sorted([p2, p1]) == ([b"a", b"c", b"e-first"], 1)


def test_ties_are_ordered_by_key_then_provenance_whatever_the_input_order():
    parts = [
        ShardPart(
            [7, 7, 7, 1],
            ["b", "a", "b", "z"],
            [(0, "f", 9), (0, "f", 5), (0, "f", 2), (0, "f", 1)],
            [b"b9", b"a5", b"b2", b"z1"],
        ),
    ]
    assert _sorted(parts) == ([b"z1", b"a5", b"b2"], 1)
    reversed_part = ShardPart(
        *(list(reversed(getattr(parts[0], f))) for f in ("order_hash", "key", "order", "payload"))
    )
    assert _sorted([reversed_part]) == ([b"z1", b"a5", b"b2"], 1)


def test_route_chunk_groups_records_by_split_and_shard_in_order():
    import numpy as np

    from transforms.prepare import EncodedChunk

    top = 1 << 63
    chunk = EncodedChunk(
        np.array([1, 0, 1, 0], np.int16),
        np.array([top + 5, 3, 7, top + 1], np.uint64),
        ["d", "a", "c", "b"],
        [(0, "f", i) for i in range(4)],
        [b"p0", b"p1", b"p2", b"p3"],
    )
    routed = [
        (dest, part.payload.to_pylist(), part.key, part.order_hash.tolist())
        for dest, part in route_chunk(chunk, [2, 1])
    ]
    assert routed == [
        ((0, 0), [b"p1"], ["a"], [3]),
        ((0, 1), [b"p3"], ["b"], [top + 1]),
        ((1, 0), [b"p0", b"p2"], ["d", "c"], [top + 5, 7]),
    ]


def test_without_key_equal_hashes_are_all_kept():
    p = ShardPart([2, 2, 1], None, [(0, "f", 1), (0, "f", 0), (0, "f", 3)], [b"y", b"x", b"w"])
    assert _sorted([p]) == ([b"w", b"x", b"y"], 0)
