"""The bigquery format: options, the Beam read it builds, and the row → record mapping.

There is no BigQuery here. The read is checked by building the pipeline with Beam's real
`ReadFromBigQuery` and inspecting the transform and the source object it creates (nothing is
run against BigQuery). Rows are mapped by the real `RowsToChunks` on a local pipeline, with
`beam.Create` of rows shaped as Beam delivers them (Avro exports and DIRECT_READ: Decimal,
date, datetime, raw bytes; JSON exports: through `JsonRowCoder`, Beam's coder with BYTES
decoded). The end-to-end test runs the whole ETL with `beam.Create` in place of the read and
reads the shards back with TensorFlow.
"""

from __future__ import annotations

import base64
import datetime
import json
import struct
from decimal import Decimal

import apache_beam as beam
import pytest
from apache_beam.io.gcp import bigquery as beam_bigquery
from apache_beam.io.gcp.internal.clients.bigquery import TableFieldSchema, TableSchema
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.config.loader import ConfigError, parse_config
from transforms.contract.config import OptionError, SourceSpec
from transforms.records import CHUNK_ROWS, RawChunk, record_json
from transforms.sources import queries
from transforms.sources.bigquery import (
    BigqueryOptions,
    field_value,
    flatten_row,
    options,
    row_number,
    rows_to_chunk,
)
from transforms.sources.queries import JsonRowCoder, RowsToChunks
from transforms.sources.queries import ReadBigquery as Read

UTC = datetime.timezone.utc

# --- options --------------------------------------------------------------------------------------


def test_options_defaults():
    assert options({"table": "proj:ds.tbl"}).to_dict() == {
        "table": "proj:ds.tbl",
        "query": None,
        "method": "EXPORT",
        "project": None,
        "gcs_location": None,
        "use_json_exports": False,
        "query_priority": "BATCH",
        "temp_dataset": None,
        "selected_fields": None,
        "row_restriction": None,
        "chunk_rows": CHUNK_ROWS,
    }


@pytest.mark.parametrize(
    "table, normalized",
    [
        ("proj:ds.tbl", "proj:ds.tbl"),
        ("proj.ds.tbl", "proj:ds.tbl"),
        ("my-proj-1.my_ds.events_2024", "my-proj-1:my_ds.events_2024"),
        ("example.com:proj.ds.tbl", "example.com:proj:ds.tbl"),
        ("example.com:proj:ds.tbl", "example.com:proj:ds.tbl"),
        ("ds.tbl", "ds.tbl"),
        ("proj:ds.tbl$20240501", "proj:ds.tbl$20240501"),
    ],
)
def test_table_references_are_normalized_to_beams_form(table, normalized):
    assert options({"table": table}).table == normalized
    # Beam parses the normalized form into the same parts
    ref = beam_bigquery.bigquery_tools.parse_table_reference(normalized)
    project, _, rest = normalized.rpartition(":")
    assert (ref.projectId or "", f"{ref.datasetId}.{ref.tableId}") == (project, rest)


