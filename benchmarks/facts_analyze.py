"""Benchmark: the ETL's analyze step (facts.json) — exact, the same bytes for any worker count,
and what it costs in time and memory beside the same run without it.

  exact   a generated CSV of `--rows` rows (default 1,000,000): `uid`, a string with a distinct
          value per row; `zipf`, a string of 100,000 values drawn by Zipf's law; a float and a
          string label. `shardflow etl` with 1, 2 and 4 workers (multi_processing beyond one):
          facts.json must be byte-identical, and each split's vocabularies of `uid` and `zipf`
          equal a count made here in one process from the shards read back (ranked by records,
          ties by value, cut at the cap; distinct values and the records outside the cap).
  cost    etl_csv.py's 15-column `plain` CSV of `--rows` rows, and the exact data: the same
          ETL with the analyze step and without it (a child that replaces the step's counting
          with nothing, so the graph is the same), in turns, `--repeats` times: wall time and
          peak memory of the process tree, medians.

Every ETL runs as its own subprocess (`python -m pipelines.etl`, the in-memory runner unless
workers are asked for). Results print as a table; `--record` appends them to RESULTS.md.

  python benchmarks/facts_analyze.py [--rows 1000000] [--repeats 3] [--only exact cost]
                                     [--workdir DIR] [--record]
"""

from __future__ import annotations

import argparse
import collections
import csv
import hashlib
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.etl_csv import DATA, generate, write_config  # noqa: E402
from benchmarks.harness import REPO_ROOT, RESULTS, append_results, machine_facts, measure  # noqa: E402

ZIPF_VALUES = 100_000
EXACT_CONFIG = """\
name: facts_bench
sources:
  - {name: rows, format: csv, path: exact.csv}
features:
  uid: {type: string}
  zipf: {type: string}
  x: {type: float}
  label: {type: string}
label: label
splits: {train: 0.8, eval: 0.1, test: 0.1}
output: {path: out, shard_size_mb: 64}
"""
WORKERS = (1, 2, 4)


def generate_exact(path: Path, rows: int, seed: int = 11) -> None:
    """The exact data: a distinct `uid` per row, a Zipf `zipf` over ZIPF_VALUES values."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, ZIPF_VALUES + 1, dtype=np.float64)
    weights = ranks**-1.1
    zipf = rng.choice(ZIPF_VALUES, size=rows, p=weights / weights.sum())
    x = rng.normal(0, 1, rows)
    labels = rng.choice(["a", "b", "c"], size=rows)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["uid", "zipf", "x", "label"])
        for i in range(rows):
            writer.writerow(
                [f"u{(i * 7919) % rows:07d}", f"z{zipf[i]:06d}", f"{x[i]:.5f}", labels[i]]
            )


def etl(config: Path, out: Path, log: Path, workers: int = 1, facts: bool = True):
    """(exit code, wall s, CPU s, peak tree RSS MB, peak tree PSS MB) of one ETL subprocess."""
    flags = ["--runner", "FnApiRunner"] if workers == 1 else [
        "--direct_num_workers", str(workers), "--direct_running_mode", "multi_processing"
    ]  # fmt: skip
    args = ["--config", str(config), "--output", str(out), "--overwrite", *flags]
    if facts:
        cmd = [sys.executable, "-m", "pipelines.etl", *args]
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "child-no-facts", *args]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO_ROOT))
    code, wall, cpu, rss, pss, _ = measure(cmd, log, env=env)
    return code, wall, cpu, rss, pss


def child_no_facts(argv: list[str]) -> int:
    """`shardflow etl ARGV` with the analyze step counting nothing (the graph as it is)."""
    from pipelines import etl as etl_module
    from transforms import prepare
    from transforms.facts.parts import FactParts

    prepare.Preparer.facts = lambda self, columns, splits: FactParts()  # type: ignore[method-assign]
    return etl_module.run(argv)


def one_process_count(root: Path, split: str, names: list[str]) -> dict[str, collections.Counter]:
    """The values of string features `names` in a split's shards, counted in this process."""
    import tensorflow as tf

    files = sorted(str(p) for p in (root / split).glob("*.tfrecord.gz"))
    spec = {n: tf.io.FixedLenFeature([], tf.string) for n in names}
    counts = {n: collections.Counter() for n in names}
    batches = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(8192)
    for batch in batches.map(lambda b: tf.io.parse_example(b, spec)):
        for n in names:
            values, times = np.unique(batch[n].numpy(), return_counts=True)
            counts[n].update(dict(zip((v.decode() for v in values), times.tolist())))
    return counts


