"""Loads and validates a dataset's manifest.json, the contract between the ETL and the trainer.

The manifest declares every feature (type, shape, whether it is always present, vocabulary),
the label, the compression, the shard files of each split with their record counts and, when
the dataset was preprocessed with tf.Transform, where the transform output is and whether the
shards hold raw or transformed examples. It is read once into frozen dataclasses; every error
names the field that is wrong. All file access
goes through tf.io.gfile, so DATASET may be a local folder or a gs:// prefix.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
FEATURE_TYPES = ("int", "float", "string", "bytes", "image")
# manifest "compression" -> TFRecordDataset compression_type
COMPRESSION_TYPES = {"gzip": "GZIP", "zlib": "ZLIB", "none": ""}
# manifest "transform.materialize": what the split shards hold
MATERIALIZE = ("raw", "transformed")


class ManifestError(ValueError):
    """The dataset has no manifest, or its manifest breaks the contract."""


@dataclass(frozen=True)
class FeatureSpec:
    """One feature as declared in the manifest, or a tf.Transform output fed to the model.

    `buckets` is set only on transform outputs: an int feature whose values are ids in
    [0, buckets) (a vocabulary with its OOV buckets, a bucketization), learned as a category.
    """

    name: str
    type: str
    shape: tuple[int | None, ...] = ()
    required: bool = True
    default: Any = None
    values: tuple[str | int, ...] | None = None
    min: float | None = None
    max: float | None = None
    buckets: int | None = None

    @property
    def variable_length(self) -> bool:
        """True for shape [null]: a list of any length."""
        return self.shape == (None,)

    @property
    def always_full(self) -> bool:
        """True when every example holds exactly `size` values (required or defaulted)."""
        return not self.variable_length and (self.required or self.default is not None)

    @property
    def size(self) -> int:
        """Number of values of a fixed-shape feature (1 for a scalar)."""
        if self.variable_length:
            raise ValueError(f"feature {self.name!r} has a variable length")
        return math.prod(self.shape)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ShardFile:
    """One TFRecord shard of a split; `path` is absolute (local path or URI)."""

    path: str
    records: int
    bytes: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class Split:
    """A split (train, eval, test, ...) and its shards."""

    name: str
    records: int
    files: tuple[ShardFile, ...]


@dataclass(frozen=True)
class TransformSpec:
    """The dataset's tf.Transform output: `path` is absolute (local path or URI).

    `materialize` says what the split shards hold: `raw` examples (the trainer applies the
    transform while reading) or `transformed` ones (written by the ETL with the transform
    applied). Either way the exported model serves raw examples.
    """

    path: str
    materialize: str = "raw"


@dataclass(frozen=True)
class Manifest:
    """A validated manifest.json; `root` is the absolute dataset location."""

    root: str
    name: str
    compression: str
    features: Mapping[str, FeatureSpec]
    label: str | None
    splits: Mapping[str, Split]
    created: str | None = None
    config_sha256: str | None = None
    sources: Mapping[str, Any] | None = None
    rejected_records: int = 0
    rejected_reasons: Mapping[str, int] | None = None
    duplicates: int = 0
    transform: TransformSpec | None = None
    format_version: int = FORMAT_VERSION

    @property
    def compression_type(self) -> str:
        """The compression as tf.data.TFRecordDataset spells it: GZIP, ZLIB or ''."""
        return COMPRESSION_TYPES[self.compression]

    def has_split(self, split: str) -> bool:
        """True when the split exists and has at least one file and one record."""
        found = self.splits.get(split)
        return found is not None and bool(found.files) and found.records > 0

    def split_files(self, split: str) -> list[str]:
        """Absolute paths of the split's shards; raises ManifestError if there are none."""
        if split not in self.splits:
            known = ", ".join(sorted(self.splits)) or "none"
            raise ManifestError(
                f"{self.root}: no split {split!r} in the manifest (splits: {known})"
            )
        files = self.splits[split].files
        if not files:
            raise ManifestError(f"{self.root}: split {split!r} has no files")
        return [f.path for f in files]

    def split_records(self, split: str) -> int:
        """Number of examples in the split, as counted by the ETL."""
        self.split_files(split)
        return self.splits[split].records