@pytest.mark.parametrize(
    "raw, field, message",
    [
        ({}, "query", "give exactly one of table and query"),
        ({"table": "proj.ds.t", "query": "SELECT 1"}, "table", "give exactly one"),
        ({"table": "tbl"}, "table", "must be project:dataset.table or project.dataset.table"),
        ({"table": "p:d.t.x"}, "table", "must be project:dataset.table"),
        ({"table": "Bad_Project:d.t"}, "table", "must be project:dataset.table"),
        ({"table": ""}, "table", "must be a non-empty string"),
        ({"query": "  "}, "query", "is empty"),
        ({"table": "proj.ds.t", "method": "STREAM"}, "method", "'STREAM' is not one of EXPORT"),
        ({"table": "proj.ds.t", "gcs_location": "/tmp/x"}, "gcs_location", "must be a gs://"),
        ({"table": "proj.ds.t", "project": "Not A Project"}, "project", "is not a project id"),
        (
            {"table": "proj.ds.t", "method": "DIRECT_READ", "gcs_location": "gs://b/t"},
            "gcs_location",
            "applies to method EXPORT only",
        ),
        (
            {"table": "proj.ds.t", "method": "DIRECT_READ", "use_json_exports": True},
            "use_json_exports",
            "applies to method EXPORT only",
        ),
        ({"table": "proj.ds.t", "query_priority": "INTERACTIVE"}, "query_priority", "a query only"),
        ({"table": "proj.ds.t", "temp_dataset": "proj.tmp"}, "temp_dataset", "a query only"),
        ({"table": "proj.ds.t", "selected_fields": ["a"]}, "selected_fields", "DIRECT_READ and"),
        (
            {"query": "SELECT 1", "method": "DIRECT_READ", "row_restriction": "a > 1"},
            "row_restriction",
            "DIRECT_READ and a table",
        ),
        (
            {"table": "proj.ds.t", "method": "DIRECT_READ", "selected_fields": []},
            "selected_fields",
            "names no field",
        ),
        ({"query": "SELECT 1", "temp_dataset": "tmp"}, "temp_dataset", "project.dataset"),
        (
            {"query": "SELECT 1", "temp_dataset": "proj.beam_temp_dataset_1"},
            "temp_dataset",
            "Beam's own",
        ),
        ({"table": "proj.ds.t", "chunk_rows": 0}, "chunk_rows", "must be at least 1"),
        ({"table": "proj.ds.t", "use_json_exports": "yes"}, "use_json_exports", "true or false"),
        ({"table": "proj.ds.t", "dataset": "d"}, "dataset", "unknown key"),
    ],
)
def test_bad_options_name_the_option(raw, field, message):
    with pytest.raises(OptionError) as e:
        options(raw)
    assert e.value.field == field
    assert message in e.value.message


def test_options_of_each_method_are_kept():
    opts = options(
        {
            "query": "SELECT a FROM `p.d.t`\n",
            "method": "direct_read",
            "project": "billing-proj",
            "query_priority": "interactive",
            "temp_dataset": "proj.scratch",
        }
    )
    assert (opts.query, opts.method, opts.project) == (
        "SELECT a FROM `p.d.t`",
        "DIRECT_READ",
        "billing-proj",
    )
    assert (opts.query_priority, opts.temp_dataset) == ("INTERACTIVE", "proj:scratch")
    opts = options(
        {
            "table": "proj.ds.t",
            "method": "DIRECT_READ",
            "selected_fields": ["a", "b.c"],
            "row_restriction": "a > 1",
            "chunk_rows": 10,
        }
    )
    assert (opts.selected_fields, opts.row_restriction, opts.chunk_rows) == (
        ["a", "b.c"],
        "a > 1",
        10,
    )
    opts = options({"table": "proj.ds.t", "gcs_location": "gs://b/bq", "use_json_exports": True})
    assert (opts.gcs_location, opts.use_json_exports) == ("gs://b/bq", True)


def test_config_errors_name_the_source_option(tmp_path):
    cfg = {
        "name": "bq",
        "sources": [{"name": "events", "format": "bigquery", "options": {"table": "nope"}}],
        "features": {"id": {"type": "int"}},
        "output": {"path": "out"},
    }
    with pytest.raises(ConfigError) as e:
        parse_config(cfg, base_dir=str(tmp_path))
    assert str(e.value).startswith("sources[0].options.table: 'nope' must be")
    cfg["sources"][0]["options"] = {"table": "proj.ds.t"}
    dataset = parse_config(cfg, base_dir=str(tmp_path))
    assert dataset.sources[0].options_as(BigqueryOptions).table == "proj:ds.t"


# --- the Beam read it builds ----------------------------------------------------------------------


def built_read(raw: dict, *beam_args: str):
    """Builds (does not run) a pipeline reading a bigquery source; returns its parts."""
    source = SourceSpec("events", "bigquery", None, options(raw))
    p = beam.Pipeline(runner="FnApiRunner", options=PipelineOptions(list(beam_args)))
    chunks, rejected, counts = p | "Read[events]" >> Read(source)
    nodes = {}

    class Collect(beam.pipeline.PipelineVisitor):
        def enter_composite_transform(self, node):
            nodes[node.full_label] = node.transform

        def visit_transform(self, node):
            nodes[node.full_label] = node.transform

    p.visit(Collect())
    read = nodes["Read[events]/ReadFromBigQuery"]
    source_object = nodes["Read[events]/ReadFromBigQuery/Read"].source
    assert isinstance(read, beam.io.ReadFromBigQuery)
    assert p.to_runner_api().components.transforms  # the whole graph serializes
    return read, source_object, nodes, (chunks, rejected, counts)


