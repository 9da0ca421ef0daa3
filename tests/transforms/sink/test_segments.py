"""Shards joined from segments: the checksum combines against zlib, a joined file against the
file written whole, joined files read back whole by TensorFlow, Python's zlib and gzip and
shardflow's own TFRecord reader, which also reads gzip files of several members."""

from __future__ import annotations

import gzip
import hashlib
import random
import zlib

import pytest
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.contract.layout import COMPRESSIONS
from transforms.files import open_file
from transforms.sink.framing import RecordFileWriter, frame_records
from transforms.sink.segments import adler32_combine, crc32_combine, join_segments
from transforms.sources.tfrecord import read_records

LENGTHS = [0, 1, 2, 15, 5552, 65520, 65521, 65522, 200_003]  # 5552, 65521: Adler-32's bounds


def _blobs(rng: random.Random) -> list[bytes]:
    blobs = [rng.randbytes(n) for n in LENGTHS] + [b"\xff" * n for n in LENGTHS]
    return blobs + [b"\x00" * 70_000]


@pytest.mark.parametrize(
    "checksum, combine", [(zlib.adler32, adler32_combine), (zlib.crc32, crc32_combine)]
)
def test_a_combined_checksum_is_zlibs_checksum_of_the_concatenation(checksum, combine):
    rng = random.Random(7)
    blobs = _blobs(rng)
    for a in blobs:
        for b in rng.sample(blobs, 6) + [b""]:
            assert combine(checksum(a), checksum(b), len(b)) == checksum(a + b), (len(a), len(b))
    running, whole = checksum(b""), b""
    for blob in blobs:  # folded over many pieces, as a join does
        running = combine(running, checksum(blob), len(blob))
        whole += blob
    assert running == checksum(whole)


def _records(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.choice([b"abc" * rng.randrange(200), rng.randbytes(rng.randrange(300))])
            for _ in range(n)]  # fmt: skip


def _write(folder, compression: str, pieces: list[list[bytes]], level: int = 6) -> str:
    """The record file of these pieces in `folder` (local or gs://), joined from one segment
    per piece; returns its path."""
    suffix = ".tfrecord" + COMPRESSIONS[compression].suffix
    segments = []
    for i, records in enumerate(pieces):
        path = f"{folder}/segment{i}"
        writer = RecordFileWriter(path, compression, level, segment=True, last=i == len(pieces) - 1)
        writer.write(records)
        segments.append({**writer.close(), "file": path})
    path = f"{folder}/joined{suffix}"
    facts = join_segments(path, segments, compression, level)
    data = _bytes(path)
    assert facts == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return path


def _bytes(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def _whole(tmp_path, compression: str, records: list[bytes], level: int = 6) -> bytes:
    path = str(tmp_path / "whole")
    writer = RecordFileWriter(path, compression, level)
    writer.write(records)
    writer.close()
    return open(path, "rb").read()


@pytest.mark.parametrize("compression", ["gzip", "zlib", "none"])
@pytest.mark.parametrize("level", [1, 6, 9])
def test_a_file_joined_from_one_segment_is_the_file_written_whole(tmp_path, compression, level):
    records = _records(3000, 1)
    joined = _write(tmp_path, compression, [records], level)
    assert open(joined, "rb").read() == _whole(tmp_path, compression, records, level)


def _read_with_tensorflow(path: str, compression: str) -> list[bytes]:
    tf = pytest.importorskip("tensorflow")
    kind = COMPRESSIONS[compression].tf_type
    return [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=kind)]


def _read_with_shardflow(path: str) -> list[bytes]:
    with open_file(path) as stream:
        found = list(read_records(stream, path, "auto"))
    assert all(reason is None for _, _, _, reason in found), found
    return [data for _, _, data, _ in found]


@pytest.mark.parametrize("compression", ["gzip", "zlib", "none"])
def test_a_file_joined_from_many_segments_reads_back_whole_everywhere(tmp_path, compression):
    # 1 MB of framed records buffered at a time: the large pieces are compressed in several steps
    pieces = [_records(n, seed) for seed, n in enumerate([0, 2000, 0, 1, 9000, 0, 700, 0])]
    records = [r for piece in pieces for r in piece]
    path = _write(tmp_path, compression, pieces)
    data = open(path, "rb").read()
    if compression != "none":
        inflate = zlib.decompressobj(COMPRESSIONS[compression].wbits)
        framed = inflate.decompress(data)
        assert inflate.eof and not inflate.unused_data  # one stream: no reader stops early
        assert framed == frame_records(records)
        assert len(data) < len(_whole(tmp_path, compression, records)) * 1.05
    if compression == "gzip":
        assert gzip.decompress(data) == frame_records(records)
    assert _read_with_shardflow(path) == records
    assert _read_with_tensorflow(path, compression) == records


@pytest.mark.parametrize("name", ["members.tfrecord.gz", "members.tfrecord"])
def test_a_gzip_file_of_several_members_reads_back_whole(tmp_path, name):
    """shardflow's TFRecord reader reads every member of a gzip file, empty ones too, by its
    extension (Python's gzip module) or, under a plain name, by its magic (its own inflater)."""
    pieces = [_records(n, seed) for seed, n in enumerate([500, 0, 1200, 3, 0])]
    path = tmp_path / name
    path.write_bytes(b"".join(gzip.compress(frame_records(p), mtime=0) for p in pieces))
    records = [r for piece in pieces for r in piece]
    assert _read_with_shardflow(str(path)) == records
    assert gzip.decompress(path.read_bytes()) == frame_records(records)


def test_a_segment_shorter_than_written_fails_the_join(tmp_path):
    path = _write(tmp_path, "gzip", [_records(100, 1), _records(100, 2)])
    segments = []
    for i in range(2):
        segment = tmp_path / f"segment{i}"
        segments.append({"file": str(segment), "bytes": segment.stat().st_size})
    data = (tmp_path / "segment1").read_bytes()
    (tmp_path / "segment1").write_bytes(data[:-3])
    with pytest.raises(OSError, match="segment1: segment holds .* bytes, .* written"):
        join_segments(path, segments, "none", 6)


def test_segments_on_gcs_are_joined_into_the_file_joined_locally(tmp_path, gcs_emulator):
    pieces = [_records(n, seed) for seed, n in enumerate([900, 0, 2500])]
    remote = _write("gs://shardflow-test/segments", "gzip", pieces)
    assert _bytes(remote) == _bytes(_write(tmp_path, "gzip", pieces))
