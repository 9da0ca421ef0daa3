"""Checks that a finished run made the dataset its config asked for, before it is published.

A run can complete without an error and still produce a dataset that is plainly not what the
user meant: a source that contributed nothing (its path matched empty files, or every record
was rejected), a split with no records, the key or a `source: SRC.FIELD` field that no
record of a source holds (a join key spelled differently in one file), or a feature's field
that no source has at all (a misspelled optional feature, published as all default). Each of
these fails the run with one line naming the cause and the fix, unless the config allows it
explicitly in `output.allow` (`empty_source`, `empty_split`, `missing_field`). The
rejected-record limits (`output.max_rejected[_fraction]`) are checked here too
(`check_rejections`); a config that sets neither gets DEFAULT_MAX_REJECTED_FRACTION, so that a
run rejecting most of its input never publishes quietly.

Field presence is counted while the records flow (`CountFields`): per source and field, the
records holding a value. Fields that nothing reads are the manifest's `ignored_fields`; fields
that the key or a `source:` feature reads are counted under `present/SOURCE/FIELD`, and the
chunks that have the field of a feature read from any source under `seen/SOURCE/FIELD`, for the
checks here.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping

import apache_beam as beam
import pyarrow as pa

from transforms.contract.config import DEFAULT_MAX_REJECTED_FRACTION, DatasetSpec
from transforms.contract.manifest import Manifest
from transforms.records import RawChunk, ignored_counter

TOP_REASONS = 3  # rejection reasons a refusal names


class QualityError(RuntimeError):
    """The run made a dataset it must not publish: more rejected records than the output's
    limits allow, or one that is plainly not the one meant (see the module's docstring)."""


def check_rejections(dataset: DatasetSpec, manifest: Manifest) -> None:
    """Raises QualityError when the rejected records exceed the output's limits (without
    either, more than DEFAULT_MAX_REJECTED_FRACTION of the records read); the message names
    the most frequent reasons."""
    out = dataset.output
    read = sum(s.records for s in manifest.sources.values())
    rejected = manifest.rejected.records
    fraction = rejected / read if read else 0.0
    top = top_reasons(manifest.rejected.reasons)
    if out.max_rejected is not None and rejected > out.max_rejected:
        raise QualityError(
            f"{rejected} of {read} records rejected, more than output.max_rejected "
            f"({out.max_rejected}){top}; no dataset published"
        )
    if out.max_rejected_fraction is not None and fraction > out.max_rejected_fraction:
        raise QualityError(
            f"{rejected} of {read} records rejected ({fraction:.2%}), more than "
            f"output.max_rejected_fraction ({out.max_rejected_fraction:g}){top}; "
            "no dataset published"
        )
    unset = out.max_rejected is None and out.max_rejected_fraction is None
    if unset and fraction > DEFAULT_MAX_REJECTED_FRACTION:
        raise QualityError(
            f"{rejected} of {read} records rejected ({fraction:.2%}), more than the default "
            f"output.max_rejected_fraction ({DEFAULT_MAX_REJECTED_FRACTION:g}){top}; fix the "
            "input or the features, or set output.max_rejected_fraction: 1 to accept any share; "
            "no dataset published"
        )


def top_reasons(reasons: Mapping[str, int], most: int = TOP_REASONS) -> str:
    """`; most often: 'REASON' (N), ...`, the `most` most frequent reasons (ties by reason),
    each cut at 120 characters; "" without any."""
    if not reasons:
        return ""
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    listed = ", ".join(f"{_cut(reason)!r} ({n})" for reason, n in ranked[:most])
    more = f" and {len(ranked) - most} more" if len(ranked) > most else ""
    return f"; most often: {listed}{more}"


def _cut(text: str, most: int = 120) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def present_counter(source_name: str, field: str) -> str:
    """The name under which the records holding a value in a field that is read are counted."""
    return f"present/{source_name}/{field}"


def seen_counter(source_name: str, field: str) -> str:
    """The name under which the chunks of a source that have a field at all are counted."""
    return f"seen/{source_name}/{field}"


def used_fields(dataset: DatasetSpec, source_name: str) -> frozenset[str]:
    """The fields of a source's records that the dataset reads: its features' and the key."""
    used = {f.field_name for f in dataset.features if f.source in (None, source_name)}
    if dataset.key is not None:
        used.add(dataset.key)
    return frozenset(used)


def feature_fields(dataset: DatasetSpec) -> frozenset[str]:
    """The fields of the features read from whichever source holds them (no `source:`): each
    must be held by some record of some source."""
    return frozenset(f.field_name for f in dataset.features if f.source is None)


def checked_fields(dataset: DatasetSpec, source_name: str) -> frozenset[str]:
    """The fields every record of a source is expected to hold: the key, and the fields of the
    features taken from this source by name (`source: SRC.FIELD`)."""
    fields = {f.field_name for f in dataset.features if f.source == source_name}
    if dataset.key is not None:
        fields.add(dataset.key)
    return frozenset(fields)


class CountFields(beam.DoFn):
    """Counts, per source and field, the records holding a value in it: fields that no feature
    (nor the key) reads are ignored, never silently; the key and `source:` fields are checked
    for presence before publication; the chunks that have the field of a feature read from any
    source are counted, so that a field no source has is found."""

    def __init__(self, dataset: DatasetSpec):
        self._used = {s.name: used_fields(dataset, s.name) for s in dataset.sources}
        self._checked = {s.name: checked_fields(dataset, s.name) for s in dataset.sources}
        self._anywhere = feature_fields(dataset)

    def process(self, chunk: RawChunk):
        used, checked = self._used[chunk.source], self._checked[chunk.source]
        for name in self._anywhere & chunk.columns.keys():
            yield seen_counter(chunk.source, name), 1
        for name, column in chunk.columns.items():
            if name in used and name not in checked:
                continue
            if isinstance(column, pa.Array):
                n = len(column) - column.null_count
            else:
                n = len(column) - column.count(None)
            if n:
                counter = present_counter if name in checked else ignored_counter
                yield counter(chunk.source, name), n


def check_dataset(
    dataset: DatasetSpec,
    manifest: Manifest,
    counts: dict[str, int],
    rejected: Mapping[tuple[str, str], int],
) -> None:
    """Raises QualityError for the first thing that makes the dataset plainly not the one meant:
    a field missing from every record of a source, a source that contributed no record, a split
    without records. `output.allow` lets each through. `rejected`: the rejected records per
    (source, reason); a joined record that is rejected names every source it holds ("a,b")."""
    allowed = set(dataset.output.allow)
    by_source: Counter = Counter()
    for (names, _), n in rejected.items():
        for name in names.split(","):
            by_source[name] += n
    if "missing_field" not in allowed:
        _check_fields(dataset, manifest, counts, by_source)
    if "empty_source" not in allowed:
        _check_sources(dataset, manifest, rejected, by_source)
    if "empty_split" not in allowed:
        for name in dataset.split_names:
            if manifest.splits[name].records == 0:
                written = sum(s.records for s in manifest.splits.values())
                raise QualityError(
                    f"split {name!r} has 0 records (of {written} written); give it a larger "
                    "fraction in `splits`, add data, or set output.allow: [empty_split]; "
                    "no dataset published"
                )


def _check_fields(
    dataset: DatasetSpec, manifest: Manifest, counts: dict[str, int], rejected: Counter
):
    # the sources that delivered a record: one whose records were all rejected (or that read
    # none) is said by the empty-source check, not as a field it lacks
    sources = [s for s in dataset.sources if manifest.sources[s.name].records > rejected[s.name]]
    for f in dataset.features:
        if f.source is not None or not sources or f.field_name == dataset.key:
            continue
        if any(counts.get(seen_counter(s.name, f.field_name), 0) for s in sources):
            continue
        fields = sorted({n for s in sources for n in manifest.sources[s.name].ignored_fields or {}})
        hint = f" (they hold {_names(fields)})" if fields else ""
        records = sum(manifest.sources[s.name].records for s in sources)
        raise QualityError(
            f"feature {f.name!r}: no source has a field {f.field_name!r} in any of its {records} "
            f"records{hint}; fix the feature's name (or `field:`), or set output.allow: "
            "[missing_field]; no dataset published"
        )
    for i, source in enumerate(dataset.sources):
        if manifest.sources[source.name].records == 0:
            continue  # said by the empty-source check
        for field in sorted(checked_fields(dataset, source.name)):
            if counts.get(present_counter(source.name, field), 0):
                continue
            what = "the key" if field == dataset.key else "field"
            fields = sorted(manifest.sources[source.name].ignored_fields or {})
            hint = f" (its records hold {_names(fields)})" if fields else ""
            raise QualityError(
                f"sources[{i}] {source.name!r}: {what} {field!r} is missing from all "
                f"{manifest.sources[source.name].records} of its records{hint}; "
                "fix the field name, or set output.allow: [missing_field]; no dataset published"
            )


def _check_sources(
    dataset: DatasetSpec,
    manifest: Manifest,
    rejected: Mapping[tuple[str, str], int],
    by_source: Counter,
) -> None:
    for i, source in enumerate(dataset.sources):
        read = manifest.sources[source.name].records
        if read == 0:
            where = f"path {source.path!r}" if source.path is not None else "its query"
            raise QualityError(
                f"sources[{i}] {source.name!r} contributed 0 records ({where} holds none); "
                "check the path and options, or set output.allow: [empty_source]; "
                "no dataset published"
            )
        if by_source[source.name] >= read:
            reasons: Counter = Counter()
            for (names, reason), n in rejected.items():
                if source.name in names.split(","):
                    reasons[reason] += n
            top = min(reasons.items(), key=lambda item: (-item[1], item[0]))
            raise QualityError(
                f"sources[{i}] {source.name!r}: all {read} records were rejected (most often: "
                f"{top[0]!r}, {top[1]}x); fix the input, or set output.allow: [empty_source]; "
                "no dataset published"
            )


def _names(fields: list[str], most: int = 5) -> str:
    shown = ", ".join(repr(f) for f in fields[:most])
    return shown + (f" and {len(fields) - most} more" if len(fields) > most else "")
