"""Peak memory of an ETL run whose input has many bad rows, against the same input without.

Two CSV files of the same ROWS rows (id, score, name, day) are generated: in one every fifth
row's `score` is not a number (20% of the rows are rejected, each with its raw line), in the
other it is. `shardflow etl` runs on each, a fresh process tree per run, while a sampler sums
the resident memory (RSS, from /proc) of the command and every process it started, every 0.1 s
(`benchmarks.harness.measure`): the peak of that sum is the run's memory. With `--before DIR` (a
checkout of an earlier commit) the same runs are made with that code too, side by side. The
memory with rejects should stay within 10% of the memory without: no worker holds the rejected
records.

    python benchmarks/rejected_memory.py --rows 5000000 --before /tmp/base --record
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import RESULTS, append_results, machine_facts, measure  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REJECT_EVERY = 5
CONFIG = """\
name: rejected_memory
sources:
  - {{name: rows, format: csv, path: {path}}}
features:
  score: {{type: float}}
  name: {{type: string}}
  day: {{type: string}}
splits: {{train: 0.9, eval: 0.1}}
output: {{path: out, compression: gzip}}
"""


def generate(path: Path, rows: int, bad: bool, seed: int = 11) -> int:
    """Writes the CSV; returns its bytes. Both files draw the same numbers: only every fifth
    row's score differs (`bad`: a word, else a number)."""
    rng = random.Random(seed)
    partial = path.with_name(path.name + ".partial")  # a kept input is always whole
    with partial.open("w", encoding="utf-8") as f:
        f.write("id,score,name,day\n")
        lines = []
        for i in range(rows):
            score = f"{rng.random():.6f}"
            if bad and i % REJECT_EVERY == 0:
                score = "n/a-" + score
            lines.append(f"{i},{score},name{i % 1013},2026-{1 + i % 12:02d}-{1 + i % 28:02d}\n")
            if len(lines) == 100_000:
                f.writelines(lines)
                lines.clear()
        f.writelines(lines)
    partial.rename(path)
    return path.stat().st_size


def run(code: Path, config: Path, work: Path, name: str) -> tuple[float, float, int]:
    """One `shardflow etl` with the code at `code`; returns (peak MB, wall s, rejected)."""
    out = work / f"out-{name}"
    cmd = [
        sys.executable, "-c", "import sys; from pipelines.cli import main; sys.exit(main())",
        "etl", "--config", str(config), "--output", str(out), "--overwrite",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(code))
    status, wall, _, peak, _, _ = measure(cmd, work / f"{name}.log", env, cwd=code)
    if status != 0:
        raise SystemExit(f"{name}: exit {status}; see {work / f'{name}.log'}")
    rejected = json.loads((out / "manifest.json").read_text())["rejected"]["records"]
    shutil.rmtree(out)
    return peak, wall, rejected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each variant (median)")
    parser.add_argument("--before", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--workdir", type=Path, help="where the inputs go (kept)")
    parser.add_argument("--record", action="store_true", help="append the results to RESULTS.md")
    args = parser.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="rejected-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for bad in (False, True):
        path = work / f"{'bad' if bad else 'clean'}-{args.rows}.csv"
        sizes[bad] = path.stat().st_size if path.exists() else generate(path, args.rows, bad)
        (work / f"{'bad' if bad else 'clean'}.yaml").write_text(CONFIG.format(path=path))
    codes = [("this commit", REPO)] + ([("before", args.before)] if args.before else [])
    rows = []
    for label, code in codes:
        found = {}
        for bad in (False, True):
            config = work / f"{'bad' if bad else 'clean'}.yaml"
            runs = [
                run(code, config, work, f"{label.replace(' ', '_')}-{bad}-{i}")
                for i in range(args.repeats)
            ]
            peak = statistics.median(r[0] for r in runs)
            wall = statistics.median(r[1] for r in runs)
            found[bad] = (peak, wall, runs[0][2])
            print(f"{label}: {'20% rejected' if bad else 'no rejects'}: peak {peak:,.0f} MB, "
                  f"{wall:.1f} s, {runs[0][2]:,} rejected", flush=True)  # fmt: skip
        ratio = found[True][0] / found[False][0]
        rows.append((label, found, ratio))
    table = [
        "| code | input | rejected | peak RSS of the process tree (MB) | wall (s) | "
        "peak vs no rejects |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label, found, ratio in rows:
        for bad in (False, True):
            peak, wall, rejected = found[bad]
            table.append(
                f"| {label} | {'20% rejected' if bad else 'no rejects'} | {rejected:,} | "
                f"{peak:,.0f} | {wall:.1f} | {ratio:.2f}× |"
                if bad
                else f"| {label} | no rejects | {rejected:,} | {peak:,.0f} | {wall:.1f} | 1.00× |"
            )
    text = "\n".join(table)
    print(text)
    this = rows[0][2]
    verdict = f"with 20% rejected the peak is {this:.2f}× the peak without (target ≤ 1.10×)"
    print(("PASS: " if this <= 1.10 else "FAIL: ") + verdict)
    if args.record:
        command = "python benchmarks/rejected_memory.py " + " ".join(argv or sys.argv[1:])
        described = (
            f"{args.rows:,} CSV rows (id, score, name, day), {sizes[False] / 1e6:.0f} MB clean "
            f"and {sizes[True] / 1e6:.0f} MB with every fifth score not a number; default "
            "runner flags; memory: the peak of the summed RSS of the command and its workers, "
            "sampled every 0.1 s; medians of "
            f"{args.repeats} run(s)"
        )
        append_results(
            RESULTS,
            f"rejected_memory, {args.rows:,} rows",
            [command, machine_facts(), described],
            text,
            [verdict],
        )
    if not args.workdir:
        shutil.rmtree(work)
    return 0 if this <= 1.10 else 1


if __name__ == "__main__":
    sys.exit(main())