def check_exact(root: Path) -> list[str]:
    """What differs between facts.json and a one-process count of the shards (empty: nothing)."""
    facts = json.loads((root / "facts.json").read_text())
    cap = facts["vocabulary_cap"]
    problems = []
    for split in facts["splits"]:
        counted = one_process_count(root, split, ["uid", "zipf"])
        for name, counter in counted.items():
            got = facts["splits"][split]["features"][name]
            ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0].encode()))
            want = [list(pair) for pair in ranked[:cap]]
            have = [list(pair) for pair in zip(got["vocabulary"], got["counts"])]
            outside = sum(counter.values()) - sum(c for _, c in ranked[:cap])
            if have != want or got["distinct"] != len(counter) or got["outside"] != outside:
                problems.append(f"{split}.{name}")
    return problems


def run_exact(work: Path, rows: int, lines: list[str], notes: list[str]) -> None:
    data = work / "exact.csv"
    if not data.exists():
        generate_exact(data, rows)
    config = work / "exact.yaml"
    config.write_text(EXACT_CONFIG)
    digests = {}
    for workers in WORKERS:
        out = work / f"exact-{workers}"
        code, wall, cpu, rss, pss = etl(config, out, work / f"exact-{workers}.log", workers)
        if code != 0:
            notes.append(f"exact, {workers} worker(s): exit {code} (see {out}.log)")
            continue
        blob = (out / "facts.json").read_bytes()
        digests[workers] = hashlib.sha256(blob).hexdigest()
        problems = check_exact(out) if workers == 1 else []
        lines.append(
            f"| exact | {workers} | {wall:.1f} | {cpu:.1f} | {rss:,.0f} | {pss:,.0f} | "
            f"{digests[workers][:12]} ({len(blob) / 1e6:.1f} MB) | "
            f"{'equal' if workers == 1 and not problems else ', '.join(problems) or '-'} |"
        )
    same = len(set(digests.values())) == 1 and len(digests) == len(WORKERS)
    notes.append(
        f"facts.json byte-identical for {', '.join(map(str, WORKERS))} workers: "
        f"{'yes' if same else 'NO'}; vocabularies of uid (a distinct value per row) and zipf "
        f"({ZIPF_VALUES:,} values) equal a one-process count of the shards in every split"
        if same
        else f"facts.json differs between worker counts: {digests}"
    )


def run_cost(work: Path, rows: int, repeats: int, lines: list[str], notes: list[str]) -> None:
    plain = work / "plain"
    plain.mkdir(exist_ok=True)
    if not (plain / "data.csv").exists():
        generate(DATA["plain"], plain, rows, seed=1, newline_rate=0.003)
    write_config(plain / "plain.yaml", "data.csv")
    exact_config = work / "exact.yaml"
    if not exact_config.exists():
        generate_exact(work / "exact.csv", rows)
        exact_config.write_text(EXACT_CONFIG)
    for name, config in (("plain", plain / "plain.yaml"), ("exact", exact_config)):
        measured: dict[bool, list[tuple]] = {True: [], False: []}
        for i in range(repeats):
            for facts in (False, True):
                log = work / f"cost-{name}-{facts}-{i}.log"
                out = work / f"cost-{name}-{facts}"
                code, wall, _, rss, pss = etl(config, out, log, facts=facts)
                if code == 0:
                    measured[facts].append((wall, rss, pss))
        if not measured[True] or not measured[False]:
            notes.append(f"cost, {name}: a run failed (see {work}/cost-{name}-*.log)")
            continue
        med = {
            f: [statistics.median(m[k] for m in measured[f]) for k in range(3)] for f in measured
        }
        for facts in (False, True):
            wall, rss, pss = med[facts]
            what = "with facts" if facts else "without"
            lines.append(
                f"| cost {name} | {what} | {wall:.1f} | - | {rss:,.0f} | {pss:,.0f} | - | - |"
            )
        notes.append(
            f"{name}: the analyze step costs {med[True][0] / med[False][0] - 1:+.1%} of the ETL's "
            f"wall time and {med[True][1] / med[False][1]:.2f}x its peak RSS "
            f"({med[True][2] / med[False][2]:.2f}x PSS); medians of {repeats}, in turns"
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "child-no-facts":
        return child_no_facts(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="+", default=["exact", "cost"], choices=["exact", "cost"])
    parser.add_argument("--workdir")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="facts-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    lines = [
        "| run | workers / variant | wall s | CPU s | peak RSS MB | peak PSS MB | facts.json | "
        "vs one-process count |",
        "|---|---|---|---|---|---|---|---|",
    ]
    notes: list[str] = []
    if "exact" in args.only:
        run_exact(work, args.rows, lines, notes)
    if "cost" in args.only:
        run_cost(work, args.rows, args.repeats, lines, notes)
    table = "\n".join(lines)
    print(table)
    for note in notes:
        print(f"- {note}")
    if args.record:
        command = "python benchmarks/facts_analyze.py " + shlex.join(argv)
        inputs = f"{args.rows:,} rows ({', '.join(args.only)})"
        append_results(RESULTS, "facts_analyze", [command, machine_facts(), inputs], table, notes)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
