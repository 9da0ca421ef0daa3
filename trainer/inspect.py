"""`shardflow inspect DATASET_URI [--split NAME] [--take N]`: what a dataset holds.

Prints a summary of the manifest (name, label, features, splits with records and files,
rejected records, duplicates), then the first N examples of a split in file order, decoded with
the manifest's parse spec, one JSON object per line. A missing value of an optional feature is
null; image and bytes values are shown by size, not content. Shards that hold tf.Transform
outputs (manifest `transform.materialize: transformed`) are shown feature by feature as lists
of the values each example holds.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import tensorflow as tf

from trainer.features import parse_spec
from trainer.manifest import FeatureSpec, Manifest, ManifestError, load_manifest


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `shardflow inspect`."""
    p = argparse.ArgumentParser(prog="shardflow inspect", description=__doc__.splitlines()[0])
    p.add_argument("dataset", metavar="DATASET_URI", help="dataset folder or gs:// prefix")
    p.add_argument("--split", default="train", help="split to show examples of (default: train)")
    p.add_argument("--take", type=int, default=5, help="number of examples to show (default: 5)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Runs `shardflow inspect`; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    if args.take < 0:
        print("shardflow inspect: --take: must be 0 or more", file=sys.stderr)
        return 2
    try:
        manifest = load_manifest(args.dataset)
        files = manifest.split_files(args.split) if args.take else []
    except ManifestError as e:
        print(f"shardflow inspect: {e}", file=sys.stderr)
        return 2
    for line in summary(manifest):
        print(line)
    if args.take:
        print(f"first {args.take} examples of split {args.split!r}:")
        for example in take_examples(manifest, files, args.take):
            print(json.dumps(example, ensure_ascii=False))
    return 0


def summary(manifest: Manifest) -> list[str]:
    """Human-readable lines describing the manifest."""
    lines = [
        f"dataset: {manifest.name} at {manifest.root}",
        (
            f"created: {manifest.created}  format: {manifest.format_version}  "
            f"compression: {manifest.compression}"
        ),
        f"label: {manifest.label}",
        "features:",
    ]
    for f in manifest.features.values():
        shape = "[null]" if f.variable_length else json.dumps(list(f.shape))
        extras = ["required" if f.required else "optional"]
        if f.default is not None:
            extras.append(f"default={f.default!r}")
        if f.values is not None:
            extras.append(f"{len(f.values)} values")
        lines.append(f"  {f.name}: {f.type} {shape} {', '.join(extras)}")
    lines.append("splits:")
    for split in manifest.splits.values():
        lines.append(f"  {split.name}: {split.records} records in {len(split.files)} files")
    lines.append(f"rejected: {manifest.rejected_records}")
    for reason, count in sorted((manifest.rejected_reasons or {}).items()):
        lines.append(f"  {reason}: {count}")
    lines.append(f"duplicates: {manifest.duplicates}")
    if manifest.transform is not None:
        lines.append(
            f"transform: {manifest.transform.path} "
            f"(shards hold {manifest.transform.materialize} examples)"
        )
    return lines


def take_examples(manifest: Manifest, files: list[str], n: int) -> list[dict]:
    """The first `n` examples of `files` (file order), as JSON-friendly dicts."""
    records = tf.data.TFRecordDataset(files, compression_type=manifest.compression_type)
    if manifest.transform is not None and manifest.transform.materialize == "transformed":
        return [_as_lists(r.numpy()) for r in records.take(n)]
    spec = parse_spec(manifest)
    ds = records.take(n).batch(n).map(lambda s: tf.io.parse_example(s, spec))
    batch = next(iter(ds), None)
    if batch is None:
        return []
    columns = {name: _rows(value) for name, value in batch.items()}
    count = len(next(iter(columns.values())))
    return [
        {name: _decode(manifest.features[name], columns[name][i]) for name in manifest.features}
        for i in range(count)
    ]


def _as_lists(serialized: bytes) -> dict:
    """A serialized tf.train.Example as {feature: [values]}, in feature name order."""
    example = tf.train.Example.FromString(serialized)
    out = {}
    for name, feature in sorted(example.features.feature.items()):
        kind = feature.WhichOneof("kind")
        values = list(getattr(feature, kind).value) if kind else []
        if kind == "bytes_list":
            values = [_text_or_size(v) for v in values]
        elif kind == "float_list":
            values = [float(str(np.float32(v))) for v in values]
        out[name] = values
    return out


def _text_or_size(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(value)} bytes>"


def _rows(value: tf.Tensor | tf.RaggedTensor) -> list:
    if isinstance(value, tf.RaggedTensor):
        # dtype=object: a numpy bytes array would drop trailing NUL bytes
        return [np.array(row, dtype=object) for row in value.to_list()]
    return list(value.numpy())


def _decode(feature: FeatureSpec, value: np.ndarray):
    values = np.asarray(value)
    if not feature.variable_length and not feature.always_full and values.size == 0:
        return None
    items = [_item(feature, v) for v in values.reshape(-1)]
    if feature.variable_length:
        return items
    if feature.shape == ():
        return items[0]
    return np.asarray(items, dtype=object).reshape(feature.shape).tolist()


def _item(feature: FeatureSpec, v):
    if feature.type in ("image", "bytes"):
        return f"<{len(v)} bytes>"
    if feature.type == "string":
        return v.decode("utf-8", errors="replace")
    if feature.type == "float":
        return float(str(np.float32(v)))  # the shortest decimal that reads back the same float32
    return int(v)


if __name__ == "__main__":
    sys.exit(main())
