"""shardflow's ETL against TFX's CsvExampleGen, side by side on one CSV, runs interleaved.

The input is etl_csv.py's keyed orders export (15 columns: ints, floats, categories, unicode,
free text with quotes and newlines inside quoted fields, missing values, nearly unique
strings), 1,000,000 rows by default. Each repeat runs, one after the other in the same window:

- `tfx`: TFX 1.21's whole CsvExampleGen component, as a TFX user runs it: a one-component
  pipeline on `LocalDagRunner` with a real sqlite ML Metadata store, train:eval 9:1 by hash,
  gzip TFRecords of tf.train.Example (TFX's defaults). TFX cannot be installed with the
  project's pins (its ml-metadata and TFDV pins conflict): it is installed beside them with
  `--no-deps` into a folder given by `--tfx-path` (see benchmarks/README.md).
- `shardflow`: `shardflow etl` with the config declaring the same columns, keyed by `id`,
  train 0.9 / eval 0.1, gzip.

Each run is a fresh process, measured whole: wall time, CPU time and the peak RSS of its process
tree (etl_scale.measure). The records each wrote are counted back from its TFRecords. The table
has the median of each, and the ratio of the medians.

    python benchmarks/tfx_side_by_side.py --rows 1000000 --repeats 2 \\
        --tfx-path /tmp/tfxpkgs --record
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import etl_csv  # noqa: E402
from benchmarks.etl_scale import shardflow_command  # noqa: E402
from benchmarks.harness import measure  # noqa: E402

KEYED = etl_csv.DATA["keyed"]


def run_tfx_child(input_dir: str, out: str) -> None:
    """The TFX side, in its own process: CsvExampleGen as a one-component pipeline."""
    from tfx.components.example_gen.csv_example_gen.component import CsvExampleGen
    from tfx.orchestration import metadata, pipeline
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner
    from tfx.proto import example_gen_pb2

    output = example_gen_pb2.Output(
        split_config=example_gen_pb2.SplitConfig(
            splits=[
                example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=9),
                example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1),
            ]
        )
    )
    gen = CsvExampleGen(input_base=input_dir, output_config=output)
    root = os.path.join(out, "pipeline")
    p = pipeline.Pipeline(
        pipeline_name="side_by_side",
        pipeline_root=root,
        components=[gen],
        metadata_connection_config=metadata.sqlite_metadata_connection_config(
            os.path.join(out, "metadata.sqlite")
        ),
        enable_cache=False,
    )
    LocalDagRunner().run(p)


def records_written(out: Path) -> int:
    return etl_csv.count_tfrecords(sorted(p for p in out.rglob("*.gz") if p.is_file()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each, interleaved")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tfx_side_by_side"))
    parser.add_argument("--tfx-path", help="the folder TFX was installed into (--target)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--newline-rate", type=float, default=0.01)
    parser.add_argument("--record", action="store_true", help="append the results to RESULTS.md")
    parser.add_argument("--child-tfx", nargs=2, metavar=("INPUT", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_tfx:
        run_tfx_child(*args.child_tfx)
        return 0
    if not args.tfx_path:
        parser.error("--tfx-path: the folder TFX 1.21 was installed into is needed")
    work = args.workdir
    data_dir = work / f"rows-{args.rows}"
    csv_dir = data_dir / "csv"  # CsvExampleGen reads every file of its folder: the CSV alone
    csv_dir.mkdir(parents=True, exist_ok=True)
    csv_path = KEYED.paths(csv_dir)[0]
    if not csv_path.exists():
        print(f"generating {csv_path} ({args.rows:,} rows)...", flush=True)
        etl_csv.generate(KEYED, csv_dir, args.rows, args.seed, args.newline_rate)
    etl_csv.write_data_config(data_dir / "etl.yaml", KEYED, [f"csv/{csv_path.name}"])
    tfx_env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([args.tfx_path, str(Path(__file__).parent)])
    )
    runs: dict[str, list[tuple[float, float, float, int]]] = {"tfx": [], "shardflow": []}
    for i in range(args.repeats):
        for variant in ("tfx", "shardflow"):
            out = work / "runs" / f"{variant}-{i}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            log = work / f"{variant}-{i}.log"
            if variant == "tfx":
                cmd = [sys.executable, __file__, "--child-tfx", str(csv_dir), str(out)]
                env = tfx_env
            else:
                cmd = [shardflow_command(), "etl", "--config", str(data_dir / "etl.yaml")]
                cmd += ["--output", str(out / "dataset")]
                env = None
            rc, wall, cpu, tree_rss, _, _ = measure(cmd, log, env)
            if rc != 0:
                print(f"{variant} run {i} failed (exit {rc}): see {log}", file=sys.stderr)
                return 1
            written = records_written(out)
            print(f"{variant} {i}: {wall:.1f} s wall, {cpu:.1f} s CPU, {tree_rss:.0f} MB, "
                  f"{written:,} records", flush=True)  # fmt: skip
            runs[variant].append((wall, cpu, tree_rss, written))
            shutil.rmtree(out, ignore_errors=True)
    med = {v: [statistics.median(r[k] for r in rs) for k in range(3)] for v, rs in runs.items()}
    rows = [
        "| runner | runs | wall s (median) | CPU s | peak RSS MB (tree) | records written "
        "| rows/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant, rs in runs.items():
        wall, cpu, rss = med[variant]
        rows.append(
            f"| {variant} | {len(rs)} | {wall:.1f} | {cpu:.1f} | {rss:,.0f} | "
            f"{rs[0][3]:,} | {args.rows / wall:,.0f} |"
        )
    ratio = med["tfx"][0] / med["shardflow"][0]
    notes = [
        f"shardflow / TFX CsvExampleGen: {ratio:.1f}x faster (median wall, whole processes, "
        f"runs interleaved), {med['tfx'][2] / med['shardflow'][2]:.1f}x less peak memory",
        "TFX writes every row (it has no schema validation: rows it cannot type are retyped or "
        "fail the run); shardflow writes the valid, distinct ids and counts the rest in its "
        "manifest, so the record counts differ by the rows it rejected or dropped as repeated",
    ]
    print("\n".join(rows + [""] + notes))
    if args.record:
        command = "python benchmarks/tfx_side_by_side.py " + " ".join(argv or sys.argv[1:])
        facts = etl_csv.machine_facts() + ", TFX 1.21.0 (ml-metadata 1.17.1), --no-deps"
        inputs = (
            f"keyed orders CSV (etl_csv.py), {args.rows:,} rows, "
            f"{csv_path.stat().st_size / 1e6:.1f} MB"
        )
        etl_csv.append_results(
            etl_csv.RESULTS,
            f"tfx_side_by_side, {args.rows:,} rows",
            [command, facts, inputs],
            "\n".join(rows),
            notes,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
