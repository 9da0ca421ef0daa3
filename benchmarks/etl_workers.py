"""Benchmark: how `shardflow etl` scales with worker processes, on one CSV, CSV parts, JSON Lines.

It generates the seeded 15-column rows of benchmarks/etl_csv.py (quoted newlines included), in
`--files` parts on parallel processes with distinct trip ids, and from them three inputs of the
same rows, each with the dataset config of etl_csv.py (`format: jsonl` for the third):

  (a) one CSV file (the parts concatenated; ~1 GB at the default 8,000,000 rows)
  (b) the `--files` parts themselves (64 CSV files of ~16 MB by default)
  (c) one JSON Lines file (numbers as JSON numbers, empty cells as null)

Each case runs `python -m pipelines.cli etl --config CFG --output OUT --runner DirectRunner` (the
in-process FnApiRunner) for 1 worker, adding `--direct_num_workers N --direct_running_mode
multi_processing` for N > 1. Case (d) is the naive Beam pipeline of etl_csv.py on (a)'s CSV, at
the largest N (its child mode with `--workers N`); on a machine without TensorFlow it runs with
the stand-in of benchmarks/device/ (.device/tf_stub, made by benchmarks/device/prepare.sh).

Per run: wall time around the subprocess (start-up included), CPU time of it, its descendants and
their orphans (`os.wait4`; the benchmark is their subreaper), the peak RSS and PSS of the process
tree (etl_scale.py's sampler; forked workers share pages, which RSS counts in each), the records
written (read back from the TFRecord framing, no TensorFlow), and the sha256 of every output
file but report.html (which holds the run's times), manifest.json without its `created` time:
a case's output must be byte-identical at every N. The table gives the speed-ups over 1 worker
and, for (a) at naive's N, over naive; the notes PASS/FAIL for the targets. A time estimate comes
first. `--out-json` keeps every raw result (rewritten after each run); `--from-json PATH
--record` records a run made elsewhere.

  python benchmarks/etl_workers.py [--rows 8000000] [--files 64] [--workers 1,2,4,8,16]
                                   [--cases a,b,c,d] [--repeats 1] [--workdir DIR]
                                   [--out-json PATH] [--record] [--results PATH]
  python benchmarks/etl_workers.py --from-json PATH --record
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import importlib.util
import json
import multiprocessing
import os
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import etl_csv  # noqa: E402
from benchmarks.etl_csv import COLUMNS, count_tfrecords, finish, generate_csv, write_config  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    REPO_ROOT,
    RESULTS,
    append_results,
    git_commit,
    machine_facts,
    measure,  # noqa: E402
)

CASES = {"a": "one CSV", "b": "CSV parts", "c": "one JSON Lines", "d": "naive, (a)'s CSV"}
NAIVE = "d"
TF_STUB = REPO_ROOT / ".device" / "tf_stub"
LOG_TAIL = 4000  # characters of a failed run's log kept in the results

# Targets: (case, N, at least this many times the throughput of 1 worker).
SPEEDUP_TARGETS = (("a", 16, 8.0), ("a", 4, 3.3), ("b", 16, 8.0), ("b", 4, 3.3), ("c", 16, 6.0))
TARGET_VS_NAIVE = 5.0  # (a) at naive's N over naive
TARGET_RSS_WORKERS, TARGET_RSS_MB = 16, 8 * 1024  # peak tree RSS of (a) at 16 workers

# The up-front estimate: (start-up s, µs per row) per worker count, from a 2M-row CSV on a
# 16-core machine (23.9 s in process; 17.7/13.1/14.3/15.8 s at 2/4/8/16 workers, before the
# ranges were cut in parallel; naive at 16 workers 21.8 s). JSON Lines is assumed to cost what
# CSV does.
ESTIMATE = {1: (4.0, 10.0), 2: (8.0, 4.9), 4: (8.0, 2.6), 8: (8.0, 3.2), 16: (8.0, 3.9)}
ESTIMATE_NAIVE = (8.0, 6.9)
GENERATE_US_PER_ROW = 26.0  # one process: CSV 14 µs + JSON Lines 12 µs (measured on 2 cores)
READ_BACK_US_PER_ROW = 4.0  # count_tfrecords, one process
BUDGET_S = 9 * 60


@dataclasses.dataclass
class Run:
    case: str
    workers: int
    repeat: int
    returncode: int
    wall_s: float
    cpu_s: float
    tree_rss_mb: float  # peak of the summed RSS of the process tree
    max_rss_mb: float  # the largest single process (os.wait4)
    tree_pss_mb: float | None = None  # peak of the summed PSS of the process tree
    work_s: float | None = None  # shardflow: its job time; naive: its own timing
    records: int | None = None
    rejected: int | None = None  # shardflow: rejected records; naive: dropped lines
    sha256: dict[str, str] | None = None  # output file (relative path) -> digest; shardflow only
    log: str | None = None
    log_tail: str | None = None  # the end of the log of a failed run


# --- data --------------------------------------------------------------------------------------


def _write_part(task: tuple[Path, int, int, float, int, Path | None]) -> dict[str, int]:
    """One part: its CSV and, if asked, the same rows as JSON Lines."""
    path, rows, seed, newline_rate, first_id, jsonl = task
    facts = generate_csv(path, rows, seed, newline_rate, first_id)
    if jsonl:
        csv_to_jsonl(path, jsonl)
    return facts


def csv_to_jsonl(source: Path, target: Path) -> None:
    """Writes the rows of a generated CSV as JSON objects: numbers as JSON numbers, an empty cell
    as null (shardflow reads both as a missing value)."""
    kinds = {"int": int, "float": float, "string": str}
    names, converts = [c.name for c in COLUMNS], [kinds[c.kind] for c in COLUMNS]
    with source.open(newline="", encoding="utf-8") as f, target.open("w", encoding="utf-8") as out:
        reader = csv.reader(f)
        next(reader)  # the header
        for row in reader:
            values = {n: convert(v) if v else None for n, convert, v in zip(names, converts, row)}
            out.write(json.dumps(values) + "\n")


def concatenate(parts: list[Path], target: Path, header: bool) -> None:
    """Joins files into one, keeping only the first part's header line when they have one."""
    with target.open("wb") as out:
        for index, part in enumerate(parts):
            with part.open("rb") as f:
                if header and index:
                    f.readline()
                shutil.copyfileobj(f, out, 16 << 20)


