"""Benchmark: how `shardflow etl` scales with rows and processes, against naive and the floor.

For each size (250,000 and 1,000,000 rows by default) it generates (or reuses) the seeded mixed
CSV of benchmarks/etl_csv.py and its dataset config, then converts that file four ways, each as
its own subprocess, alternating them `--repeats` times:

  shardflow-1  `shardflow etl --config CFG --output OUT`: the default in-process runner.
  shardflow-2  the same with `--direct_num_workers 2 --direct_running_mode multi_processing`.
  naive        etl_csv.run_naive: ReadFromText -> csv.reader -> a Python tf.train.Example per
               row -> WriteToTFRecord(GZIP), FnApiRunner (drops rows with a quoted newline).
  floor        etl_csv.run_floor: pyarrow.csv -> tfx_bsl C++ encoder -> TFRecordWriter(GZIP),
               one process, no Beam.

Wall time is measured around each subprocess (start-up included). Peak RSS is that of the whole
process tree: /proc is sampled every 0.1 s and the RSS of the process and all its descendants
summed; the largest sum is the peak (multi_processing workers count). The notes give the
throughput ratios and the targets (PASS/FAIL) at the largest size, and the peak RSS growth from
the smallest to the largest size.

  python benchmarks/etl_scale.py [--sizes 250000,1000000] [--repeats 3] [--repeats-large 1]
                                 [--workdir DIR] [--record] [--results PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import inspect
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import etl_csv  # noqa: E402
from benchmarks.etl_csv import finish, generate_csv, read_outputs, write_config  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    REPO_ROOT,
    RESULTS,
    SAMPLE_S,
    append_results,
    machine_facts,
    measure,
)

VARIANTS = ("shardflow-1", "shardflow-2", "naive", "floor")
# Sizes of this many rows or more run --repeats-large times instead of --repeats.
LARGE_ROWS = 1_000_000

# Targets, checked at the largest size (throughput ratios).
TARGET_VS_NAIVE = 7.0
TARGET_VS_FLOOR = 0.5
TARGET_TWO_VS_ONE = 1.6
TARGET_RSS_GROWTH = 1.2

# Rough cost model for the up-front time estimate: (start-up s, µs per row), from the etl_csv
# runs in RESULTS.md at 200,000 rows on this 2-core machine.
ESTIMATE = {
    "shardflow-1": (6.0, 35.0),
    "shardflow-2": (14.0, 35.0),
    "naive": (8.0, 240.0),
    "floor": (7.0, 25.0),
}
GENERATE_US_PER_ROW = 30.0


# --- measuring ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    variant: str
    rows: int
    returncode: int
    wall_s: float
    cpu_s: float
    tree_rss_mb: float  # peak of the summed RSS of the process tree
    max_rss_mb: float  # the largest single process (os.wait4), as etl_csv.py reports
    tree_pss_mb: float | None = None  # peak of the summed PSS of the process tree
    records: int | None = None
    rejected: int | None = None
    work_s: float | None = None
    log: Path | None = None


def shardflow_command() -> str:
    beside = Path(sys.executable).with_name("shardflow")
    return str(beside if beside.exists() else REPO_ROOT / ".venv" / "bin" / "shardflow")


def run_variant(variant: str, index: int, data: dict, work: Path) -> Run:
    """Runs one variant once into a fresh output folder, counts what it wrote, deletes it."""
    rows, folder = data["rows"], data["folder"]
    name = f"{rows}-{variant}-{index}"
    out, log = work / "runs" / name, work / "logs" / f"{name}.log"
    result_file = work / "logs" / f"{name}.json"
    shutil.rmtree(out, ignore_errors=True)
    if variant.startswith("shardflow"):
        cmd = [shardflow_command(), "etl", "--config", str(folder / "etl.yaml")]
        cmd += ["--output", str(out)]
        if variant == "shardflow-2":
            cmd += ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]
    else:
        out.mkdir(parents=True)
        # etl_csv.py's own child mode runs its naive pipeline or floor in a fresh process
        cmd = [sys.executable, str(Path(etl_csv.__file__).resolve()), "--child", variant]
        cmd += ["--csv", str(folder / "data.csv"), "--out", str(out)]
        cmd += ["--result", str(result_file)]
    rc, wall, cpu, tree_rss, tree_pss, max_rss = measure(cmd, log)
    run = Run(variant, rows, rc, wall, cpu, tree_rss, max_rss, tree_pss, log=log)
    if rc == 0:
        read_outputs(run, variant.startswith("shardflow"), log, out, result_file)
    shutil.rmtree(out, ignore_errors=True)
    return run


# --- data --------------------------------------------------------------------------------------


def _generator_hash() -> str:
    """Hash of what shapes the generated CSV and config (etl_csv's generator and schema)."""
    parts = [inspect.getsource(generate_csv), inspect.getsource(etl_csv._maybe)]
    parts += [inspect.getsource(write_config), repr(etl_csv.COLUMNS)]
    parts += [repr(etl_csv.PAYMENT_TYPES), repr(etl_csv.COMPANIES), repr(etl_csv.COMMENT_PARTS)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def prepare(work: Path, rows: int, seed: int, newline_rate: float) -> dict:
    """The CSV and config of one size in work/rows-N, reused when their stamp matches."""
    folder = work / f"rows-{rows}"
    csv_path, stamp = folder / "data.csv", folder / "stamp.json"
    params = {"rows": rows, "seed": seed, "newline_rate": newline_rate}
    params["generator"] = _generator_hash()
    try:
        stamped = json.loads(stamp.read_text())
    except (OSError, ValueError):
        stamped = {}
    if csv_path.exists() and stamped.get("params") == params:
        print(f"reusing {csv_path}", flush=True)
        facts = stamped["facts"]
    else:
        folder.mkdir(parents=True, exist_ok=True)
        stamp.unlink(missing_ok=True)
        print(f"generating {csv_path} ({rows:,} rows)...", flush=True)
        facts = generate_csv(csv_path, rows, seed, newline_rate)
        stamp.write_text(json.dumps({"params": params, "facts": facts}))
    write_config(folder / "etl.yaml", csv_path.name)
    return {"rows": rows, "folder": folder, **facts}


def is_prepared(work: Path, rows: int) -> bool:
    return (work / f"rows-{rows}" / "stamp.json").exists()


def estimate_s(sizes: list[int], repeats: dict[int, int], work: Path | None) -> float:
    total = 0.0
    for rows in sizes:
        if work is None or not is_prepared(work, rows):
            total += rows * GENERATE_US_PER_ROW / 1e6
        for startup, us in ESTIMATE.values():
            total += repeats[rows] * (startup + rows * us / 1e6)
    return total


# --- the report --------------------------------------------------------------------------------


@dataclasses.dataclass
class Summary:
    wall_s: float
    rows_s: float
    work_s: float | None
    tree_rss_mb: float


def summarize(runs: list[Run], datas: list[dict]) -> tuple[str, dict[tuple[int, str], Summary]]:
    """A markdown table of medians per size and variant, and those medians."""
    lines = [
        "| rows | variant | runs ok | wall s (median) | rows/s | MB/s | in-process s "
        "| CPU s | peak RSS MB (tree) | largest process MB | records written | rejected/dropped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    medians = {}
    for data in datas:
        rows, mb = data["rows"], data["bytes"] / 1e6
        for variant in VARIANTS:
            mine = [r for r in runs if r.rows == rows and r.variant == variant]
            ok = [r for r in mine if r.returncode == 0]
            if not mine:
                continue
            if not ok:
                lines.append(
                    f"| {rows:,} | {variant} | 0/{len(mine)} | failed: see {mine[-1].log} |||||||||"
                )
                continue
            wall = statistics.median(r.wall_s for r in ok)
            work = [r.work_s for r in ok if r.work_s is not None]
            summary = Summary(
                wall, rows / wall, statistics.median(work) if work else None,
                statistics.median(r.tree_rss_mb for r in ok),
            )  # fmt: skip
            medians[rows, variant] = summary
            records = sorted({r.records for r in ok})
            rejected = sorted({r.rejected for r in ok})
            lines.append(
                f"| {rows:,} | {variant} | {len(ok)}/{len(mine)} | {wall:.1f} "
                f"| {rows / wall:,.0f} | {mb / wall:.2f} "
                f"| {f'{summary.work_s:.1f}' if work else '-'} "
                f"| {statistics.median(r.cpu_s for r in ok):.1f} "
                f"| {summary.tree_rss_mb:,.0f} "
                f"| {statistics.median(r.max_rss_mb for r in ok):,.0f} "
                f"| {', '.join(f'{n:,}' for n in records)} | {', '.join(map(str, rejected))} |"
            )
    return "\n".join(lines), medians


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def notes(medians: dict[tuple[int, str], Summary], sizes: list[int]) -> list[str]:
    """Throughput ratios per size, the targets at the largest size, the RSS growth."""
    out = []
    for rows in sizes:

        def rate(variant: str) -> float | None:
            found = medians.get((rows, variant))
            return found.rows_s if found else None

        def work_rate(variant: str) -> float | None:
            found = medians.get((rows, variant))
            return rows / found.work_s if found and found.work_s else None

        for label, a, b in (
            ("shardflow-1 / naive", "shardflow-1", "naive"),
            ("shardflow-1 / floor", "shardflow-1", "floor"),
            ("shardflow-2 / shardflow-1", "shardflow-2", "shardflow-1"),
        ):
            if rate(a) and rate(b):
                text = f"{rows:,} rows: rows/s of {label} = {rate(a) / rate(b):.2f}"
                if work_rate(a) and work_rate(b):
                    text += f" (in-process time: {work_rate(a) / work_rate(b):.2f})"
                out.append(text)

    largest, smallest = max(sizes), min(sizes)

    def ratio(a: str, b: str) -> float | None:
        x, y = medians.get((largest, a)), medians.get((largest, b))
        return x.rows_s / y.rows_s if x and y else None

    for label, a, b, target, relation in (
        ("shardflow-1 >= 7x naive", "shardflow-1", "naive", TARGET_VS_NAIVE, "x naive"),
        ("shardflow-1 >= 0.5x floor", "shardflow-1", "floor", TARGET_VS_FLOOR, "x floor"),
        ("2 processes >= 1.6x 1 process", "shardflow-2", "shardflow-1", TARGET_TWO_VS_ONE,
         "x shardflow-1"),
    ):  # fmt: skip
        found = ratio(a, b)
        if found is not None:
            out.append(
                f"target at {largest:,} rows, {label}: {_verdict(found >= target)} "
                f"({found:.2f}{relation})"
            )
    if largest != smallest:
        for variant in ("shardflow-1", "shardflow-2"):
            big, small = medians.get((largest, variant)), medians.get((smallest, variant))
            if big and small:
                growth = big.tree_rss_mb / small.tree_rss_mb
                out.append(
                    f"target {variant} peak RSS at {largest:,} rows <= {TARGET_RSS_GROWTH}x "
                    f"at {smallest:,}: {_verdict(growth <= TARGET_RSS_GROWTH)} "
                    f"({big.tree_rss_mb:,.0f} / {small.tree_rss_mb:,.0f} MB = {growth:.2f}x)"
                )
    return out


def record(results: Path, command: str, datas: list[dict], table: str, lines: list[str]) -> None:
    """Appends a dated "ETL scale" section to the results file."""
    inputs = "; ".join(
        f"{d['rows']:,} rows, {d['bytes'] / 1e6:.1f} MB, {d['newline_rows']:,} with a quoted "
        "newline"
        for d in datas
    )
    rss = (
        "peak RSS (tree): the largest sum of the RSS of the process and its descendants, "
        f"sampled every {SAMPLE_S} s; rows/s and MB/s from the wall time"
    )
    append_results(results, "ETL scale", [command, machine_facts(), inputs], table, [rss, *lines])


# --- main --------------------------------------------------------------------------------------


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(s.replace("_", "")) for s in text.split(",") if s.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of row counts: {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"row counts must be positive: {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", type=_sizes, default=[250_000, 1_000_000],
        help="comma-separated row counts (default 250000,1000000; e.g. 200000,1000000)",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant per size")
    parser.add_argument(
        "--repeats-large", type=int, default=1,
        help=f"runs of each variant for sizes of {LARGE_ROWS:,} rows or more",
    )  # fmt: skip
    parser.add_argument("--only", nargs="+", choices=VARIANTS, help="run only these variants")
    parser.add_argument(
        "--workdir", type=Path,
        help="where CSVs, logs and outputs go (kept; CSVs reused when their stamp matches)",
    )  # fmt: skip
    parser.add_argument("--record", action="store_true", help="append the results to --results")
    parser.add_argument("--results", type=Path, default=RESULTS, help="default: RESULTS.md")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--newline-rate", type=float, default=0.005)
    args = parser.parse_args(argv)

    sizes = args.sizes
    repeats = {n: args.repeats_large if n >= LARGE_ROWS else args.repeats for n in sizes}
    variants = tuple(v for v in VARIANTS if not args.only or v in args.only)
    expected = estimate_s(sizes, repeats, args.workdir) * len(variants) / len(VARIANTS)
    print(
        f"sizes {', '.join(f'{n:,}' for n in sizes)} rows; repeats "
        f"{', '.join(str(repeats[n]) for n in sizes)}; variants {', '.join(variants)}\n"
        f"expected total time: ~{expected / 60:.1f} min (rough, from earlier runs on this "
        "machine)",
        flush=True,
    )
    started = time.perf_counter()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="etl_scale_"))
    (work / "logs").mkdir(parents=True, exist_ok=True)

    datas, runs = [], []
    for rows in sizes:
        data = prepare(work, rows, args.seed, args.newline_rate)
        datas.append(data)
        print(
            f"input: {data['folder'] / 'data.csv'} ({rows:,} rows, {data['bytes'] / 1e6:.1f} MB, "
            f"{data['newline_rows']} rows with a quoted newline)",
            flush=True,
        )
        for index in range(repeats[rows]):
            shift = index % len(variants)  # alternate, and rotate who goes first
            for variant in variants[shift:] + variants[:shift]:
                run = run_variant(variant, index, data, work)
                runs.append(run)
                status = "ok" if run.returncode == 0 else f"FAILED rc={run.returncode}"
                status += "" if run.returncode == 0 else f", see {run.log}"
                print(
                    f"  {variant:<11} run {index + 1}: {run.wall_s:6.1f} s  "
                    f"{run.tree_rss_mb:6.0f} MB tree  {status}",
                    flush=True,
                )

    table, medians = summarize(runs, datas)
    lines = notes(medians, sizes)
    if any((n, "naive") in medians for n in sizes):
        lines.append(
            "naive drops the rows with a quoted newline (ReadFromText splits each into two or "
            "more malformed lines)"
        )
    print(f"\n{table}\n")
    print("\n".join(lines))
    print(f"\ntotal time: {(time.perf_counter() - started) / 60:.1f} min")
    if args.record:
        command = shlex.join(["python", "benchmarks/etl_scale.py", *sys.argv[1:]])
        record(args.results, command, datas, table, lines)
        print(f"appended to {args.results}")
    return finish(runs, work, keep=args.workdir is not None)


if __name__ == "__main__":
    sys.exit(main())
