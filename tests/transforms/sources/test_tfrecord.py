"""TFRecord parsing: Example features to fields, record numbers, checksums, truncation, records
that are not Examples, compression, chunking; and no TensorFlow import.

Examples are serialized by shardflow's encoder (byte for byte TensorFlow's, checked in
test_encode.py) and framed by its writer; tests/e2e/test_tabular.py reads files that TensorFlow
itself wrote.
"""

import gzip
import io
import itertools
import subprocess
import sys
import zlib
from pathlib import Path

import pyarrow as pa
import pytest

from tests.transforms import parsed
from transforms.contract.config import OptionError, SourceSpec
from transforms.encode import encode_columns
from transforms.sink.framing import frame_records
from transforms.sources import tfrecord

ROOT = Path(__file__).resolve().parents[3]
INT, FLOAT, BYTES = pa.list_(pa.int64()), pa.list_(pa.float32()), pa.list_(pa.binary())
KINDLESS = b"\n\x07\n\x05\n\x01k\x12\x00"  # Example{features{feature{key: "k" value {}}}}


def _examples(**columns) -> list[bytes]:
    """Serialized Examples, one per row: name=(arrow list type, [values of each row])."""
    names = sorted(columns)
    arrays = [pa.array(columns[n][1], columns[n][0]) for n in names]
    return encode_columns(names, arrays).to_pylist()


def _parse(data: bytes, path="f.tfrecord", chunk_rows=100, compression="auto"):
    source = SourceSpec("src", "tfrecord", path, tfrecord.options({"compression": compression}))
    return parsed.split(tfrecord.parse_tfrecord(io.BytesIO(data), path, source, chunk_rows))


def _rows(chunks) -> list[tuple[int, dict]]:
    return parsed.rows(chunks, skip_missing=True)


THREE = _examples(
    id=(INT, [[1], [2], [3]]),
    x=(FLOAT, [[0.5], [], [1.25, -2.0]]),
    s=(BYTES, [[b"a"], [b"b", b"\xff"], []]),
)


def test_features_become_fields_holding_their_value_lists():
    missing = _examples(id=(INT, [[4]]))  # no x, no s: missing values
    chunks, rejected = _parse(frame_records(THREE + missing + [KINDLESS, b""]))
    assert rejected == []
    assert _rows(chunks) == [
        (1, {"id": [1], "x": [0.5], "s": [b"a"]}),
        (2, {"id": [2], "x": [], "s": [b"b", b"\xff"]}),
        (3, {"id": [3], "x": [1.25, -2.0], "s": []}),
        (4, {"id": [4]}),
        (5, {}),  # a feature without a kind is a missing value
        (6, {}),  # an empty Example
    ]


def test_a_feature_whose_kind_differs_between_examples_keeps_each_value():
    mixed = _examples(id=(INT, [[1]])) + _examples(id=(BYTES, [[b"one"]]))
    chunks, rejected = _parse(frame_records(mixed))
    assert (_rows(chunks), rejected) == ([(1, {"id": [1]}), (2, {"id": [b"one"]})], [])


def test_a_record_that_is_not_an_example_is_rejected():
    chunks, rejected = _parse(frame_records([THREE[0], b"plain text", THREE[1]]))
    assert [line for line, _ in _rows(chunks)] == [1, 3]
    assert [r.to_json() for r in rejected] == [
        {
            "source": "src",
            "location": "f.tfrecord:2",
            "reason": "tfrecord: not a tf.train.Example",
            "record": '{"data": "plain text"}',
        }
    ]


def test_a_data_checksum_mismatch_rejects_that_record_only():
    data = bytearray(frame_records(THREE))
    second = 16 + len(THREE[0])  # offset of record 2
    data[second + 12 + 3] ^= 0x01
    chunks, rejected = _parse(bytes(data))
    assert [line for line, _ in _rows(chunks)] == [1, 3]
    assert [r.to_json() for r in rejected] == [
        {
            "source": "src",
            "location": "f.tfrecord:2",
            "reason": "tfrecord: data checksum mismatch",
            "record": f'{{"offset": {second}}}',
        }
    ]


def test_a_corrupt_length_rejects_its_record_and_the_next_frames_are_read():
    data = bytearray(frame_records(THREE))
    second = 16 + len(THREE[0])
    data[second] ^= 0x01
    chunks, rejected = _parse(bytes(data))
    assert [line for line, _ in _rows(chunks)] == [1, 3]
    assert [(r.location, r.reason) for r in rejected] == [
        ("f.tfrecord:2", "tfrecord: corrupt record length")
    ]


@pytest.mark.parametrize("cut", [1, 5, 20], ids=["in-data-crc", "in-data", "in-header"])
def test_a_truncated_tail_is_rejected(cut):
    data = frame_records(THREE)
    chunks, rejected = _parse(data[:-cut] if cut != 20 else data + data[:5])
    kept = [1, 2] if cut != 20 else [1, 2, 3]
    assert [line for line, _ in _rows(chunks)] == kept
    assert [(r.location, r.reason) for r in rejected] == [
        (f"f.tfrecord:{len(kept) + 1}", "tfrecord: truncated record")
    ]