def prepare(work: Path, rows: int, files: int, cases: str, seed: int, newline_rate: float) -> dict:
    """Generates the inputs and configs the cases need in work/data; returns their facts."""
    folder = work / "data"
    parts_folder, jsonl_folder = folder / "parts", folder / "jsonl-parts"
    shutil.rmtree(folder, ignore_errors=True)
    parts_folder.mkdir(parents=True)
    jsonl_folder.mkdir()
    tasks, first_id = [], 10_000_000
    for index in range(files):
        part_rows = rows // files + (index < rows % files)
        path = parts_folder / f"part-{index:03d}.csv"
        jsonl = jsonl_folder / f"part-{index:03d}.jsonl" if "c" in cases else None
        tasks.append((path, part_rows, seed * 1_000_000 + index, newline_rate, first_id, jsonl))
        first_id += part_rows
    with multiprocessing.Pool(min(files, os.cpu_count() or 1)) as pool:
        facts = pool.map(_write_part, tasks)
    csv_parts = [task[0] for task in tasks]
    inputs = {"rows": rows, "newline_rows": sum(f["newline_rows"] for f in facts)}
    if "b" in cases:
        write_config(folder / "b.yaml", parts_folder.name)
        size = sum(f["bytes"] for f in facts)
        inputs["b"] = {"config": str(folder / "b.yaml"), "files": files, "bytes": size}
    if "a" in cases or NAIVE in cases:
        concatenate(csv_parts, folder / "data.csv", header=True)
        write_config(folder / "a.yaml", "data.csv")
        inputs["a"] = input_facts(folder / "a.yaml", folder / "data.csv")
    if "c" in cases:
        concatenate([task[-1] for task in tasks], folder / "data.jsonl", header=False)
        write_config(folder / "c.yaml", "data.jsonl", "jsonl")
        inputs["c"] = input_facts(folder / "c.yaml", folder / "data.jsonl")
    shutil.rmtree(jsonl_folder)
    return inputs


def input_facts(config: Path, data: Path) -> dict:
    return {"config": str(config), "data": str(data), "files": 1, "bytes": data.stat().st_size}


