"""End to end for the parquet, avro and tfrecord sources: fixtures written by each format's own
library (pyarrow, fastavro, TensorFlow), `shardflow etl` on one config per format, the shards
read back with TensorFlow and every value compared with the source rows; bad records rejected
with their reasons; the ledger exact. Then shardflow's own output shards re-ingested by a second
run (format tfrecord) give the same values.

The expected examples are computed here from the rows themselves, not by shardflow code.
"""

from __future__ import annotations

import io
import json
import struct
from collections import Counter
from pathlib import Path

import pytest

from pipelines import etl
from tests import readback

pytestmark = pytest.mark.slow
N = 300
FEATURES = ["id", "name", "score", "count", "tags", "blob", "px"]
KINDS = {
    "id": "int64_list",
    "name": "bytes_list",
    "score": "float_list",
    "count": "int64_list",
    "tags": "bytes_list",
    "blob": "bytes_list",
    "px": "float_list",
}


def make_row(i: int) -> dict:
    """A source row, None where a value is missing; some rows break the schema on purpose."""
    return {
        "id": i,
        "name": None if i % 50 == 7 else f"näme-{i}",  # required: rejected when missing
        "score": None if i % 7 == 3 else (-1.5 if i % 100 == 42 else i / 3),  # min 0
        "count": None if i % 5 == 1 else i * 10**12,  # default -1
        "tags": None if i % 11 == 5 else [f"t{j}" for j in range(i % 4)],
        "blob": None if i % 13 == 4 else bytes([i % 256, 0, 255]),
        "point": None if i % 17 == 2 else {"x": i * 0.25 - 3, "y": -i},
    }


ROWS = [make_row(i) for i in range(N)] + [make_row(10)]  # one duplicate key


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def expected(rows: list[dict]) -> tuple[list[tuple], Counter]:
    """(the examples, sorted, as tuples of value tuples; the rejection reasons) of these rows."""
    examples, reasons, seen = [], Counter(), set()
    for r in rows:
        if r["id"] in seen:
            continue
        seen.add(r["id"])
        if r["name"] is None:
            reasons["name: missing required value"] += 1
            continue
        if r["score"] is not None and r["score"] < 0:
            reasons["score: below min 0"] += 1
            continue
        point = r["point"] or {}
        examples.append(
            (
                (r["id"],),
                (r["name"].encode(),),
                () if r["score"] is None else (_f32(r["score"]),),
                (-1 if r["count"] is None else r["count"],),
                tuple(t.encode() for t in r["tags"] or []),
                () if r["blob"] is None else (r["blob"],),
                () if point.get("x") is None else (_f32(point["x"]),),
            )
        )
    return sorted(examples), reasons


def read_back(out: Path, features=FEATURES) -> list[tuple]:
    """Every example of the dataset, read with TensorFlow, as tuples of value tuples."""
    return readback.rows(out, readback.manifest(out), list(features), KINDS)


def config(
    folder: Path, fmt: str, path: str, options: dict | None = None, features: str | None = None
) -> Path:
    features = (
        features
        or """
  id:    {type: int}
  name:  {type: string}
  score: {type: float, required: false, min: 0}
  count: {type: int, required: false, default: -1}
  tags:  {type: string, shape: [null], required: false}
  blob:  {type: bytes, required: false}
  px:    {type: float, required: false, source: src.point.x}
"""
    )
    cfg = folder / f"{fmt}.yaml"
    cfg.write_text(
        f"name: {fmt}\n"
        f"sources: [{{name: src, format: {fmt}, path: '{path}', "
        f"options: {json.dumps(options or {})}}}]\n"
        f"key: id\nfeatures:{features}"
        "splits: {train: 0.5, eval: 0.5}\n"
        f"output: {{path: '{folder / 'out'}'}}\n"
    )
    return cfg


