"""Benchmark: the trainer's tf.data input pipeline against floors and the usual baselines.

One run generates the seeded mixed CSV of benchmarks/etl_csv.py (ints, floats, categoricals
declared with `values`, free text, missing values), turns it into two datasets with the real
`shardflow etl` (output.compression gzip and none, with output.shard_size_mb chosen so that the
train split has at least --shards shards), then reads the train split of each, in one process,
one variant at a time, alternating them `--repeats` times:

  a   raw floor        TFRecordDataset(files, num_parallel_reads=AUTOTUNE) -> batch: no parsing.
  a'  parse floor      the same -> batch -> tf.io.parse_example(trainer spec) -> prefetch.
  b   naive            TFRecordDataset(files) -> map(parse_single_example) -> ragged_batch.
  c   from_generator   a Python generator reads records (TFRecordDataset.as_numpy_iterator),
                       tf.train.Example.FromString -> dict of numpy arrays ->
                       Dataset.from_generator(output_signature) -> ragged_batch;
                       only the first --generator-examples examples (it is ~100x slower).
  d   shardflow        what `shardflow train` feeds the model (see shardflow_dataset): first
                       epoch without cache, first epoch with cache on, and the cached 2nd epoch.

Every pass is drained to the end inside one tf.function (Dataset.reduce), so Python is not in the
loop; each variant is warmed up on a few batches of another dataset object first. Rates are
examples/s and MB/s of shard files read (their size on disk, compressed for gzip).

  python benchmarks/input_pipeline.py [--examples 500000] [--shards 16] [--batch-size 256]
                                      [--repeats 3] [--workdir DIR] [--record]

`--images N` measures the image row instead: N generated 128x128 JPEGs in three class folders,
through the real `shardflow etl` with `image_size: [64, 64]`, then, on the train split, the
read + parse floor (no decoding), the shardflow input (parse, then decode and resize on the
host, in the parallel map) and the built-in model's step on one batch held in memory (CPU), in
examples/s, and the input_bound verdict:

  python benchmarks/input_pipeline.py --images 3000 --batch-size 64 [--repeats 3] [--record]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.etl_csv import COLUMNS, PAYMENT_TYPES, generate_csv  # noqa: E402
from benchmarks.harness import REPO_ROOT, RESULTS, append_results, machine_facts  # noqa: E402
from trainer.dataset.manifest import Manifest, load_manifest  # noqa: E402
from trainer.keras.inputs import Inputs  # noqa: E402
from trainer.keras.plan import InputFlags, plan_input  # noqa: E402
from transforms.contract.layout import MANIFEST  # noqa: E402

COMPRESSIONS = ("gzip", "none")
LABEL = "payment_type"
# Categorical columns declared with their `values` (the label among them).
VALUES = {"payment_type": list(PAYMENT_TYPES), "vendor": ["V1", "V2", "V3"]}
TRAIN_FRACTION = 0.9
WARMUP_BATCHES = 5
# Target shard size = estimated train bytes / (shards * SHARD_MARGIN): a few shards more than
# asked, so that an estimate a little off still gives --shards or more.
SHARD_MARGIN = 1.15


def shardflow_dataset(manifest: Manifest, batch: int, cache: bool) -> tf.data.Dataset:
    """One epoch of exactly what `shardflow train` feeds the model (label encoded), with the
    knobs it derives from the dataset (trainer.keras.plan) and `--cache` or not."""
    plan = plan_input(manifest, InputFlags(cache="memory" if cache else "none"))
    return Inputs.of(manifest).dataset(
        "train", batch, shuffle=True, seed=0, deterministic=False, repeat=False,
        **plan.dataset_options(),
    )  # fmt: skip


# --- data -------------------------------------------------------------------------------------


def write_config(path: Path, csv_name: str, compression: str, shard_size_mb: float) -> str:
    """Writes the dataset config of the generated CSV; returns its text."""
    lines = []
    for c in COLUMNS:
        parts = [f"type: {c.kind}"]
        if not c.required:
            parts.append("required: false")
        if c.name in VALUES:
            parts.append("values: [" + ", ".join(json.dumps(v) for v in VALUES[c.name]) + "]")
        lines.append(f"  {c.name}: {{{', '.join(parts)}}}")
    text = f"""\
