"""Benchmark: splits without a key, on a table where half the rows repeat another.

A survey-like table (generated, seeded): four categorical answers and a number, a label that
depends on them with noise, and `--repeated` of its rows (default 50%) copies of earlier rows —
respondents who gave the same answers, some of them with the other label. Three datasets of
the same rows, each `shardflow etl` then `shardflow train --deterministic` (default flags):

  identity   no key: each record's split comes from its identity (source, file, line), as
             shardflow splits a table without a key;
  row key    `key: row`, a column numbering the rows: each row its own entity;
  content    `key: content`, a column holding the row's answers and label: every copy of a
             row in one split, the split a hash of the record's content (how records without
             a key were split before: the test split then never holds a row train has with
             its label).

Reported: each run's test accuracy, the majority baseline (of train, on test), and the facts'
repeated and conflicting rows. The targets: identity at least the baseline, and within 0.02 of
the row-key run.

  python benchmarks/keyless_splits.py [--rows 20000] [--repeated 0.5] [--workdir DIR] [--record]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REPO_ROOT, RESULTS, append_results, machine_facts  # noqa: E402

ANSWERS = {"q1": 3, "q2": 4, "q3": 3, "q4": 5}
VARIANTS = {"identity": None, "row key": "row", "content": "content"}


def generate(path: Path, rows: int, repeated: float, seed: int = 5) -> None:
    rng = np.random.default_rng(seed)
    unique = int(rows * (1 - repeated))
    weights = {q: rng.normal(0, 1, n) for q, n in ANSWERS.items()}
    out = []
    for i in range(unique):
        answers = {q: int(rng.integers(0, n)) for q, n in ANSWERS.items()}
        age = int(rng.integers(18, 80))
        score = sum(weights[q][a] for q, a in answers.items()) + (age - 50) / 30
        label = "yes" if rng.random() < 1 / (1 + np.exp(-1.5 * score)) else "no"
        out.append({**{q: f"a{a}" for q, a in answers.items()}, "age": age, "label": label})
    for i in rng.integers(0, unique, rows - unique):
        copy = dict(out[int(i)])
        if rng.random() < 0.3:  # the same answers, the other label
            copy["label"] = "no" if copy["label"] == "yes" else "yes"
        out.append(copy)
    order = rng.permutation(len(out))
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["row", *ANSWERS, "age", "label", "content"])
        for n, i in enumerate(order):
            r = out[int(i)]
            answers = [r[q] for q in ANSWERS]
            content = "|".join([*answers, str(r["age"]), r["label"]])
            writer.writerow([n, *answers, r["age"], r["label"], content])


def config(key: str | None) -> str:
    features = "\n".join(f"  {q}: {{type: string}}" for q in ANSWERS)
    keyed = "" if key is None else f"key: {key}\n"
    extra = "" if key is None else f"  {key}: {{type: {'int' if key == 'row' else 'string'}}}\n"
    return (
        "name: survey\nsources:\n  - {name: rows, format: csv, path: survey.csv}\n"
        f"{keyed}features:\n{features}\n  age: {{type: int}}\n  label: {{type: string}}\n{extra}"
        "label: label\nsplits: {train: 0.8, eval: 0.1, test: 0.1}\noutput: {path: out}\n"
    )


def run(cmd: list[str], log: Path) -> int:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO_ROOT))
    with log.open("wb") as out:
        return subprocess.run(
            cmd, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        ).returncode


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeated", type=float, default=0.5)
    parser.add_argument("--workdir")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="keyless-"))
    work.mkdir(parents=True, exist_ok=True)
    generate(work / "survey.csv", args.rows, args.repeated)
    results = {}
    for name, key in VARIANTS.items():
        slug = name.replace(" ", "_")
        cfg = work / f"{slug}.yaml"
        cfg.write_text(config(key))
        data, model = work / f"data_{slug}", work / f"model_{slug}"
        etl = [sys.executable, "-m", "pipelines.etl", "--config", str(cfg), "--output", str(data),
               "--overwrite", "--runner", "FnApiRunner"]  # fmt: skip
        if run(etl, work / f"etl_{slug}.log") != 0:
            print(f"{name}: etl failed (see {work}/etl_{slug}.log)")
            return 1
        train = [sys.executable, "-m", "trainer.task", "--data", str(data), "--model-dir",
                 str(model), "--fresh", "--deterministic"]  # fmt: skip
        if run(train, work / f"train_{slug}.log") != 0:
            print(f"{name}: train failed (see {work}/train_{slug}.log)")
            return 1
        metrics = json.loads((model / "metrics.json").read_text())
        facts = json.loads((data / "facts.json").read_text())
        results[name] = (metrics["test"], facts["rows"])
    lines = [
        "| splits | test accuracy | majority baseline | vs baseline | repeated | conflicting | "
        "rows in several splits |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (test, rows) in results.items():
        lines.append(
            f"| {name} | {test['accuracy']:.4f} | {test['baseline_accuracy']:.4f} | "
            f"{test['accuracy'] - test['baseline_accuracy']:+.4f} | {rows['repeated']:,} | "
            f"{rows['conflicting']:,} | {rows['across_splits']:,} |"
        )
    identity, keyed = results["identity"][0], results["row key"][0]
    ok_base = identity["accuracy"] >= identity["baseline_accuracy"]
    ok_key = abs(identity["accuracy"] - keyed["accuracy"]) <= 0.02
    notes = [
        f"identity splits: test accuracy {'>=' if ok_base else '<'} the majority baseline "
        f"({'PASS' if ok_base else 'FAIL'}), within 0.02 of the row-key run "
        f"({identity['accuracy'] - keyed['accuracy']:+.4f}: {'PASS' if ok_key else 'FAIL'})",
        "content: every copy of a row in the split of the first (the rule before identity "
        "splits), shown for comparison",
    ]
    table = "\n".join(lines)
    print(table)
    for note in notes:
        print(f"- {note}")
    if args.record:
        command = "python benchmarks/keyless_splits.py " + shlex.join(argv)
        inputs = (
            f"{args.rows:,} generated survey rows, {args.repeated:.0%} of them copies of "
            "earlier rows (30% of the copies with the other label)"
        )
        append_results(RESULTS, "keyless_splits", [command, machine_facts(), inputs], table, notes)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok_base and ok_key else 1


if __name__ == "__main__":
    sys.exit(main())
