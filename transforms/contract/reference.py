"""The dataset config's reference: every key, with its type, default, allowed values, a
description and an example, declared once as data.

`pipelines.config` and `pipelines.preprocessing` take the keys they accept from here, and
`transforms.contract.configdoc` renders it as the reference page (docs/reference/config.md) and as
a JSON Schema for editors (docs/config.schema.json); tests/transforms/contract/test_reference.py
checks it against what the parser and every source format's options checker accept.

A `Part` is one mapping of the config: the top level, a source, a format's `options`, a feature,
`splits`, `output`, `transform` and the transform ops. Its keys are named relative to it; a
dotted name is a key inside another (`fields.<name>.offset`), and `<name>` stands for any name
the user chooses (a feature, a split, a field). No Beam, no TensorFlow, no YAML here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from transforms.contract.config import (
    ALLOWANCES,
    ANOMALY_KINDS,
    DEFAULT_BLOCKING,
    FEATURE_TYPES,
    MATERIALIZE,
    SOURCE_FORMATS,
    TRANSFORM_OPS,
)
from transforms.contract.layout import (
    COMPRESSIONS,
    DEFAULT_COMPRESSION,
    DEFAULT_COMPRESSION_LEVEL,
    DEFAULT_SHARD_SIZE_MB,
    REJECTED_DIR,
    SPILL_DIR,
    TRANSFORM_DIR,
)


class _Required:
    """The default of a key that must be given."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
NAME = "<name>"  # a key segment that stands for any name (a feature, a split, a field)
QUERY_FORMATS = ("sql", "bigquery")  # formats without `path`: everything is in `options`
CHUNK_ROWS = 8192  # rows per chunk of the query formats (transforms.records.CHUNK_ROWS)

# The value types of keys, as the reference page names them (JSON Schema in configdoc).
TYPES = (
    "string",
    "integer",
    "number",
    "boolean",
    "mapping",
    "list of strings",
    "list of integers",
    "list of mappings",
    "list",
    "list of strings or mapping",
    "list of strings or string",
    "string or list of strings",
    "scalar",
    "any",
    "no parameters",
    "op or list of ops",
)


@dataclasses.dataclass(frozen=True)
class Key:
    """One key of the config: `Key(name, type, description, example, ...)`.

    `default` is the value the parser uses when the key is absent (None: unset, REQUIRED: must be
    given); `default_text` says it in words where the value alone would mislead. `allowed` is a
    fixed set of values (for lists, of their items); `minimum`/`maximum` bound numbers (for
    lists of integers, their items); `length` is the (min, max) length of a string, list or
    mapping. `nullable`: whether YAML null stands for the default (None: unless the key is
    required). `schema` is JSON Schema for a value `type` alone does not describe.
    `context` (source options only) holds the other options the example is given with: the key
    applies only alongside them (a null there means "left out").
    """

    name: str
    type: str
    description: str
    example: Any
    default: Any = None
    default_text: str | None = None
    allowed: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    length: tuple[int | None, int | None] | None = None
    pattern: str | None = None
    case_insensitive: bool = False
    nullable: bool | None = None
    schema: Mapping[str, Any] | None = None
    context: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def accepts_null(self) -> bool:
        return not self.required if self.nullable is None else self.nullable


@dataclasses.dataclass(frozen=True)
class Part:
    """One mapping of the config and its keys.

    `path` is where it sits in the config (`sources[]` is any entry of the list `sources`,
    `<name>` any key of a mapping). `kind`: `config` (checked by pipelines.config and
    pipelines.preprocessing), `options` (a source format's options, checked by
    transforms/sources/<format>.py; `format` names it) or `ops` (the transform ops of one
    feature). `example` is YAML: top-level keys of a config, complete with the top-level part's.
    """

    title: str
    path: str
    intro: str
    keys: tuple[Key, ...]
    example: str
    kind: str = "config"
    format: str | None = None

    def key(self, name: str) -> Key:
        for k in self.keys:
            if k.name == name:
                return k
        raise KeyError(name)

    def key_names(self) -> frozenset[str]:
        """The keys directly in this part's mapping (not nested ones, not `<name>`)."""
        return frozenset(k.name for k in self.keys if "." not in k.name and k.name != NAME)

    def full_path(self, key: Key) -> str:
        return f"{self.path}.{key.name}" if self.path else key.name


