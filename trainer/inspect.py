"""`shardflow inspect DATASET_URI [--split NAME|all] [--take N] [--stats]`: what a dataset holds.

Prints a summary of the manifest (name, label, features, splits with records and files,
rejected records, duplicates) and of its facts (facts.json: repeated rows, conflicting labels);
with --stats, the per-feature statistics of the split that the ETL wrote to
DATASET/statistics.json (one line saying there are none for a dataset written
without them); then the first N examples of the split in file order, decoded as the manifest
declares (by the readers' TFRecord framing and tfx-bsl's decoder: a local dataset is inspected
without importing TensorFlow), one JSON object per line; a record that holds another kind or
number of values than declared ends the command with exit 2, naming the feature. A missing
value of an optional feature is null; image and bytes values are shown by size, not content.
Shards that hold tf.Transform outputs (manifest `transform.materialize: transformed`) are shown
feature by feature as lists of the values each example holds. `--split all` does this for
every split. Every line goes out through `transforms.ui.safe.shown` (`_say`): names and values
come from data (escape codes, bidi overrides are escaped) and a dataset URI may hold a password.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Callable, cast

import numpy as np
import pyarrow as pa
from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

from trainer.dataset.framing import CorruptShardError, read_shard
from trainer.dataset.manifest import (
    InputFeature,
    Manifest,
    ManifestError,
    load_facts,
    load_manifest,
    load_statistics,
)
from trainer.errors import first_line, type_mismatch
from trainer.flags import inspect_parser
from trainer.readers.decode import ExampleError, schema_of
from transforms.contract.facts import REPEATED_SHARE
from transforms.contract.layout import COMPRESSIONS, STATISTICS
from transforms.contract.manifest import FileEntry
from transforms.contract.statistics import Sizes, Statistics
from transforms.ui.safe import mask_logs, shown

SIZE_TYPES = ("bytes", "image")
TOP_SHOWN = 3  # top values shown per string feature
VALUE_CHARS = 24  # of one shown value


def main(argv: list[str] | None = None) -> int:
    """Runs `shardflow inspect`; returns the exit status."""
    try:
        args = inspect_parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    mask_logs()
    try:
        manifest = load_manifest(args.dataset)
        splits = list(manifest.splits) if args.split == "all" else [args.split]
        files = {s: manifest.split_files(s) for s in splits} if args.take or args.stats else {}
        statistics = load_statistics(manifest.root) if args.stats else None
        lines = summary(manifest)  # reads facts.json: damaged or oversized, one line
    except ManifestError as e:
        _say(f"shardflow inspect: {e}", error=True)
        return 2
    except _tensorflow_errors() as e:  # a gs:// dataset that cannot be reached
        _say(f"shardflow inspect: {args.dataset}: cannot be read: {first_line(e)}", error=True)
        return 1
    for line in lines:
        _say(line)
    if args.stats:
        if statistics is None:
            _say(f"statistics: none, {manifest.root} has no {STATISTICS} (an older dataset)")
        else:
            for split in splits:
                for line in statistics_table(manifest, statistics, split):
                    _say(line)
    if args.take:
        for split in splits:
            _say(f"first {args.take} examples of split {split!r}:")
            try:  # read whole before any is printed: a closed stdout is not a shard's error
                examples = take_examples(manifest, files[split], args.take)
            except ExampleError as e:
                _say(f"shardflow inspect: {e}", error=True)
                return 2
            except (CorruptShardError, OSError, *_storage_errors()) as e:  # type: ignore[misc]
                _say(f"shardflow inspect: {read_failure(split, e)}", error=True)
                return 1
            for example in examples:
                _say(json.dumps(example, ensure_ascii=False), json_line=True)
    return 0


def _say(line: str, error: bool = False, json_line: bool = False) -> None:
    """Prints a line (on stderr for an `error`) as a terminal may show it: secrets masked,
    control characters escaped (as JSON escapes in a `json_line`)."""
    print(shown(line, json=json_line), file=sys.stderr if error else sys.stdout)


def _tensorflow_errors() -> tuple[type[BaseException], ...]:
    """TensorFlow's errors, once it is loaded (the manifest of a gs:// dataset); none before: a
    local dataset's summary and examples never import TensorFlow (about 5 s)."""
    tf = sys.modules.get("tensorflow")
    return (tf.errors.OpError,) if tf is not None else ()


def _storage_errors() -> tuple[type[BaseException], ...]:
    """Cloud Storage's errors, once its client is loaded (the shards of a gs:// dataset)."""
    errors = sys.modules.get("google.api_core.exceptions")
    return (errors.GoogleAPIError,) if errors is not None else ()


def read_failure(split: str, e: BaseException) -> str:
    """One line for a split whose shards cannot be read (a corrupt shard)."""
    why = shown(str(e)) if isinstance(e, CorruptShardError) else first_line(e)
    return f"split {split!r}: its shards cannot be read: {why}"


