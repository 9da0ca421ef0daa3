"""Every file format reads the same from gs:// (Beam's GCS filesystem, on the emulator) as from
a local disk: same records, same rejections (up to the path in their locations)."""

from __future__ import annotations

import gzip
import io
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.transforms.parsed import rows as chunk_rows
from transforms.contract.config import SourceSpec
from transforms.files import open_file
from transforms.records import RawChunk
from transforms.sink.framing import frame_records
from transforms.sources import registry

BUCKET = "shardflow-test"


def _parquet() -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": [1, 2, 3], "name": ["a", None, "c"]}), buf, row_group_size=2)
    return buf.getvalue()


def _avro() -> bytes:
    import fastavro

    schema = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}
    buf = io.BytesIO()
    fastavro.writer(buf, schema, [{"id": 1}, {"id": 2}])
    return buf.getvalue()


def _tfrecord() -> bytes:
    from transforms.encode import encode_columns

    ids = pa.array([[1], [2]], pa.list_(pa.int64()))
    return frame_records(encode_columns(["id"], [ids])) + b"\x00\x01"  # and a truncated tail


# format -> (file name, bytes, options)
FILES = {
    "csv": ("a.csv", b'id,name\n1,"x, y"\n2\n3,z\n', {}),
    "jsonl": ("a.jsonl.gz", gzip.compress(b'{"id": 1}\n{broken\n{"id": 3}\n'), {}),
    "parquet": ("a.parquet", _parquet(), {}),
    "avro": ("a.avro", _avro(), {}),
    "tfrecord": ("a.tfrecord", _tfrecord(), {}),
    "text": ("a.txt", b"one\ntwo\n\nthree\n", {}),
    "binary": (
        "a.bin",
        struct.pack("<ii", 1, 2) + struct.pack("<ii", 3, 4) + b"\x09",
        {"record_bytes": 8, "struct": "<ii", "fields": ["a", "b"]},
    ),
}


def _read(path: str, fmt: str, options: dict):
    source = SourceSpec("src", fmt, path, registry.check_options(fmt, options))
    with open_file(path) as stream:
        items = list(registry.parser(fmt)(stream, path, source))
    chunks = [i for i in items if isinstance(i, RawChunk)]
    rejected = [
        r._replace(location=r.location.replace(path, "FILE"))
        for r in items
        if not isinstance(r, RawChunk)
    ]
    return chunk_rows(chunks), rejected


@pytest.mark.parametrize("fmt", sorted(FILES))
def test_a_format_reads_the_same_from_gcs_as_from_disk(fmt, tmp_path, gcs_emulator):
    name, data, options = FILES[fmt]
    local = tmp_path / name
    local.write_bytes(data)
    gcs_emulator.client().bucket(BUCKET).blob(f"formats/{name}").upload_from_string(data)
    remote = f"gs://{BUCKET}/formats/{name}"
    from_disk = _read(str(local), fmt, options)
    assert from_disk[0], f"{fmt}: no records read"
    assert _read(remote, fmt, options) == from_disk