def _applies(op: str) -> str:
    return f"For {', '.join(TRANSFORM_OPS[op][1])} features."


_NAME_PATTERN = "^[a-z0-9_-]+$"
_SIDE = {"type": "integer", "minimum": 1}

TOP = Part(
    title="Top level",
    path="",
    intro=(
        "A dataset config is one YAML mapping. Relative paths in it are resolved against the "
        "config file's folder. YAML `null` (or `key:` with no value) means the default."
    ),
    keys=(
        Key(
            "name",
            "string",
            "The dataset's name, written to the manifest.",
            "penguins",
            default=REQUIRED,
            pattern=_NAME_PATTERN,
        ),
        Key(
            "sources",
            "list of mappings",
            "The inputs of the dataset, one or more (see Sources).",
            [{"name": "measurements", "format": "csv", "path": "data/*.csv"}],
            default=REQUIRED,
            length=(1, None),
        ),
        Key(
            "key",
            "string",
            "The field that identifies a record: it drops duplicates, drives the split hash and "
            "joins sources. Without it a record's split comes from its content.",
            "id",
        ),
        Key(
            "combine",
            "string",
            "How the records of several sources are combined: `union` takes every record of "
            "every source; `join` is a full outer join on `key` (needs `key` and two sources).",
            "join",
            default="union",
            allowed=("union", "join"),
        ),
        Key(
            "features",
            "mapping",
            "The schema: every feature written to the examples, by name (see Features).",
            {"year": {"type": "int"}},
            default=REQUIRED,
            length=(1, None),
            schema={"propertyNames": {"minLength": 1}},
        ),
        Key("label", "string", "The feature the trainer predicts; one of the features.", "species"),
        Key(
            "splits",
            "mapping",
            "Split names and the fraction of the records each gets; fractions sum to 1 (see "
            "Splits).",
            {"train": 0.8, "eval": 0.1, "test": 0.1},
            default={"train": 0.9, "eval": 0.1},
            length=(1, None),
            schema={
                "propertyNames": {
                    "pattern": _NAME_PATTERN,
                    "maxLength": 100,
                    "not": {"enum": [REJECTED_DIR, TRANSFORM_DIR, SPILL_DIR]},
                }
            },
        ),
        Key(
            "transform",
            "mapping",
            "tf.Transform preprocessing, analyzed on the `train` split (see Transform).",
            {"features": {"bill_length_mm": "z_score"}},
        ),
        Key(
            "output",
            "mapping",
            "Where and how the dataset is written (see Output).",
            {"path": "out/penguins"},
        ),
        Key(
            "validation",
            "mapping",
            "What the run's statistics are checked against (a schema, a baseline dataset, the "
            "train split) and the limits; which anomalies fail the run (see Validation).",
            {"drift": {"l_infinity": 0.1}},
        ),
    ),
    example="""\
name: penguins
sources:
  - {name: measurements, format: csv, path: data/measurements.csv}
  - {name: observations, format: jsonl, path: data/observations.jsonl}
key: id
combine: union
features:
  id:             {type: int}
  bill_length_mm: {type: float, required: false, min: 0}
  body_mass_g:    {type: int, required: false}
  island:         {type: string}
  sex:            {type: string, required: false, default: unknown}
  species:        {type: string, values: [Adelie, Chinstrap, Gentoo]}
label: species
splits: {train: 0.8, eval: 0.1, test: 0.1}
output:
  path: out/penguins
""",
)

