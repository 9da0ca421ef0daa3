"""Benchmark: what data validation costs an ETL run.

Generates the plain CSV input of `etl_csv.py` (seeded; 15 columns: ints, floats, categoricals,
free text), writes its config with a `validation:` section that sets every limit (drift and
skew, L-infinity and Jensen-Shannon: every measure is computed for every feature), then:

  1. runs `python -m pipelines.etl` once without a baseline (its schema is inferred), and keeps
     that dataset as the baseline;
  2. runs it `--repeats` more times with `--baseline` that dataset (schema from the baseline,
     drift against it, skew against train), each into a fresh folder; from each run's
     report.html it reads the seconds of the `validation` step (the schema, the anomalies,
     statistics.pb and schema.pbtxt, measured on the worker) beside the run's wall time;
  3. times `transforms.validation.check.validate` alone, in this process, on the statistics
     of the last run (median of 5): the validation work without the job around it.

The target: validation under 10% of the ETL's time. Medians; the machine is noisy.

  python benchmarks/validation_cost.py [--rows 1000000] [--repeats 3] [--workdir DIR] [--record]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.etl_csv import DATA, generate, measure, write_config  # noqa: E402
from benchmarks.harness import append_results, machine_facts  # noqa: E402

LIMITS = {
    "drift": {"l_infinity": 0.01, "jensen_shannon": 0.01},
    "skew": {"l_infinity": 0.01, "jensen_shannon": 0.01},
    "block": [],  # report, never fail: the benchmark times the checks, not a refusal
}
_STEP = re.compile(r'<tr data-step="validation"><td>validation</td><td class="n" id="[^"]+" '
                   r'data-value="([0-9.e+-]+)"')  # fmt: skip


def run_etl(config: Path, out: Path, log: Path, baseline: Path | None) -> tuple[float, float]:
    """(wall seconds, validation step seconds) of one ETL run."""
    cmd = [sys.executable, "-m", "pipelines.etl", "--config", str(config), "--output", str(out)]
    cmd += ["--runner", "FnApiRunner"] + (["--baseline", str(baseline)] if baseline else [])
    rc, wall, _, _ = measure(cmd, REPO_ROOT, log)
    if rc != 0:
        raise SystemExit(f"the ETL failed (exit {rc}); see {log}")
    found = _STEP.search((out / "report.html").read_text())
    if found is None:
        raise SystemExit(f"{out}/report.html has no validation step")
    return wall, float(found.group(1))


def time_validate(out: Path, baseline: Path, repeats: int = 5) -> float:
    """Median seconds of `validate` on `out`'s statistics against `baseline`."""
    from pipelines.config.loader import load_config
    from transforms.contract.manifest import Manifest
    from transforms.contract.statistics import Statistics
    from transforms.validation.check import Baseline, validate

    manifest = Manifest.from_json((out / "manifest.json").read_text())
    stats = Statistics.loads((out / "statistics.json").read_text())
    base = Baseline(
        str(baseline),
        Statistics.loads((baseline / "statistics.json").read_text()),
        (baseline / "schema.pbtxt").read_text(),
    )
    spec = load_config(str(out.parent / "config.yaml"), output=str(out)).validation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        validate(spec, manifest, stats, base)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--record", action="store_true", help="append to benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="shardflow-validation-"))
    (work / "logs").mkdir(parents=True, exist_ok=True)
    data = DATA["plain"]
    facts = generate(data, work, args.rows, seed=1, newline_rate=0.003)
    config = work / "config.yaml"
    write_config(config, data.paths(work)[0].name)
    import yaml

    raw = yaml.safe_load(config.read_text())
    raw["validation"] = LIMITS
    config.write_text(yaml.safe_dump(raw, sort_keys=False))

    baseline = work / "baseline"
    shutil.rmtree(baseline, ignore_errors=True)
    wall0, step0 = run_etl(config, baseline, work / "logs" / "baseline.log", None)
    print(f"baseline run: {wall0:.1f} s, validation {step0:.3f} s", flush=True)
    rows = []
    for i in range(args.repeats):
        out = work / f"run-{i}"
        shutil.rmtree(out, ignore_errors=True)
        wall, step = run_etl(config, out, work / "logs" / f"run-{i}.log", baseline)
        rows.append((wall, step))
        print(f"run {i}: {wall:.1f} s, validation {step:.3f} s ({step / wall:.2%})", flush=True)
    anomalies = len(json.loads((out / "manifest.json").read_text())["validation"]["anomalies"])
    alone = time_validate(out, baseline)
    wall = statistics.median(w for w, _ in rows)
    step = statistics.median(s for _, s in rows)
    share = step / wall
    table = "\n".join(
        [
            "| rows | input MB | ETL wall s (median) | validation step s (median) | share | "
            "validate() alone s (median of 5) | anomalies found |",
            "|---|---|---|---|---|---|---|",
            f"| {args.rows:,} | {facts['bytes'] / 1e6:.1f} | {wall:.1f} | {step:.3f} | "
            f"{share:.2%} | {alone:.3f} | {anomalies} |",
        ]
    )
    notes = [
        f"every run: {', '.join(f'{w:.1f} s / {s:.3f} s' for w, s in rows)} (wall / validation)",
        f"target: validation under 10% of the ETL's time: "
        f"{'PASS' if share < 0.10 else 'FAIL'} ({share:.2%})",
    ]
    print(table)
    print("\n".join(f"- {n}" for n in notes))
    if args.record:
        command = "python benchmarks/validation_cost.py"
        command += f" --rows {args.rows} --repeats {args.repeats} --record"
        inputs = (
            f"plain data, {args.rows:,} rows, {facts['bytes'] / 1e6:.1f} MB, one CSV; drift and "
            "skew limits on every measure"
        )
        append_results(
            REPO_ROOT / "benchmarks" / "RESULTS.md",
            "validation_cost: data validation in the ETL run",
            [command, machine_facts(), inputs],
            table,
            notes,
        )
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
