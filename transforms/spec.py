"""Typed, validated dataset configuration shared by every transform.

These frozen dataclasses are built once by `pipelines.config.load_config` from the YAML file;
transforms receive them already checked and never re-validate. The manifest's `features`
section is rendered from the same objects (`FeatureSpec.to_manifest`), so a feature is declared
exactly once: in the config.
"""

from __future__ import annotations

import dataclasses
from typing import Any

FEATURE_TYPES = ("int", "float", "string", "bytes", "image")
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
COMPRESSIONS = {"gzip": ".gz", "zlib": ".zz", "none": ""}


class OptionError(ValueError):
    """A bad per-format source option: `field` is the option's name (or dotted path in it)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclasses.dataclass(frozen=True)
class SourceSpec:
    """One input of the dataset: a format, a location and per-format options."""

    name: str
    format: str
    path: str | None
    options: dict[str, Any]


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

    @property
    def field_name(self) -> str:
        return self.field if self.field is not None else self.name

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    def to_manifest(self) -> dict[str, Any]:
        """The feature as described in manifest.json (what the trainer builds its parse spec from)."""
        out: dict[str, Any] = {
            "type": self.type,
            "shape": list(self.shape),
            "required": self.required,
        }
        if self.default is not None:
            default = self.default[0] if self.is_scalar else self.default
            out["default"] = _json_value(default)
        if self.values is not None:
            out["values"] = list(self.values)
        if self.min is not None:
            out["min"] = self.min
        if self.max is not None:
            out["max"] = self.max
        return out


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    path: str
    compression: str = "gzip"
    compression_level: int = 6  # zlib level 1 (fastest) to 9 (smallest); 6 is TensorFlow's
    shard_size_mb: float = 128.0

    @property
    def suffix(self) -> str:
        return ".tfrecord" + COMPRESSIONS[self.compression]


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
    transform: dict[str, Any] | None = None
    config_sha256: str = ""

    @property
    def source_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sources)

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.splits)


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return value