SOURCE = Part(
    title="Sources",
    path="sources[]",
    intro="Each entry of `sources` is one input: a format, a location and its options.",
    keys=(
        Key(
            "name",
            "string",
            "The source's name, unique within the config, without dots; features name it in "
            "`source: SOURCE.FIELD`.",
            "measurements",
            default=REQUIRED,
            pattern=r"^[^.]+$",
            length=(1, None),
        ),
        Key(
            "format",
            "string",
            "The format of the source (see the options of each below).",
            "csv",
            default=REQUIRED,
            allowed=SOURCE_FORMATS,
        ),
        Key(
            "path",
            "string",
            "A file, a glob or a folder, local or `gs://`; a relative path is resolved against "
            "the config's folder. Required for file formats; `sql` and `bigquery` sources have "
            "none.",
            "data/*.csv",
            default_text="required for file formats",
            length=(1, None),
        ),
        Key(
            "options",
            "mapping",
            "The format's options; an unknown option is an error naming it.",
            {"delimiter": ";"},
            default={},
        ),
    ),
    example="""\
sources:
  - name: measurements
    format: csv
    path: data/measurements.csv     # a file, a glob or a folder; local or gs://
    options: {null_values: ["", NA]}
  - name: bands
    format: sql                     # no path: the database is in the options
    options: {url: "sqlite:///bands.db", table: bands}
""",
)


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
                default=[".bmp", ".gif", ".jpeg", ".jpg", ".png", ".webp"],
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

FEATURE = Part(
    title="Features",
    path="features.<name>",
    intro=(
        "Each key of `features` is a feature's name; its value says the feature's type and "
        "how it is checked. A feature takes the field of the same name from any source, or "
        "the field given by `source`."
    ),
    keys=(
        Key(
            "type",
            "string",
            "`int` (int64), `float` (float32), `string` (UTF-8 text), `bytes`, or `image` "
            "(encoded image bytes, checked by decoding).",
            "float",
            default=REQUIRED,
            allowed=FEATURE_TYPES,
        ),
        Key(
            "shape",
            "list of integers",
            "`[]` a scalar, `[n]` a list of exactly n values, `[null]` a list of any length.",
            [None],
            default=[],
            default_text="`[]` (a scalar)",
            length=(0, 1),
            schema={
                "items": {
                    "anyOf": [
                        {"type": "integer", "minimum": 1, "maximum": 1_000_000},
                        {"type": "null"},
                    ]
                }
            },
        ),
        Key(
            "required",
            "boolean",
            "Whether a record without a value is rejected; an optional feature may be missing.",
            False,
            default=True,
        ),
        Key(
            "default",
            "any",
            "The value written for a missing value of an optional feature (a required feature "
            "takes none), of the feature's type and shape.",
            0.0,
        ),
        Key(
            "values",
            "list",
            "The only allowed values, for `int` and `string` features (also the vocabulary the "
            "trainer uses).",
            ["Adelie", "Chinstrap", "Gentoo"],
            length=(1, None),
            schema={"items": {"type": ["number", "string"]}},
        ),
        Key("min", "number", "The smallest allowed value, for `int` and `float` features.", 0),
        Key("max", "number", "The largest allowed value, for `int` and `float` features.", 10000),
        Key(
            "source",
            "string",
            "`SOURCE.FIELD`: take the value from this field of this source only (split at the "
            "first dot; the field may contain dots).",
            "photos.image",
            pattern=r"^[^.]+\..+",
        ),
        Key(
            "image_size",
            "list of integers",
            "For a scalar `image` feature: `[height, width]` or `[height, width, channels]` "
            "(channels 1, 3 or 4; 3 by default), the size the trainer decodes and resizes to.",
            [64, 64],
            minimum=1,
            length=(2, 3),
            schema={"prefixItems": [_SIDE, _SIDE, {"enum": [1, 3, 4]}]},
        ),
    ),
    example="""\
features:
  bill_length_mm: {type: float, required: false, min: 0}
  body_mass_g:    {type: int, required: false, default: 0}
  species:        {type: string, values: [Adelie, Chinstrap, Gentoo]}
  tags:           {type: string, shape: [null], required: false}
  readings:       {type: float, shape: [3], required: false}
  notes:          {type: string, required: false, source: observations.notes}
""",
)