# Written by benchmarks/input_pipeline.py.
name: input_pipeline_bench
sources:
  - name: trips
    format: csv
    path: {csv_name}
combine: union
features:
{chr(10).join(lines)}
label: {LABEL}
splits: {{train: {TRAIN_FRACTION}, eval: {1 - TRAIN_FRACTION:.1f}}}
output:
  path: out
  compression: {compression}
  shard_size_mb: {shard_size_mb:.6f}
"""
    path.write_text(text, encoding="utf-8")
    return text


def encoded_bytes_per_row(csv_path: Path, sample: int = 2000) -> float:
    """Mean size of a TFRecord (framing included) of the first rows, encoded like the ETL."""
    import csv

    kinds = {c.name: c.kind for c in COLUMNS}
    total = rows = 0
    with csv_path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            feature = {}
            for name, value in row.items():
                if kinds[name] == "int":
                    v = tf.train.Int64List(value=[int(value)] if value else [])
                    feature[name] = tf.train.Feature(int64_list=v)
                elif kinds[name] == "float":
                    v = tf.train.FloatList(value=[float(value)] if value else [])
                    feature[name] = tf.train.Feature(float_list=v)
                else:
                    v = tf.train.BytesList(value=[value.encode()] if value else [])
                    feature[name] = tf.train.Feature(bytes_list=v)
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            total += example.ByteSize() + 16  # u64 length, two u32 CRCs
            rows += 1
            if rows == sample:
                break
    return total / rows


def _stamp_ok(stamp: Path, expected: dict) -> bool:
    try:
        return json.loads(stamp.read_text()) == expected
    except (OSError, ValueError):
        return False


def prepare_csv(work: Path, examples: int, seed: int) -> tuple[Path, dict]:
    """The generated CSV in `work`, reused when its stamp matches; returns (path, facts)."""
    csv_path, stamp = work / "data.csv", work / "data.stamp.json"
    params = {"examples": examples, "seed": seed, "generator": _generator_hash()}
    if csv_path.exists() and _stamp_ok(stamp, params):
        print(f"reusing {csv_path}", flush=True)
    else:
        stamp.unlink(missing_ok=True)
        print(f"generating {csv_path} ({examples:,} rows)...", flush=True)
        generate_csv(csv_path, examples, seed, newline_rate=0.005)
        stamp.write_text(json.dumps(params))
    return csv_path, {"examples": examples, "csv_bytes": csv_path.stat().st_size}


def _generator_hash() -> str:
    source = (Path(__file__).resolve().parent / "etl_csv.py").read_bytes()
    return hashlib.sha256(source).hexdigest()[:16]


def prepare_dataset(
    work: Path, csv_path: Path, compression: str, shard_size_mb: float, shards: int
) -> Manifest:
    """Runs `shardflow etl` for one compression unless a dataset with the same stamp exists."""
    folder = work / f"dataset-{compression}"
    config = work / f"config-{compression}.yaml"
    stamp = work / f"dataset-{compression}.stamp.json"
    text = write_config(config, csv_path.name, compression, shard_size_mb)
    params = {"config": text, "csv": json.loads((work / "data.stamp.json").read_text())}
    if (folder / MANIFEST).exists() and _stamp_ok(stamp, params):
        print(f"reusing {folder}", flush=True)
    else:
        stamp.unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        log = work / f"etl-{compression}.log"
        command = [
            str(REPO_ROOT / ".venv" / "bin" / "shardflow"),
            "etl", "--config", str(config), "--output", str(folder), "--runner", "FnApiRunner",
        ]  # fmt: skip
        print(f"running shardflow etl ({compression}, shard_size_mb {shard_size_mb:.3f})...",
              flush=True)  # fmt: skip
        started = time.perf_counter()
        with log.open("wb") as out:
            status = subprocess.run(command, cwd=work, stdout=out, stderr=subprocess.STDOUT)
        if status.returncode != 0:
            tail = log.read_text(errors="replace").splitlines()[-20:]
            raise SystemExit(
                f"shardflow etl failed (exit {status.returncode}), log {log}:\n" + "\n".join(tail)
            )
        print(f"  done in {time.perf_counter() - started:.0f} s", flush=True)
        stamp.write_text(json.dumps(params))
    manifest = load_manifest(str(folder))
    found = len(manifest.split_files("train"))
    if found < shards:
        raise SystemExit(
            f"{folder}: the train split has {found} shards, fewer than --shards {shards} "
            f"(output.shard_size_mb {shard_size_mb:.3f} was estimated too large)"
        )
    return manifest


# --- the variants -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Data:
    """One dataset's train split, as the variants read it."""

    compression: str
    manifest: Manifest
    files: list[str]
    bytes: int
    records: int
    spec: dict

    @property
    def compression_type(self) -> str:
        return self.manifest.compression_type


