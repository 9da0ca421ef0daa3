"""The reference of the source formats' `options` (`pipelines.config.reference`): one
`Part` per format, in the contract's order; each checked against the format's own options
checker (transforms/sources/<format>.py) by tests/pipelines/config/test_reference.py.

Longer than most modules because it is data, not logic: every source format's `options`, key by
key, each with its type, default, bounds, description and example, kept side by side in the
contract's order, as the reference page lists them.
"""

from __future__ import annotations

from pipelines.config.reference_keys import REQUIRED, Key, Part
from transforms.contract.layout import COMPRESSIONS
from transforms.records import CHUNK_ROWS
from transforms.sources import registry


def _options(fmt: str, intro: str, keys: tuple[Key, ...], example: str) -> Part:
    return Part(
        title=f"Options of `format: {fmt}`",
        path="sources[].options",
        intro=intro,
        keys=keys,
        example=example,
        kind="options",
        format=fmt,
    )


_ENCODING = Key(
    "encoding",
    "string",
    "The text encoding of the files: any Python text codec name (`latin-1`, `utf-16`, ...).",
    "latin-1",
    default="utf-8",
    nullable=False,
)

OPTIONS = (
    _options(
        "csv",
        "Delimited text files; the first line is the header unless `header: false`.",
        (
            Key(
                "delimiter",
                "string",
                "The character between fields.",
                ";",
                default=",",
                length=(1, 1),
                nullable=False,
            ),
            Key(
                "header",
                "boolean",
                "Whether the first line names the columns; with `false`, give `columns`.",
                False,
                default=True,
                nullable=False,
                context={"columns": ["id", "name"]},
            ),
            Key(
                "columns",
                "list of strings",
                "The column names: required when `header` is false; with a header they rename the "
                "columns.",
                ["id", "name", "score"],
            ),
            Key(
                "null_values",
                "list of strings",
                "Cells that are missing values.",
                ["", "NA"],
                default=[""],
                nullable=False,
            ),
            _ENCODING,
            Key(
                "list_delimiter",
                "string",
                "How a cell holds a list, for `shape: [n]` and `[null]` features (an empty cell "
                "is an empty list).",
                ";",
                default="|",
                length=(1, None),
                nullable=False,
            ),
        ),
        """\
sources:
  - name: measurements
    format: csv
    path: data/*.csv
    options: {delimiter: ";", null_values: ["", NA], list_delimiter: ","}
""",
    ),
    _options(
        "jsonl",
        "JSON Lines: one JSON object per line; JSON `null` is a missing value.",
        (_ENCODING,),
        """\
sources:
  - {name: observations, format: jsonl, path: data/*.jsonl, options: {encoding: utf-8}}
""",
    ),
    _options(
        "parquet",
        "Parquet files; nested columns become dotted field names.",
        (
            Key(
                "columns",
                "list of strings",
                "The top-level columns to read (default: all); only those are read from the file.",
                ["trip_id", "fare", "pickup"],
            ),
        ),
        """\
sources:
  - {name: trips, format: parquet, path: data/trips/*.parquet, options: {columns: [id, fare]}}
""",
    ),
    _options(
        "avro",
        "Avro object container files. This format has no options.",
        (),
        """\
sources:
  - {name: events, format: avro, path: data/events-*.avro}
""",
    ),
    _options(
        "tfrecord",
        "Files of serialized `tf.train.Example`s (shardflow's own shards too).",
        (
            Key(
                "compression",
                "string",
                "How the files are compressed: `auto` detects it (names ending in `.gz`, `.bz2`, "
                "... are decompressed by their extension whatever the option).",
                "gzip",
                default="auto",
                allowed=("auto", *COMPRESSIONS),
                nullable=False,
            ),
        ),
        """\
sources:
  - name: previous
    format: tfrecord
    path: out/previous/train/*.tfrecord.gz
    options: {compression: gzip}
""",
    ),
    _options(
        "text",
        "Text files: one record per line.",
        (
            _ENCODING,
            Key(
                "field",
                "string",
                "The name of the one field holding the whole line (not with `regex`).",
                "message",
                default="line",
                length=(1, None),
                nullable=False,
            ),
            Key(
                "regex",
                "string",
                "A Python regular expression that must match the whole line; each named group "
                "`(?P<name>...)` is a field. A line it does not match is rejected.",
                r"(?P<level>[A-Z]+) (?P<ms>\d+)ms",
                length=(1, None),
            ),
            Key(
                "skip_blank_lines",
                "boolean",
                "Whether blank lines (empty or only whitespace) are skipped rather than records.",
                False,
                default=True,
                nullable=False,
            ),
        ),
        """\
sources:
  - name: logs
    format: text
    path: logs/*.log
    options: {regex: '(?P<level>[A-Z]+) req=(?P<id>\\d+) took=(?P<ms>[\\d.]+)ms'}
""",
    ),
    _options(
        "binary",
        (
            "Files of fixed-length records: `header_bytes`, then records of `record_bytes` each, "
            "then `footer_bytes`. Without `struct` and `fields` a record is one field `record`."
        ),
        (
            Key(
                "record_bytes",
                "integer",
                "The size of one record in bytes.",
                26,
                default=REQUIRED,
                minimum=1,
                maximum=1 << 30,
            ),
            Key(
                "header_bytes",
                "integer",
                "Bytes skipped at the start of every file.",
                16,
                default=0,
                minimum=0,
                nullable=False,
            ),
            Key(
                "footer_bytes",
                "integer",
                "Bytes skipped at the end of every file.",
                8,
                default=0,
                minimum=0,
                nullable=False,
            ),
            Key(
                "struct",
                "string",
                "A Python `struct` format of one record; its size must be `record_bytes`, and "
                "`fields` names each item it unpacks.",
                "<qfH?3x8s",
                length=(1, None),
                context={"record_bytes": 26, "fields": ["id", "score", "count", "flag", "tag"]},
            ),
            Key(
                "fields",
                "list of strings or mapping",
                "With `struct`: one name per item it unpacks. Without: named byte ranges of a "
                "record, `{name: {offset, length, type, endian}}`.",
                {"uid": {"offset": 0, "length": 4, "type": "uint", "endian": "big"}},
                nullable=False,
                length=(1, None),
                context={"record_bytes": 8},
            ),
            Key(
                "fields.<name>",
                "mapping",
                "One named byte range of a record.",
                {"offset": 0, "length": 4, "type": "uint"},
                nullable=False,
            ),
            Key(
                "fields.<name>.offset",
                "integer",
                "Where the range starts in the record.",
                4,
                default=REQUIRED,
                minimum=0,
            ),
            Key(
                "fields.<name>.length",
                "integer",
                "The range's size: 1, 2, 4 or 8 for `int` and `uint`, 2, 4 or 8 for `float`; it "
                "must fit in `record_bytes`.",
                4,
                default=REQUIRED,
                minimum=1,
            ),
            Key(
                "fields.<name>.type",
                "string",
                "How the bytes are read: integers, a float, the bytes unchanged, or UTF-8 text "
                "with trailing NUL bytes removed.",
                "float",
                default=REQUIRED,
                allowed=("int", "uint", "float", "bytes", "string"),
            ),
            Key(
                "fields.<name>.endian",
                "string",
                "The byte order of `int`, `uint` and `float`.",
                "big",
                default="little",
                allowed=("little", "big"),
                nullable=False,
            ),
        ),
        """\
sources:
  - name: points
    format: binary
    path: data/points.bin
    options:
      record_bytes: 26
      header_bytes: 16
      struct: "<qfH?3x8s"           # int64, float32, uint16, bool, 3 pad bytes, 8 bytes
      fields: [id, score, count, flag, tag]
""",
    ),
    _options(
        "images",
        (
            "Folders of image files, read recursively: one record per file, with the fields "
            "`image`, `height`, `width`, `channels`, `filename` and `label`."
        ),
        (
            Key(
                "label_from",
                "string",
                "Where the field `label` comes from: the folder holding the file, `label_regex`, "
                "or nowhere (no `label` field).",
                "none",
                default="parent_dir",
                default_text="`parent_dir` (`regex` with `label_regex`)",
                allowed=("parent_dir", "regex", "none"),
                nullable=False,
            ),
            Key(
                "label_regex",
                "string",
                "A regular expression searched in the file's path relative to the source folder; "
                "the label is its group `label`, else its only group.",
                r"(?P<label>[a-z]+)_\d+\.jpg$",
                length=(1, None),
            ),
            Key(
                "extensions",
                "list of strings or string",
                'The file extensions read (case-insensitive); other files are skipped. `"*"` '
                "reads every file.",
                [".png", ".jpg"],
                default=list(registry.describe("images").extensions),
                nullable=False,
                schema={
                    "anyOf": [
                        {
                            "type": "array",
                            "items": {"type": "string", "minLength": 1},
                            "minItems": 1,
                        },
                        {"const": "*"},
                    ]
                },
            ),
            Key(
                "resize",
                "list of integers",
                "`[height, width]`: scales every image to exactly that size.",
                [64, 64],
                minimum=1,
                length=(2, 2),
            ),
            Key(
                "encode",
                "string",
                "Re-encodes every image in this format (without it the bytes are the file's, or "
                "PNG/JPEG after `resize`).",
                "png",
                allowed=("png", "jpeg"),
            ),
            Key(
                "quality",
                "integer",
                "The JPEG quality of re-encoded images (not with `png`).",
                80,
                default=90,
                minimum=1,
                maximum=100,
                nullable=True,
            ),
        ),
        """\
sources:
  - name: photos
    format: images
    path: photos                    # a folder of class folders: photos/cat/001.jpg ...
    options: {label_from: parent_dir, resize: [64, 64], encode: jpeg, quality: 85}
""",
    ),
    _options(
        "sql",
        "A table or a query of a SQLite file or a PostgreSQL server; no `path`.",
        (
            Key(
                "url",
                "string",
                "`sqlite:///relative/path.db`, `sqlite:////absolute/path.db` or "
                "`postgresql://[user@]host[:port]/database`, without a password.",
                "postgresql://etl@db.internal:5432/telemetry",
                default=REQUIRED,
                length=(1, None),
            ),
            Key(
                "table",
                "string",
                "A table or view, `name` or `schema.name`. Give exactly one of `table` and "
                "`query`.",
                "public.readings",
                length=(1, None),
            ),
            Key(
                "query",
                "string",
                "A SELECT statement. Give exactly one of `table` and `query`.",
                "SELECT id, label FROM labels WHERE ok = 1",
                length=(1, None),
                context={"table": None},
            ),
            Key(
                "partition_column",
                "string",
                "A numeric column to cut the read into `partitions` ranges read in parallel.",
                "id",
                length=(1, None),
            ),
            Key(
                "partitions",
                "integer",
                "How many ranges, with `partition_column`.",
                8,
                default=4,
                minimum=1,
                nullable=True,
                context={"partition_column": "id"},
            ),
            Key(
                "chunk_rows",
                "integer",
                "Rows fetched per round trip (and per chunk of records).",
                1000,
                default=CHUNK_ROWS,
                minimum=1,
                nullable=False,
            ),
            Key(
                "user",
                "string",
                "The PostgreSQL user, when the URL names none (else `$PGUSER`, else the login "
                "name).",
                "etl",
                length=(1, None),
                context={"url": "postgresql://db.internal/telemetry"},
            ),
            Key(
                "password_env",
                "string",
                "The environment variable that holds the PostgreSQL password (`PGPASSWORD` when "
                "not given).",
                "TELEMETRY_DB_PASSWORD",
                default_text="`PGPASSWORD`",
                length=(1, None),
                context={"url": "postgresql://db.internal/telemetry"},
            ),
            Key(
                "password_file",
                "string",
                "A file (local or `gs://`) that holds the PostgreSQL password; not with "
                "`password_env`.",
                "gs://secrets/db-password",
                length=(1, None),
                context={"url": "postgresql://db.internal/telemetry"},
            ),
        ),
        """\
sources:
  - name: readings
    format: sql
    options:
      url: postgresql://etl@db.internal:5432/telemetry
      table: public.readings        # or query: "SELECT ..."
      partition_column: id
      partitions: 8
      password_env: TELEMETRY_DB_PASSWORD
""",
    ),
    _options(
        "bigquery",
        "A BigQuery table or the result of a standard SQL query; no `path`.",
        (
            Key(
                "table",
                "string",
                "`project:dataset.table`, `project.dataset.table` or `dataset.table`. Give exactly "
                "one of `table` and `query`.",
                "my-proj:analytics.events",
                length=(1, None),
            ),
            Key(
                "query",
                "string",
                "A query in standard SQL. Give exactly one of `table` and `query`.",
                "SELECT id, score FROM `my-proj.analytics.events`",
                length=(1, None),
                context={"table": None},
            ),
            Key(
                "method",
                "string",
                "`EXPORT` exports the rows to files on GCS; `DIRECT_READ` uses the BigQuery "
                "Storage Read API. Case-insensitive.",
                "DIRECT_READ",
                default="EXPORT",
                allowed=("EXPORT", "DIRECT_READ"),
                case_insensitive=True,
                nullable=False,
            ),
            Key(
                "project",
                "string",
                "The project that runs the jobs when the `--project` pipeline option is not given.",
                "my-proj",
                length=(1, None),
            ),
            Key(
                "gcs_location",
                "string",
                "With `method: EXPORT`: the `gs://` folder for the exported files.",
                "gs://my-bucket/bq-export",
                default_text="`--temp_location`",
                pattern="^gs://",
            ),
            Key(
                "use_json_exports",
                "boolean",
                "With `method: EXPORT`: export JSON instead of Avro.",
                True,
                default=False,
                nullable=False,
            ),
            Key(
                "query_priority",
                "string",
                "With `query`: the priority of the query job.",
                "INTERACTIVE",
                default="BATCH",
                allowed=("BATCH", "INTERACTIVE"),
                case_insensitive=True,
                nullable=False,
                context={"table": None, "query": "SELECT 1"},
            ),
            Key(
                "temp_dataset",
                "string",
                "With `query`: `project.dataset` where the query's temporary table is created.",
                "my-proj.scratch",
                length=(1, None),
                context={"table": None, "query": "SELECT 1"},
            ),
            Key(
                "selected_fields",
                "list of strings",
                "With `method: DIRECT_READ` and `table`: the columns to read.",
                ["id", "address.city"],
                length=(1, None),
                context={"method": "DIRECT_READ"},
            ),
            Key(
                "row_restriction",
                "string",
                "With `method: DIRECT_READ` and `table`: a filter like a WHERE clause.",
                "day >= '2024-01-01'",
                length=(1, None),
                context={"method": "DIRECT_READ"},
            ),
            Key(
                "chunk_rows",
                "integer",
                "Rows per chunk handed to validation.",
                1000,
                default=CHUNK_ROWS,
                minimum=1,
                nullable=False,
            ),
        ),
        """\
sources:
  - name: events
    format: bigquery
    options:
      query: "SELECT id, score FROM `my-proj.analytics.events` WHERE day >= '2024-01-01'"
      method: DIRECT_READ
      project: my-proj
""",
    ),
)
