"""The manifest of a dataset: counts, files with sizes and checksums, the schema.

Built once the shards and the rejected file are staged, from the run's counters; it checks the
ledger (every record read is written, rejected, a duplicate or joined into another) and raises
when it does not balance: such a dataset is never published.
"""

from __future__ import annotations

import datetime
from typing import Any

from transforms.contract.config import DatasetSpec
from transforms.contract.manifest import (
    FileEntry,
    Manifest,
    ManifestFeature,
    RejectedEntry,
    SourceEntry,
    SplitEntry,
    TransformEntry,
)
from transforms.records import ShardFile, ignored_counter, read_counter
from transforms.sink.rejected import RejectedFiles

MAX_IGNORED_LISTED = 100  # ignored fields a source lists in the manifest, by records holding them


def build_manifest(
    dataset: DatasetSpec,
    shards: list[ShardFile],
    rejected: RejectedFiles,
    counts: dict[str, int],
    transform: dict[str, Any] | None = None,
) -> Manifest:
    """The manifest: counts, files with sizes and checksums, the schema. Checks the ledger.

    `transform` is the `transform` section (tf.Transform output), or None without one; its
    analyzed records must be exactly the train split's.
    """
    splits: dict[str, SplitEntry] = {}
    duplicates = counts.get("duplicates", 0)
    for name in dataset.split_names:
        files = sorted((s for s in shards if s.split == name), key=lambda s: s.path)
        duplicates += sum(s.duplicates for s in files)
        splits[name] = SplitEntry(
            records=sum(s.records for s in files),
            files=tuple(FileEntry(s.path, s.records, s.bytes, s.sha256) for s in files),
        )
    sources = {
        s.name: SourceEntry(
            format=s.format,
            records=counts.get(read_counter(s.name), 0),
            **_ignored_fields(counts, s.name),
        )
        for s in dataset.sources
    }
    read = sum(v.records for v in sources.values())
    written = sum(v.records for v in splits.values())
    joined = counts.get("joined", 0)
    accounted = written + rejected.records + duplicates + joined
    if read != accounted:
        raise RuntimeError(
            f"ledger does not balance: read {read} records, accounted for {accounted} "
            f"(written {written}, rejected {rejected.records}, duplicates {duplicates}, "
            f"joined {joined})"
        )
    if transform is not None:
        train = splits[transform["analyzed_split"]].records
        if transform["analyzed_records"] != train:
            raise RuntimeError(
                f"tf.Transform analyzed {transform['analyzed_records']} records, but the "
                f"{transform['analyzed_split']} split holds {train}"
            )
    return Manifest(
        name=dataset.name,
        created=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        config_sha256=dataset.config_sha256,
        compression=dataset.output.compression,
        compression_level=dataset.output.compression_level,
        features={f.name: ManifestFeature.of(f) for f in dataset.features},
        label=dataset.label,
        key=dataset.key,
        combine=dataset.combine,
        sources=sources,
        splits=splits,
        rejected=RejectedEntry(
            records=rejected.records,
            reasons=dict(sorted(rejected.reasons().items())),
            files=tuple(_file(f) for f in rejected.files),
        ),
        duplicates=duplicates,
        transform=None if transform is None else TransformEntry(**transform),
        joined=joined if dataset.combine == "join" else None,
        date=dataset.date,
        limit=_partial(dataset.limit, sources),
    )


def _partial(limit: int | None, sources: dict[str, SourceEntry]) -> int | None:
    """The manifest's `limit`: `etl --limit N`'s N when a source was cut at it (read N records);
    None when every source held fewer, so that all of it was read."""
    if limit is None or all(s.records < limit for s in sources.values()):
        return None
    return limit


def _file(facts: dict[str, Any]) -> FileEntry:
    return FileEntry(facts["path"], facts["records"], facts["bytes"], facts["sha256"])


def _ignored_fields(counts: dict[str, int], source_name: str) -> dict[str, Any]:
    """`ignored_fields`, {field: records holding a value in it} of a source's fields that no
    feature reads, the MAX_IGNORED_LISTED held by most records (by name), and
    `ignored_fields_unlisted`, how many more there are (records with thousands of distinct
    keys must not make a manifest of megabytes)."""
    prefix = ignored_counter(source_name, "")
    fields = {k[len(prefix) :]: n for k, n in counts.items() if k.startswith(prefix)}
    listed = sorted(fields.items(), key=lambda item: (-item[1], item[0]))[:MAX_IGNORED_LISTED]
    unlisted = len(fields) - len(listed)
    return {"ignored_fields": dict(sorted(listed)), "ignored_fields_unlisted": unlisted or None}