def raw_floor(data: Data, batch: int) -> tf.data.Dataset:
    ds = tf.data.TFRecordDataset(
        data.files, compression_type=data.compression_type, num_parallel_reads=tf.data.AUTOTUNE
    )
    return ds.batch(batch)


def parse_floor(data: Data, batch: int) -> tf.data.Dataset:
    spec = data.spec
    ds = raw_floor(data, batch).map(
        lambda s: tf.io.parse_example(s, spec),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=False,
    )
    return ds.prefetch(tf.data.AUTOTUNE)


def naive(data: Data, batch: int) -> tf.data.Dataset:
    spec = data.spec
    ds = tf.data.TFRecordDataset(data.files, compression_type=data.compression_type)
    ds = ds.map(lambda s: tf.io.parse_single_example(s, spec))
    # batch() cannot stack the optional features' lists of 0 or 1 values; ragged_batch can.
    return ds.ragged_batch(batch)


def from_generator(data: Data, batch: int, limit: int) -> tf.data.Dataset:
    """At most `limit` examples parsed in Python and handed to tf.data one by one."""
    dtypes = {n: (f.dtype, getattr(f, "shape", None)) for n, f in data.spec.items()}
    numpy_types = {tf.int64: np.int64, tf.float32: np.float32, tf.string: object}

    def examples() -> Iterator[dict]:
        n = 0
        for path in data.files:
            records = tf.data.TFRecordDataset(path, compression_type=data.compression_type)
            for record in records.as_numpy_iterator():
                feature = tf.train.Example.FromString(record).features.feature
                row = {}
                for name, (dtype, shape) in dtypes.items():
                    kind = feature[name].WhichOneof("kind") if name in feature else None
                    values = list(getattr(feature[name], kind).value) if kind else []
                    array = np.array(values, dtype=numpy_types[dtype])
                    row[name] = array.reshape(shape) if shape is not None else array
                yield row
                n += 1
                if n == limit:
                    return

    signature = {
        name: tf.TensorSpec(shape if shape is not None else [None], dtype)
        for name, (dtype, shape) in dtypes.items()
    }
    ds = tf.data.Dataset.from_generator(examples, output_signature=signature)
    return ds.ragged_batch(batch)


def _batch_size(element) -> tf.Tensor:
    """Examples in one batch: of the label (d: (features, label); a', b, c: dict) or records."""
    if isinstance(element, tuple):
        dense = element[1]
    elif isinstance(element, dict):
        dense = element[LABEL] if LABEL in element else next(iter(element.values()))
    else:
        dense = element
    return tf.cast(tf.shape(dense)[0], tf.int64)


@tf.function
def drain(ds: tf.data.Dataset) -> tf.Tensor:
    """Reads `ds` to its end inside the graph; returns the number of examples."""
    return ds.reduce(tf.constant(0, tf.int64), lambda n, element: n + _batch_size(element))


def timed(ds: tf.data.Dataset) -> tuple[int, float]:
    started = time.perf_counter()
    n = int(drain(ds))
    return n, time.perf_counter() - started


@dataclasses.dataclass(frozen=True)
class Variant:
    key: str
    label: str
    # make(data, batch, cache) -> a fresh dataset
    make: Callable[[Data, int, bool], tf.data.Dataset]
    full: bool = True  # reads the whole split (else: the first --generator-examples)