def run_etl(cfg: Path) -> tuple[Path, dict, list[dict]]:
    assert etl.run(["--config", str(cfg)]) == 0
    out = cfg.parent / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    rejected = [
        json.loads(line)
        for path in sorted((out / "rejected").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    return out, manifest, rejected


def check_ledger(manifest: dict, rejected: list[dict], reasons: Counter, read: int) -> None:
    assert manifest["sources"]["src"]["records"] == read
    written = sum(s["records"] for s in manifest["splits"].values())
    assert read == written + manifest["rejected"]["records"] + manifest["duplicates"]
    assert manifest["duplicates"] == 1
    assert manifest["rejected"]["reasons"] == dict(reasons)
    assert Counter(r["reason"] for r in rejected) == reasons
    assert all(set(r) >= {"source", "location", "reason", "record"} for r in rejected)


# --- fixtures, each written by the format's own library -------------------------------------------


def write_parquet(folder: Path) -> tuple[list[dict], Counter, int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("score", pa.float64()),
            ("count", pa.int64()),
            ("tags", pa.list_(pa.string())),
            ("blob", pa.binary()),
            ("point", pa.struct([("x", pa.float64()), ("y", pa.int64())])),
        ]
    )
    pq.write_table(pa.Table.from_pylist(ROWS, schema), folder / "rows.parquet", row_group_size=64)
    # A second file whose middle row group (rows 11-20) cannot be decoded.
    broken = [make_row(i) for i in range(1000, 1030)]
    buf = io.BytesIO()
    pq.write_table(
        pa.Table.from_pylist(broken, schema), buf, row_group_size=10, use_dictionary=False
    )
    data = bytearray(buf.getvalue())
    column = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(1).column(0)
    data[column.data_page_offset] ^= 0xFF
    (folder / "broken.parquet").write_bytes(bytes(data))
    readable = broken[:10] + broken[20:]
    return ROWS + readable, Counter({"parquet: unreadable row group": 10}), len(ROWS) + 30


AVRO_SCHEMA = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"]},
        {"name": "score", "type": ["null", "double"]},
        {"name": "count", "type": ["null", "long"]},
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}]},
        {"name": "blob", "type": ["null", "bytes"]},
        {
            "name": "point",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Point",
                    "fields": [{"name": "x", "type": "double"}, {"name": "y", "type": "long"}],
                },
            ],
        },
    ],
}


def write_avro(folder: Path) -> tuple[list[dict], Counter, int]:
    import fastavro

    with open(folder / "rows.avro", "wb") as f:
        fastavro.writer(f, AVRO_SCHEMA, ROWS, codec="deflate", sync_interval=2000)
    # A second file cut short: its last block is unreadable.
    cut = [make_row(i) for i in range(2000, 2030)]
    buf = io.BytesIO()
    fastavro.writer(buf, AVRO_SCHEMA, cut, sync_interval=400)
    data = buf.getvalue()
    blocks = [b.num_records for b in fastavro.block_reader(io.BytesIO(data))]
    assert len(blocks) >= 3
    (folder / "cut.avro").write_bytes(data[:-10])
    kept = len(cut) - blocks[-1]
    return ROWS + cut[:kept], Counter({"avro: unreadable data block": 1}), len(ROWS) + kept + 1


