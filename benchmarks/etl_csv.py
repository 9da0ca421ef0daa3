"""Benchmark: shardflow's CSV ETL against a naive Beam pipeline and a no-Beam floor, on one file.

One run generates a seeded, realistic 15-column CSV (ints, floats, categoricals, free text with
quotes and commas, missing values, and a few rows with a newline inside a quoted field), writes
the shardflow dataset config for it, then times three ways of turning it into gzip TFRecords of
`tf.train.Example`, alternating them `--repeats` times:

  shardflow  `python -m pipelines.etl --config CFG --output OUT --runner FnApiRunner` (repo root).
  naive      the pipeline people write: ReadFromText -> csv.reader per line -> a Python
             tf.train.Example per row -> SerializeToString -> WriteToTFRecord(GZIP), FnApiRunner.
             ReadFromText splits quoted newlines, so it drops those rows (counted, reported).
  floor      one process, no Beam: pyarrow.csv -> tfx_bsl RecordBatchToExamples (C++) ->
             tf.io.TFRecordWriter("GZIP"): the physical cost of the same work.

Every variant runs as its own subprocess; wall time is measured around it (start-up and imports
included, as a user sees it), peak RSS and CPU time come from `os.wait4`. Records written are
counted afterwards by reading the output files back. Missing values become empty lists of the
feature's kind in all three, so the outputs hold the same examples (naive: minus the dropped rows).

  python benchmarks/etl_csv.py [--rows 200000] [--repeats 3] [--only all|naive|shardflow|floor]
                               [--workdir DIR] [--record]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import gzip
import importlib.metadata
import json
import os
import platform
import random
import re
import shlex
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
VARIANTS = ("shardflow", "naive", "floor")


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    kind: str  # int | float | string
    required: bool = True


# The one declaration of the benchmark schema: the generator, the shardflow config, the naive
# pipeline and the floor all derive from it. `comment` sits mid-row on purpose: a line split at
# its newline gives two fragments that both have the wrong column count, so naive drops the row
# instead of keeping a truncated one.
COLUMNS = (
    Column("trip_id", "int"),
    Column("pickup_hour", "int"),
    Column("day_of_week", "int"),
    Column("passenger_count", "int", required=False),
    Column("trip_miles", "float"),
    Column("trip_seconds", "int", required=False),
    Column("fare", "float"),
    Column("tips", "float", required=False),
    Column("tolls", "float"),
    Column("comment", "string", required=False),
    Column("pickup_latitude", "float", required=False),
    Column("pickup_longitude", "float", required=False),
    Column("payment_type", "string"),
    Column("company", "string", required=False),
    Column("vendor", "string"),
)

PAYMENT_TYPES = {"Credit Card": 50, "Cash": 35, "Mobile": 8, "Prcard": 5, "Unknown": 2}
COMPANIES = [
    "Flash Cab",
    "Taxi Affiliation Services",
    "Sun Taxi",
    "City Service",
    "Chicago Carriage Cab Corp",
    "Blue Ribbon Taxi Association Inc.",
    '"Globe" Taxi, LLC',
    "Medallion Leasin, Inc.",
]
COMMENT_PARTS = [
    "Driver was friendly",
    'said "no card reader", paid cash',
    "took the long way, I think",
    "car smelled of pine",
    "great ride, thanks!",
    "AC broken",
    'radio on "loud", asked to lower it',
    "stopped twice for gas, then traffic",
    "clean car",
]


# --- data -------------------------------------------------------------------------------------


def generate_csv(
    path: Path, rows: int, seed: int, newline_rate: float, first_id: int = 10_000_000
) -> dict[str, int]:
    """Writes `rows` seeded rows of COLUMNS to `path`, their trip_id counting from `first_id`;
    returns bytes and quoted-newline rows."""
    rng = random.Random(seed)
    payment_names, payment_weights = list(PAYMENT_TYPES), list(PAYMENT_TYPES.values())
    newline_rows = 0
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow([c.name for c in COLUMNS])
        for i in range(rows):
            miles = rng.lognormvariate(1.0, 0.8)
            fare = 3.25 + 2.25 * miles + rng.uniform(0, 3)
            payment = rng.choices(payment_names, payment_weights)[0]
            tips = 0.0 if payment == "Cash" else fare * rng.uniform(0, 0.25)
            comment = ""
            if rng.random() < 0.6:
                parts = rng.sample(COMMENT_PARTS, rng.randint(1, 3))
                separator = ", "
                if rng.random() < newline_rate:
                    separator, newline_rows = ".\n", newline_rows + 1
                    parts = parts if len(parts) > 1 else [*parts, "that's all"]
                comment = separator.join(parts)
            writer.writerow(
                [
                    first_id + i,
                    rng.randrange(24),
                    rng.randrange(7),
                    _maybe(rng, 0.03, str(rng.choice([1, 1, 1, 1, 2, 2, 3, 4, 5, 6]))),
                    f"{miles:.2f}",
                    _maybe(rng, 0.02, str(max(30, round(miles * 180 + rng.gauss(120, 60))))),
                    f"{fare:.2f}",
                    _maybe(rng, 0.05, f"{tips:.2f}"),
                    f"{rng.uniform(2.5, 12):.2f}" if rng.random() < 0.03 else "0.00",
                    comment,
                    _maybe(rng, 0.04, f"{41.88 + rng.gauss(0, 0.05):.6f}"),
                    _maybe(rng, 0.04, f"{-87.63 + rng.gauss(0, 0.05):.6f}"),
                    payment,
                    _maybe(rng, 0.10, rng.choice(COMPANIES)),
                    rng.choice(["V1", "V2", "V3"]),
                ]
            )
    return {"bytes": path.stat().st_size, "newline_rows": newline_rows}


def _maybe(rng: random.Random, missing_rate: float, value: str) -> str:
    return "" if rng.random() < missing_rate else value


def write_config(path: Path, data_path: str, fmt: str = "csv") -> None:
    """Writes the shardflow dataset config declaring COLUMNS (no key, one source of `fmt`)."""
    features = "\n".join(
        f"  {c.name}: {{type: {c.kind}" + ("" if c.required else ", required: false") + "}"
        for c in COLUMNS
    )
    path.write_text(
        f"""\