def test_a_table_is_read_by_an_export_to_the_gcs_location():
    read, src, nodes, outputs = built_read(
        {"table": "proj.ds.tbl", "gcs_location": "gs://bucket/bq-export"}, "--project", "billing"
    )
    assert read.method == "EXPORT"
    assert read.gcs_location.get() == "gs://bucket/bq-export"
    assert read._kwargs == {"table": "proj:ds.tbl", "project": None}
    assert isinstance(src, beam_bigquery._CustomBigQuerySource)
    ref = src.table_reference
    assert (ref.projectId, ref.datasetId, ref.tableId) == ("proj", "ds", "tbl")
    assert src.query is None and src.use_json_exports is False
    assert src._get_project() == "billing"
    batch = nodes["Read[events]/MapRows/BatchRows"]
    assert isinstance(batch, beam.BatchElements)
    assert (
        batch._batch_size_estimator._min_batch_size,
        batch._batch_size_estimator._max_batch_size,
    ) == (CHUNK_ROWS, CHUNK_ROWS)
    chunks, rejected, counts = outputs
    assert chunks.element_type is RawChunk
    assert "Read[events]/MapRows/RowsToRecords" in nodes


def test_export_falls_back_to_the_temp_location_and_needs_one():
    read, src, _, _ = built_read({"table": "proj.ds.t"}, "--temp_location", "gs://bucket/tmp")
    assert read.gcs_location is None and src.gcs_location is None  # Beam uses --temp_location
    with pytest.raises(ValueError, match="method EXPORT needs a gs:// folder"):
        built_read({"table": "proj.ds.t"})
    with pytest.raises(ValueError, match="options.gcs_location or the --temp_location"):
        built_read({"table": "proj.ds.t"}, "--temp_location", "/tmp/local")


def test_a_query_is_standard_sql_with_its_priority_and_json_exports_decode_bytes():
    read, src, _, _ = built_read(
        {
            "query": "SELECT * FROM `p.d.t` WHERE x > 1",
            "gcs_location": "gs://b/x",
            "use_json_exports": True,
            "query_priority": "INTERACTIVE",
            "temp_dataset": "proj.scratch",
            "project": "billing",
        }
    )
    assert read.method == "EXPORT"
    assert src.query.get() == "SELECT * FROM `p.d.t` WHERE x > 1"
    assert src.use_legacy_sql is False
    assert src.flatten_results is False
    assert src.use_json_exports is True and src.coder is JsonRowCoder
    assert src.query_priority == beam_bigquery.BigQueryQueryPriority.INTERACTIVE
    assert (src.temp_dataset.projectId, src.temp_dataset.datasetId) == ("proj", "scratch")
    assert src.table_reference is None
    assert src._get_project() == "proj"  # Beam bills query jobs to the temp dataset's project


def test_direct_read_of_a_table_passes_fields_and_restriction():
    read, src, _, _ = built_read(
        {
            "table": "proj:ds.tbl",
            "method": "DIRECT_READ",
            "selected_fields": ["id", "address.city"],
            "row_restriction": "id > 10",
            "project": "billing",
        }
    )
    assert read.method == "DIRECT_READ"
    assert isinstance(src, beam_bigquery._CustomBigQueryStorageSource)
    ref = src.table_reference
    assert (ref.projectId, ref.datasetId, ref.tableId) == ("proj", "ds", "tbl")
    assert src.selected_fields == ["id", "address.city"]
    assert src.row_restriction == "id > 10"
    assert src.project == "billing"


def test_direct_read_of_a_query():
    read, src, _, _ = built_read(
        {"query": "SELECT 1 AS one", "method": "DIRECT_READ", "query_priority": "batch"},
        "--project",
        "p",
    )
    assert read.method == "DIRECT_READ"
    assert isinstance(src, beam_bigquery._CustomBigQueryStorageSource)
    assert src.query.get() == "SELECT 1 AS one"
    assert src.use_legacy_sql is False
    assert src.query_priority == beam_bigquery.BigQueryQueryPriority.BATCH


