"""TFRecord framing and compression of the record file writer."""

import gzip
import struct
import zlib

import pytest

from transforms.sink.framing import RecordFileWriter, frame_records


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