def _example(tf, row: dict, id_value=None) -> bytes:
    def feature(kind: str, values: list):
        lists = {
            "int64_list": tf.train.Int64List,
            "float_list": tf.train.FloatList,
            "bytes_list": tf.train.BytesList,
        }
        return tf.train.Feature(**{kind: lists[kind](value=values)})

    features = {
        "id": feature("int64_list", [row["id"]])
        if id_value is None
        else feature("bytes_list", [id_value])
    }
    if row["name"] is not None:
        features["name"] = feature("bytes_list", [row["name"].encode()])
    if row["score"] is not None:
        features["score"] = feature("float_list", [row["score"]])
    if row["count"] is not None:
        features["count"] = feature("int64_list", [row["count"]])
    if row["tags"] is not None:
        features["tags"] = feature("bytes_list", [t.encode() for t in row["tags"]])
    if row["blob"] is not None:
        features["blob"] = feature("bytes_list", [row["blob"]])
    if row["point"] is not None:
        features["point.x"] = feature("float_list", [row["point"]["x"]])
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def write_tfrecord(folder: Path) -> tuple[list[dict], Counter, int]:
    import tensorflow as tf

    gzip = tf.io.TFRecordOptions(compression_type="GZIP")
    with tf.io.TFRecordWriter(str(folder / "rows.tfrecord.gz"), gzip) as w:
        for row in ROWS[:200]:
            w.write(_example(tf, row))
    zlib = tf.io.TFRecordOptions(compression_type="ZLIB")
    with tf.io.TFRecordWriter(str(folder / "rows.tfrecord.zz"), zlib) as w:
        for row in ROWS[200:]:
            w.write(_example(tf, row))
    # An uncompressed file with good Examples and broken records of every kind.
    extra = [make_row(i) for i in range(3000, 3006)]
    path = folder / "extra.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for row in extra[:4]:
            w.write(_example(tf, row))
        w.write(b"not an example")
        w.write(_example(tf, extra[4], id_value=b"x"))  # id: not an integer
        w.write(_example(tf, extra[5]))  # corrupted below
        w.write(_example(tf, extra[0]))  # cut in half below
    data = bytearray(path.read_bytes())
    last = 16 + len(_example(tf, extra[0]))
    corrupt = len(data) - last - 16 - len(_example(tf, extra[5]))
    data[corrupt + 12 + 2] ^= 0x20
    path.write_bytes(bytes(data[: len(data) - last // 2]))
    reasons = Counter(
        {
            "tfrecord: not a tf.train.Example": 1,
            "id: not an integer": 1,
            "tfrecord: data checksum mismatch": 1,
            "tfrecord: truncated record": 1,
        }
    )
    return ROWS + extra[:4], reasons, len(ROWS) + 8


WRITERS = {"parquet": write_parquet, "avro": write_avro, "tfrecord": write_tfrecord}


@pytest.fixture(scope="module", params=sorted(WRITERS))
def run(request, tmp_path_factory):
    fmt = request.param
    folder = tmp_path_factory.mktemp(fmt)
    (folder / "data").mkdir()
    rows, format_reasons, read = WRITERS[fmt](folder / "data")
    out, manifest, rejected = run_etl(config(folder, fmt, str(folder / "data")))
    return fmt, folder, rows, format_reasons, read, out, manifest, rejected


def test_every_value_read_back_matches_the_source(run):
    _, _, rows, _, _, out, _, _ = run
    examples, _ = expected(rows)
    assert len(examples) > N * 0.9
    assert read_back(out) == examples


def test_bad_records_are_rejected_with_reasons_and_the_ledger_is_exact(run):
    fmt, folder, rows, format_reasons, read, _, manifest, rejected = run
    _, reasons = expected(rows)
    check_ledger(manifest, rejected, reasons + format_reasons, read)
    assert manifest["sources"]["src"]["format"] == fmt
    data = folder / "data"
    where = sorted(r["location"] for r in rejected if r["reason"].startswith(f"{fmt}: "))
    if fmt == "parquet":
        assert where == sorted(f"{data / 'broken.parquet'}:{n}" for n in range(11, 21))
    elif fmt == "avro":
        assert len(where) == 1 and where[0].startswith(f"{data / 'cut.avro'}:")
    else:
        assert where == [f"{data / 'extra.tfrecord'}:{n}" for n in (5, 7, 8)]
        bad_id = [r for r in rejected if r["reason"] == "id: not an integer"]
        assert bad_id[0]["location"] == f"{data / 'extra.tfrecord'}:6"
        assert json.loads(bad_id[0]["record"])["id"] == ["x"]
    # a record the schema rejects shows its fields (binary formats have no text)
    missing = [r for r in rejected if r["reason"] == "name: missing required value"]
    assert json.loads(missing[0]["record"])["name"] is None


ROUND_TRIP_FEATURES = """
  id:    {type: int}
  name:  {type: string}
  count: {type: int, required: false, default: -1}
  tags:  {type: string, shape: [null], required: false}
"""


def test_output_shards_reingested_as_tfrecord_give_the_same_values(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_parquet(data)
    (tmp_path / "first").mkdir()
    first = config(tmp_path / "first", "parquet", str(data), features=ROUND_TRIP_FEATURES)
    out, manifest, _ = run_etl(first)
    written = sum(s["records"] for s in manifest["splits"].values())
    (tmp_path / "again").mkdir()
    again = config(
        tmp_path / "again", "tfrecord", f"{out}/*/*.tfrecord.gz", features=ROUND_TRIP_FEATURES
    )
    out2, manifest2, rejected2 = run_etl(again)
    names = ["id", "name", "count", "tags"]
    assert read_back(out2, names) == read_back(out, names)
    assert manifest2["sources"]["src"]["records"] == written
    assert manifest2["rejected"]["records"] == 0 and rejected2 == []


def test_reingested_shards_keep_missing_optional_scalars_missing(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_parquet(data)
    (tmp_path / "first").mkdir()
    first = config(tmp_path / "first", "parquet", str(data))
    out, _, _ = run_etl(first)
    (tmp_path / "again").mkdir()
    again = config(tmp_path / "again", "tfrecord", f"{out}/*/*.tfrecord.gz")
    # the round trip reads the feature `px` back from the field of that name
    again.write_text(again.read_text().replace("source: src.point.x", "source: src.px"))
    out2, _, rejected2 = run_etl(again)
    assert rejected2 == []
    assert read_back(out2) == read_back(out)