def join(root: str, relative: str) -> str:
    """Joins a manifest-relative path to the dataset root (local path or URI)."""
    return posixpath.join(root, relative) if "://" in root else os.path.join(root, relative)


def normalize_root(uri: str) -> str:
    """An absolute folder location (local path or URI) without a trailing slash."""
    uri = uri.rstrip("/") or "/"
    return uri if "://" in uri else os.path.abspath(uri)


def load_manifest(dataset_uri: str) -> Manifest:
    """Reads and validates DATASET/manifest.json."""
    root = normalize_root(dataset_uri)
    path = join(root, MANIFEST_NAME)
    if not tf.io.gfile.exists(path):
        raise ManifestError(
            f"{dataset_uri}: no manifest.json at {path}, "
            "the run is incomplete or this is not a shardflow dataset"
        )
    return parse_manifest(read_json(path), root, where=path)


def read_json(path: str) -> Any:
    """The JSON document of a local or gs:// file; ManifestError when it is not valid JSON."""
    with tf.io.gfile.GFile(path, "r") as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path}: not valid JSON: {e}") from None


def parse_manifest(raw: Any, root: str, where: str = MANIFEST_NAME) -> Manifest:
    """Validates the decoded JSON of a manifest; `root` anchors its relative paths."""
    _check(isinstance(raw, dict), where, "", "must be a JSON object")
    version = raw.get("format_version")
    _check(
        version == FORMAT_VERSION,
        where,
        "format_version",
        f"{version!r} is not supported (this trainer reads {FORMAT_VERSION})",
    )
    name = raw.get("name")
    _check(isinstance(name, str) and bool(name), where, "name", "must be a non-empty string")
    compression = raw.get("compression", "gzip")
    _check(
        compression in COMPRESSION_TYPES,
        where,
        "compression",
        f"{compression!r} is not one of {', '.join(COMPRESSION_TYPES)}",
    )
    raw_features = raw.get("features")
    _check(
        isinstance(raw_features, dict) and bool(raw_features),
        where,
        "features",
        "must be a non-empty object",
    )
    features = {n: _parse_feature(n, spec, where) for n, spec in raw_features.items()}
    label = raw.get("label")
    _check(
        label is None or label in features,
        where,
        "label",
        f"{label!r} is not one of the features",
    )
    raw_splits = raw.get("splits")
    _check(isinstance(raw_splits, dict), where, "splits", "must be an object")
    splits = {n: _parse_split(n, s, root, where) for n, s in raw_splits.items()}
    rejected = raw.get("rejected") or {}
    _check(isinstance(rejected, dict), where, "rejected", "must be an object")
    return Manifest(
        root=root,
        name=name,
        compression=compression,
        features=features,
        label=label,
        splits=splits,
        created=raw.get("created"),
        config_sha256=raw.get("config_sha256"),
        sources=raw.get("sources"),
        rejected_records=_count(rejected.get("records", 0), where, "rejected.records"),
        rejected_reasons=dict(rejected.get("reasons") or {}),
        duplicates=_count(raw.get("duplicates", 0), where, "duplicates"),
        transform=_parse_transform(raw.get("transform"), root, where),
        format_version=version,
    )


def missing_files(paths: list[str]) -> list[str]:
    """The paths that do not exist; one directory listing per parent folder."""
    listed: dict[str, set[str]] = {}
    for parent in {_parent(p) for p in paths}:
        names = tf.io.gfile.listdir(parent) if tf.io.gfile.isdir(parent) else []
        listed[parent] = {n.rstrip("/") for n in names}
    return [p for p in paths if p.rsplit("/", 1)[-1] not in listed[_parent(p)]]


def _parent(path: str) -> str:
    return posixpath.dirname(path) if "://" in path else os.path.dirname(path)


