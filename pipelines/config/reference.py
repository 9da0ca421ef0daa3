"""The dataset config's reference: every key, with its type, default, allowed values, a
description and an example, declared once as data.

`pipelines.config.loader` and `pipelines.config.transform` take the keys they accept from here, and
`pipelines.config.doc` renders it as the reference page (docs/reference/config.md) and as
a JSON Schema for editors (docs/config.schema.json); tests/pipelines/config/test_reference.py
checks it against what the parser and every source format's options checker accept.

A `Part` is one mapping of the config: the top level, a source, a format's `options`, a feature,
`splits`, `output`, `transform` and the transform ops. Its keys are named relative to it; a
dotted name is a key inside another (`fields.<name>.offset`), and `<name>` stands for any name
the user chooses (a feature, a split, a field). No Beam, no TensorFlow, no YAML here.

`Key` and `Part` are in `reference_keys`, the formats' options in `reference_options`, the
`transform:` section and its ops in `reference_transform`; this module holds the other parts and
the whole reference, `PARTS`, in the order of the reference page.

Longer than most modules because it is data, not logic: the top level, a source, a feature,
`splits`, `output` and `validation` declared key by key, each key with its description and
example, beside `PARTS`, which puts every part in the order of the reference page.
"""

from __future__ import annotations

from typing import Any

from pipelines.config.reference_keys import (  # noqa: F401 - the reference's vocabulary
    NAME,
    REQUIRED,
    TYPES,
    Key,
    Part,
)
from pipelines.config.reference_options import OPTIONS
from pipelines.config.reference_transform import OPS, TRANSFORM
from transforms.contract.config import (
    ALLOWANCES,
    ANOMALY_KINDS,
    DEFAULT_BLOCKING,
    DEFAULT_MAX_REJECTED_FRACTION,
    FEATURE_ALLOWANCES,
    FEATURE_TYPES,
    SOURCE_FORMATS,
)
from transforms.contract.facts import VOCABULARY_CAP
from transforms.contract.layout import (
    COMPRESSIONS,
    DEFAULT_COMPRESSION,
    DEFAULT_COMPRESSION_LEVEL,
    DEFAULT_SHARD_SIZE_MB,
    REJECTED_DIR,
    SPILL_DIR,
    TRANSFORM_DIR,
)

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
            "joins sources. Without it a record's split comes from its identity: its source, "
            "its file and its line (or number) in the file.",
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
            "The schema: every feature written to the examples, by name (see Features); at "
            "most 1,000.",
            {"year": {"type": "int"}},
            default=REQUIRED,
            length=(1, 1000),
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
        Key(
            "allow",
            "string or list of strings",
            "For a `float` feature: `infinity` keeps `inf` and `-inf` (text, JSON `Infinity`, "
            "float columns) as values; without it they are rejected, `NAME: not a finite "
            "number (inf)`, because a label or input holding one trains a model whose loss is "
            "NaN. NaN is never a value.",
            ["infinity"],
            default=[],
            allowed=FEATURE_ALLOWANCES,
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
        "identity, its source, file and line, without one)."
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
            "Fail the run, publishing nothing, when more records than this are rejected. Set "
            "alone, it replaces the default limit of `max_rejected_fraction`.",
            100,
            default_text="no limit",
            minimum=0,
        ),
        Key(
            "max_rejected_fraction",
            "number",
            "Fail the run, publishing nothing, when more than this fraction of the records "
            "read are rejected (the message names the most frequent reasons). When neither "
            f"this nor `max_rejected` is set, the limit is {DEFAULT_MAX_REJECTED_FRACTION:g}: "
            "a run that rejects most of its input never publishes quietly; `1` accepts any "
            "share.",
            0.01,
            default_text=f"{DEFAULT_MAX_REJECTED_FRACTION:g} if `max_rejected` is not set",
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
        Key(
            "vocabulary_cap",
            "integer",
            "The most values a string feature's vocabulary keeps in facts.json (the most "
            "frequent first); the distinct values and the records outside it are counted "
            "whatever it is.",
            20000,
            default=VOCABULARY_CAP,
            minimum=1,
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

# The reference, in the order of the reference page.
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
            assert key.minimum is not None and key.maximum is not None  # every op param is bounded
            out.setdefault(op, {})[param] = (default, int(key.minimum), int(key.maximum))
    return out
