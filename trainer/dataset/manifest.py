"""Loads a dataset's manifest.json, the contract between the ETL and the trainer, for training.

The manifest (`transforms.contract.manifest.Manifest`, which validates it and names the field
that is wrong) declares every feature (type, shape, whether it is always present, vocabulary),
the label, the compression, the shard files of each split with their record counts and, when
the dataset was preprocessed with tf.Transform, where the transform output is and whether the
shards hold raw or transformed examples. This module anchors it at the dataset's location: the
trainer's `Manifest` holds absolute paths. `load_statistics` reads the dataset's statistics.json
as a `transforms.contract.statistics.Statistics`. DATASET may be a local folder or a gs://
prefix, read by trainer.dataset.storage (Python's own file calls, google-cloud-storage), never
through TensorFlow. Each file is read only when it is a regular file within its size limit
(`read_file`; the limits are the contract's, as for the readers).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainer.dataset import storage
from trainer.dataset.paths import join, normalize_root
from trainer.dataset.storage import not_regular
from transforms.contract import manifest as contract
from transforms.contract.facts import Facts, FactsError
from transforms.contract.layout import COMPRESSIONS, MANIFEST, STATISTICS
from transforms.contract.manifest import (
    FACTS_MAX_BYTES,
    MANIFEST_MAX_BYTES,
    STATISTICS_MAX_BYTES,
    FileEntry,
    ManifestError,
    RejectedEntry,
    SourceEntry,
    SplitEntry,
    TransformEntry,
)
from transforms.contract.statistics import Statistics, StatisticsError


@dataclass(frozen=True, kw_only=True)
class InputFeature(contract.ManifestFeature):
    """A feature fed to the model: a feature of the manifest with its name, or a tf.Transform
    output described the same way.

    `buckets` is set only on transform outputs: an int feature whose values are ids in
    [0, buckets) (a vocabulary with its OOV buckets, a bucketization), learned as a category.
    `text`: free text (--text-features), split into words on the host.
    """

    name: str
    buckets: int | None = None
    text: bool = False

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
class Manifest:
    """A dataset's manifest.json as training reads it: the contract's `Manifest` as written
    (`written`) and what the trainer resolves from it: `root`, the absolute dataset location;
    the splits' shards and the transform output with absolute paths; the features as model
    inputs. Several datasets read as one (`trainer.dataset.union`) have one manifest, their
    `parts`."""

    root: str
    written: contract.Manifest
    features: Mapping[str, InputFeature]
    splits: Mapping[str, SplitEntry]
    transform: TransformEntry | None = None
    parts: tuple[Manifest, ...] = ()  # the datasets read as one (trainer.dataset.union)

    @property
    def name(self) -> str:
        return self.written.name

    @property
    def label(self) -> str | None:
        return self.written.label

    @property
    def key(self) -> str | None:
        return self.written.key

    @property
    def compression(self) -> str:
        return self.written.compression

    @property
    def created(self) -> str | None:
        return self.written.created

    @property
    def sources(self) -> Mapping[str, SourceEntry]:
        return self.written.sources

    @property
    def rejected(self) -> RejectedEntry:
        return self.written.rejected

    @property
    def duplicates(self) -> int:
        return self.written.duplicates

    @property
    def limit(self) -> int | None:
        """Partial: at most this many records of each source (etl --limit)."""
        return self.written.limit

    @property
    def compression_type(self) -> str:
        """The compression as tf.data.TFRecordDataset spells it: GZIP, ZLIB or ''."""
        return COMPRESSIONS[self.compression].tf_type

    def has_split(self, split: str) -> bool:
        """True when the split exists and has at least one file and one record."""
        found = self.splits.get(split)
        return found is not None and bool(found.files) and found.records > 0

    @property
    def roots(self) -> tuple[str, ...]:
        """The locations of the datasets read as one (this one's alone when it is one)."""
        return tuple(p.root for p in self.parts) or (self.root,)

    @property
    def wbits(self) -> int | None:
        """The zlib window bits of the shards' stream (None: not compressed)."""
        return COMPRESSIONS[self.compression].wbits

    def shards(self, split: str) -> tuple[FileEntry, ...]:
        """The split's shards (absolute paths, records as listed); ManifestError when there is
        no such split, it has none, or one is no regular file (opening a FIFO would wait for
        ever; a device never ends)."""
        if split not in self.splits:
            known = ", ".join(sorted(self.splits)) or "none"
            raise ManifestError(
                f"{self.root}: no split {split!r} in the manifest (splits: {known})"
            )
        files = self.splits[split].files
        if not files:
            raise ManifestError(f"{self.root}: split {split!r} has no files")
        for f in files:
            kind = not_regular(f.path)
            if kind is not None:
                raise ManifestError(
                    f"{f.path}: {kind}, not a regular file: a shard the ETL wrote is a file; "
                    "refused unread"
                )
        return files

    def split_files(self, split: str) -> list[str]:
        """Absolute paths of the split's shards (`shards`)."""
        return [f.path for f in self.shards(split)]

    def split_records(self, split: str) -> int:
        """Number of examples in the split, as counted by the ETL."""
        self.split_files(split)
        return self.splits[split].records


def load_manifest(dataset_uri: str) -> Manifest:
    """Reads and validates DATASET/manifest.json."""
    root = normalize_root(dataset_uri)
    path = join(root, MANIFEST)
    if not found(path, dataset_uri):
        raise ManifestError(
            f"{dataset_uri}: no manifest.json at {path}, "
            "the run is incomplete or this is not a shardflow dataset"
        )
    data = read_file(path, MANIFEST_MAX_BYTES)
    return _anchored(contract.Manifest.from_json(data, where=path), root)


def load_statistics(root: str) -> Statistics | None:
    """DATASET/statistics.json as written by the ETL, or None when the dataset has none;
    ManifestError naming the file (and the field) when it is not JSON or breaks the contract
    (`transforms.contract.statistics`)."""
    path = join(root, STATISTICS)
    if not found(path):
        return None
    try:
        return Statistics.from_json(read_json(path, STATISTICS_MAX_BYTES), where=path)
    except StatisticsError as e:
        raise ManifestError(str(e)) from None


def load_facts(manifest: Manifest) -> tuple[Facts | None, ...]:
    """The facts.json of each dataset read as one (None for one written without facts),
    checked against the sha256 its manifest lists (`parse_facts`)."""
    out: list[Facts | None] = []
    for part in manifest.parts or (manifest,):
        entry = part.written.facts
        if entry is None:
            out.append(None)
            continue
        path = join(part.root, entry.path)
        data = read_file(path, FACTS_MAX_BYTES, entry.bytes)
        out.append(parse_facts(data, entry.sha256, path))
    return tuple(out)


def parse_facts(data: bytes, sha256: str | None, path: str) -> Facts:
    """The facts.json at `path` (its bytes), checked against the sha256 its manifest lists;
    ManifestError naming the file when it changed or breaks the contract."""
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise ManifestError(
            f"{path}: changed after publication (its sha256 differs from the manifest's)"
        )
    try:
        return Facts.loads(data, where=path)
    except FactsError as e:
        raise ManifestError(str(e)) from None


def read_json(path: str, limit: int) -> Any:
    """The JSON document of a local or gs:// file of at most `limit` bytes (`read_file`);
    ManifestError when it is not valid JSON (nor UTF-8 text, or nested too deep to read)."""
    try:
        return json.loads(read_file(path, limit).decode("utf-8"))
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError; too deep
        raise ManifestError(f"{path}: not valid JSON: {e}") from None


def read_file(path: str, limit: int, listed: int | None = None, writer: str = "the ETL") -> bytes:
    """The bytes of a dataset's file (or a model folder's: `writer` "a training run"), when it
    is a regular file of at most `limit` bytes (and of `listed` bytes when the manifest lists
    its size); ManifestError naming it before it is opened when it is a folder, a FIFO or device
    (a link to /dev/zero), too large, or cannot be read: nothing waits on a pipe or reads
    without end (`storage.read_bytes`, local or gs://)."""
    return storage.read_bytes(path, limit, listed, writer)


def parse_manifest(raw: Any, root: str, where: str = MANIFEST) -> Manifest:
    """Validates the decoded JSON of a manifest; `root` anchors its relative paths."""
    return _anchored(contract.Manifest.from_dict(raw, where), root)


def _anchored(m: contract.Manifest, root: str) -> Manifest:
    """The trainer's view of a manifest: its paths joined to the dataset root."""
    transform = None
    if m.transform is not None:
        transform = replace(m.transform, path=join(root, m.transform.path.rstrip("/")))
    return Manifest(
        root=root,
        written=m,
        features={n: InputFeature(name=n, **vars(f)) for n, f in m.features.items()},
        splits={n: _anchored_split(root, s) for n, s in m.splits.items()},
        transform=transform,
    )


def missing_files(paths: list[str]) -> list[str]:
    """The paths that do not exist; one listing per parent folder."""
    listed = {parent: storage.names_in(parent) for parent in {_parent(p) for p in paths}}
    return [p for p in paths if p.rsplit("/", 1)[-1] not in listed[_parent(p)]]


def found(path: str, dataset: str | None = None) -> bool:
    """Whether a file or folder is at `path` (`storage.exists`); ManifestError naming
    `dataset` (or the path) for a location neither local nor gs://."""
    if "://" in path and not storage.is_remote(path):
        raise ManifestError(
            f"{dataset or path}: not a dataset location: give a local folder or gs://BUCKET/PREFIX"
        )
    return storage.exists(path)


def _parent(path: str) -> str:
    return posixpath.dirname(path) if "://" in path else os.path.dirname(path)


def _anchored_split(root: str, split: SplitEntry) -> SplitEntry:
    files = tuple(replace(f, path=join(root, f.path), records=f.records or 0) for f in split.files)
    return replace(split, files=files)