SPLITS = Part(
    title="Splits",
    path="splits",
    intro=(
        "Each key of `splits` is a split's name, its value the fraction of the records it "
        "gets; the fractions sum to 1. A record's split is a stable hash of its `key` (of its "
        "content without one)."
    ),
    keys=(
        Key(
            NAME,
            "number",
            "The fraction of the records in this split. Split names match `[a-z0-9_-]+` (at "
            f"most 100 characters) and are not `{REJECTED_DIR}`, `{TRANSFORM_DIR}` or "
            f"`{SPILL_DIR}`.",
            0.8,
            minimum=0,
            maximum=1,
            exclusive_minimum=True,
            nullable=False,
        ),
    ),
    example="""\
splits: {train: 0.8, eval: 0.1, test: 0.1}
""",
)

OUTPUT = Part(
    title="Output",
    path="output",
    intro="Where the dataset is written, how its shards are compressed and sized, and when a run "
    "fails instead of publishing.",
    keys=(
        Key(
            "path",
            "string",
            "The dataset's folder, local or `gs://bucket/prefix`; `--output` overrides it.",
            "out/penguins",
            default_text="required unless `--output` is given",
        ),
        Key(
            "compression",
            "string",
            "How the shards are compressed.",
            "zlib",
            default=DEFAULT_COMPRESSION,
            allowed=tuple(COMPRESSIONS),
        ),
        Key(
            "compression_level",
            "integer",
            "The zlib level of `gzip` and `zlib` shards: 1 is fastest, 9 smallest.",
            9,
            default=DEFAULT_COMPRESSION_LEVEL,
            minimum=1,
            maximum=9,
        ),
        Key(
            "shard_size_mb",
            "number",
            "The target size of one shard, in MB.",
            256,
            default=DEFAULT_SHARD_SIZE_MB,
            minimum=0.001,
            maximum=16384,
        ),
        Key(
            "max_rejected",
            "integer",
            "Fail the run, publishing nothing, when more records than this are rejected.",
            100,
            default_text="no limit",
            minimum=0,
        ),
        Key(
            "max_rejected_fraction",
            "number",
            "Fail the run, publishing nothing, when more than this fraction of the records "
            "read are rejected.",
            0.01,
            default_text="no limit",
            minimum=0,
            maximum=1,
        ),
        Key(
            "allow",
            "string or list of strings",
            "What the run may publish although it looks like a mistake: a source that "
            "contributed no record, an empty split, a key or field missing from every record "
            "of a source.",
            ["empty_split"],
            default=[],
            allowed=ALLOWANCES,
        ),
    ),
    example="""\
output:
  path: out/penguins
  compression: gzip
  compression_level: 6
  shard_size_mb: 128
  max_rejected: 100
  max_rejected_fraction: 0.01
  allow: [empty_split]
""",
)

TRANSFORM = Part(
    title="Transform",
    path="transform",
    intro=(
        "tf.Transform preprocessing: the ETL analyzes the `train` split (the config needs "
        "one) and writes the transform graph beside the shards; the trainer and the exported "
        "model apply it. Give either `features` or `module`."
    ),
    keys=(
        Key(
            "features",
            "mapping",
            "Declarative ops per feature (see Transform ops). Features without ops pass "
            "through unchanged; the label takes none.",
            {"bill_length_mm": "z_score"},
            length=(1, None),
        ),
        Key(
            "features.<name>",
            "op or list of ops",
            "One op, or a list of ops run in order: `fill_missing`, then `log1p`, then one of "
            "the others.",
            [{"fill_missing": 0}, "log1p", "z_score"],
            nullable=False,
        ),
        Key(
            "module",
            "string",
            "A local Python file (relative to the config's folder) that defines "
            "`preprocessing_fn(inputs) -> dict`.",
            "prep.py",
            pattern=r"\.py$",
        ),
        Key(
            "materialize",
            "string",
            "What the shards hold: `raw` examples (the trainer applies the transform) or the "
            "`transformed` ones.",
            "transformed",
            default="raw",
            allowed=MATERIALIZE,
        ),
    ),
    example="""\
transform:
  materialize: raw
  features:
    bill_length_mm: z_score
    body_mass_g: [{fill_missing: 4000}, log1p, z_score]
    island: {vocabulary: {top_k: 100, num_oov_buckets: 1}}
""",
)

