"""The Beam steps of the query formats: `ReadSql` and `ReadBigquery`, each applied to the
pipeline root, return (chunks, rejected, counts) like `transforms.sources.read.ReadSource`.

What they read and how rows become records is each format's own module
(`transforms.sources.sql`, `transforms.sources.bigquery`), which imports no Beam: a config that
names a query source is checked without loading Beam (`shardflow predict`, `init`); the
format's `read(source)` imports this module when a pipeline is built.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import apache_beam as beam
from apache_beam.io.gcp.bigquery_read_internal import _JsonToDictCoder
from apache_beam.options.pipeline_options import GoogleCloudOptions

import transforms.coders  # noqa: F401 - registers the coder of the RawChunks read here
from transforms.contract.config import SourceSpec
from transforms.records import COUNTS, REJECTED, RawChunk, gc_paused, read_counter
from transforms.sources.bigquery import BigqueryOptions, rows_to_chunk, source_label
from transforms.sources.database import Database
from transforms.sources.read import tagged
from transforms.sources.sql import Partition, SqlOptions, plan_partitions, read_partition

logger = logging.getLogger(__name__)

# --- sql ------------------------------------------------------------------------------------------


class _PlanPartitionsFn(beam.DoFn):
    def __init__(self, source: SourceSpec):
        self._source = source

    def process(self, _):
        if self._source.options_as(SqlOptions).partition_column is None:
            yield Partition(None, None)
            return
        db = Database(self._source)
        try:
            parts = plan_partitions(db, self._source)
        finally:
            db.close()
        logger.info("sql source %r: %d partition(s)", self._source.name, len(parts))
        yield from parts


class _ReadPartitionFn(beam.DoFn):
    def __init__(self, source: SourceSpec):
        self._source = source
        self._db: Database | None = None

    def setup(self):
        self._db = Database(self._source)

    def process(self, partition: Partition):
        assert self._db is not None  # Beam calls setup first
        with gc_paused():
            items = read_partition(self._db, self._source, partition)
            yield from tagged(items, self._source.name)

    def teardown(self):
        if self._db is not None:
            self._db.close()
            self._db = None


class ReadSql(beam.PTransform):
    """Reads one sql source, a partition per Beam element. Returns (chunks, rejected, counts)."""

    def __init__(self, source: SourceSpec):
        super().__init__()
        self._source = source

    def expand(self, pbegin):
        read = (
            pbegin
            | "Start" >> beam.Impulse()
            | "PlanPartitions" >> beam.ParDo(_PlanPartitionsFn(self._source))
            # a fusion break: the partitions spread over the workers instead of staying on one
            | "SpreadPartitions" >> beam.Reshuffle()
            | "ReadPartitions"
            >> beam.ParDo(_ReadPartitionFn(self._source))
            .with_output_types(RawChunk)
            .with_outputs(REJECTED, COUNTS, main="chunks")
        )
        return read.chunks, read[REJECTED], read[COUNTS]


# --- bigquery -------------------------------------------------------------------------------------


class JsonRowCoder(_JsonToDictCoder):
    """Beam's coder of JSON-export rows, with BYTES decoded from their base64 text.

    Beam's own keeps the base64 text (as bytes), so BYTES would differ between JSON and Avro
    exports; the table schema the coder is built with says which fields are BYTES.
    """

    @staticmethod
    def _to_bytes(value):
        return base64.b64decode(value, validate=True)


def read_arguments(opts: BigqueryOptions) -> dict[str, Any]:
    """The keyword arguments of `beam.io.ReadFromBigQuery` for a source's options."""
    from apache_beam.io.gcp.bigquery import BigQueryQueryPriority
    from apache_beam.io.gcp.internal.clients.bigquery import DatasetReference

    args: dict[str, Any] = {"method": opts.method, "project": opts.project}
    if opts.table is not None:
        args["table"] = opts.table
    else:
        args["query"] = opts.query
        args["use_standard_sql"] = True
        args["flatten_results"] = False  # records are flattened here, by name
        args["query_priority"] = getattr(BigQueryQueryPriority, opts.query_priority)
        if opts.temp_dataset is not None:
            project, dataset = opts.temp_dataset.rsplit(":", 1)
            args["temp_dataset"] = DatasetReference(projectId=project, datasetId=dataset)
    if opts.method == "EXPORT":
        args["gcs_location"] = opts.gcs_location
        if opts.use_json_exports:
            args["use_json_exports"] = True
            args["coder"] = JsonRowCoder
    elif opts.table is not None:
        if opts.selected_fields is not None:
            args["selected_fields"] = opts.selected_fields
        if opts.row_restriction is not None:
            args["row_restriction"] = opts.row_restriction
    return args


def read_rows(source: SourceSpec, pipeline_options) -> beam.PTransform:
    """Beam's BigQuery read of a source: a PTransform from the pipeline root to row dicts.

    EXPORT writes the rows to files on GCS first: `gcs_location`, else `--temp_location`.
    """
    opts = source.options_as(BigqueryOptions)
    if opts.method == "EXPORT" and opts.gcs_location is None:
        temp = pipeline_options.view_as(GoogleCloudOptions).temp_location
        if not temp or not temp.startswith("gs://"):
            raise ValueError(
                f"bigquery source {source.name!r}: method EXPORT needs a gs:// folder for the "
                "exported rows: give options.gcs_location or the --temp_location pipeline option"
            )
    return beam.io.ReadFromBigQuery(**read_arguments(opts))


class ReadBigquery(beam.PTransform):
    """Reads one bigquery source. Returns (chunks, rejected, counts)."""

    def __init__(self, source: SourceSpec):
        super().__init__()
        self._source = source

    def expand(self, pbegin):
        rows = pbegin | "ReadFromBigQuery" >> read_rows(self._source, pbegin.pipeline.options)
        return rows | "MapRows" >> RowsToChunks(self._source)


class RowsToChunks(beam.PTransform):
    """Row dicts → (chunks of up to `chunk_rows` records, rejected rows, read counts)."""

    def __init__(self, source: SourceSpec):
        super().__init__()
        self._source = source

    def expand(self, rows):
        size = self._source.options_as(BigqueryOptions).chunk_rows
        mapped = (
            rows
            | "BatchRows" >> beam.BatchElements(min_batch_size=size, max_batch_size=size)
            | "RowsToRecords"
            >> beam.ParDo(_RowsToChunkFn(self._source))
            .with_output_types(RawChunk)
            .with_outputs(REJECTED, COUNTS, main="chunks")
        )
        return mapped.chunks, mapped[REJECTED], mapped[COUNTS]


class _RowsToChunkFn(beam.DoFn):
    def __init__(self, source: SourceSpec):
        self._source = source
        self._path = source_label(source.options_as(BigqueryOptions))

    def process(self, rows: list[Any]):
        with gc_paused():
            chunk, rejected = rows_to_chunk(self._source.name, self._path, rows)
        if chunk is not None:
            yield chunk
        for record in rejected:
            yield beam.pvalue.TaggedOutput(REJECTED, record)
        yield beam.pvalue.TaggedOutput(COUNTS, (read_counter(self._source.name), len(rows)))
