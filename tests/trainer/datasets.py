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
import shutil
import subprocess
import sys
import tempfile
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


# --- tf.Transform fixtures -------------------------------------------------------------------
# A dataset with a transform holds OUTPUT/transform/ as the ETL writes it with tft_beam:
# transform_fn/, transformed_metadata/ and metadata/ (the raw metadata). The analysis runs in a
# child process (`python -m tests.trainer.datasets`) so the test process never imports
# Apache Beam and an exit-time crash of a Beam/TF process cannot take the test run with it.

ISLAND_VOCABULARY = "island"
TAGS_VOCABULARY = "tags"


def raw_feature_spec(features: dict = FEATURES) -> dict:
    """The transform's raw input spec, as the ETL derives it from the manifest's features.

    Required and defaulted features are FixedLenFeature; optional features without a default
    and variable-length features are VarLenFeature. Every feature is in it, the label too.
    """
    dtypes = {"int": tf.int64, "float": tf.float32}
    spec = {}
    for name, f in features.items():
        dtype = dtypes.get(f["type"], tf.string)
        full = f["shape"] != [None] and (f.get("required", True) or "default" in f)
        spec[name] = (
            tf.io.FixedLenFeature(f["shape"], dtype) if full else tf.io.VarLenFeature(dtype)
        )
    return spec


def preprocessing_fn(inputs: dict) -> dict:
    """z-score of flipper_mm, vocabularies (1 OOV bucket) of island and tags, the rest as is."""
    import tensorflow_transform as tft

    outputs = dict(inputs)
    outputs["flipper_mm"] = tft.scale_to_z_score(inputs["flipper_mm"])
    outputs["island"] = tft.compute_and_apply_vocabulary(
        inputs["island"], num_oov_buckets=1, vocab_filename=ISLAND_VOCABULARY
    )
    outputs["tags"] = tft.compute_and_apply_vocabulary(
        inputs["tags"], num_oov_buckets=1, vocab_filename=TAGS_VOCABULARY
    )
    return outputs


def analyze(root: str, materialized: str | None = None) -> None:
    """Analyzes ROOT's train split and writes ROOT/transform/ (run in a child process).

    With `materialized`, also writes there a copy of the dataset whose shards hold the
    transformed examples of every split (manifest `materialize: transformed`).
    """
    import apache_beam as beam
    import tensorflow_transform.beam as tft_beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io, schema_utils
    from tfx_bsl.public import tfxio

    base = Path(root)
    manifest = json.loads((base / "manifest.json").read_text())
    schema = schema_utils.schema_from_feature_spec(raw_feature_spec(manifest["features"]))
    out = base / "transform"

    def source(split: str) -> tfxio.TFExampleRecord:
        files = [str(base / f["path"]) for f in manifest["splits"][split]["files"]]
        return tfxio.TFExampleRecord(file_pattern=files, schema=schema)

    temp_dir = tempfile.mkdtemp(prefix="tft-")
    with beam.Pipeline(runner=FnApiRunner()) as p, tft_beam.Context(temp_dir=temp_dir):
        train = source("train")
        raw = p | "ReadTrain" >> train.BeamSource()
        transform_fn = (raw, train.TensorAdapterConfig()) | tft_beam.AnalyzeDataset(
            preprocessing_fn
        )
        _ = transform_fn | tft_beam.WriteTransformFn(str(out))
        for split in manifest["splits"] if materialized else []:
            read = source(split)
            data = p | f"Read{split}" >> read.BeamSource()
            transformed = ((data, read.TensorAdapterConfig()), transform_fn) | (
                f"Transform{split}" >> tft_beam.TransformDataset(output_record_batches=True)
            )
            encoded = transformed | f"Encode{split}" >> tft_beam.EncodeTransformedDataset()
            path = Path(materialized) / _materialized_shard(split)
            path.parent.mkdir(parents=True, exist_ok=True)
            _ = encoded | f"Write{split}" >> beam.io.WriteToTFRecord(
                str(path), shard_name_template="", compression_type="gzip"
            )
    shutil.rmtree(temp_dir)
    metadata_io.write_metadata(dataset_metadata.DatasetMetadata(schema), str(out / "metadata"))
    if materialized:
        _copy_materialized(base, Path(materialized), manifest)


def _materialized_shard(split: str) -> str:
    return f"{split}/{split}-00000-of-00001.tfrecord.gz"


def _copy_materialized(base: Path, target: Path, manifest: dict) -> None:
    """Completes the transformed copy: its transform/ and its manifest (one shard per split)."""
    shutil.copytree(base / "transform", target / "transform")
    for split, entry in manifest["splits"].items():
        rel = _materialized_shard(split)
        data = (target / rel).read_bytes()
        entry["files"] = [
            {
                "path": rel,
                "records": entry["records"],
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        ]
    manifest["transform"] = {"path": "transform", "materialize": "transformed"}
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2))


def add_transform(dataset: Dataset, materialized: Path | None = None) -> Dataset:
    """Writes DATASET/transform/ in a child process and declares it in the manifest."""
    args = [str(dataset.root)] + ([str(materialized)] if materialized else [])
    proc = run_python("-m", "tests.trainer.datasets", *args, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"tf.Transform analysis failed (rc={proc.returncode}):\n{proc.stderr}")
    manifest = dict(dataset.manifest, transform={"path": "transform", "materialize": "raw"})
    (dataset.root / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return Dataset(root=dataset.root, manifest=manifest, rows=dataset.rows)


if __name__ == "__main__":
    analyze(*sys.argv[1:])
