"""Reading a written dataset back with TensorFlow only: the independent reader of the e2e tests.

Nothing here uses shardflow's code: shards are listed from the manifest, read with
`tf.data.TFRecordDataset` and parsed with `tf.train.Example`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Mapping


def manifest(folder: Path) -> dict:
    return json.loads((Path(folder) / "manifest.json").read_text())


def features(folder: Path, manifest: dict) -> Iterator[Mapping]:
    """The feature map (`tf.train.Features.feature`) of every example of every split."""
    import tensorflow as tf

    for split in manifest["splits"].values():
        for f in split["files"]:
            path = str(Path(folder) / f["path"])
            compression = {".gz": "GZIP", ".zz": "ZLIB"}.get(Path(path).suffix, "")
            for record in tf.data.TFRecordDataset(path, compression_type=compression):
                yield tf.train.Example.FromString(record.numpy()).features.feature


def values(feature) -> tuple[str, tuple]:
    """(kind, values) of one tf.train.Feature."""
    kind = feature.WhichOneof("kind")
    return kind, tuple(getattr(feature, kind).value)


def rows(
    folder: Path, manifest: dict, names: list[str], kinds: Mapping[str, str] | None = None
) -> list[tuple]:
    """Every example as a tuple of value tuples in `names` order, sorted; each example must hold
    exactly the features `names` (and, with `kinds`, each of its kind)."""
    out = []
    for feature in features(folder, manifest):
        assert sorted(feature) == sorted(names)
        row = []
        for name in names:
            kind, vals = values(feature[name])
            if kinds is not None:
                assert kind == kinds[name], (name, kind)
            row.append(vals)
        out.append(tuple(row))
    return sorted(out)


def rejected(folder: Path) -> list[dict]:
    path = Path(folder) / "rejected" / "rejected-00000-of-00001.jsonl"
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]
