"""Typed, validated dataset configuration shared by every transform.

These frozen dataclasses are built once by `pipelines.config.loader.load_config` from the YAML file;
transforms receive them already checked and never re-validate. The manifest's `features`
section is rendered from the same objects (`manifest.ManifestFeature.of`), so a feature is declared
exactly once: in the config. No Beam and no TensorFlow here: the trainer imports this package.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from transforms.contract.facts import VOCABULARY_CAP
from transforms.contract.layout import (
    DEFAULT_COMPRESSION,
    DEFAULT_COMPRESSION_LEVEL,
    DEFAULT_SHARD_SIZE_MB,
    shard_suffix,
)

# Feature type -> the dtype of its tensors (a tf.DType name): what the ETL writes, tf.Transform
# reads and the trainer parses.
FEATURE_DTYPES = {
    "int": "int64",
    "float": "float32",
    "string": "string",
    "bytes": "string",
    "image": "string",
}
FEATURE_TYPES = tuple(FEATURE_DTYPES)
IMAGE_CHANNELS = (1, 3, 4)  # an image's `image_size` channels: gray, RGB, RGBA
SOURCE_FORMATS = (
    "csv",
    "jsonl",
    "parquet",
    "avro",
    "tfrecord",
    "text",
    "binary",
    "images",
    "sql",
    "bigquery",
)

# tf.Transform ops of the declarative `transform.features`: name -> (stage, feature types).
# A feature's ops run in stage order, at most one op per stage: fill_missing (0), then log1p
# (1), then one op that makes the model input (2).
NUMERIC = ("int", "float")
TRANSFORM_OPS = {
    "fill_missing": (0, ("int", "float", "string", "bytes")),
    "log1p": (1, NUMERIC),
    "z_score": (2, NUMERIC),
    "scale_to_0_1": (2, NUMERIC),
    "bucketize": (2, NUMERIC),
    "vocabulary": (2, ("int", "string", "bytes")),
    "hash": (2, ("int", "string", "bytes")),
    "decode_resize": (2, ("image",)),
}
AFTER_LOG1P = ("z_score", "scale_to_0_1", "bucketize")  # the stage-2 ops log1p may precede
MATERIALIZE = ("raw", "transformed")
TRAIN_SPLIT = "train"  # tf.Transform analyzes this split only
# The trainer feeds a numeric feature NAME that may be missing to the model together with its
# 0/1 presence, the input NAME + PRESENT_SUFFIX; config loading refuses a feature of that name.
PRESENT_SUFFIX = "__present"
# What `output.allow` may let through although it looks like a mistake (transforms.quality).
ALLOWANCES = ("empty_source", "empty_split", "missing_field")
# What a float feature's `allow` may let through: infinity (`inf`, `-inf`) is rejected as
# `not a finite number` by default (transforms.schema), since a label or input holding one
# trains a model whose loss is NaN.
INFINITY = "infinity"
FEATURE_ALLOWANCES = (INFINITY,)
# The kinds of anomaly data validation finds (transforms.validation.anomalies), and those that
# fail a run unless the config's `validation.block` says otherwise: the schema's rules broken,
# but for values outside a string domain, which a schema inferred from data (a domain of the
# values one train split held) meets in every open-ended feature: a warning by default.
ANOMALY_KINDS = (
    "feature_missing",
    "feature_new",
    "type_mismatch",
    "missing_rate",
    "out_of_domain",
    "out_of_range",
    "drift",
    "skew",
    "rejected_rate",
)
DEFAULT_BLOCKING = ("feature_missing", "type_mismatch", "missing_rate", "out_of_range")
# The limits of `validation:` (and of `validation.features.<name>`): (drift|skew).(measure) and
# max_missing_rate, as `transforms.validation.anomalies.Thresholds` names them.
MEASURES = {"l_infinity": "linf", "jensen_shannon": "js"}


class OptionError(ValueError):
    """A bad per-format source option: `field` is the option's name (or dotted path in it)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    """A source's options, checked and complete (defaults filled in).

    Each format's module (`transforms.sources.<format>`) subclasses it with a frozen dataclass of
    its own typed fields, returned by that module's `options(raw)`; this base has no fields.
    """

    def to_dict(self) -> dict[str, Any]:
        """The options as a mapping, each field under its option name."""
        return dataclasses.asdict(self)

    @property
    def cell_list_delimiter(self) -> str | None:
        """The delimiter of a list's values within one text cell, for formats that read lists
        so (csv's `list_delimiter`); None for the others, whose lists are lists."""
        return None


_Options = TypeVar("_Options", bound=SourceOptions)


@dataclasses.dataclass(frozen=True)
class SourceSpec:
    """One input of the dataset: a format, a location and per-format options."""

    name: str
    format: str
    path: str | None
    options: SourceOptions

    def options_as(self, kind: type[_Options]) -> _Options:
        """The options, which a source of the format of `kind` (`CsvOptions`, ...) holds; a
        `TypeError` for another format's."""
        if not isinstance(self.options, kind):
            raise TypeError(
                f"source {self.name!r} ({self.format}) holds {type(self.options).__name__}, "
                f"not {kind.__name__}"
            )
        return self.options


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One feature of the written examples and how to find and check its value."""

    name: str
    type: str
    shape: tuple[int | None, ...]
    required: bool
    default: Any = None  # already coerced to the feature's type and shape; None: no default
    values: tuple[Any, ...] | None = None
    min: float | None = None
    max: float | None = None
    source: str | None = None  # a source name, when the field is taken from one source only
    field: str | None = None  # the field name in the source record; the feature name by default
    image_size: tuple[int, int, int] | None = None  # an image: height, width, channels to learn at
    allow: tuple[str, ...] = ()  # of FEATURE_ALLOWANCES: values kept although they look wrong

    @property
    def field_name(self) -> str:
        return self.field if self.field is not None else self.name

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()


# The limit of rejected / read when a config sets neither output.max_rejected nor
# output.max_rejected_fraction (`transforms.quality.check_rejections`): more than half the records
# read rejected is a config that does not fit its data (a wrong delimiter, type or `values`),
# never a dataset to publish by accident.
DEFAULT_MAX_REJECTED_FRACTION = 0.5


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    path: str
    compression: str = DEFAULT_COMPRESSION  # a key of COMPRESSIONS
    compression_level: int = DEFAULT_COMPRESSION_LEVEL
    shard_size_mb: float = float(DEFAULT_SHARD_SIZE_MB)
    # Data-quality limits: the run fails, publishing nothing, when more records are rejected.
    max_rejected: int | None = None  # a count of rejected records
    max_rejected_fraction: float | None = None  # rejected / read, from 0 to 1 (see above)
    allow: tuple[str, ...] = ()
    vocabulary_cap: int = VOCABULARY_CAP  # values a vocabulary of facts.json keeps at most

    @property
    def suffix(self) -> str:
        return shard_suffix(self.compression)

    @property
    def shard_bytes(self) -> float:
        """The target size of a shard, in bytes (`shard_size_mb` MiB)."""
        return self.shard_size_mb * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class TransformOp:
    """One preprocessing op of a feature, with its parameters complete (defaults filled in)."""

    name: str
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TransformSpec:
    """The `transform:` section: declarative ops per feature, or a user module.

    `features` maps a feature name to its ops in the order they run; features without ops pass
    through unchanged. `module` is the path of a Python file defining `preprocessing_fn`
    (then `features` is empty). `materialize` says what the shards hold: `raw` examples (the
    transform is applied by the trainer) or `transformed` ones.
    """

    features: dict[str, tuple[TransformOp, ...]] = dataclasses.field(default_factory=dict)
    module: str | None = None
    materialize: str = "raw"


@dataclasses.dataclass(frozen=True)
class ValidationSpec:
    """The `validation:` section: what a run's statistics are checked against, and the limits.

    `schema`: a curated schema's path (`schema_text` its text, read with the config); None: the
    baseline's schema, else one inferred from this run. `baseline`: the dataset compared with
    for drift (`etl --baseline` overrides it). `limits` and each of `features`' map a
    `Thresholds` field (`drift_linf`, `skew_js`, `max_missing_rate`, ...) to its value.
    `block`: the anomaly kinds that fail a run.
    """

    schema: str | None = None
    schema_text: str | None = None
    baseline: str | None = None
    limits: tuple[tuple[str, float], ...] = ()
    features: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    block: tuple[str, ...] = DEFAULT_BLOCKING


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """The whole validated config."""

    name: str
    sources: tuple[SourceSpec, ...]
    features: tuple[FeatureSpec, ...]
    splits: tuple[tuple[str, float], ...]
    output: OutputSpec
    key: str | None = None
    combine: str = "union"
    label: str | None = None
    transform: TransformSpec | None = None
    config_sha256: str = ""
    date: str | None = None  # the partition date (YYYY-MM-DD) of a date-templated config
    limit: int | None = None  # records of each source read at most (`etl --limit`): partial
    validation: ValidationSpec = ValidationSpec()

    @property
    def vocabulary_cap(self) -> int:
        return self.output.vocabulary_cap

    @property
    def source_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sources)

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.splits)