def _check(ok: bool, where: str, field: str, problem: str) -> None:
    if not ok:
        raise ManifestError(f"{where}: {field}: {problem}" if field else f"{where}: {problem}")


def _count(value: Any, where: str, field: str) -> int:
    _check(
        isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        where,
        field,
        f"{value!r} is not a non-negative integer",
    )
    return value


def _relative_path(path: Any) -> bool:
    return (
        isinstance(path, str)
        and bool(path)
        and not path.startswith("/")
        and "://" not in path
        and ".." not in path.split("/")
    )


def _parse_transform(raw: Any, root: str, where: str) -> TransformSpec | None:
    if raw is None:
        return None
    _check(isinstance(raw, dict), where, "transform", "must be an object or null")
    path = raw.get("path")
    _check(
        _relative_path(path),
        where,
        "transform.path",
        f"{path!r} is not a path relative to the dataset",
    )
    materialize = raw.get("materialize", "raw")
    _check(
        materialize in MATERIALIZE,
        where,
        "transform.materialize",
        f"{materialize!r} is not one of {', '.join(MATERIALIZE)}",
    )
    return TransformSpec(path=join(root, path.rstrip("/")), materialize=materialize)


def _parse_feature(name: str, raw: Any, where: str) -> FeatureSpec:
    field = f"features.{name}"
    _check(isinstance(raw, dict), where, field, "must be an object")
    ftype = raw.get("type")
    _check(
        ftype in FEATURE_TYPES,
        where,
        f"{field}.type",
        f"{ftype!r} is not one of {', '.join(FEATURE_TYPES)}",
    )
    shape = raw.get("shape", [])
    _check(
        isinstance(shape, list)
        and (
            shape == [None]
            or all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)
        ),
        where,
        f"{field}.shape",
        f"{shape!r} is not [], [n, ...] or [null]",
    )
    required = raw.get("required", True)
    _check(isinstance(required, bool), where, f"{field}.required", "must be true or false")
    values = raw.get("values")
    if values is not None:
        kind = {"string": str, "int": int}.get(ftype)
        _check(
            kind is not None
            and isinstance(values, list)
            and bool(values)
            and all(isinstance(v, kind) and not isinstance(v, bool) for v in values)
            and len(set(values)) == len(values),
            where,
            f"{field}.values",
            "must be a non-empty list of distinct values of a string or int feature",
        )
        values = tuple(values)
    default = raw.get("default")
    if default is not None:
        _check(shape != [None], where, f"{field}.default", "not allowed on a [null] shape")
        _check(
            all(_fits(ftype, v) for v in (default if isinstance(default, list) else [default])),
            where,
            f"{field}.default",
            f"{default!r} is not a value of type {ftype}",
        )
    return FeatureSpec(
        name=name,
        type=ftype,
        shape=tuple(shape),
        required=required,
        default=default,
        values=values,
        min=raw.get("min"),
        max=raw.get("max"),
    )


def _fits(ftype: str, value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if ftype == "int":
        return isinstance(value, int)
    if ftype == "float":
        return isinstance(value, (int, float))
    return isinstance(value, str)


def _parse_split(name: str, raw: Any, root: str, where: str) -> Split:
    field = f"splits.{name}"
    _check(isinstance(raw, dict), where, field, "must be an object")
    files = raw.get("files", [])
    _check(isinstance(files, list), where, f"{field}.files", "must be a list")
    shards = []
    for i, f in enumerate(files):
        ffield = f"{field}.files[{i}]"
        _check(isinstance(f, dict), where, ffield, "must be an object")
        path = f.get("path")
        _check(
            _relative_path(path),
            where,
            f"{ffield}.path",
            f"{path!r} is not a path relative to the dataset",
        )
        shards.append(
            ShardFile(
                path=join(root, path),
                records=_count(f.get("records", 0), where, f"{ffield}.records"),
                bytes=f.get("bytes"),
                sha256=f.get("sha256"),
            )
        )
    records = _count(raw.get("records", 0), where, f"{field}.records")
    return Split(name=name, records=records, files=tuple(shards))