# --- running -----------------------------------------------------------------------------------


def _count_and_hash(path: Path) -> tuple[int, str]:
    with path.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return count_tfrecords([path]), digest


def read_back(files: list[Path]) -> list[tuple[int, str]]:
    """Records and sha256 of each TFRecord file, read on parallel processes."""
    if not files:
        return []
    with multiprocessing.Pool(min(len(files), os.cpu_count() or 1)) as pool:
        return pool.map(_count_and_hash, files)


def output_digests(out: Path, shards: dict[Path, str]) -> dict[str, str]:
    """The sha256 of every file a rerun must write byte for byte: all but report.html, and
    manifest.json without its `created` time. `shards` holds the digests already computed."""
    digests = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        name = path.relative_to(out).as_posix()
        if name == "report.html":
            continue
        if name == "manifest.json":
            manifest = json.loads(path.read_text())
            manifest.pop("created")
            data = json.dumps(manifest, sort_keys=True).encode()
            digests[name] = hashlib.sha256(data).hexdigest()
        else:
            digests[name] = shards.get(path) or hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def naive_env() -> dict[str, str] | None:
    """The naive child needs `tf.train.Example`: without TensorFlow, the stand-in goes first on
    its path (None: the naive child runs in this process's environment)."""
    if importlib.util.find_spec("tensorflow") is not None or not TF_STUB.is_dir():
        return None
    path = os.pathsep.join(p for p in (str(TF_STUB), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def run_case(case: str, workers: int, repeat: int, inputs: dict, work: Path) -> Run:
    """Runs one case once into a fresh output folder, reads back what it wrote, deletes it."""
    name = f"{case}-{workers}-{repeat}"
    out, log = work / "runs" / name, work / "logs" / f"{name}.log"
    result_file = work / "logs" / f"{name}.json"
    shutil.rmtree(out, ignore_errors=True)
    env = None
    if case == NAIVE:
        out.mkdir(parents=True)
        cmd = [sys.executable, str(Path(etl_csv.__file__).resolve()), "--child", "naive"]
        cmd += ["--csv", inputs["a"]["data"], "--out", str(out)]
        cmd += ["--result", str(result_file), "--workers", str(workers)]
        env = naive_env()
    else:
        cmd = [sys.executable, "-m", "pipelines.cli", "etl", "--config", inputs[case]["config"]]
        cmd += ["--output", str(out), "--runner", "DirectRunner"]
        if workers > 1:
            cmd += ["--direct_num_workers", str(workers)]
            cmd += ["--direct_running_mode", "multi_processing"]
    rc, wall, cpu, tree_rss, tree_pss, max_rss = measure(cmd, log, env)
    run = Run(case, workers, repeat, rc, wall, cpu, tree_rss, max_rss, tree_pss, log=str(log))
    if rc != 0:
        run.log_tail = log.read_text(errors="replace")[-LOG_TAIL:]
    elif case == NAIVE:
        child = json.loads(result_file.read_text())
        run.rejected, run.work_s = child["malformed_lines"], child["work_s"]
        run.records = sum(n for n, _ in read_back(sorted(out.glob("*.tfrecord*"))))
    else:
        # Its own report: "... N records read in X.Ys" times the job, imports excluded.
        found = re.search(r"records read in ([0-9.]+)s", log.read_text(errors="replace"))
        run.work_s = float(found.group(1)) if found else None
        run.rejected = json.loads((out / "manifest.json").read_text())["rejected"]["records"]
        shards = sorted(p for p in out.glob("*/*.tfrecord*") if p.parent.name != "rejected")
        counted = read_back(shards)
        run.records = sum(n for n, _ in counted)
        run.sha256 = output_digests(out, {p: d for p, (_, d) in zip(shards, counted)})
    shutil.rmtree(out, ignore_errors=True)
    return run


def estimate_s(rows: int, files: int, workers: list[int], cases: str, repeats: int) -> float:
    """Rough seconds of the whole benchmark on a 16-core machine (see ESTIMATE)."""
    cores = os.cpu_count() or 1
    total = rows * GENERATE_US_PER_ROW / 1e6 / min(files, cores)
    costs = [ESTIMATE[min(ESTIMATE, key=lambda k: abs(k - n))] for n in workers]
    costs *= sum(case in cases for case in "abc")
    costs += [ESTIMATE_NAIVE] if NAIVE in cases else []
    for startup, us in costs:
        total += repeats * (startup + rows * (us + READ_BACK_US_PER_ROW / cores) / 1e6)
    return total


# --- the report --------------------------------------------------------------------------------


def summarize(results: dict) -> tuple[str, list[str]]:
    """The markdown table of medians per case and worker count, and the notes: identity per
    case, the targets, what naive drops."""
    rows = results["inputs"]["rows"]
    runs = [Run(**r) for r in results["runs"]]
    by_key: dict[tuple[str, int], list[Run]] = {}
    for run in runs:
        by_key.setdefault((run.case, run.workers), []).append(run)
    walls = {
        key: statistics.median(r.wall_s for r in mine if r.returncode == 0)
        for key, mine in by_key.items()
        if any(r.returncode == 0 for r in mine)
    }
    naive = next((key for key in by_key if key[0] == NAIVE), None)
    lines = [
        "| case | workers | runs ok | wall s (median) | rows/s | x 1 worker | x naive "
        "| in-process s | CPU s | peak RSS MB (tree) | peak PSS MB (tree) | largest process MB "
        "| records written | rejected/dropped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case, workers in sorted(by_key):
        mine = by_key[case, workers]
        ok = [r for r in mine if r.returncode == 0]
        label = f"({case}) {CASES[case]}"
        if not ok:
            failed = f"0/{len(mine)} | failed: see {mine[-1].log}"
            lines.append(f"| {label} | {workers} | {failed} |||||||||||")
            continue
        wall = walls[case, workers]
        one = walls.get((case, 1)) if case != NAIVE else None
        beside_naive = case == "a" and naive in walls and workers == naive[1]
        work = [r.work_s for r in ok if r.work_s is not None]
        lines.append(
            f"| {label} | {workers} | {len(ok)}/{len(mine)} | {wall:.1f} | {rows / wall:,.0f} "
            f"| {f'{one / wall:.2f}' if one else '-'} "
            f"| {f'{walls[naive] / wall:.2f}' if beside_naive else '-'} "
            f"| {f'{statistics.median(work):.1f}' if work else '-'} "
            f"| {statistics.median(r.cpu_s for r in ok):.1f} "
            f"| {max(r.tree_rss_mb for r in ok):,.0f} | {_peak_pss(ok)} "
            f"| {max(r.max_rss_mb for r in ok):,.0f} "
            f"| {', '.join(f'{n:,}' for n in sorted({r.records for r in ok}))} "
            f"| {', '.join(str(n) for n in sorted({r.rejected for r in ok}))} |"
        )
    identities = [identity(c, [r for r in runs if r.case == c]) for c in "abc"]
    identities = [found for found in identities if found]
    notes = [text for text, _ in identities]
    notes += targets(by_key, walls, naive)
    if identities:
        same = all(identical for _, identical in identities)
        notes.append(f"target byte-identical at every N in every case: {_verdict(same)}")
    if naive:
        stub = "; it ran with the TensorFlow stand-in (.device/tf_stub)"
        notes.append(
            f"naive ran on (a)'s CSV at {naive[1]} workers and drops the "
            f"{results['inputs']['newline_rows']:,} rows with a quoted newline (ReadFromText "
            f"splits each into malformed lines){stub if results['naive_stub'] else ''}"
        )
    return "\n".join(lines), notes


def _peak_pss(runs: list[Run]) -> str:
    pss = [r.tree_pss_mb for r in runs if r.tree_pss_mb]
    return f"{max(pss):,.0f}" if pss else "-"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def identity(case: str, runs: list[Run]) -> tuple[str, bool] | None:
    """Whether every run of a case wrote the same bytes (all but report.html and `created`):
    the note that says so, and the answer."""
    if not runs:
        return None
    counts = ", ".join(str(n) for n in sorted({r.workers for r in runs}))
    text = f"({case}) {CASES[case]}: identical across {counts} workers: "
    failed = sorted({r.workers for r in runs if r.returncode != 0})
    if failed:
        return text + f"no (failed at {', '.join(map(str, failed))} workers)", False
    first = runs[0].sha256
    names = sorted({name for r in runs for name in r.sha256})
    differ = [n for n in names if any(r.sha256.get(n) != first.get(n) for r in runs)]
    if differ:
        return text + f"no ({len(differ)} of {len(names)} differ: {', '.join(differ[:5])})", False
    return text + f"yes ({len(names)} files)", True


def targets(by_key: dict, walls: dict, naive: tuple[str, int] | None) -> list[str]:
    """PASS/FAIL of each target whose runs were made (a failed run fails its target)."""

    def verdict(label: str, ok: bool | None, found: str) -> str:
        if ok is None:
            return f"target {label}: FAIL (a run failed)"
        return f"target {label}: {_verdict(ok)} ({found})"

    def ratio(slow: tuple, fast: tuple) -> float | None:
        return walls[slow] / walls[fast] if slow in walls and fast in walls else None

    out = []
    for case, n, target in SPEEDUP_TARGETS:
        if (case, n) in by_key and (case, 1) in by_key:
            found = ratio((case, 1), (case, n))
            label = f"({case}) {n} workers >= {target}x 1 worker"
            out.append(verdict(label, found and found >= target, f"{found or 0:.2f}x"))
    if naive and ("a", naive[1]) in by_key:
        label = f"(a) {naive[1]} workers >= {TARGET_VS_NAIVE}x naive at {naive[1]}"
        found = ratio(naive, ("a", naive[1]))
        out.append(verdict(label, found and found >= TARGET_VS_NAIVE, f"{found or 0:.2f}x naive"))
    key = ("a", TARGET_RSS_WORKERS)
    if key in by_key:
        peak = max((r.tree_rss_mb for r in by_key[key] if r.returncode == 0), default=None)
        label = f"(a) peak RSS (tree) at {TARGET_RSS_WORKERS} workers <= {TARGET_RSS_MB:,} MB"
        out.append(verdict(label, peak and peak <= TARGET_RSS_MB, f"{peak or 0:,.0f} MB"))
        pss = [r.tree_pss_mb for r in by_key[key] if r.returncode == 0 and r.tree_pss_mb]
        if pss:
            label = f"(a) peak PSS (tree) at {TARGET_RSS_WORKERS} workers <= {TARGET_RSS_MB:,} MB"
            out.append(verdict(label, max(pss) <= TARGET_RSS_MB, f"{max(pss):,.0f} MB"))
    return out


def inputs_line(inputs: dict) -> str:
    parts = [
        f"({case}) {CASES[case]}: {inputs[case]['files']} file(s), "
        f"{inputs[case]['bytes'] / 1e6:,.1f} MB"
        for case in "abc"
        if case in inputs
    ]
    return (
        f"{inputs['rows']:,} rows, {inputs['newline_rows']:,} with a newline inside a quoted "
        f"field; {'; '.join(parts)}"
    )


def report(results: dict, record_to: Path | None, recorded_from: Path | None = None) -> None:
    """Prints the table and notes; appends them as a dated section to `record_to` if given."""
    table, notes = summarize(results)
    print(f"\n{table}\n")
    print("\n".join(notes))
    if record_to is None:
        return
    if recorded_from is not None:
        notes.append(f"run elsewhere; recorded from {recorded_from.name} at commit {git_commit()}")
    notes.append(
        "wall time includes start-up; CPU time of the process, its descendants and their "
        "orphans (all reaped by the benchmark); peak RSS (tree): the largest sum of the RSS of "
        "the process and its descendants, sampled every 0.1 s, and the same for PSS (shared "
        "pages divided among the processes that share them); identical: the sha256 of every "
        "output file but report.html (the run's times), "
        "manifest.json without its created time"
    )
    facts = [results["command"], results["machine"], inputs_line(results["inputs"])]
    title = f"ETL workers, {results['inputs']['rows']:,} rows"
    append_results(record_to, title, facts, table, notes)
    print(f"appended to {record_to}")


# --- main --------------------------------------------------------------------------------------


def _counts(text: str) -> list[int]:
    try:
        counts = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of worker counts: {text!r}") from None
    if not counts or counts[0] <= 0:
        raise argparse.ArgumentTypeError(f"worker counts must be positive: {text!r}")
    return counts


def _cases(text: str) -> str:
    cases = "".join(sorted({s.strip() for s in text.split(",") if s.strip()}))
    if not cases or not set(cases) <= set(CASES):
        raise argparse.ArgumentTypeError(f"cases are some of a,b,c,d: {text!r}")
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=8_000_000, help="rows of every input")
    parser.add_argument("--files", type=int, default=64, help="CSV files of case (b)")
    parser.add_argument(
        "--workers",
        type=_counts,
        default=[1, 2, 4, 8, 16],
        help="comma-separated worker counts (default 1,2,4,8,16; 1: in process)",
    )
    parser.add_argument(
        "--cases", type=_cases, default="abcd", help="some of a,b,c,d (default all)"
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs of each (median)")
    parser.add_argument(
        "--workdir", type=Path, help="where inputs, logs and outputs go (kept; default: temporary)"
    )
    parser.add_argument("--out-json", type=Path, help="write every raw result here (JSON)")
    parser.add_argument("--from-json", type=Path, help="report the results of this --out-json")
    parser.add_argument("--record", action="store_true", help="append the results to --results")
    parser.add_argument("--results", type=Path, default=RESULTS, help="default: RESULTS.md")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--newline-rate", type=float, default=0.005)
    args = parser.parse_args(argv)
    if not 1 <= args.files <= args.rows:
        parser.error("--files must be at least 1 and at most --rows")
    record_to = args.results if args.record else None

    if args.from_json:
        report(json.loads(args.from_json.read_text()), record_to, recorded_from=args.from_json)
        return 0

    cases, workers = args.cases, args.workers
    expected = estimate_s(args.rows, args.files, workers, cases, args.repeats)
    print(
        f"{args.rows:,} rows; cases {','.join(cases)}; workers {','.join(map(str, workers))}; "
        f"repeats {args.repeats}\nexpected total time: ~{expected / 60:.1f} min (rough, from "
        "runs on a 16-core machine)",
        flush=True,
    )
    if expected > BUDGET_S:
        fixed = estimate_s(0, args.files, workers, cases, args.repeats)
        fits = (BUDGET_S - fixed) / ((expected - fixed) / args.rows)
        print(f"  over {BUDGET_S // 60} min: about --rows {fits:,.0f} would fit", flush=True)
    started = time.perf_counter()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="etl_workers_"))
    (work / "logs").mkdir(parents=True, exist_ok=True)

    inputs = prepare(work, args.rows, args.files, cases, args.seed, args.newline_rate)
    print(
        f"inputs in {work / 'data'} ({time.perf_counter() - started:.0f} s): {inputs_line(inputs)}"
    )
    results = {
        "command": shlex.join(["python", "benchmarks/etl_workers.py", *sys.argv[1:]]),
        "machine": machine_facts(),
        "inputs": inputs,
        "naive_stub": NAIVE in cases and naive_env() is not None,
        "runs": [],
    }
    # Naive right after (a), which it is compared with: a run cut short keeps the pair.
    plan = [(c, n) for c in cases.replace(NAIVE, "") for n in workers]
    if NAIVE in cases:
        plan.insert(len(workers) if "a" in cases else 0, (NAIVE, workers[-1]))
    runs = []
    for repeat in range(args.repeats):
        shift = repeat % len(plan)  # rotate who goes first
        for case, n in plan[shift:] + plan[:shift]:
            run = run_case(case, n, repeat, inputs, work)
            runs.append(run)
            status = "ok" if run.returncode == 0 else f"FAILED rc={run.returncode}, see {run.log}"
            print(
                f"  ({case}) {n:>2} workers run {repeat + 1}: {run.wall_s:6.1f} s "
                f"{run.tree_rss_mb:7,.0f} MB tree  {status}",
                flush=True,
            )
            if run.log_tail:
                print(textwrap.indent(run.log_tail[-1500:], "    | "), flush=True)
            results["runs"] = [dataclasses.asdict(r) for r in runs]
            results["total_s"] = time.perf_counter() - started
            if args.out_json:
                args.out_json.write_text(json.dumps(results, indent=1))

    report(results, record_to)
    print(f"\ntotal time: {(time.perf_counter() - started) / 60:.1f} min")
    return finish(runs, work, keep=args.workdir is not None)


if __name__ == "__main__":
    sys.exit(main())
