"""Benchmark: how long the quick commands take, against what they cannot avoid.

A newcomer's first commands are small: look at a dataset (`inspect`), answer for three new
records (`predict --input`), write a config from a file (`init`). Their time is mostly imports:
each loads only what it needs (`inspect` of a local dataset no TensorFlow, `predict` and `init`
no Beam; `predict` needs TensorFlow to serve the model). Measured side by side in one run, as
a user types them (the `shardflow` entry point, a fresh process each), on the penguins demo
(its dataset and a model trained for one epoch, made first in `--workdir`):

  floor          `python -c pass`: the interpreter alone
  TF floor       `python -c "import tensorflow"`: what serving a SavedModel cannot avoid
  commands       inspect (5 examples), inspect --take 0, predict --input (4 rows),
                 predict --data --take 5, init --source (a 3,000-row CSV)

Reported: the median wall time of `--repeats` runs (2 noisy cores: medians), and each
command's time over its floor (the interpreter's, or TensorFlow's import for predict).

  python benchmarks/command_latency.py [--repeats 5] [--workdir DIR] [--record]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REPO_ROOT, RESULTS, append_results, command_line, machine_facts  # noqa: E402

PENGUINS = REPO_ROOT / "examples" / "penguins"
SHARDFLOW = [sys.executable, "-m", "pipelines.cli"]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as `make` runs


def run(argv: list[str], check: bool = True) -> float:
    """Seconds `argv` took; its exit status checked."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO_ROOT, env=ENV, capture_output=True, text=True)
    took = time.perf_counter() - start
    if check and done.returncode != 0:
        raise SystemExit(f"{shlex.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took


def prepare(workdir: Path) -> tuple[Path, Path]:
    """The penguins dataset and a model trained on it for one epoch (made once)."""
    data, model = workdir / "penguins", workdir / "model"
    if not (data / "manifest.json").exists():
        etl = ["etl", "--config", str(PENGUINS / "penguins.yaml"), "--output", str(data)]
        run([*SHARDFLOW, *etl, "--overwrite"])
    if not (model / "metrics.json").exists():
        train = ["train", "--data", str(data), "--model-dir", str(model), "--epochs", "1"]
        run([*SHARDFLOW, *train, "--fresh"])
    return data, model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--record", action="store_true", help=f"append the table to {RESULTS}")
    args = p.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="shardflow-latency-"))
    data, model = prepare(workdir)
    config = workdir / "init.yaml"
    served = ["--model-dir", str(model)]
    new = ["--config", str(PENGUINS / "penguins.yaml"), "--input"]
    measured = {
        "floor: python -c pass": [sys.executable, "-c", "pass"],
        "TF floor: import tensorflow": [sys.executable, "-c", "import tensorflow"],
        "inspect DATASET": [*SHARDFLOW, "inspect", str(data)],
        "inspect DATASET --take 0": [*SHARDFLOW, "inspect", str(data), "--take", "0"],
        "predict --input (4 rows)": [
            *SHARDFLOW, "predict", *served, *new, str(PENGUINS / "new_penguins.csv"),
        ],
        "predict --data --take 5": [*SHARDFLOW, "predict", *served, "--data", str(data)],
        "init --source (3,000 rows)": [
            *SHARDFLOW, "init", "--source", str(PENGUINS / "measurements.csv"),
            "--output", str(config), "--force",
        ],
    }  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in measured}
    for _ in range(args.repeats):  # interleaved: a busy moment touches every command alike
        for name, command in measured.items():
            times[name].append(run(command))
    median = {name: statistics.median(t) for name, t in times.items()}
    floor, tf_floor = median["floor: python -c pass"], median["TF floor: import tensorflow"]
    rows = ["| command | median s | its floor | over the floor |", "|---|---:|---|---:|"]
    for name, seconds in median.items():
        if name.startswith(("floor", "TF floor")):
            rows.append(f"| {name} | {seconds:.2f} | | |")
            continue
        base, which = (tf_floor, "TF import") if name.startswith("predict") else (floor, "python")
        rows.append(f"| {name} | {seconds:.2f} | {which} | +{seconds - base:.2f} s |")
    table = "\n".join(rows)
    print(table)
    if args.record:
        line = command_line(__file__, argv)
        append_results(
            RESULTS,
            "command latency: inspect, predict and init against their floors",
            [line, machine_facts(), "examples/penguins (dataset, a 1-epoch model)"],
            table,
            [
                f"Medians of {args.repeats} runs, each command a fresh process "
                "(`python -m pipelines.cli`, modules compiled once).",
                "predict's floor is TensorFlow's import: it serves the model's SavedModel.",
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