# Written by benchmarks/etl_csv.py.
name: etl_csv_bench
sources:
  - name: trips
    format: {fmt}
    path: {data_path}
combine: union
features:
{features}
splits: {{train: 0.9, eval: 0.1}}
output:
  path: out
  compression: gzip
  shard_size_mb: 64
""",
        encoding="utf-8",
    )


def count_tfrecords(files: list[Path]) -> int:
    """Counts the records of TFRecord files (gzip by suffix) by walking their framing."""
    total = 0
    for file in files:
        opener = gzip.open if file.name.endswith(".gz") else open
        with opener(file, "rb") as f:
            while header := f.read(12):  # u64 length + u32 masked crc of the length
                (length,) = struct.unpack("<Q", header[:8])
                f.seek(length + 4, os.SEEK_CUR)
                total += 1
    return total


# --- the children: naive and floor --------------------------------------------------------------


def run_naive(csv_path: str, out_dir: str, workers: int = 1) -> dict:
    """The per-row Beam pipeline as commonly written; returns its counters. With `workers` > 1
    it runs on that many local worker processes (multi_processing), else in process."""
    import apache_beam as beam
    import tensorflow as tf
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.metrics import Metrics
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions

    names = [c.name for c in COLUMNS]
    malformed = Metrics.counter("naive", "malformed_lines")

    def parse_line(line: str):
        fields = next(csv.reader([line]))
        if len(fields) != len(names):
            malformed.inc()
            return
        yield dict(zip(names, fields))

    def to_example(row: dict) -> tf.train.Example:
        feature = {}
        for c in COLUMNS:
            value = row[c.name]
            if c.kind == "int":
                feature[c.name] = tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[int(value)] if value else [])
                )
            elif c.kind == "float":
                feature[c.name] = tf.train.Feature(
                    float_list=tf.train.FloatList(value=[float(value)] if value else [])
                )
            else:
                feature[c.name] = tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[value.encode()] if value else [])
                )
        return tf.train.Example(features=tf.train.Features(feature=feature))

    start = time.perf_counter()
    flags = ["--runner=FnApiRunner"]
    if workers > 1:
        flags += [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]
    options = PipelineOptions(flags)
    p = beam.Pipeline(options=options)
    _ = (
        p
        | "ReadLines" >> beam.io.ReadFromText(csv_path, skip_header_lines=1)
        | "ParseLines" >> beam.FlatMap(parse_line)
        | "BuildExamples" >> beam.Map(to_example)
        | "Serialize" >> beam.Map(lambda example: example.SerializeToString())
        | "WriteTFRecords"
        >> beam.io.WriteToTFRecord(
            os.path.join(out_dir, "data"),
            file_name_suffix=".tfrecord.gz",
            compression_type=CompressionTypes.GZIP,
        )
    )
    result = p.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("malformed_lines"))["counters"]
    return {
        "malformed_lines": sum(c.committed or 0 for c in counters),
        "work_s": time.perf_counter() - start,
    }


def run_floor(csv_path: str, out_dir: str) -> dict:
    """Arrow CSV parse + C++ Example encoding + TF's gzip writer, one process, no Beam."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import tensorflow as tf
    from tfx_bsl.coders import example_coder

    arrow_types = {"int": pa.int64(), "float": pa.float32(), "string": pa.binary()}

    def as_list(array: pa.Array) -> pa.Array:
        # The encoder needs list columns; a null would become a kind-less Feature(), so a
        # missing value becomes an empty list instead, as in shardflow and naive.
        offsets = np.zeros(len(array) + 1, dtype=np.int32)
        np.cumsum(array.is_valid().to_numpy(zero_copy_only=False), out=offsets[1:])
        return pa.ListArray.from_arrays(pa.array(offsets), array.drop_null())

    start = time.perf_counter()
    reader = pacsv.open_csv(
        csv_path,
        read_options=pacsv.ReadOptions(block_size=8 << 20),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(
            column_types={c.name: arrow_types[c.kind] for c in COLUMNS},
            null_values=[""],
            strings_can_be_null=True,
        ),
    )
    names = [c.name for c in COLUMNS]
    with tf.io.TFRecordWriter(os.path.join(out_dir, "data.tfrecord.gz"), "GZIP") as writer:
        for batch in reader:
            lists = pa.RecordBatch.from_arrays([as_list(batch.column(n)) for n in names], names)
            for record in example_coder.RecordBatchToExamples(lists):
                writer.write(record)
    return {"malformed_lines": 0, "work_s": time.perf_counter() - start}


