"""A dataset as the readers see it: its manifest, shards, statistics and facts, read without
TensorFlow.

`open_dataset(data)` reads DATASET/manifest.json (`transforms.contract.manifest.Manifest`, which
names the field that is wrong), statistics.json when there is one and the facts.json that the
manifest lists (`transforms.contract.facts`); several URIs (as
`shardflow train --data A B`) are read as one dataset, their features, label and compression
the same (an error names the first difference) and each split's shards those of all. Shard
paths are made absolute, with the size and sha256 the manifest lists for them. Nothing is read
twice: one dataset given twice (`ds` and `ds/`, a link to it, a date range that repeats one)
and one shard file listed twice (in one split or two, or by two datasets) are refused, naming
both (`check_once`, which the trainer calls too); the small files are read only when they are
regular files within their size limits (trainer.dataset.storage).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainer.dataset import storage
from trainer.dataset.paths import expand
from transforms.contract.facts import Facts, FactsError
from transforms.contract.layout import COMPRESSIONS, MANIFEST, STATISTICS
from transforms.contract.manifest import (
    FACTS_MAX_BYTES,
    MANIFEST_MAX_BYTES,
    STATISTICS_MAX_BYTES,
    Manifest,
    ManifestError,
    ManifestFeature,
)
from transforms.contract.statistics import Statistics, StatisticsError


@dataclass(frozen=True)
class Shard:
    """One TFRecord shard: its absolute path, records, size in bytes and sha256 (as listed)."""

    path: str
    records: int
    bytes: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class Dataset:
    """One or more datasets read as one: `roots` (absolute), their shared features, label and
    compression, each split's shards in manifest order (dataset by dataset), and the first
    dataset's statistics (None when it has none, or for several datasets), and each dataset's
    facts (None for one written without them)."""

    roots: tuple[str, ...]
    features: Mapping[str, ManifestFeature]
    label: str | None
    compression: str
    splits: Mapping[str, tuple[Shard, ...]]
    statistics: Statistics | None = None
    facts: tuple[Facts | None, ...] = ()

    @property
    def wbits(self) -> int | None:
        """The zlib window bits of the shards' stream (None: not compressed)."""
        return COMPRESSIONS[self.compression].wbits

    def shards(self, split: str) -> tuple[Shard, ...]:
        """The shards of `split`; ManifestError when there is no such split or it has none."""
        if split not in self.splits:
            known = ", ".join(sorted(self.splits)) or "none"
            raise ManifestError(f"{self.roots[0]}: no split {split!r} (splits: {known})")
        shards = self.splits[split]
        if not shards:
            raise ManifestError(f"{self.roots[0]}: split {split!r} has no files")
        return shards


def open_dataset(data: str | Sequence[str]) -> Dataset:
    """The dataset at `data`: one URI (local folder or gs:// prefix) or several read as one, a
    date range in braces standing for one URI a day (as `--data`: trainer.dataset.paths.expand)."""
    uris = expand([data] if isinstance(data, str) else list(data))  # date ranges: one a day
    if not uris:
        raise ManifestError("no dataset given")
    roots = tuple(storage.normalize_root(u) for u in uris)
    check_once("data", roots, {})
    manifests = [_load_manifest(root) for root in roots]
    first = manifests[0]
    for root, other in zip(roots[1:], manifests[1:]):
        difference = _difference(first, other)
        if difference:
            raise ManifestError(
                f"{root} does not match {roots[0]}: {difference}; datasets read as one must "
                "declare the same features, label and compression"
            )
    splits: dict[str, tuple[Shard, ...]] = {}
    for root, manifest in zip(roots, manifests):
        for name, entry in manifest.splits.items():
            shards = tuple(
                Shard(storage.join(root, f.path), f.records or 0, f.bytes, f.sha256)
                for f in entry.files
            )
            splits[name] = splits.get(name, ()) + shards
    check_once("data", (), {name: [s.path for s in shards] for name, shards in splits.items()})
    return Dataset(
        roots=roots,
        features=dict(first.features),
        label=first.label,
        compression=first.compression,
        splits=splits,
        statistics=_load_statistics(roots[0]) if len(roots) == 1 else None,
        facts=tuple(_load_facts(root, m) for root, m in zip(roots, manifests)),
    )


def _load_manifest(root: str) -> Manifest:
    path = storage.join(root, MANIFEST)
    if not storage.exists(path):
        raise ManifestError(
            f"{root}: no manifest.json at {path}, "
            "the run is incomplete or this is not a shardflow dataset"
        )
    return Manifest.from_json(storage.read_bytes(path, MANIFEST_MAX_BYTES), where=path)


def _load_statistics(root: str) -> Statistics | None:
    path = storage.join(root, STATISTICS)
    if not storage.exists(path):
        return None
    try:
        return Statistics.loads(storage.read_bytes(path, STATISTICS_MAX_BYTES), where=path)
    except StatisticsError as e:
        raise ManifestError(str(e)) from None


def _load_facts(root: str, manifest: Manifest) -> Facts | None:
    """The facts.json that the manifest lists (None: it lists none)."""
    if manifest.facts is None:
        return None
    path = storage.join(root, manifest.facts.path)
    if not storage.exists(path):
        raise ManifestError(f"{root}: the manifest lists {manifest.facts.path}, which is missing")
    data = storage.read_bytes(path, FACTS_MAX_BYTES, manifest.facts.bytes)
    return parse_facts(data, manifest.facts.sha256, path)


def check_once(flag: str, roots: Sequence[str], splits: Mapping[str, Sequence[str]]) -> None:
    """ManifestError when two of the dataset locations `roots` are one dataset, or when two of
    the shard paths of `splits` (split name -> absolute paths) are one file (compared as
    storage.same_file_key: links and `..` do not hide it): its records would be read twice,
    or a model scored on records it trained on. `flag` names the argument in the error."""
    seen: dict = {}
    for root in roots:
        key = storage.same_file_key(root)
        if key in seen:
            same = "" if seen[key] == root else f" is {seen[key]},"
            raise ManifestError(
                f"{flag}: {root}{same} given twice: its records would be read (and scored) "
                "twice; give each dataset once"
            )
        seen[key] = root
    places: dict = {}
    for name, paths in splits.items():
        for path in paths:
            key = storage.same_file_key(path)
            if key in places:
                first, split = places[key]
                where = f"split {name!r}" if split == name else f"splits {split!r} and {name!r}"
                raise ManifestError(
                    f"{flag}: {path} is {first}: one shard listed twice ({where}): its "
                    "records would be read twice, or a model scored on records it trained on; "
                    "give each dataset once, and rerun the ETL of one whose shards are links"
                )
            places[key] = (path, name)


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


def _difference(a: Manifest, b: Manifest) -> str | None:
    if a.label != b.label:
        return f"label {b.label!r}, not {a.label!r}"
    if a.compression != b.compression:
        return f"compression {b.compression!r}, not {a.compression!r}"
    if a.features != b.features:
        name = next(
            n for n in sorted(set(a.features) | set(b.features))
            if a.features.get(n) != b.features.get(n)
        )  # fmt: skip
        return f"feature {name!r} differs"
    return None