# --- rows to records ------------------------------------------------------------------------------

# A row as Avro exports and DIRECT_READ deliver it (fastavro with logical types).
AVRO_ROW = {
    "id": 1,
    "score": 0.25,
    "price": Decimal("12.500000000"),
    "qty": Decimal("3.000000000"),
    "big": Decimal("123456789012345678901234567890"),
    "ok": True,
    "name": 'Åsa "quoted"',
    "blob": b"\x00\xff\x10",
    "day": datetime.date(2024, 5, 1),
    "ts": datetime.datetime(2024, 5, 1, 12, 30, 5, 250000, tzinfo=UTC),
    "local": "2024-05-01T12:30:05",  # DATETIME: a string unless use_native_datetime
    "at": datetime.time(7, 5, 0, 12),
    "tags": ["a", "b"],
    "nums": [1, 2, 3],
    "none": [],
    "nothing": None,
    "address": {"city": "Oslo", "zip": None, "geo": {"lat": 59.9, "lon": 10.7}},
    "items": [{"sku": "x1", "n": 2}, {"sku": "x2", "n": 5}],
    "no_items": [],
}

AVRO_FIELDS = {
    "id": 1,
    "score": 0.25,
    "price": 12.5,
    "qty": 3,
    "big": 123456789012345678901234567890,
    "ok": True,
    "name": 'Åsa "quoted"',
    "blob": b"\x00\xff\x10",
    "day": "2024-05-01",
    "ts": "2024-05-01T12:30:05.250000+00:00",
    "local": "2024-05-01T12:30:05",
    "at": "07:05:00.000012",
    "tags": ["a", "b"],
    "nums": [1, 2, 3],
    "none": [],
    "nothing": None,
    "address.city": "Oslo",
    "address.zip": None,
    "address.geo.lat": 59.9,
    "address.geo.lon": 10.7,
    "items.sku": ["x1", "x2"],
    "items.n": [2, 5],
    "no_items": [],
}


def test_a_row_of_every_bigquery_type_maps_to_natural_field_values():
    fields = flatten_row(AVRO_ROW)
    assert fields == AVRO_FIELDS
    assert type(fields["qty"]) is int and type(fields["price"]) is float


def test_field_values():
    assert field_value(Decimal("-7.000000000"), "n") == -7
    assert field_value(Decimal("0.1"), "n") == 0.1
    assert field_value(datetime.datetime(2024, 1, 2, 3, 4, 5), "n") == "2024-01-02T03:04:05"
    assert field_value(bytearray(b"ab"), "n") == b"ab"
    assert field_value([Decimal("1"), None], "n") == [1, None]


def json_export_coder() -> JsonRowCoder:
    def field(name, type_, mode="NULLABLE", fields=()):
        return TableFieldSchema(name=name, type=type_, mode=mode, fields=list(fields))

    schema = TableSchema(
        fields=[
            field("id", "INT64"),
            field("price", "NUMERIC"),
            field("blob", "BYTES"),
            field("blobs", "BYTES", "REPEATED"),
            field("day", "DATE"),
            field("ts", "TIMESTAMP"),
            field("ok", "BOOL"),
            field("items", "RECORD", "REPEATED", [field("sku", "STRING"), field("raw", "BYTES")]),
            field("gone", "STRING"),
        ]
    )
    return JsonRowCoder(schema)


def test_json_exports_deliver_bytes_decoded_from_base64():
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    line = json.dumps(
        {
            "id": "42",
            "price": "12.5",
            "blob": b64(b"\x00\xffhi"),
            "blobs": [b64(b"a"), b64(b"")],
            "day": "2024-05-01",
            "ts": "2024-05-01 12:30:05 UTC",
            "ok": True,
            "items": [{"sku": "x", "raw": b64(b"\x01")}],
        }
    ).encode()
    row = json_export_coder().decode(line)
    assert row == {
        "id": 42,
        "price": Decimal("12.5"),
        "blob": b"\x00\xffhi",
        "blobs": [b"a", b""],
        "day": "2024-05-01",
        "ts": "2024-05-01 12:30:05 UTC",
        "ok": True,
        "items": [{"sku": "x", "raw": b"\x01"}],
        "gone": None,
    }
    assert flatten_row(row) == {
        "id": 42,
        "price": 12.5,
        "blob": b"\x00\xffhi",
        "blobs": [b"a", b""],
        "day": "2024-05-01",
        "ts": "2024-05-01 12:30:05 UTC",
        "ok": True,
        "items.sku": ["x"],
        "items.raw": [b"\x01"],
        "gone": None,
    }


