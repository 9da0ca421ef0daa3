"""Loads a dataset's manifest.json, the contract between the ETL and the trainer, for training.

The manifest (`transforms.contract.manifest.Manifest`, which validates it and names the field
that is wrong) declares every feature (type, shape, whether it is always present, vocabulary),
the label, the compression, the shard files of each split with their record counts and, when
the dataset was preprocessed with tf.Transform, where the transform output is and whether the
shards hold raw or transformed examples. This module anchors it at the dataset's location: the
trainer's `Manifest` holds absolute paths. `load_statistics` reads the dataset's statistics.json
as a `transforms.contract.statistics.Statistics`. All file access goes through tf.io.gfile, so
DATASET may be a local folder or a gs:// prefix.
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

from trainer.paths import join, normalize_root
from transforms.contract import manifest as contract
from transforms.contract.layout import COMPRESSIONS, FORMAT_VERSION, MANIFEST, STATISTICS
from transforms.contract.manifest import ManifestError, SourceEntry
from transforms.contract.statistics import Statistics, StatisticsError


@dataclass(frozen=True)
class InputFeature:
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
    image_size: tuple[int, int, int] | None = None  # an image: decoded and resized to this
    text: bool = False  # free text (--text-features): split into words on the host

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
class TransformOutput:
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
    features: Mapping[str, InputFeature]
    label: str | None
    splits: Mapping[str, Split]
    key: str | None = None
    created: str | None = None
    config_sha256: str | None = None
    sources: Mapping[str, SourceEntry] | None = None
    rejected_records: int = 0
    rejected_reasons: Mapping[str, int] | None = None
    duplicates: int = 0
    transform: TransformOutput | None = None
    format_version: int = FORMAT_VERSION
    parts: tuple[str, ...] = ()  # the datasets read as one (trainer.union); () : this one
    limit: int | None = None  # partial: at most this many records of each source (etl --limit)

    @property
    def compression_type(self) -> str:
        """The compression as tf.data.TFRecordDataset spells it: GZIP, ZLIB or ''."""
        return COMPRESSIONS[self.compression].tf_type

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


def load_manifest(dataset_uri: str) -> Manifest:
    """Reads and validates DATASET/manifest.json."""
    root = normalize_root(dataset_uri)
    path = join(root, MANIFEST)
    if not tf.io.gfile.exists(path):
        raise ManifestError(
            f"{dataset_uri}: no manifest.json at {path}, "
            "the run is incomplete or this is not a shardflow dataset"
        )
    return _anchored(contract.Manifest.from_json(_read_bytes(path), where=path), root)


def load_statistics(root: str) -> Statistics | None:
    """DATASET/statistics.json as written by the ETL, or None when the dataset has none;
    ManifestError naming the file (and the field) when it is not JSON or breaks the contract
    (`transforms.contract.statistics`)."""
    path = join(root, STATISTICS)
    if not tf.io.gfile.exists(path):
        return None
    try:
        return Statistics.from_json(read_json(path), where=path)
    except StatisticsError as e:
        raise ManifestError(str(e)) from None


def read_json(path: str) -> Any:
    """The JSON document of a local or gs:// file; ManifestError when it is not valid JSON
    (nor UTF-8 text, or nested too deep to read) or is a folder."""
    try:
        return json.loads(_read_bytes(path).decode("utf-8"))
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError; too deep
        raise ManifestError(f"{path}: not valid JSON: {e}") from None


def _read_bytes(path: str) -> bytes:
    """The bytes of a dataset's file; ManifestError when it is a folder or cannot be read."""
    if tf.io.gfile.isdir(path):
        raise ManifestError(f"{path}: is a folder, not a file: not a shardflow dataset")
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    except tf.errors.OpError as e:
        raise ManifestError(f"{path}: cannot be read: {e.message}") from None


def parse_manifest(raw: Any, root: str, where: str = MANIFEST) -> Manifest:
    """Validates the decoded JSON of a manifest; `root` anchors its relative paths."""
    return _anchored(contract.Manifest.from_dict(raw, where), root)


def _anchored(m: contract.Manifest, root: str) -> Manifest:
    """The trainer's view of a manifest: its paths joined to the dataset root."""
    transform = None
    if m.transform is not None:
        path = join(root, m.transform.path.rstrip("/"))
        transform = TransformOutput(path=path, materialize=m.transform.materialize)
    return Manifest(
        root=root,
        name=m.name,
        compression=m.compression,
        features={n: _feature(n, f) for n, f in m.features.items()},
        label=m.label,
        splits={n: _split(root, n, s) for n, s in m.splits.items()},
        key=m.key,
        created=m.created,
        config_sha256=m.config_sha256,
        sources=m.sources,
        rejected_records=m.rejected.records,
        rejected_reasons=dict(m.rejected.reasons),
        duplicates=m.duplicates,
        transform=transform,
        format_version=m.format_version,
        limit=m.limit,
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


def _feature(name: str, f: contract.ManifestFeature) -> InputFeature:
    return InputFeature(
        name=name,
        type=f.type,
        shape=f.shape,
        required=f.required,
        default=f.default,
        values=f.values,
        min=f.min,
        max=f.max,
        image_size=f.image_size,
    )


def _split(root: str, name: str, split: contract.SplitEntry) -> Split:
    files = tuple(
        ShardFile(path=join(root, f.path), records=f.records or 0, bytes=f.bytes, sha256=f.sha256)
        for f in split.files
    )
    return Split(name=name, records=split.records, files=files)
