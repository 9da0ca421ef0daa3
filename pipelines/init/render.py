"""The text of the config `shardflow init` writes: YAML with comments that say what each inferred
setting rests on and what to check, and settings left to the user written commented out.

Every value goes through `yaml.safe_dump`, so names and values are quoted exactly where YAML
needs it (`'yes'`, `'#N/A'`, `"\\t"`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

from pipelines.init.guess import Guess
from pipelines.init.infer import Feature
from pipelines.init.sample import Sample, relative_to
from transforms.contract.layout import DEFAULT_COMPRESSION, DEFAULT_SHARD_SIZE_MB

SPLITS = {"train": 0.8, "eval": 0.1, "test": 0.1}
# Below this many records in all (every file read whole), a split of 0.1 may get none: the run
# would fail its empty-split check.
FEW_RECORDS = 100
_COMMENT_AT = 34  # the column trailing comments start at, where the setting is shorter


def scalar(value: Any) -> str:
    """A value as YAML flow text on one line, quoted where YAML needs it."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_in_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_in_flow(k)}: {_in_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str) and not value.isprintable():
        return json.dumps(value, ensure_ascii=False)  # a double-quoted YAML scalar: "a\nb"
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=1 << 30)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _in_flow(value: Any) -> str:
    """A value inside a flow collection, where `,` `[` `]` `{` `}` need quotes too."""
    if isinstance(value, (list, tuple, dict)) or (
        isinstance(value, str) and not value.isprintable()
    ):
        return scalar(value)
    text = yaml.safe_dump([value], default_flow_style=True, allow_unicode=True, width=1 << 30)
    return text.strip()[1:-1]


def _line(text: str, comment: str | None = None) -> str:
    if not comment:
        return text
    comment = " ".join(comment.split())  # one line
    return f"{text.ljust(_COMMENT_AT - 2)}  # {comment}"


def render(
    samples: list[Sample],
    features: list[Feature],
    key: Guess,
    label: Guess,
    *,
    name: str,
    folder: str,
    command: str,
    config_name: str | None,
    warnings: Sequence[str] = (),
) -> str:
    """The config's text. Source paths are written relative to `folder` (the config's, or the
    current one when the config goes to stdout: `config_name` None)."""
    total = sum(s.records for s in samples)
    out = _header(samples, command, config_name, warnings)
    out.append(f"name: {scalar(name)}")
    out.append("sources:")
    for s in samples:
        out += _source(s, folder)
    out.append("features:")
    for f in features:
        out += _feature(f)
    out.append(_suggestion("key", key))
    out.append(_suggestion("label", label))
    out.append(
        _line(
            f"splits: {scalar(SPLITS)}",
            "fractions summing to 1; a record's split is a stable hash of its key (of its "
            "content without a key)",
        )
    )
    out.append("output:")
    out.append(_line(f"  path: {scalar('out/' + name)}", "or give shardflow etl --output"))
    out.append(_line(f"  # compression: {DEFAULT_COMPRESSION}", "gzip (default) | zlib | none"))
    out.append(_line(f"  # shard_size_mb: {DEFAULT_SHARD_SIZE_MB}", "the target size of a shard"))
    if total < FEW_RECORDS and all(s.whole for s in samples):
        out.append(
            _line(
                "  allow: [empty_split]",
                f"only {total} records: a split may get none of them, which fails a run",
            )
        )
    return "\n".join(out) + "\n"


def _header(samples, command: str, config_name: str | None, warnings) -> list[str]:
    config = config_name or "CONFIG.yaml"
    lines = [
        "# A dataset config written by `shardflow init` from the records of its input files:",
        f"#   {command}",
        "# Read:",
    ]
    for s in samples:
        lines.append(f"#   {s.name} ({s.format}): {s.describe()}")
    if all(s.whole for s in samples):
        lines.append("# Every record was read; new data may hold more. Check before the first run:")
    else:
        lines += [
            "# A sample can miss what the rest of the data holds (a `values:` list from a sample",
            "# is commented out). Check, before the first run:",
        ]
    lines += [
        "#   - each feature's type and shape, and `required: false` where a value may be missing;",
        "#   - `values:` (a value not listed is rejected) and the commented-out min/max bounds;",
        "#   - the key and the label at the end.",
        f"# Then: shardflow etl --config {config} --validate-only",
    ]
    where = "this file's folder" if config_name else "the folder init ran in"
    lines.append(f"# Paths are relative to {where}.")
    for warning in warnings:
        lines.append(f"# WARNING: {' '.join(warning.split())}")
    return lines


def _source(sample: Sample, folder: str) -> list[str]:
    lines = [
        f"  - name: {scalar(sample.name)}",
        f"    format: {sample.format}",
        f"    path: {scalar(relative_to(sample.path, folder))}",
    ]
    if sample.options:
        lines.append("    options:")
        for option, value in sample.options.items():
            lines.append(_line(f"      {option}: {scalar(value)}", sample.notes.get(option)))
    return lines


def _feature(f: Feature) -> list[str]:
    if f.type is None:
        return [_line(f"  # {scalar(f.name)}:", f"not a feature: it {f.skipped}")]
    lines = [_line(f"  {scalar(f.name)}:", "; ".join(f.notes))]
    lines.append(f"    type: {f.type}")
    if f.shape:
        lines.append(f"    shape: {scalar(list(f.shape))}")
    if not f.required:
        missing = f"missing in {f.records - f.present:,} of {f.records:,} sampled records"
        lines.append(_line("    required: false", missing))
    if f.values is not None:
        shown = f"values: {scalar(f.values)}"
        if f.values_doubt is None:
            lines.append(
                _line(
                    f"    {shown}",
                    f"{len(f.values)} distinct in {len(f.canonical):,} sampled values; a value "
                    "not listed is rejected",
                )
            )
        else:
            lines.append(_line(f"    # {shown}", f.values_doubt))
    if f.min is not None:
        observed = f"observed in {f.present:,} sampled records; a bound rejects values beyond it"
        lines.append(_line(f"    # min: {scalar(f.min)}", observed))
        lines.append(f"    # max: {scalar(f.max)}")
    return lines


def _suggestion(setting: str, guess: Guess) -> str:
    if guess.name is None:
        return _line(f"# {setting}:", guess.reason)
    text = f"{setting}: {scalar(guess.name)}"
    return _line(text if guess.sure else f"# {text}", guess.reason)