BAD_ROWS = [
    {"id": 7, "orders": [{"lines": [1, 2]}, {"lines": [3]}]},  # an array inside an array
    {"id": 8, "shape": {1, 2}},  # no BigQuery value is a set
    ("not", "a", "dict"),
]


def test_rows_that_cannot_be_mapped_are_rejected_with_a_stable_location():
    chunk, rejected = rows_to_chunk("events", "bigquery:p:d.t", [AVRO_ROW, *BAD_ROWS])
    assert len(chunk) == 1
    ids = [row_number(record_json(row)) for row in BAD_ROWS]
    assert [r.to_json() for r in rejected] == [
        {
            "source": "events",
            "location": f"bigquery:p:d.t:{ids[0]}",
            "reason": "bigquery: orders.lines: an array inside an array",
            "record": record_json(BAD_ROWS[0]),
        },
        {
            "source": "events",
            "location": f"bigquery:p:d.t:{ids[1]}",
            "reason": "bigquery: shape: unsupported value type set",
            "record": record_json(BAD_ROWS[1]),
        },
        {
            "source": "events",
            "location": f"bigquery:p:d.t:{ids[2]}",
            "reason": "bigquery: not a row but tuple",
            "record": record_json(BAD_ROWS[2]),
        },
    ]


def test_row_ids_depend_on_the_row_alone():
    assert row_number('{"id": 1}') == 739283081272213400  # XXH3-64 >> 1: the same everywhere
    rows = [{"id": i, "v": f"x{i}"} for i in range(50)]
    forward, _ = rows_to_chunk("s", "bigquery:query", rows)
    backward, _ = rows_to_chunk("s", "bigquery:query", rows[::-1])
    by_id = lambda c: {c.lines[i]: c.values("v")[i] for i in range(len(c))}  # noqa: E731
    assert by_id(forward) == by_id(backward)
    assert len(set(forward.lines)) == 50


def test_empty_repeated_records_give_empty_lists_to_leaves_seen_in_other_rows():
    chunk, _ = rows_to_chunk(
        "s",
        "bigquery:query",
        [{"items": [{"sku": "a"}]}, {"items": []}, {"items": None}],
    )
    assert chunk.values("items.sku") == [["a"], [], None]


def test_rows_to_chunks_on_a_local_pipeline():
    """Rows as Beam delivers them, mapped by the real transform: chunks, rejections, counts."""
    rows = [dict(AVRO_ROW, id=i) for i in range(5)] + BAD_ROWS[:2]
    opts = options({"table": "proj.ds.t", "chunk_rows": 2})
    source = SourceSpec("events", "bigquery", None, opts)
    with TestPipeline(runner="FnApiRunner") as p:
        chunks, rejected, counts = p | beam.Create(rows) | RowsToChunks(source)
        records = chunks | "Records" >> beam.FlatMap(
            lambda c: [
                (
                    c.path,
                    c.lines[i],
                    json.dumps(
                        {n: c.values(n)[i] for n in c.columns}, sort_keys=True, default=repr
                    ),
                )
                for i in range(len(c))
            ]
        )
        expected = [
            (
                "bigquery:proj:ds.t",
                row_number(record_json(dict(AVRO_ROW, id=i))),
                json.dumps(dict(AVRO_FIELDS, id=i), sort_keys=True, default=repr),
            )
            for i in range(5)
        ]
        assert_that(records, equal_to(expected), label="CheckRecords")
        assert_that(
            chunks | "Sizes" >> beam.Map(len) | beam.combiners.Top.Largest(1),
            equal_to([[2]]),
            label="CheckChunkSize",
        )
        assert_that(
            rejected | beam.Map(lambda r: r.reason),
            equal_to(
                [
                    "bigquery: orders.lines: an array inside an array",
                    "bigquery: shape: unsupported value type set",
                ]
            ),
            label="CheckRejected",
        )
        assert_that(
            counts | beam.CombinePerKey(sum), equal_to([("read/events", 7)]), label="CheckCounts"
        )