def variants(generator_examples: int) -> list[Variant]:
    return [
        Variant("a", "a raw floor (read + batch)", lambda d, b, c: raw_floor(d, b)),
        Variant("a'", "a' parse floor (+ parse_example)", lambda d, b, c: parse_floor(d, b)),
        Variant("b", "b naive (parse_single_example)", lambda d, b, c: naive(d, b)),
        Variant(
            "c",
            "c from_generator",
            lambda d, b, c: from_generator(d, b, generator_examples),
            full=False,
        ),
        Variant("d", "d shardflow", lambda d, b, c: shardflow_dataset(d.manifest, b, False)),
    ]


CACHE_FILL = "d shardflow, cache on, 1st epoch"
CACHED = "d shardflow, cached 2nd epoch"


def run_once(variant: Variant, data: Data, batch: int, results: dict) -> None:
    """Warms up, times one pass of a fresh dataset (two for the cache); stores (n, seconds)."""
    drain(variant.make(data, batch, False).take(WARMUP_BATCHES))
    n, seconds = timed(variant.make(data, batch, False))
    _store(results, data, variant.label, n, seconds, variant.full)
    if variant.key == "d":
        ds = shardflow_dataset(data.manifest, batch, True)
        for label in (CACHE_FILL, CACHED):
            n, seconds = timed(ds)
            _store(results, data, label, n, seconds, True)


def _store(results: dict, data: Data, label: str, n: int, seconds: float, full: bool) -> None:
    if full and n != data.records:
        raise SystemExit(
            f"{label} ({data.compression}): read {n:,} examples, the manifest lists "
            f"{data.records:,}"
        )
    results.setdefault((data.compression, label), []).append((n, seconds))
    print(f"  {data.compression:<4} {label:<34} {n:>9,} ex  {seconds:7.2f} s  "
          f"{n / seconds:>10,.0f} ex/s", flush=True)  # fmt: skip


# --- report -------------------------------------------------------------------------------------


