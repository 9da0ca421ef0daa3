"""Benchmark: shardflow's CSV ETL against a naive Beam pipeline and a no-Beam floor.

One run generates seeded, realistic CSV input (`--data`), writes the shardflow dataset config
for it, then times several ways of turning it into gzip TFRecords of `tf.train.Example`,
alternating them `--repeats` times. The inputs:

  plain   one 15-column CSV: ints, floats, categoricals, free text with quotes and commas,
          missing values, and a few rows with a newline inside a quoted field; no key.
  keyed   one 15-column CSV shaped like a real export, with `key: id`: six string columns, two
          of them nearly unique (timestamp text, ZIP+4 codes with leading zeros), unicode city
          names and free text with quotes, commas and newlines, and a few re-exported rows
          (an earlier id again: a duplicate the key drops).
  join    the keyed rows cut into two CSVs joined by `id` (`combine: join`): orders (8 columns)
          and payments (the id and the other 7), payments holding 95% of the ids.

The variants:

  shardflow  `python -m pipelines.etl --config CFG --output OUT --runner FnApiRunner` (repo root).
  unkeyed    keyed data only: the same command with the config's `key` left out, so the two
             runs differ only by the key (canonical keys, their provenance, duplicates dropped).
  naive      the pipeline people write: ReadFromText -> csv.reader per line -> a Python
             tf.train.Example per row -> SerializeToString -> WriteToTFRecord(GZIP), FnApiRunner;
             keyed: a GroupByKey on the id keeps one row per id; join: a CoGroupByKey of the two
             files. ReadFromText splits quoted newlines, so it drops those rows (counted).
  floor      one process, no Beam: pyarrow.csv -> tfx_bsl RecordBatchToExamples (C++) ->
             tf.io.TFRecordWriter("GZIP"): the physical cost of the same work (keyed: the first
             row of each id kept with numpy; join: Arrow's full outer join).

Every variant runs as its own subprocess; wall time is measured around it (start-up and imports
included, as a user sees it), peak RSS and CPU time come from `os.wait4`. Records written are
counted afterwards by reading the output files back. Missing values become empty lists of the
feature's kind in all of them, so the outputs hold the same examples (naive: minus the dropped
rows).

  python benchmarks/etl_csv.py [--data plain|keyed|join] [--rows 200000] [--repeats 3]
                               [--only all|shardflow|unkeyed|naive|floor ...] [--workdir DIR]
                               [--record]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import gzip
import json
import os
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.harness import (  # noqa: E402
    REPO_ROOT,
    RESULTS,
    append_results,
    machine_facts,
)

VARIANTS = ("shardflow", "unkeyed", "naive", "floor")
# Targets of the keyed data, checked when the variants they compare ran (wall-time ratios).
TARGET_KEYED_VS_NAIVE = 8.0  # shardflow at least this many times naive's throughput
TARGET_KEYED_VS_UNKEYED = 1.15  # shardflow's time at most this many times unkeyed's


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    kind: str  # int | float | string
    required: bool = True


# The one declaration of the plain benchmark schema: the generator, the shardflow config, the
# naive pipeline and the floor all derive from it. `comment` sits mid-row on purpose: a line split
# at its newline gives two fragments that both have the wrong column count, so naive drops the
# row instead of keeping a truncated one.
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

# The keyed schema: an orders export. Six string columns: `created_at` and `zip` nearly unique,
# `city` and `note` unicode, `note` free text (mid-row, as `comment` above).
KEYED_COLUMNS = (
    Column("id", "int"),
    Column("created_at", "string"),
    Column("zip", "string"),
    Column("city", "string"),
    Column("status", "string"),
    Column("channel", "string", required=False),
    Column("note", "string", required=False),
    Column("quantity", "int"),
    Column("amount", "float"),
    Column("discount", "float", required=False),
    Column("rating", "int", required=False),
    Column("latitude", "float"),
    Column("longitude", "float"),
    Column("weight_kg", "float", required=False),
    Column("items", "int"),
)
ORDER_COLUMNS = KEYED_COLUMNS[:8]  # the join's first source: id .. quantity
PAYMENT_COLUMNS = KEYED_COLUMNS[:1] + KEYED_COLUMNS[8:]  # the second: id, amount .. items


@dataclasses.dataclass(frozen=True)
class Data:
    """One kind of benchmark input: its CSV files (name, columns) and its key."""

    name: str
    files: tuple[tuple[str, tuple[Column, ...]], ...]
    key: str | None = None

    @property
    def columns(self) -> tuple[Column, ...]:
        """Every column once, in file order (a join's key once)."""
        found = {c.name: c for _, columns in self.files for c in columns}
        return tuple(found.values())

    def paths(self, work: Path) -> list[Path]:
        return [work / f"{name}.csv" for name, _ in self.files]


DATA = {
    "plain": Data("plain", (("data", COLUMNS),)),
    "keyed": Data("keyed", (("orders", KEYED_COLUMNS),), key="id"),
    "join": Data("join", (("orders", ORDER_COLUMNS), ("payments", PAYMENT_COLUMNS)), key="id"),
}

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
CITIES = [
    "Zürich", "São Paulo", "Kraków", "Москва", "東京", "İstanbul", "Reykjavík", "Łódź",
    "Montréal", "Malmö", "Düsseldorf", "Ciudad de México", "Αθήνα", "القاهرة", "서울", "Chicago",
    "New York", "Toronto", "Berlin", "Paris", "København", "Göteborg", "Bogotá", "Mumbai",
]  # fmt: skip
STATUSES = {"delivered": 70, "shipped": 15, "pending": 8, "cancelled": 5, "returned": 2}
CHANNELS = ["web", "app", "phone", "store", "partner, EU", 'partner "B2B"']
NOTE_PARTS = [
    "leave at the door",
    'call before, "ring twice"',
    "fragile, handle with care",
    "Geschenk – bitte ohne Rechnung",
    "entregar después de las 18h",
    "подъезд 3, этаж 5",
    "置き配希望",
    "gift wrap 🎁, no price tag",
    'customer asked: "is it in stock?"',
    "café au lait colour, naïve pattern",
]


# --- data -------------------------------------------------------------------------------------


def generate(data: Data, work: Path, rows: int, seed: int, newline_rate: float) -> dict[str, int]:
    """Writes the CSV files of `data` in `work`; returns their bytes, quoted-newline rows and
    (keyed data) re-exported rows."""
    if data.name == "plain":
        return generate_csv(data.paths(work)[0], rows, seed, newline_rate)
    return generate_keyed(data, work, rows, seed, newline_rate)


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


def keyed_rows(rows: int, seed: int, newline_rate: float, facts: dict[str, int]):
    """Seeded rows of KEYED_COLUMNS; 0.5% re-export an earlier id (counted in `facts`)."""
    rng = random.Random(seed)
    status_names, status_weights = list(STATUSES), list(STATUSES.values())
    start = datetime.datetime(2025, 1, 1)
    for i in range(rows):
        order_id = 10_000_000 + i
        if i and rng.random() < 0.005:
            order_id = 10_000_000 + rng.randrange(i)
            facts["duplicate_rows"] += 1
        note = ""
        if rng.random() < 0.5:
            parts = rng.sample(NOTE_PARTS, rng.randint(1, 3))
            separator = "; "
            if rng.random() < newline_rate:
                separator, facts["newline_rows"] = ".\n", facts["newline_rows"] + 1
                parts = parts if len(parts) > 1 else [*parts, "merci"]
            note = separator.join(parts)
        quantity = rng.randint(1, 12)
        amount = quantity * rng.lognormvariate(3.0, 0.7)
        moment = start + datetime.timedelta(seconds=rng.uniform(0, 365 * 86400))
        yield [
            order_id,
            moment.isoformat(timespec="microseconds"),
            f"{rng.randrange(100_000):05d}-{rng.randrange(10_000):04d}",
            rng.choice(CITIES),
            rng.choices(status_names, status_weights)[0],
            _maybe(rng, 0.05, rng.choice(CHANNELS)),
            note,
            quantity,
            f"{amount:.2f}",
            _maybe(rng, 0.7, f"{amount * rng.uniform(0.05, 0.3):.2f}"),
            _maybe(rng, 0.4, str(rng.randint(1, 5))),
            f"{rng.uniform(-60, 70):.6f}",
            f"{rng.uniform(-180, 180):.6f}",
            _maybe(rng, 0.1, f"{rng.lognormvariate(0.5, 1.0):.3f}"),
            rng.randint(1, 30),
        ]


def generate_keyed(
    data: Data, work: Path, rows: int, seed: int, newline_rate: float
) -> dict[str, int]:
    """Writes the keyed rows as `data`'s files: all columns in one file, or each file's columns
    (a join: the second file skips 5% of the rows, so their ids have no payment)."""
    facts = {"newline_rows": 0, "duplicate_rows": 0}
    index = {c.name: i for i, c in enumerate(KEYED_COLUMNS)}
    picks = [[index[c.name] for c in columns] for _, columns in data.files]
    paths = data.paths(work)
    skip = random.Random(seed + 1)
    with contextlib.ExitStack() as stack:
        writers = []
        for path, (_, columns) in zip(paths, data.files):
            f = stack.enter_context(path.open("w", newline="", encoding="utf-8"))
            writers.append(csv.writer(f, lineterminator="\n"))
            writers[-1].writerow([c.name for c in columns])
        for row in keyed_rows(rows, seed, newline_rate, facts):
            for n, (writer, pick) in enumerate(zip(writers, picks)):
                if n == 0 or skip.random() >= 0.05:
                    writer.writerow([row[i] for i in pick])
    return {"bytes": sum(p.stat().st_size for p in paths), **facts}


def _maybe(rng: random.Random, missing_rate: float, value: str) -> str:
    return "" if rng.random() < missing_rate else value


def write_config(path: Path, data_path: str, fmt: str = "csv") -> None:
    """Writes the shardflow dataset config of the plain data (no key, one source of `fmt`)."""
    write_data_config(
        path, DATA["plain"], [data_path], keyed=False, source_names=["trips"], fmt=fmt
    )


def write_data_config(
    path: Path,
    data: Data,
    csv_names: list[str],
    keyed: bool = True,
    source_names: list[str] | None = None,
    fmt: str = "csv",
) -> None:
    """Writes the shardflow dataset config declaring `data`'s columns, one csv source per file,
    keyed by `data.key` when `keyed` (a join: the columns of its later files are optional)."""
    names = source_names or [name for name, _ in data.files]
    sources = "\n".join(
        f"  - name: {name}\n    format: {fmt}\n    path: {csv_name}"
        for name, csv_name in zip(names, csv_names)
    )
    first = {c.name for c in data.files[0][1]}
    features = "\n".join(
        f"  {c.name}: {{type: {c.kind}"
        + ("" if c.required and c.name in first else ", required: false")
        + "}"
        for c in data.columns
    )
    key = f"key: {data.key}\n" if keyed and data.key else ""
    combine = "join" if len(data.files) > 1 else "union"
    path.write_text(
        f"""\
# Written by benchmarks/etl_csv.py.
name: etl_csv_bench
sources:
{sources}
{key}combine: {combine}
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


def run_naive(csv_paths: list[str], out_dir: str, data: Data, workers: int = 1) -> dict:
    """The per-row Beam pipeline as commonly written; returns its counters. With `workers` > 1
    it runs on that many local worker processes (multi_processing), else in process.

    Keyed data: a GroupByKey on the key keeps one row of each; a join: a CoGroupByKey of the
    files merges the first row of each file per key."""
    import apache_beam as beam
    import tensorflow as tf
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.metrics import Metrics
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions

    malformed = Metrics.counter("naive", "malformed_lines")

    def parse_line(line: str, names: list[str]):
        fields = next(csv.reader([line]))
        if len(fields) != len(names):
            malformed.inc()
            return
        yield dict(zip(names, fields))

    def to_example(row: dict) -> tf.train.Example:
        feature = {}
        for c in data.columns:
            value = row.get(c.name, "")
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

    def merge(item) -> dict:
        row = {}
        for name, _ in reversed(data.files):  # the first file's fields win
            row.update(next(iter(item[1][name]), {}))
        return row

    start = time.perf_counter()
    flags = ["--runner=FnApiRunner"]
    if workers > 1:
        flags += [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]
    options = PipelineOptions(flags)
    p = beam.Pipeline(options=options)
    parsed = {
        name: p
        | f"Read {name}" >> beam.io.ReadFromText(path, skip_header_lines=1)
        | f"Parse {name}" >> beam.FlatMap(parse_line, [c.name for c in columns])
        for (name, columns), path in zip(data.files, csv_paths)
    }
    if data.key is None:
        (rows,) = parsed.values()
    else:
        keyed = {
            name: rows | f"Key {name}" >> beam.Map(lambda row: (row[data.key], row))
            for name, rows in parsed.items()
        }
        rows = keyed | "GroupByKey" >> beam.CoGroupByKey() | "FirstRows" >> beam.Map(merge)
    _ = (
        rows
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


def run_floor(csv_paths: list[str], out_dir: str, data: Data) -> dict:
    """Arrow CSV parse + C++ Example encoding + TF's gzip writer, one process, no Beam.

    Keyed data: the first row of each key is kept (numpy); a join: the files, each with one row
    per key, go through Arrow's full outer join."""
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

    def read(path: str, columns: tuple[Column, ...]):
        return pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(block_size=8 << 20),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types={c.name: arrow_types[c.kind] for c in columns},
                null_values=[""],
                strings_can_be_null=True,
            ),
        )

    def first_of_each_key(table: pa.Table) -> pa.Table:
        _, first = np.unique(table[data.key].to_numpy(), return_index=True)
        return table.take(np.sort(first))

    start = time.perf_counter()
    names = [c.name for c in data.columns]
    if data.key is None:
        batches = read(csv_paths[0], data.files[0][1])
    else:
        tables = [
            first_of_each_key(read(path, columns).read_all())
            for path, (_, columns) in zip(csv_paths, data.files)
        ]
        table = tables[0]
        for other in tables[1:]:
            table = table.join(other, keys=data.key, join_type="full outer")
        batches = table.select(names).combine_chunks().to_batches(max_chunksize=8192)
    with tf.io.TFRecordWriter(os.path.join(out_dir, "data.tfrecord.gz"), "GZIP") as writer:
        for batch in batches:
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