def _gzip_members(data: bytes) -> bytes:
    half = len(data) // 2
    return gzip.compress(data[:half]) + gzip.compress(data[half:])


@pytest.mark.parametrize(
    "path, compression, compress",
    [
        ("f.tfrecord", "auto", lambda d: d),
        ("f.tfrecord.zz", "auto", zlib.compress),  # shardflow's zlib suffix
        ("f.tfrecord", "auto", gzip.compress),  # gzip data under a plain name: its magic says
        ("f.tfrecord", "auto", zlib.compress),  # zlib data under a plain name: its header says
        ("f.tfrecord", "auto", _gzip_members),  # concatenated gzip members
        ("f.tfrecord.gz", "auto", lambda d: d),  # Beam has decompressed it already, by extension
        ("f.tfrecord.gz", "gzip", lambda d: d),  # ... so `gzip` does not decompress it twice
        ("f.data", "gzip", gzip.compress),
        ("f.data", "zlib", zlib.compress),
        ("f.data", "none", lambda d: d),
    ],
)
def test_compression_by_extension_content_or_option(path, compression, compress):
    data = compress(frame_records(THREE))
    chunks, rejected = _parse(data, path=path, compression=compression)
    assert rejected == []
    assert [fields["id"] for _, fields in _rows(chunks)] == [[1], [2], [3]]


def test_a_record_whose_length_looks_like_gzip_magic_is_not_taken_for_gzip():
    size = 0x8B1F  # as a little-endian u64, the length starts with the bytes 1f 8b
    padding = size - len(_examples(b=(BYTES, [[b""]]))[0])
    example = _examples(b=(BYTES, [[b"x" * padding]]))[0]
    example = _examples(b=(BYTES, [[b"x" * (padding - (len(example) - size))]]))[0]
    assert len(example) == size
    data = frame_records([example])
    assert data[:2] == b"\x1f\x8b"
    chunks, rejected = _parse(data)
    assert rejected == [] and len(_rows(chunks)) == 1


def test_forcing_none_on_compressed_data_rejects_it():
    chunks, rejected = _parse(gzip.compress(frame_records(THREE)), compression="none")
    assert chunks == []
    assert [r.reason for r in rejected] == ["tfrecord: corrupt record length"]


def test_a_truncated_compressed_stream_keeps_what_inflates_and_rejects_the_tail():
    records = THREE * 50
    data = zlib.compress(frame_records(records))[:-20]
    inflated = len(zlib.decompressobj().decompress(data))
    ends = itertools.accumulate(16 + len(r) for r in records)
    whole = sum(1 for end in ends if end <= inflated)  # records wholly inflatable
    assert 0 < whole < len(records)
    chunks, rejected = _parse(data, path="f.tfrecord.zz")
    read = len(_rows(chunks))
    assert read == whole
    assert [(r.location, r.reason) for r in rejected] == [
        (f"f.tfrecord.zz:{read + 1}", "tfrecord: truncated record")
    ]


def test_corrupt_compressed_data_rejects_the_rest_of_the_file():
    data = bytearray(zlib.compress(frame_records(THREE)))
    data[len(data) // 2] ^= 0xFF
    _, rejected = _parse(bytes(data), path="f.tfrecord.zz")
    assert [r.reason for r in rejected][-1:] in (
        ["tfrecord: corrupt compressed data"],
        ["tfrecord: truncated record"],
    )
    assert len(rejected) == 1


def test_chunks_hold_at_most_chunk_rows():
    examples = _examples(id=(INT, [[i] for i in range(25)]))
    chunks, _ = _parse(frame_records(examples), chunk_rows=10)
    assert [len(c) for c in chunks] == [10, 10, 5]
    assert [v for c in chunks for v in c.values("id")] == [[i] for i in range(25)]


def test_options_default_and_errors():
    assert tfrecord.options({}) == tfrecord.TfrecordOptions(compression="auto")
    message = "compression: 'snappy' is not one of auto, gzip, zlib, none"
    with pytest.raises(OptionError, match=message):
        tfrecord.options({"compression": "snappy"})
    with pytest.raises(OptionError, match="level: unknown key"):
        tfrecord.options({"level": 1})


@pytest.mark.slow  # a fresh interpreter imports Beam (records.py): several seconds here
def test_reading_examples_does_not_import_tensorflow():
    code = (
        "import sys, io; from transforms.sources import tfrecord; "
        "from transforms.contract.config import SourceSpec; "
        "list(tfrecord.parse_tfrecord(io.BytesIO(b''), 'f', SourceSpec('s', 'tfrecord', 'f', "
        "tfrecord.TfrecordOptions()))); "
        "assert not [m for m in sys.modules if m == 'tensorflow' or m.startswith('tensorflow.')]"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