# The maxima of the op parameters bound the ids the trainer one-hot encodes or embeds per feature;
# `vocabulary.num_oov_buckets` is at least 1 because unknown values need an id (a model cannot
# embed -1). pipelines.preprocessing checks the parameters with these (`op_params`).
OPS = Part(
    title="Transform ops",
    path="transform.features.<name>",
    kind="ops",
    intro=(
        "An op is its name (`z_score`) or a one-key mapping `{op: parameters}`; a feature "
        "takes one op or a list of them. The order is fixed: `fill_missing`, then `log1p` "
        "(before `z_score`, `scale_to_0_1` or `bucketize` only), then one of the other ops."
    ),
    keys=(
        Key(
            "fill_missing",
            "scalar",
            "The value of the feature's type that replaces a missing one. "
            + _applies("fill_missing"),
            0,
            nullable=False,
        ),
        Key("log1p", "no parameters", "float32 `log(1 + x)`. " + _applies("log1p"), {}),
        Key(
            "z_score",
            "no parameters",
            "float32 `(x - mean) / std` over the train split. " + _applies("z_score"),
            {},
        ),
        Key(
            "scale_to_0_1",
            "no parameters",
            "float32 `(x - min) / (max - min)` over the train split. " + _applies("scale_to_0_1"),
            {},
        ),
        Key(
            "bucketize",
            "mapping",
            "int64 quantile bucket in `[0, num_buckets)`. " + _applies("bucketize"),
            {"num_buckets": 4},
            nullable=False,
        ),
        Key(
            "bucketize.num_buckets",
            "integer",
            "How many buckets.",
            4,
            default=REQUIRED,
            minimum=2,
            maximum=100_000,
        ),
        Key(
            "vocabulary",
            "mapping",
            "int64 id by decreasing train frequency; unknown values get out-of-vocabulary "
            "ids. " + _applies("vocabulary"),
            {"top_k": 100},
        ),
        Key(
            "vocabulary.top_k",
            "integer",
            "Keep the most frequent values only.",
            100,
            default_text="all",
            minimum=1,
            maximum=100_000_000,
        ),
        Key(
            "vocabulary.num_oov_buckets",
            "integer",
            "Ids for values not in the vocabulary.",
            2,
            default=1,
            minimum=1,
            maximum=1_000_000,
        ),
        Key(
            "vocabulary.frequency_threshold",
            "integer",
            "Keep values seen at least this many times.",
            5,
            default_text="none",
            minimum=1,
            maximum=2**63 - 1,
        ),
        Key(
            "hash",
            "mapping",
            "int64 `FarmHash64(value) mod buckets`; no analysis. " + _applies("hash"),
            {"buckets": 64},
            nullable=False,
        ),
        Key(
            "hash.buckets",
            "integer",
            "How many buckets.",
            64,
            default=REQUIRED,
            minimum=1,
            maximum=100_000_000,
        ),
        Key(
            "decode_resize",
            "list of integers",
            "`[height, width]`: float32 `[height, width, 3]` decoded as RGB, scaled to [0, 1] "
            "and resized. " + _applies("decode_resize"),
            [64, 64],
            minimum=1,
            maximum=4096,
            length=(2, 2),
            nullable=False,
        ),
    ),
    example="""\
transform:
  features:
    bill_length_mm: z_score
    body_mass_g: [{fill_missing: 4000}, log1p, {bucketize: {num_buckets: 8}}]
    island: {vocabulary: {top_k: 100, num_oov_buckets: 1}}
    sex: {hash: {buckets: 8}}
""",
)

# The reference, in the order of the reference page.


def _limit(name: str, what: str, example: float, maximum: float | None = 1) -> Key:
    return Key(name, "number", what, example, default_text="not checked", minimum=0,
               maximum=maximum)  # fmt: skip


_DISTANCES = (
    ("drift", "a split and the same split of the baseline dataset"),
    ("skew", "each split but `train` and `train`"),
)