def run_variant(
    variant: str, index: int, work: Path, data: Data, csv_paths: list[Path], configs: dict
) -> Run:
    """Runs one variant once into a fresh output folder, counts what it wrote, deletes it."""
    out = work / "runs" / f"{variant}-{index}"
    shutil.rmtree(out, ignore_errors=True)
    log = work / "logs" / f"{variant}-{index}.log"
    result_file = work / "logs" / f"{variant}-{index}.json"
    if variant in ("shardflow", "unkeyed"):
        cmd = [sys.executable, "-m", "pipelines.etl", "--config", str(configs[variant])]
        cmd += ["--output", str(out), "--runner", "FnApiRunner"]
    else:
        out.mkdir(parents=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", variant]
        cmd += ["--data", data.name, "--out", str(out), "--result", str(result_file)]
        for path in csv_paths:
            cmd += ["--csv", str(path)]
    rc, wall, cpu, rss = measure(cmd, REPO_ROOT, log)
    run = Run(variant, rc, wall, cpu, rss, log=log)
    if rc == 0:
        read_outputs(run, variant in ("shardflow", "unkeyed"), log, out, result_file)
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
        for other in ("unkeyed", "naive", "floor"):
            if "shardflow" in times and other in times:
                ratio = times["shardflow"] / times[other]
                out.append(
                    f"shardflow / {other} {kind} time: {ratio:.2f} "
                    f"({1 / ratio:.2f}x the throughput of {other})"
                )
    return out


def targets(data: Data, medians: dict[str, float], work_medians: dict[str, float]) -> list[str]:
    """PASS/FAIL of the keyed data's targets, for the variants that ran: shardflow at least
    TARGET_KEYED_VS_NAIVE times naive's throughput (wall), and within TARGET_KEYED_VS_UNKEYED
    of the time of the unkeyed run (wall and in-process)."""
    if data.name != "keyed" or "shardflow" not in medians:
        return []
    out = []
    if "naive" in medians:
        speedup = medians["naive"] / medians["shardflow"]
        verdict = "PASS" if speedup >= TARGET_KEYED_VS_NAIVE else "FAIL"
        out.append(f"target shardflow >= {TARGET_KEYED_VS_NAIVE:g}x naive (wall): {verdict} "
                   f"({speedup:.2f}x)")  # fmt: skip
    for kind, times in (("wall", medians), ("in-process", work_medians)):
        if "unkeyed" in times and "shardflow" in times:
            ratio = times["shardflow"] / times["unkeyed"]
            verdict = "PASS" if ratio <= TARGET_KEYED_VS_UNKEYED else "FAIL"
            out.append(
                f"target keyed within {TARGET_KEYED_VS_UNKEYED - 1:.0%} of unkeyed ({kind}): "
                f"{verdict} (keyed / unkeyed = {ratio:.2f})"
            )
    return out


def record(command: str, facts: str, data: Data, inputs: dict, table: str, notes: list[str]):
    """Appends a dated section to RESULTS.md."""
    described = (
        f"{data.name} data, {inputs['rows']:,} rows, {inputs['bytes'] / 1e6:.1f} MB in "
        f"{len(data.files)} CSV file(s), {inputs['newline_rows']:,} rows with a newline inside "
        "a quoted field"
    )
    if "duplicate_rows" in inputs:
        described += f", {inputs['duplicate_rows']:,} rows repeating an earlier id"
    title = f"etl_csv, {inputs['rows']:,} rows" + ("" if data.name == "plain" else f", {data.name}")
    append_results(RESULTS, title, [command, facts, described], table, notes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", choices=tuple(DATA), default="plain", help="the input")
    parser.add_argument("--rows", type=int, default=200_000, help="rows of the generated CSV")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=("all", *VARIANTS),
        default=["all"],
        help="the variants to run (all: every one the data has; unkeyed needs keyed data)",
    )
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
    parser.add_argument("--csv", action="append", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)  # naive only
    args = parser.parse_args(argv)
    data = DATA[args.data]

    if args.child:
        if args.child == "naive":
            result = run_naive(args.csv, args.out, data, args.workers)
        else:
            result = run_floor(args.csv, args.out, data)
        Path(args.result).write_text(json.dumps(result))
        return 0

    possible = tuple(v for v in VARIANTS if v != "unkeyed" or data.name == "keyed")
    variants = possible if "all" in args.only else tuple(v for v in VARIANTS if v in args.only)
    if not set(variants) <= set(possible):
        parser.error("--only unkeyed needs --data keyed (the same data without its key)")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="etl_csv_"))
    (work / "logs").mkdir(parents=True, exist_ok=True)
    csv_paths = data.paths(work)
    inputs = {"rows": args.rows, **generate(data, work, args.rows, args.seed, args.newline_rate)}
    names = [p.name for p in csv_paths]
    configs = {"shardflow": work / "etl_csv.yaml", "unkeyed": work / "etl_csv_unkeyed.yaml"}
    if data.name == "plain":
        write_config(configs["shardflow"], names[0])
    else:
        write_data_config(configs["shardflow"], data, names)
        write_data_config(configs["unkeyed"], data, names, keyed=False)
    print(
        f"input: {', '.join(map(str, csv_paths))} ({data.name}, {inputs['rows']:,} rows, "
        f"{inputs['bytes'] / 1e6:.1f} MB, {inputs['newline_rows']} rows with a quoted newline)",
        flush=True,
    )

    runs = []
    for index in range(args.repeats):
        shift = index % len(variants)  # alternate, and rotate who goes first
        for variant in variants[shift:] + variants[:shift]:
            run = run_variant(variant, index, work, data, csv_paths, configs)
            runs.append(run)
            status = "ok" if run.returncode == 0 else f"FAILED rc={run.returncode}, see {run.log}"
            print(
                f"  {variant:<9} run {index + 1}: {run.wall_s:6.1f} s  "
                f"{run.peak_rss_mb:6.0f} MB  {status}",
                flush=True,
            )

    table, medians, work_medians = summarize(runs, args.rows)
    notes = ratios(medians, work_medians) + targets(data, medians, work_medians)
    if "naive" in medians:
        notes.append(
            f"naive drops the {inputs['newline_rows']} rows with a quoted newline "
            "(ReadFromText splits each into two or more malformed lines)"
        )
    if "unkeyed" in medians:
        notes.append(
            f"unkeyed writes the {inputs['duplicate_rows']:,} rows repeating an id, which the "
            "key drops"
        )
    print(f"\n{table}\n")
    print("\n".join(notes))
    if args.record:
        command = shlex.join(["python", "benchmarks/etl_csv.py", *sys.argv[1:]])
        record(command, machine_facts(), data, inputs, table, notes)
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