# --- end to end, with beam.Create in place of the read ----------------------------------------


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


@pytest.mark.slow
def test_etl_of_bigquery_rows_writes_every_value(tmp_path, monkeypatch):
    import tensorflow as tf

    from pipelines import etl

    rows = [dict(AVRO_ROW, id=i, score=i / 4, tags=[f"t{i}"] * (i % 3)) for i in range(20)]
    rows += [
        dict(AVRO_ROW, id=100, qty=Decimal("2.5")),  # NUMERIC with a fraction for an int feature
        dict(AVRO_ROW, id=101, day=None),  # a required feature missing
        BAD_ROWS[0],
    ]
    read_with = {}

    def create_rows(source, pipeline_options):
        read_with[source.name] = source.options_as(BigqueryOptions)
        return beam.Create(rows)

    monkeypatch.setattr(queries, "read_rows", create_rows)
    (tmp_path / "bq.yaml").write_text(
        """
name: bq
sources:
  - {name: events, format: bigquery, options: {table: "proj.ds.events", method: DIRECT_READ}}
key: id
features:
  id:     {type: int}
  score:  {type: float}
  price:  {type: float}
  qty:    {type: int}
  big:    {type: string}
  ok:     {type: string}
  name:   {type: string}
  blob:   {type: bytes}
  day:    {type: string}
  ts:     {type: string}
  tags:   {type: string, shape: [null], required: false}
  nums:   {type: int, shape: [3]}
  nothing: {type: string, required: false}
  city:   {type: string, source: events.address.city}
  lat:    {type: float, source: events.address.geo.lat}
  skus:   {type: string, shape: [null], source: events.items.sku}
  counts: {type: int, shape: [null], source: events.items.n}
  empty:  {type: int, shape: [null], source: events.no_items}
splits: {train: 0.5, eval: 0.5}
output: {path: out}
"""
    )
    assert etl.run(["--config", str(tmp_path / "bq.yaml")]) == 0
    assert read_with["events"].table == "proj:ds.events"

    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    # fields no feature reads are counted; the row rejected by the mapping carries none
    ignored = {"address.geo.lon": 22, "at": 22, "local": 22, "none": 22}
    assert manifest["sources"] == {
        "events": {"format": "bigquery", "records": 23, "ignored_fields": ignored}
    }
    assert manifest["rejected"]["reasons"] == {
        "bigquery: orders.lines: an array inside an array": 1,
        "day: missing required value": 1,
        "qty: not an integer": 1,
    }
    assert sum(s["records"] for s in manifest["splits"].values()) == 20
    rejected_file = out / "rejected/rejected-00000-of-00001.jsonl"
    rejected = [json.loads(line) for line in rejected_file.open()]
    assert sorted(r["location"] for r in rejected) == sorted(
        f"bigquery:proj:ds.events:{row_number(record_json(row))}" for row in rows[20:]
    )

    def values(feature):
        kind = feature.WhichOneof("kind")
        return list(getattr(feature, kind).value) if kind else None

    got = {}
    for split in manifest["splits"].values():
        for f in split["files"]:
            for record in tf.data.TFRecordDataset(str(out / f["path"]), compression_type="GZIP"):
                example = tf.train.Example.FromString(record.numpy())
                fields = {k: values(v) for k, v in example.features.feature.items()}
                got[fields["id"][0]] = fields
    expected = {}
    for row in rows[:20]:
        expected[row["id"]] = {
            "id": [row["id"]],
            "score": [_f32(row["score"])],
            "price": [12.5],
            "qty": [3],
            "big": [b"123456789012345678901234567890"],
            "ok": [b"true"],
            "name": ['Åsa "quoted"'.encode()],
            "blob": [b"\x00\xff\x10"],
            "day": [b"2024-05-01"],
            "ts": [b"2024-05-01T12:30:05.250000+00:00"],
            "tags": [t.encode() for t in row["tags"]],
            "nums": [1, 2, 3],
            "nothing": [],
            "city": [b"Oslo"],
            "lat": [_f32(59.9)],
            "skus": [b"x1", b"x2"],
            "counts": [2, 5],
            "empty": [],
        }
    assert got == expected
