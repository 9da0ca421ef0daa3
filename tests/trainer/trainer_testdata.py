"""Test data for the trainer tests: a small shardflow dataset written as the ETL would write it.

The writer here is independent of trainer/: it builds each tf.train.Example by hand from plain
rows, so the tests check the trainer against the contract, not against itself. The label,
`species`, is a deterministic function of `flipper_mm` and `island`, hence learnable.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

REPO = Path(__file__).resolve().parents[2]

FEATURES = {
    "id": {"type": "int", "shape": [], "required": True},
    "bill_length_mm": {"type": "float", "shape": [], "required": False, "default": 0.0, "min": 0},
    "flipper_mm": {"type": "float", "shape": [], "required": True},
    "body_mass_g": {"type": "float", "shape": [], "required": False},
    "year": {"type": "int", "shape": [], "required": True, "values": [2007, 2008, 2009]},
    "island": {
        "type": "string",
        "shape": [],
        "required": True,
        "values": ["Biscoe", "Dream", "Torgersen"],
    },
    "sex": {"type": "string", "shape": [], "required": False},
    "tags": {"type": "string", "shape": [None], "required": False},
    "embedding": {"type": "float", "shape": [4], "required": True},
    "photo": {"type": "image", "shape": [], "required": False},
    "species": {
        "type": "string",
        "shape": [],
        "required": True,
        "values": ["Adelie", "Chinstrap", "Gentoo"],
    },
}
KINDS = {"int": "int64_list", "float": "float_list", "string": "bytes_list", "image": "bytes_list"}
ISLANDS = FEATURES["island"]["values"]
TAGS = ["calm", "loud", "tagged", "banded", "young"]


@dataclass(frozen=True)
class Dataset:
    root: Path
    manifest: dict
    rows: dict[str, list[dict]]  # split -> rows in file order


def make_rows(n: int, seed: int = 7) -> list[dict]:
    """Plain rows; None marks a missing optional value."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        island = rng.choice(ISLANDS)
        flipper = round(rng.uniform(170, 230), 1)
        if flipper < 195:
            species = "Adelie"
        else:
            species = "Gentoo" if island == "Biscoe" else "Chinstrap"
        rows.append(
            {
                "id": i,
                "bill_length_mm": round(rng.uniform(32, 60), 1),
                "flipper_mm": flipper,
                "body_mass_g": None if i % 5 == 0 else float(rng.randrange(2700, 6300, 25)),
                "year": rng.choice([2007, 2008, 2009]),
                "island": island,
                "sex": None if i % 7 == 0 else rng.choice(["male", "female"]),
                "tags": rng.sample(TAGS, k=i % 3),
                "embedding": [round(rng.uniform(-1, 1), 3) for _ in range(4)],
                "photo": None if i % 2 else b"\x89PNG fake " + str(i).encode(),
                "species": species,
            }
        )
    return rows


def to_example(row: dict, features: dict = FEATURES) -> tf.train.Example:
    """Encodes a row the way the contract says: every feature present, missing = empty list."""
    example = tf.train.Example()
    for name, spec in features.items():
        value = row.get(name)
        values = [] if value is None else value if isinstance(value, list) else [value]
        if spec["type"] == "string":
            values = [v.encode() for v in values]
        kind = KINDS[spec["type"]]
        getattr(example.features.feature[name], kind).SetInParent()
        getattr(example.features.feature[name], kind).value.extend(values)
    return example


def write_dataset(
    root: Path,
    rows: list[dict],
    *,
    label: str | None = "species",
    splits: dict[str, int] | None = None,
    compression: str = "gzip",
) -> Dataset:
    """Writes manifest.json and shards; `splits` maps train and/or eval to a number of shards.

    With both splits, train gets the first 80% of the rows and eval the rest; a lone split gets
    all rows.
    """
    splits = splits or {"train": 2, "eval": 1}
    if len(splits) == 1:
        parts = {split: rows for split in splits}
    else:
        cut = len(rows) * 8 // 10
        parts = {"train": rows[:cut], "eval": rows[cut:]}
    suffix = {"gzip": ".gz", "zlib": ".zz", "none": ""}[compression]
    options = {"gzip": "GZIP", "zlib": "ZLIB", "none": ""}[compression]
    manifest_splits = {}
    for split, shards in splits.items():
        split_rows = parts[split]
        (root / split).mkdir(parents=True, exist_ok=True)
        files = []
        per_shard = -(-len(split_rows) // shards) if split_rows else 0
        for i in range(shards):
            chunk = split_rows[i * per_shard : (i + 1) * per_shard]
            rel = f"{split}/{split}-{i:05d}-of-{shards:05d}.tfrecord{suffix}"
            with tf.io.TFRecordWriter(str(root / rel), options=options) as writer:
                for row in chunk:
                    writer.write(to_example(row).SerializeToString(deterministic=True))
            data = (root / rel).read_bytes()
            files.append(
                {
                    "path": rel,
                    "records": len(chunk),
                    "bytes": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            )
        manifest_splits[split] = {"records": len(split_rows), "files": files}
    manifest = {
        "format_version": 1,
        "name": "penguins",
        "created": "2026-11-26T10:00:00Z",
        "config_sha256": "0" * 64,
        "compression": compression,
        "features": FEATURES,
        "label": label,
        "sources": {"measurements": {"format": "csv", "records": len(rows) + 3}},
        "splits": manifest_splits,
        "rejected": {"records": 2, "reasons": {"bill_length_mm: not a number": 2}},
        "duplicates": 1,
        "transform": None,
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return Dataset(root=root, manifest=manifest, rows={k: parts[k] for k in splits})


def run_python(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """Runs `python ARGS` (e.g. -m trainer.task ...) from the repository root, quietly."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO))
    env.pop("TPU_NAME", None)
    env.pop("TF_CONFIG", None)
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