def summary(manifest: Manifest) -> list[str]:
    """Human-readable lines describing the manifest."""
    lines = [
        f"dataset: {manifest.name} at {manifest.root}",
        (
            f"created: {manifest.created}  format: {manifest.written.format_version}  "
            f"compression: {manifest.compression}"
        ),
        f"label: {manifest.label}",
        "features:",
    ]
    if manifest.limit is not None:
        lines.insert(2, f"partial: the first {manifest.limit} records of each source at most")
    for f in manifest.features.values():
        shape = "[null]" if f.variable_length else json.dumps(list(f.shape))
        extras = ["required" if f.required else "optional"]
        if f.default is not None:
            extras.append(f"default={f.default!r}")
        if f.values is not None:
            extras.append(f"{len(f.values)} values")
        lines.append(f"  {f.name}: {f.type} {shape} {', '.join(extras)}")
    lines.append("splits:")
    for name, split in manifest.splits.items():
        lines.append(f"  {name}: {split.records} records in {len(split.files)} files")
    lines.append(f"rejected: {manifest.rejected.records}")
    for reason, count in sorted(manifest.rejected.reasons.items()):
        lines.append(f"  {reason}: {count}")
    lines.append(f"duplicates: {manifest.duplicates}")
    lines += _facts_lines(manifest)
    if manifest.transform is not None:
        lines.append(
            f"transform: {manifest.transform.path} "
            f"(shards hold {manifest.transform.materialize} examples)"
        )
    return lines


def _facts_lines(manifest: Manifest) -> list[str]:
    """The facts' repeated rows and conflicting labels, and what they suggest (a key, classes
    for an int label); nothing for a dataset without facts."""
    (facts,) = load_facts(manifest) or (None,)
    if facts is None:
        return []
    rows = facts.rows
    lines = [
        f"repeated rows: {rows.repeated} of {rows.records} records repeat another's features and "
        f"label ({rows.repeated_rows} distinct rows); {rows.conflicting} share their features "
        f"with a record of another label; {rows.across_splits} have a copy in another split"
    ]
    if facts.label is not None and facts.label.suggested is not None:
        lines.append(f"label: {facts.label.reason}")
    if rows.records and rows.repeated >= REPEATED_SHARE * rows.records and manifest.key is None:
        lines.append(
            "  where copies are one entity (a person, a respondent), give the config a `key` "
            "so that they land in one split"
        )
    return lines


def statistics_table(manifest: Manifest, statistics: Statistics, split: str) -> list[str]:
    """Aligned lines of a split's feature statistics: one table per kind of feature.

    Numbers: min, max, mean, std; strings: distinct values (`~` when estimated) and the top
    values with their counts; bytes and images: size in bytes, min, mean and max.
    """
    stats = statistics.splits.get(split)
    if stats is None:
        return [f"statistics of split {split!r}: none in {STATISTICS}"]
    features = stats.features
    names = [n for n in manifest.features if n in features]
    names += [n for n in features if n not in manifest.features]
    lines = [f"statistics of split {split!r} ({stats.records} records validated):"]
    numbers, strings, sizes = [], [], []
    for name in names:
        s = features[name]
        common = [name, s.type, _percent(s.missing_rate)]
        if s.is_number:
            numbers.append(common + [_stat(v) for v in (s.min, s.max, s.mean, s.std)])
        elif s.type in SIZE_TYPES:
            size = s.size or Sizes()
            sizes.append(common + [_stat(v) for v in (size.min, size.mean, size.max)])
        else:
            distinct = _stat(s.distinct)
            if s.distinct is not None and s.distinct_exact is False:
                distinct = "~" + distinct
            top = ", ".join(
                f"{json.dumps(_short(str(t.value)), ensure_ascii=False)} {t.count}"
                for t in (s.top or ())[:TOP_SHOWN]
            )
            strings.append(common + [distinct, top])
    head = ["feature", "type", "missing"]
    if numbers:
        lines += _aligned([head + ["min", "max", "mean", "std"], *numbers], left=2)
    if strings:
        lines += _aligned([head + ["distinct", "top values"], *strings], left=2, last_left=True)
    if sizes:
        lines += _aligned([head + ["size min", "size mean", "size max"], *sizes], left=2)
    return lines