def _limits(prefix: str, whose: str) -> tuple[Key, ...]:
    keys = [
        _limit(
            f"{prefix}max_missing_rate",
            f"The largest share of records without a value{whose} (default: the schema's "
            "presence: a required feature may miss none).",
            0.05,
        )
    ]
    for check, between in _DISTANCES:
        keys += [
            Key(
                f"{prefix}{check}",
                "mapping",
                f"Limits of the distance between {between}.",
                {"l_infinity": 0.1},
            ),  # fmt: skip
            _limit(
                f"{prefix}{check}.l_infinity",
                f"The largest L-infinity distance of a string feature's value shares{whose}: "
                "the largest difference in one value's share, 0 to 1.",
                0.1,
            ),
            _limit(
                f"{prefix}{check}.jensen_shannon",
                f"The largest Jensen-Shannon divergence (base 2, 0 to 1) of a number feature's "
                f"histograms{whose}.",
                0.05,
            ),
        ]
    return tuple(keys)


VALIDATION = Part(
    title="Validation",
    path="validation",
    intro=(
        "Data validation: every run checks its statistics against a schema (a curated one, "
        "the baseline's, or one inferred from the run's train split), against a baseline "
        "dataset (drift) and against its own train split (skew), and lists the anomalies in "
        "the manifest and the report. Distances are checked only where a limit is set; the "
        "kinds in `block` fail the run, publishing nothing."
    ),
    keys=(
        Key(
            "schema",
            "string",
            "A curated schema (TFDV's `schema.pbtxt`, text format) to check against, local "
            "(relative to the config's folder) or `gs://`.",
            "schema.pbtxt",
            default_text="the baseline's schema, else one inferred from this run",
        ),
        Key(
            "baseline",
            "string",
            "The dataset the run is compared with for drift; `etl --baseline` overrides it.",
            "out/penguins-2026-11-25",
            default_text="the previous date's dataset of a date-partitioned output, if any",
        ),
        *_limits("", ""),
        Key(
            "features",
            "mapping",
            "Limits of single features, over the defaults above.",
            {"island": {"drift": {"l_infinity": 0.05}}},
        ),
        Key(
            "features.<name>",
            "mapping",
            "A feature's own limits: `max_missing_rate`, `drift`, `skew`.",
            {"max_missing_rate": 0.0},
        ),
        *_limits("features.<name>.", " of this feature"),
        Key(
            "block",
            "list of strings",
            "The kinds of anomaly that fail the run; the others are warnings.",
            ["feature_missing", "type_mismatch", "drift"],
            default=list(DEFAULT_BLOCKING),
            allowed=ANOMALY_KINDS,
        ),
    ),
    example="""\
validation:
  baseline: out/penguins-previous
  max_missing_rate: 0.1
  drift: {l_infinity: 0.1, jensen_shannon: 0.05}
  skew: {l_infinity: 0.2}
  features:
    species: {max_missing_rate: 0, drift: {l_infinity: 0.05}}
  block: [feature_missing, type_mismatch, missing_rate, out_of_range, drift]
""",
)

PARTS: tuple[Part, ...] = (
    TOP, SOURCE, *OPTIONS, FEATURE, SPLITS, OUTPUT, TRANSFORM, OPS, VALIDATION,
)  # fmt: skip


def part(path: str, format: str | None = None) -> Part:
    """The part at `path` (`output`, `sources[]`, ...); for `sources[].options`, `format`'s."""
    for p in PARTS:
        if p.path == path and p.format == format:
            return p
    raise KeyError(f"{path} ({format})" if format else path)


def key_names(path: str) -> frozenset[str]:
    """The keys the mapping at `path` accepts (`""` is the top level)."""
    return part(path).key_names()


def options_part(fmt: str) -> Part:
    return part("sources[].options", fmt)


def op_params(required: Any) -> dict[str, dict[str, tuple[Any, int, int]]]:
    """The parameters of the ops that take a mapping of them: op -> parameter -> (default,
    or `required`, minimum, maximum), in the reference's order."""
    out: dict[str, dict[str, tuple[Any, int, int]]] = {}
    for key in OPS.keys:
        op, dot, param = key.name.partition(".")
        if dot:
            default = required if key.required else key.default
            out.setdefault(op, {})[param] = (default, int(key.minimum), int(key.maximum))
    return out
