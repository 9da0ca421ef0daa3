"""`shardflow predict`: serves examples of a dataset split with an exported model.

Loads `MODEL_DIR/export` as any serving system would (`tf.saved_model.load`, signature
`serving_default`), feeds it the split's raw serialized tf.train.Example records (which still
hold the label, ignored by the signature) and prints one JSON object per example: the true label
when the dataset has one and what the model answered. A dataset whose shards hold transformed
examples (manifest `transform.materialize: transformed`) has no raw examples to serve.
"""

from __future__ import annotations

import argparse
import json
import sys

import tensorflow as tf

from trainer.export import SIGNATURE
from trainer.inspect import take_examples
from trainer.manifest import ManifestError, load_manifest


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shardflow predict", description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="MODEL_DIR of `shardflow train`")
    p.add_argument("--data", required=True, help="dataset folder or gs:// prefix")
    p.add_argument("--split", default="test", help="split to take examples from (default: test)")
    p.add_argument("--take", type=int, default=5, help="number of examples (default: 5)")
    return p


def predict(model_dir: str, serialized: list[bytes]) -> dict[str, list]:
    """The serving signature's outputs for serialized examples, as Python lists."""
    model = tf.saved_model.load(f"{model_dir.rstrip('/')}/export")
    outputs = model.signatures[SIGNATURE](examples=tf.constant(serialized, tf.string))
    return {name: value.numpy().tolist() for name, value in outputs.items()}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.take < 1:
        print("shardflow predict: --take: must be 1 or more", file=sys.stderr)
        return 2
    try:
        manifest = load_manifest(args.data)
        files = manifest.split_files(args.split)
    except ManifestError as e:
        print(f"shardflow predict: {e}", file=sys.stderr)
        return 2
    if manifest.transform is not None and manifest.transform.materialize == "transformed":
        print(
            f"shardflow predict: {args.data}: the shards hold transformed examples; "
            "the model serves raw ones",
            file=sys.stderr,
        )
        return 2
    if not tf.io.gfile.exists(f"{args.model_dir.rstrip('/')}/export"):
        print(f"shardflow predict: no export/ in {args.model_dir!r}", file=sys.stderr)
        return 2
    records = tf.data.TFRecordDataset(files, compression_type=manifest.compression_type)
    serialized = [r.numpy() for r in records.take(args.take)]
    if not serialized:
        print(f"shardflow predict: split {args.split!r} is empty", file=sys.stderr)
        return 2
    outputs = predict(args.model_dir, serialized)
    examples = take_examples(manifest, files, len(serialized))
    for i, example in enumerate(examples):
        answer = {name: _plain(values[i]) for name, values in outputs.items()}
        row = {"label": example.get(manifest.label)} if manifest.label else {}
        print(json.dumps({**row, **answer}, ensure_ascii=False))
    return 0


def _plain(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list):
        return [round(v, 4) if isinstance(v, float) else _plain(v) for v in value]
    return round(value, 4) if isinstance(value, float) else value


if __name__ == "__main__":
    sys.exit(main())
