"""What `shardflow etl` prints when a run ends: the summary of the published dataset, or the
one line of why the job failed.

The summary lists the most frequent rejection reasons of the manifest; under a reason whose
records show their value (a value outside a feature's `values`: `Rejected.value`), the most
frequent values with their counts, read back from the rejected files (the first
_VALUES_READ records at most, said when there are more). Every line goes out through
`transforms.ui.safe.shown`: field names, reasons and values come from data (a CSV header may
hold escape codes), and no line repeats a password."""

from __future__ import annotations

import json
import re
from collections import Counter

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.contract.config import DatasetSpec
from transforms.contract.facts import REPEATED_SHARE, Facts
from transforms.contract.layout import MANIFEST
from transforms.contract.manifest import Manifest
from transforms.records import Rejected
from transforms.ui.safe import printable, shown
from transforms.validation.check import describe

_TOP_REASONS = 5
_TOP_VALUES = 5  # values shown under a reason
_VALUES_READ = 1_000_000  # rejected records read back for their values, at most


# Refusals of the data or of OUTPUT: their message says all there is to say. A worker process
# (multi_processing) sends them back as text prefixed with their class's qualified name.
REFUSALS = ("transforms.quality.QualityError", "transforms.sink.output.OutputError")


def failure_reason(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    # Beam wraps worker errors in long chains; the last line names the original error.
    lines = [line for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else text
    # ... and ends it with the step that raised it, which means nothing to a user.
    last = re.sub(r" \[while running '[^']*'\]$", "", last)
    for name in REFUSALS:
        last = last.removeprefix(f"{name}: ")
    return shown(last)


def refusal(error: BaseException) -> str | None:
    """The class name of a refusal of the data or of OUTPUT (`QualityError`, `OutputError`),
    raised here or in a worker process; None for any other error."""
    if type(error).__name__ in ("QualityError", "OutputError"):
        return type(error).__name__
    lines = [line for line in str(error).splitlines() if line.strip()]
    last = re.sub(r" \[while running '[^']*'\]$", "", lines[-1]) if lines else ""
    found = next((name for name in REFUSALS if last.startswith(f"{name}: ")), None)
    return None if found is None else found.rsplit(".", 1)[-1]


def _short(text: str, most: int = 120) -> str:
    """`text` on one line and at most `most` characters (field names and reasons come from data),
    its control characters escaped (`transforms.ui.safe.printable`)."""
    text = printable(text)
    return text if len(text) <= most else text[: most - 1] + "…"


def rejected_values(output: str, manifest: Manifest) -> tuple[dict[str, Counter], bool]:
    """The values shown by the rejected records of a dataset (`Rejected.value`), counted per
    reason, and whether every rejected record was read (the first _VALUES_READ are)."""
    values: dict[str, Counter] = {}
    read = 0
    for entry in manifest.rejected.files or ():
        path = f"{output}/{entry.path}"
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            for line in f:
                if read == _VALUES_READ:
                    return values, False
                read += 1
                if b'"value": ' not in line:  # the key, as json_line writes it; most lack it
                    continue
                record = Rejected.from_json(json.loads(line))
                if record.value is not None:
                    values.setdefault(record.reason, Counter())[record.value] += 1
    return values, True


def _values(counts: Counter, complete: bool) -> str:
    """`'SA' (700), 'M' (360)`: the most frequent values (ties by value), then how many more."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    shown = ", ".join(f"{_short(value, 60)} ({n})" for value, n in ranked[:_TOP_VALUES])
    more = f", and {len(ranked) - _TOP_VALUES} more" if len(ranked) > _TOP_VALUES else ""
    where = "" if complete else f" (in the first {_VALUES_READ} rejected records)"
    return f"{shown}{more}{where}"


def _repeated_rows(dataset: DatasetSpec, manifest: Manifest) -> list[str]:
    """The facts' repeated rows and conflicting labels, when 1% of the records or more repeat,
    with the suggestion of a key for a dataset without one."""
    if manifest.facts is None:
        return []
    with FileSystems.open(f"{dataset.output.path}/{manifest.facts.path}") as f:
        rows = Facts.loads(f.read()).rows
    if not rows.records or rows.repeated < REPEATED_SHARE * rows.records:
        return []
    lines = [
        f"  {'repeated':<10} {rows.repeated:>9} records repeat another's features and label "
        f"({rows.repeated_rows} distinct rows); {rows.conflicting} share their features with a "
        f"record of another label; {rows.across_splits} have a copy in another split"
    ]
    if dataset.key is None:
        lines.append(
            "             where copies are one entity (a person, a respondent), give the "
            "config a `key` so that they land in one split"
        )
    return lines


def print_summary(dataset: DatasetSpec, seconds: float) -> None:
    with FileSystems.open(f"{dataset.output.path}/{MANIFEST}") as f:
        manifest = Manifest.from_json(f.read())
    read = sum(s.records for s in manifest.sources.values())
    _say(f"shardflow etl: {dataset.name}: {read} records read in {seconds:.1f}s")
    for name, split in manifest.splits.items():
        _say(f"  {name:<10} {split.records:>9} records in {len(split.files)} shard(s)")
    _say(f"  {'rejected':<10} {manifest.rejected.records:>9} records")
    reasons = sorted(manifest.rejected.reasons.items(), key=lambda item: (-item[1], item[0]))
    values, complete = rejected_values(dataset.output.path, manifest)
    for reason, n in reasons[:_TOP_REASONS]:
        _say(f"      {n:>7}  {_short(reason)}")
        if reason in values:
            _say(f"               values: {_values(values[reason], complete)}")
    if len(reasons) > _TOP_REASONS:
        rest = sum(n for _, n in reasons[_TOP_REASONS:])
        _say(f"      {rest:>7}  ({len(reasons) - _TOP_REASONS} more reasons: see the manifest)")
    for name, source in manifest.sources.items():
        ignored = source.ignored_fields or {}
        if ignored:
            fields = ", ".join(f"{_short(f, 40)} ({n})" for f, n in list(ignored.items())[:8])
            rest = len(ignored) - 8 + (source.ignored_fields_unlisted or 0)
            more = f" and {rest} more" if rest > 0 else ""
            _say(f"  ignored fields of {name} (records holding a value): {fields}{more}")
    _say(f"  {'duplicates':<10} {manifest.duplicates:>9} records")
    for line in _repeated_rows(dataset, manifest):
        _say(line)
    if manifest.joined is not None:
        _say(f"  {'joined':<10} {manifest.joined:>9} records merged into another source's")
    transform = manifest.transform
    if transform is not None:
        _say(
            f"  transform: {transform.path}/ analyzed on {transform.analyzed_records} "
            f"{transform.analyzed_split} records; the shards hold "
            f"{transform.materialize} examples"
        )
    validation = manifest.validation
    if validation is not None:
        against = f"; drift against {validation.baseline}" if validation.baseline else ""
        found = len(validation.anomalies)
        _say(
            f"  validation: {found} anomal{'y' if found == 1 else 'ies'} (schema: "
            f"{validation.schema_from}{against})"
        )
        for anomaly in validation.anomalies[:_TOP_REASONS]:
            _say(f"      {_short(describe(anomaly), 160)}")
        if found > _TOP_REASONS:
            _say(f"      ({found - _TOP_REASONS} more: see the manifest or report.html)")
    _say(f"  dataset: {dataset.output.path}")
    if manifest.limit is not None:
        _say(
            f"  partial: the first {manifest.limit} records of each source at most (--limit); "
            f"manifest.json says so (`limit`)"
        )


def _say(line: str) -> None:
    """Prints a line of the summary as a terminal may show it (`transforms.ui.safe.shown`)."""
    print(shown(line))