def summarize(results: dict, datas: list[Data], labels: list[str]) -> tuple[str, list[str]]:
    """The markdown table and the ratio / target notes, from median times per variant."""
    rows = [
        "| data | variant | examples | s (median) | examples/s | MB/s | x a' |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for data in datas:
        rate = {}
        mbps = {}
        for label in labels:
            runs = results.get((data.compression, label))
            if not runs:
                continue
            n = runs[0][0]
            seconds = statistics.median(s for _, s in runs)
            rate[label] = n / seconds
            mbps[label] = data.bytes * n / data.records / seconds / 1e6
        floor = next((r for lbl, r in rate.items() if lbl.startswith("a'")), None)
        for label in rate:
            runs = results[(data.compression, label)]
            ratio = f"{rate[label] / floor:.2f}" if floor else "-"
            rows.append(
                f"| {data.compression} | {label} | {runs[0][0]:,} "
                f"| {statistics.median(s for _, s in runs):.2f} | {rate[label]:,.0f} "
                f"| {mbps[label]:.1f} | {ratio} |"
            )
        by_key = {label.split(" ")[0]: r for label, r in rate.items() if label in _main_labels()}
        d = by_key.get("d")
        if d is None:
            continue
        for other in ("a'", "a", "b", "c"):
            if other in by_key:
                notes.append(
                    f"{data.compression}: examples/s of d / {other} = {d / by_key[other]:.2f}"
                )
        for other, target in (("b", 5.0), ("a'", 0.8)):
            if other in by_key:
                ok = d >= target * by_key[other]
                notes.append(
                    f"{data.compression}: target d >= {target:g}x {other}: "
                    f"{'PASS' if ok else 'FAIL'} ({d / by_key[other]:.2f}x)"
                )
        for label in (CACHE_FILL, CACHED):
            if label in rate and floor:
                notes.append(f"{data.compression}: {label} / a' = {rate[label] / floor:.2f}")
    return "\n".join(rows), notes


def _main_labels() -> set[str]:
    return {v.label for v in variants(0)}


def record(
    results_path: Path, command: str, facts: str, inputs: str, table: str, notes: list[str]
) -> None:
    """Appends a dated "Input pipeline (trainer)" section to the results file."""
    append_results(results_path, "Input pipeline (trainer)", [command, facts, inputs], table, notes)


# --- images: host decode + resize against the model step -----------------------------------

IMAGE_SIDE, IMAGE_SIZE = 128, 64  # JPEGs of 128x128 pixels, learned at 64x64


def prepare_images(work: Path, images: int, seed: int) -> Manifest:
    """`images` seeded 128x128 JPEGs in three class folders -> a shardflow dataset with
    image_size [64, 64] (kept and reused in `work` while the count is the same)."""
    import io

    from PIL import Image

    from pipelines import etl

    out = work / f"images-{images}"
    if (out / "manifest.json").exists():
        return load_manifest(str(out))
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:IMAGE_SIDE, :IMAGE_SIDE]
    for i in range(images):
        label = ("blue", "green", "red")[i % 3]
        folder = work / "pictures" / label
        folder.mkdir(parents=True, exist_ok=True)
        phase = rng.uniform(0, 6.3, 3)
        pixels = 127 + 100 * np.sin(x[..., None] / rng.uniform(5, 20) + y[..., None] / 17 + phase)
        pixels = np.clip(pixels + rng.normal(0, 12, pixels.shape), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
        (folder / f"{i:06d}.jpg").write_bytes(buffer.getvalue())
    config = work / "images.yaml"
    config.write_text(
        "name: images\n"
        "sources: [{name: pictures, format: images, path: pictures}]\n"
        f"features:\n  image: {{type: image, image_size: [{IMAGE_SIZE}, {IMAGE_SIZE}]}}\n"
        "  label: {type: string}\n"
        "label: label\n"
        f"output: {{path: {out.name}}}\n"
    )
    if etl.run(["--config", str(config)]) != 0:
        raise SystemExit("the ETL of the image dataset failed")
    return load_manifest(str(out))


def image_row(manifest: Manifest, batch: int, repeats: int) -> tuple[str, list[str]]:
    """Medians of: reading and parsing the train split (no decoding), the shardflow input
    (parsing, then decoding and resizing on the host), and the built-in model's step on one
    batch held in memory (CPU); the verdict."""
    from trainer import data
    from trainer.config import ModelConfig
    from trainer.keras.model import build_model
    from trainer.run.callbacks import Throughput

    inputs = data.inputs(manifest.root)  # the label's classes from the data, as `train` does
    files = manifest.split_files("train")
    spec = {"image": tf.io.FixedLenFeature([], tf.string)}

    def parse_only() -> tf.data.Dataset:
        ds = tf.data.TFRecordDataset(files, "GZIP", num_parallel_reads=tf.data.AUTOTUNE)
        return (
            ds.batch(batch)
            .map(lambda b: tf.io.parse_example(b, spec), num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE)
        )

    def shardflow() -> tf.data.Dataset:
        return inputs.dataset("train", batch, shuffle=True, seed=0)

    rates: dict[str, list[float]] = {"parse": [], "decode": [], "model": []}
    model = build_model(inputs.model_spec, ModelConfig(), inputs.moments(), inputs.host.inputs)
    one = tf.data.Dataset.from_tensors(next(iter(shardflow()))).repeat()
    model.fit(one, steps_per_epoch=5, verbose=0)
    for _ in range(repeats):
        for key, make in (("parse", parse_only), ("decode", shardflow)):
            drain(make().take(WARMUP_BATCHES))
            n, seconds = timed(make())
            rates[key].append(n / seconds)
        throughput = Throughput()
        model.fit(one, steps_per_epoch=31, verbose=0, callbacks=[throughput])
        rates["model"].append(throughput.steps * batch / throughput.seconds)
    parse, decode, step = (statistics.median(rates[k]) for k in ("parse", "decode", "model"))
    table = "\n".join(
        [
            "| images (train split) | examples/s (median) | x model step |",
            "|---|---|---|",
            f"| read + parse floor (no decoding) | {parse:,.0f} | {parse / step:.2f} |",
            f"| shardflow input: + host decode & resize to {IMAGE_SIZE}x{IMAGE_SIZE} "
            f"| {decode:,.0f} | {decode / step:.2f} |",
            f"| built-in model step (CPU, batch {batch}) | {step:,.0f} | 1.00 |",
        ]
    )
    verdict = "input-bound" if decode < step else "not input-bound"
    notes = [
        f"input_bound: {decode < step} ({verdict}: the host decodes and resizes "
        f"{decode:,.0f} images/s, the model steps through {step:,.0f})",
        f"decode & resize cost {1e6 / decode - 1e6 / parse:,.0f} µs an image over the parse "
        "floor, on the cores tf.data's parallel map uses",
    ]
    return table, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=500_000, help="rows of the generated CSV")
    parser.add_argument("--shards", type=int, default=16, help="least train shards per dataset")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes of each variant")
    parser.add_argument(
        "--generator-examples",
        type=int,
        default=20_000,
        help="examples timed for from_generator (c)",
    )
    parser.add_argument(
        "--workdir", type=Path, help="data and datasets, kept and reused (default: a temp folder)"
    )
    parser.add_argument("--record", action="store_true", help="append the results to --results")
    parser.add_argument("--results", type=Path, default=RESULTS, help="default: %(default)s")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument(
        "--images",
        type=int,
        default=0,
        help="instead: the image row, on this many generated 128x128 JPEGs (learned at 64x64)",
    )
    args = parser.parse_args(argv)

    work = args.workdir or Path(tempfile.mkdtemp(prefix="input_pipeline_"))
    work.mkdir(parents=True, exist_ok=True)
    if args.images:
        manifest = prepare_images(work, args.images, args.seed)
        inputs = (
            f"{args.images:,} generated {IMAGE_SIDE}x{IMAGE_SIDE} JPEGs in 3 class folders; "
            f"train split {manifest.split_records('train'):,} examples, image_size "
            f"[{IMAGE_SIZE}, {IMAGE_SIZE}]; batch {args.batch_size}, repeats {args.repeats}"
        )
        print(inputs, flush=True)
        table, notes = image_row(manifest, args.batch_size, args.repeats)
        print(f"\n{table}\n")
        print("\n".join(notes))
        if args.record:
            command = shlex.join(["python", "benchmarks/input_pipeline.py", *sys.argv[1:]])
            append_results(
                args.results, "Input pipeline (trainer), images",
                [command, machine_facts(), inputs], table, notes,
            )  # fmt: skip
        if args.workdir is None:
            shutil.rmtree(work)
        return 0
    csv_path, facts = prepare_csv(work, args.examples, args.seed)
    per_row = encoded_bytes_per_row(csv_path)
    shard_size_mb = per_row * args.examples * TRAIN_FRACTION / (args.shards * SHARD_MARGIN) / 2**20
    datas = []
    for compression in COMPRESSIONS:
        manifest = prepare_dataset(work, csv_path, compression, shard_size_mb, args.shards)
        files = manifest.split_files("train")
        datas.append(
            Data(
                compression=compression,
                manifest=manifest,
                files=files,
                bytes=sum(os.path.getsize(f) for f in files),
                records=manifest.split_records("train"),
                spec=Inputs.of(manifest).spec,
            )
        )
    inputs = (
        f"{facts['examples']:,} CSV rows ({facts['csv_bytes'] / 1e6:.1f} MB); train split "
        + "; ".join(
            f"{d.compression}: {d.records:,} examples in {len(d.files)} shards, "
            f"{d.bytes / 1e6:.1f} MB"
            for d in datas
        )
        + f"; batch {args.batch_size}, repeats {args.repeats}, from_generator on the first "
        f"{args.generator_examples:,} examples"
    )
    print(inputs, flush=True)
    for data in datas:  # the page cache holds every shard before the first timed pass
        for f in data.files:
            Path(f).read_bytes()

    chosen = variants(args.generator_examples)
    results: dict = {}
    for index in range(args.repeats):
        shift = index % len(chosen)  # rotate who goes first
        for data in datas:
            for variant in chosen[shift:] + chosen[:shift]:
                run_once(variant, data, args.batch_size, results)

    labels = [v.label for v in chosen] + [CACHE_FILL, CACHED]
    table, notes = summarize(results, datas, labels)
    print(f"\n{table}\n")
    print("\n".join(notes))
    if args.record:
        command = shlex.join(["python", "benchmarks/input_pipeline.py", *sys.argv[1:]])
        record(args.results, command, machine_facts(), inputs, table, notes)
        print(f"appended to {args.results}")
    if args.workdir is None:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