# --- the harness --------------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    variant: str
    returncode: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    records: int | None = None
    rejected: int | None = None
    work_s: float | None = None
    log: Path | None = None


def measure(cmd: list[str], cwd: Path, log: Path) -> tuple[int, float, float, float]:
    """Runs cmd; returns (exit code, wall s, CPU s, peak RSS MB) of it and its reaped children."""
    with log.open("wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def run_variant(variant: str, index: int, work: Path, csv_path: Path, config: Path) -> Run:
    """Runs one variant once into a fresh output folder, counts what it wrote, deletes it."""
    out = work / "runs" / f"{variant}-{index}"
    shutil.rmtree(out, ignore_errors=True)
    log = work / "logs" / f"{variant}-{index}.log"
    result_file = work / "logs" / f"{variant}-{index}.json"
    if variant == "shardflow":
        cmd = [sys.executable, "-m", "pipelines.etl", "--config", str(config)]
        cmd += ["--output", str(out), "--runner", "FnApiRunner"]
    else:
        out.mkdir(parents=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", variant]
        cmd += ["--csv", str(csv_path), "--out", str(out), "--result", str(result_file)]
    rc, wall, cpu, rss = measure(cmd, REPO_ROOT, log)
    run = Run(variant, rc, wall, cpu, rss, log=log)
    if rc == 0:
        read_outputs(run, variant == "shardflow", log, out, result_file)
    shutil.rmtree(out, ignore_errors=True)
    return run


def read_outputs(run, shardflow: bool, log: Path, out: Path, result_file: Path) -> None:
    """Sets a finished run's `work_s`, `rejected` and `records` from its outputs."""
    if shardflow:
        # Its own report: "... N records read in X.Ys" times the job, imports excluded.
        found = re.search(r"records read in ([0-9.]+)s", log.read_text(errors="replace"))
        run.work_s = float(found.group(1)) if found else None
        manifest = json.loads((out / "manifest.json").read_text())
        run.rejected = manifest["rejected"]["records"]
        shards = [p for p in out.glob("*/*.tfrecord*") if p.parent.name != "rejected"]
    else:
        child = json.loads(result_file.read_text())
        run.rejected, run.work_s = child["malformed_lines"], child["work_s"]
        shards = sorted(out.glob("*.tfrecord*"))
    run.records = count_tfrecords(shards)


def summarize(runs: list[Run], rows: int) -> tuple[str, dict[str, float], dict[str, float]]:
    """A markdown table of medians per variant; the median wall and in-process times of each."""
    lines = [
        "| variant | runs ok | wall s (median) | rows/s | in-process s | CPU s | peak RSS MB "
        "| records written | rejected/dropped lines |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    medians, work_medians = {}, {}
    for variant in VARIANTS:
        mine = [r for r in runs if r.variant == variant]
        ok = [r for r in mine if r.returncode == 0]
        if not mine:
            continue
        if not ok:
            lines.append(f"| {variant} | 0/{len(mine)} | failed: see {mine[-1].log} |||||||")
            continue
        wall = statistics.median(r.wall_s for r in ok)
        medians[variant] = wall
        work = [r.work_s for r in ok if r.work_s is not None]
        if work:
            work_medians[variant] = statistics.median(work)
        records = sorted({r.records for r in ok})
        rejected = sorted({r.rejected for r in ok})
        lines.append(
            f"| {variant} | {len(ok)}/{len(mine)} | {wall:.1f} | {rows / wall:,.0f} "
            f"| {f'{statistics.median(work):.1f}' if work else '-'} "
            f"| {statistics.median(r.cpu_s for r in ok):.1f} "
            f"| {max(r.peak_rss_mb for r in ok):,.0f} "
            f"| {', '.join(f'{n:,}' for n in records)} | {', '.join(map(str, rejected))} |"
        )
    return "\n".join(lines), medians, work_medians


def ratios(medians: dict[str, float], work_medians: dict[str, float]) -> list[str]:
    """Time ratios of shardflow to the others (below 1: shardflow is faster).

    Wall time includes each process's start-up (TensorFlow's import for naive and floor, Beam's
    for shardflow and naive); in-process time is the work alone.
    """
    out = []
    for kind, times in (("wall", medians), ("in-process", work_medians)):
        for other in ("naive", "floor"):
            if "shardflow" in times and other in times:
                ratio = times["shardflow"] / times[other]
                out.append(
                    f"shardflow / {other} {kind} time: {ratio:.2f} "
                    f"({1 / ratio:.2f}x the throughput of {other})"
                )
    return out


def machine_facts() -> str:
    versions = []
    for package in ("apache-beam", "tensorflow", "pyarrow", "tfx-bsl"):
        try:
            versions.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{package} missing")
    return (
        f"nproc {os.cpu_count()}, Python {platform.python_version()}, {platform.platform()}, "
        f"{', '.join(versions)}, commit {git_commit() or 'none'}"
    )


def git_commit() -> str | None:
    """The checkout's short commit; None without git or outside a checkout (a copied tree)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
        )
    except OSError:  # no git installed
        return None
    return done.stdout.strip() or None


def record(command: str, facts: str, data: dict, table: str, notes: list[str]) -> None:
    """Appends a dated section to RESULTS.md."""
    inputs = (
        f"{data['rows']:,} rows, {data['bytes'] / 1e6:.1f} MB, "
        f"{data['newline_rows']:,} rows with a newline inside a quoted field"
    )
    append_results(
        RESULTS, f"etl_csv, {data['rows']:,} rows", [command, facts, inputs], table, notes
    )


def append_results(path: Path, title: str, facts: list[str], table: str, notes: list[str]) -> None:
    """Appends a dated section to a results file: `facts` are the command, the machine and the
    input, then the table and one bullet per note."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command, machine, inputs = facts
    text = "" if path.exists() else "# Benchmark results\n"
    text += (
        f"\n## {now}: {title}\n\n"
        f"- Command: `{command}`\n- Machine: {machine}\n- Input: {inputs}\n\n"
        f"{table}\n\n" + "".join(f"- {n}\n" for n in notes)
    )
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000, help="rows of the generated CSV")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant")
    parser.add_argument("--only", choices=("all", *VARIANTS), default="all")
    parser.add_argument("--workdir", type=Path, help="where data, logs and outputs go (kept)")
    parser.add_argument("--record", action="store_true", help="append the results to RESULTS.md")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument(
        "--newline-rate",
        type=float,
        default=0.005,
        help="share of comments with a newline inside the quoted field",
    )
    parser.add_argument("--child", choices=("naive", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--csv", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)  # naive only
    args = parser.parse_args(argv)

    if args.child:
        if args.child == "naive":
            result = run_naive(args.csv, args.out, args.workers)
        else:
            result = run_floor(args.csv, args.out)
        Path(args.result).write_text(json.dumps(result))
        return 0

    work = args.workdir or Path(tempfile.mkdtemp(prefix="etl_csv_"))
    (work / "logs").mkdir(parents=True, exist_ok=True)
    csv_path, config = work / "data.csv", work / "etl_csv.yaml"
    data = {"rows": args.rows, **generate_csv(csv_path, args.rows, args.seed, args.newline_rate)}
    write_config(config, csv_path.name)
    print(
        f"input: {csv_path} ({data['rows']:,} rows, {data['bytes'] / 1e6:.1f} MB, "
        f"{data['newline_rows']} rows with a quoted newline)",
        flush=True,
    )

    variants = VARIANTS if args.only == "all" else (args.only,)
    runs = []
    for index in range(args.repeats):
        shift = index % len(variants)  # alternate, and rotate who goes first
        for variant in variants[shift:] + variants[:shift]:
            run = run_variant(variant, index, work, csv_path, config)
            runs.append(run)
            status = "ok" if run.returncode == 0 else f"FAILED rc={run.returncode}, see {run.log}"
            print(
                f"  {variant:<9} run {index + 1}: {run.wall_s:6.1f} s  "
                f"{run.peak_rss_mb:6.0f} MB  {status}",
                flush=True,
            )

    table, medians, work_medians = summarize(runs, args.rows)
    notes = ratios(medians, work_medians)
    if "naive" in medians:
        notes.append(
            f"naive drops the {data['newline_rows']} rows with a quoted newline "
            "(ReadFromText splits each into two or more malformed lines)"
        )
    print(f"\n{table}\n")
    print("\n".join(notes))
    if args.record:
        command = shlex.join(["python", "benchmarks/etl_csv.py", *sys.argv[1:]])
        record(command, machine_facts(), data, table, notes)
        print(f"appended to {RESULTS}")
    return finish(runs, work, keep=args.workdir is not None)


def finish(runs: list, work: Path, keep: bool) -> int:
    """The exit status of a benchmark: 1 if a run failed (its logs are kept), else 0; the work
    folder is removed unless it was given."""
    failed = [r for r in runs if r.returncode != 0]
    if not keep and not failed:
        shutil.rmtree(work)
    elif failed:
        print(f"logs kept in {work / 'logs'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