def _aligned(rows: list[list[str]], left: int, last_left: bool = False) -> list[str]:
    """Rows as indented lines of columns; the first `left` columns (and the last one when
    `last_left`) are left-aligned, the others right-aligned. Cells are escaped (`shown`) before
    they are measured."""
    rows = [[shown(cell) for cell in row] for row in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = []
        for i, (cell, width) in enumerate(zip(row, widths)):
            last = i == len(row) - 1
            if last and last_left:
                cells.append(cell)
            else:
                cells.append(cell.ljust(width) if i < left else cell.rjust(width))
        lines.append(("  " + "  ".join(cells)).rstrip())
    return lines


def _stat(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _percent(rate) -> str:
    return "-" if rate is None else f"{100 * rate:.1f}%"


def _short(text: str) -> str:
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def take_examples(manifest: Manifest, files: list[str], n: int) -> list[dict]:
    """The first `n` examples of `files` (file order), as JSON-friendly dicts."""
    return as_values(manifest, first_records(manifest, files, n))


def first_records(manifest: Manifest, files: list[str], n: int) -> list[bytes]:
    """The first `n` serialized examples of `files`, in file order, read by the readers'
    TFRecord framing (each frame's checksums checked; no TensorFlow). Raises
    CorruptShardError for a shard that cannot be read that far."""
    listed = {f.path: f.records for split in manifest.splits.values() for f in split.files}
    wbits = COMPRESSIONS[manifest.compression].wbits
    out: list[bytes] = []
    for path in files:
        shard = FileEntry(path, listed.get(path) or 0)  # its records: for a corrupt shard's message
        for records in read_shard(shard, wbits, check_sha256=False):
            out += records[: n - len(out)]
            if len(out) >= n:
                return out
    return out


def as_values(manifest: Manifest, records: list[bytes]) -> list[dict]:
    """Serialized examples as JSON-friendly dicts of the manifest's features (decoded by
    tfx-bsl's decoder with the manifest's schema, no TensorFlow); shards of transformed
    examples as {feature: [values]}. Raises ExampleError naming the feature, for a record that
    does not hold what the manifest declares."""
    if not records:
        return []
    if manifest.transform is not None and manifest.transform.materialize == "transformed":
        return _as_lists(records)
    decoder = ExamplesToRecordBatchDecoder(schema_of(manifest.features))
    try:
        batch = decoder.DecodeBatch(records)
    except RuntimeError as e:  # the C++ decoder's: a value of another kind
        raise ExampleError(_kind_mismatch(manifest, e)) from None
    columns = {name: batch.column(name).to_pylist() for name in manifest.features}
    return [
        {name: _decode(manifest, row, columns[name][row], name) for name in manifest.features}
        for row in range(len(records))
    ]


_WRONG_KIND = re.compile(r'found (?P<held>\w+)_list for feature "(?P<key>.*)"')


def _kind_mismatch(manifest: Manifest, e: RuntimeError) -> str:
    match = _WRONG_KIND.search(str(e))
    if match is None:
        return f"{manifest.root}: a record cannot be decoded as the manifest declares: {e}"
    return type_mismatch(manifest, match["key"], match["held"])


def _as_lists(records: list[bytes]) -> list[dict]:
    """Serialized tf.train.Examples as {feature: [values]}, each in feature name order (the
    features a record does not hold left out): decoded together, each column read once."""
    batch = ExamplesToRecordBatchDecoder().DecodeBatch(records)
    columns = []
    for name, column in sorted(zip(batch.schema.names, batch.columns)):
        kind = column.type.value_type
        show: Callable[[Any], Any]
        if pa.types.is_large_binary(kind) or pa.types.is_binary(kind):
            show = _text_or_size
        elif pa.types.is_floating(kind):
            show = _shortest_float
        else:
            show = int
        columns.append((name, show, column.to_pylist()))
    return [
        {name: [show(v) for v in rows[i]] for name, show, rows in columns if rows[i] is not None}
        for i in range(len(records))
    ]


def _shortest_float(v: float) -> float:
    """A float32 value as the shortest decimal that reads back the same float32."""
    return float(str(np.float32(v)))


def _text_or_size(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(value)} bytes>"


def _decode(manifest: Manifest, row: int, values: list | None, name: str):
    """One feature's values in record `row` of a batch (None: the record does not hold it) as
    shown: a scalar, a nested list of the feature's shape, the list of a variable-length
    feature, None for a missing optional one."""
    feature = manifest.features[name]
    items = [_item(feature, v) for v in values or ()]
    if feature.variable_length:
        return items
    if not items and not feature.always_full:
        return None
    if len(items) != feature.size:
        need = "always present" if feature.always_full else "when present"
        raise ExampleError(
            f"{manifest.root}: feature {name!r}: record {row + 1} of the split holds "
            f"{len(items)} values where the manifest declares shape {list(feature.shape)} "
            f"({need}): the manifest was edited after the ETL wrote it, or is not these "
            "shards' manifest; rerun the ETL"
        )
    if feature.shape == ():
        return items[0]
    shape = cast("tuple[int, ...]", feature.shape)  # not a variable-length list: no None
    return np.asarray(items, dtype=object).reshape(shape).tolist()


def _item(feature: InputFeature, v):
    if feature.type in ("image", "bytes"):
        return f"<{len(v)} bytes>"
    if feature.type == "string":
        return v.decode("utf-8", errors="replace")
    if feature.type == "float":
        return _shortest_float(v)
    return int(v)


if __name__ == "__main__":
    sys.exit(main())
