"""`shardflow etl`: sources → validated, split, sharded TFRecords + manifest.

`build_etl(p, dataset, staging)` only wires the graph; `run(argv)` parses flags (unknown flags are
Beam pipeline options), checks the config and the inputs, runs the job, waits, and reports.
Exit status: 0 done, 2 bad command line or config, 1 the job failed.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import logging
import os
import re
import sys
import tempfile
import time
import uuid

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
)

from pipelines.config import ConfigError, load_config
from transforms import formats, progress
from transforms.files import RECURSIVE_FORMATS, match_files
from transforms.join import JoinByKey
from transforms.prepare import PrepareRecords
from transforms.graph import pipeline_graph
from transforms.publish import (
    MANIFEST,
    REPORT,
    OutputError,
    check_output,
    discard,
    holds_dataset,
    staging_path,
    write_atomically,
)
from transforms.sources import CountIgnoredFields, ReadSource
from transforms.spec import DatasetSpec
from transforms.stats import MergeStats
from transforms.write import PublishDataset, WriteShards

logger = logging.getLogger(__name__)

# The DirectRunner of Beam 2.77 first tries the Prism runner, which downloads a binary (no
# network here) and then falls back to the FnApiRunner; we go to the FnApiRunner directly. It
# honours --direct_num_workers and --direct_running_mode like the DirectRunner.
_LOCAL_RUNNERS = {None, "DirectRunner", "direct", "directrunner"}


def build_etl(p: beam.Pipeline, dataset: DatasetSpec, staging: str) -> beam.PCollection:
    """Wires the ETL graph; returns the PCollection holding the published manifest."""
    chunks, rejected, counts = [], [], []
    for source in dataset.sources:
        read = (
            formats.reader(source.format)(source)
            if source.format in formats.QUERY_FORMATS
            else ReadSource(source)
        )
        c, r, n = p | f"Read[{source.name}]" >> read
        chunks.append(c)
        rejected.append(r)
        counts.append(n)
    records = chunks | "MergeSources" >> beam.Flatten()
    counts.append(records | "CountIgnoredFields" >> beam.ParDo(CountIgnoredFields(dataset)))
    if dataset.combine == "join":
        encoded, invalid, join_counts, stats = records | "JoinSources" >> JoinByKey(dataset)
        counts.append(join_counts)
    else:
        encoded, invalid, stats = records | "ValidateRecords" >> PrepareRecords(dataset)
    rejected.append(invalid)
    statistics = stats | "MergeStatistics" >> beam.CombineGlobally(MergeStats())
    transform = None
    if dataset.transform is not None:
        # Imported here: tf.Transform brings TensorFlow (seconds and hundreds of MB), which
        # datasets without a transform never need. Keras, which it imports, writes its config
        # file to KERAS_HOME (~/.keras by default): keep it in the temp location.
        os.environ.setdefault("KERAS_HOME", os.path.join(tempfile.gettempdir(), "shardflow-keras"))
        from transforms.tft import TransformFeatures

        encoded, transform = encoded | "TransformFeatures" >> TransformFeatures(dataset, staging)
    shards, shard_count = encoded | "WriteShards" >> WriteShards(dataset, staging)
    all_rejected = rejected | "MergeRejected" >> beam.Flatten()
    totals = counts | "MergeCounts" >> beam.Flatten() | "SumCounts" >> beam.CombinePerKey(sum)
    return p | "Publish" >> PublishDataset(
        dataset, staging, shards, shard_count, all_rejected, totals, transform, statistics
    )


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Beam options from the leftover flags, with the local runner made explicit."""
    options = PipelineOptions(beam_args)
    standard = options.view_as(StandardOptions)
    if standard.runner in _LOCAL_RUNNERS:
        standard.runner = "FnApiRunner"
    return options


def _check_inputs(dataset: DatasetSpec, overwrite: bool = False) -> list[str]:
    """The input files of every source; raises ConfigError when a source has none.

    Also checks OUTPUT: it must not be something other than a dataset, and a complete dataset
    there (its manifest.json) is replaced only with `overwrite`.
    """
    files = []
    for i, source in enumerate(dataset.sources):
        recursive = source.format in RECURSIVE_FORMATS
        matched = match_files(source.path, recursive) if source.path is not None else []
        if source.path is not None and not matched:
            raise ConfigError(f"sources[{i}].path", f"no files match {source.path!r}")
        files += matched
    try:
        check_output(dataset.output.path)
    except OutputError as e:
        raise ConfigError("output.path", str(e)) from None
    if not overwrite and holds_dataset(dataset.output.path):
        raise ConfigError(
            "output.path",
            f"{dataset.output.path!r} already holds a dataset ({MANIFEST}); "
            "give --overwrite to replace it",
        )
    return files


_MAX_DATES = 3660  # a backfill of ten years at most: beyond, a typo is likelier than a wish


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shardflow etl",
        description="Reads the sources of a dataset config and writes sharded TFRecords. "
        "Unknown --flags are Beam pipeline options (--runner, --direct_num_workers, ...).",
    )
    parser.add_argument("--config", required=True, help="dataset config (YAML; local or gs://)")
    parser.add_argument("--output", help="overrides output.path of the config")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the dataset already at OUTPUT (atomically, once the new one is complete)",
    )
    parser.add_argument(
        "--validate-only",
        action="store_true",
        help="check the config, the input paths and OUTPUT, then exit (0: all good, 2: what is "
        "wrong) without reading a record",
    )
    parser.add_argument(
        "--skip-complete",
        action="store_true",
        help="do nothing (exit 0) when OUTPUT already holds a complete dataset: for retried or "
        "scheduled runs",
    )
    dates = parser.add_argument_group(
        "date partitions: {date}, {YYYY}, {MM}, {DD} in source and output paths"
    )
    dates.add_argument(
        "--date", type=_day, metavar="YYYY-MM-DD",
        help="the date to process (also `today` or `yesterday`, in UTC)",
    )  # fmt: skip
    dates.add_argument(
        "--from", dest="first", type=_day, metavar="YYYY-MM-DD",
        help="backfill: first date (with --to); one dataset per date, dates already complete "
        "are skipped unless --overwrite",
    )  # fmt: skip
    dates.add_argument("--to", dest="last", type=_day, metavar="YYYY-MM-DD", help="last date")
    return parser


def _day(text: str) -> datetime.date:
    today = datetime.datetime.now(datetime.timezone.utc).date()
    if text in ("today", "yesterday"):
        return today if text == "today" else today - datetime.timedelta(days=1)
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            raise ValueError
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date YYYY-MM-DD") from None


def _dates(args: argparse.Namespace) -> list[datetime.date | None]:
    """The dates to process: [None] without date flags. Raises ConfigError for a bad mix."""
    if args.date is not None:
        if args.first is not None or args.last is not None:
            raise ConfigError("--date", "give either --date or --from/--to, not both")
        return [args.date]
    if args.first is None and args.last is None:
        return [None]
    if args.first is None or args.last is None:
        raise ConfigError("--from" if args.first is None else "--to", "--from and --to go together")
    if args.last < args.first:
        raise ConfigError("--to", f"{args.last} is before --from {args.first}")
    days = (args.last - args.first).days + 1
    if days > _MAX_DATES:
        raise ConfigError("--to", f"{days} dates; a backfill covers at most {_MAX_DATES}")
    return [args.first + datetime.timedelta(days=i) for i in range(days)]


def run(argv: list[str] | None = None) -> int:
    args, beam_args = build_parser().parse_known_args(argv)
    try:
        dates = _dates(args)
        if len(dates) > 1:
            return _backfill(args, beam_args, dates)
        dataset = load_config(args.config, args.output, dates[0])
        if args.skip_complete and not args.overwrite and holds_dataset(dataset.output.path):
            print(f"shardflow etl: {dataset.output.path} is complete; skipped")
            return 0
        inputs = _check_inputs(dataset, args.overwrite)
    except ConfigError as e:
        print(f"shardflow etl: error: {e}", file=sys.stderr)
        return 2
    if args.validate_only:
        print(f"shardflow etl: {dataset.name}: config valid; {len(inputs)} input file(s)")
        return 0
    return _run_dataset(dataset, inputs, beam_args)


def _backfill(args: argparse.Namespace, beam_args: list[str], dates: list[datetime.date]) -> int:
    """Runs the dataset of every date in turn: complete ones are skipped (unless --overwrite;
    as with --skip-complete), a failed date does not stop the others. Exit 0 when every date is
    done, else 1."""
    first = load_config(args.config, args.output, dates[0])  # a bad config: exit 2 at once
    probe = load_config(args.config, args.output, dates[0] + datetime.timedelta(days=1))
    if probe.output.path == first.output.path:
        raise ConfigError(
            "--output" if args.output else "output.path",
            f"{first.output.path!r} has no date template ({{date}} or {{YYYY}}, {{MM}}, "
            "{DD}): every date would write the same dataset",
        )
    done, skipped, failed = 0, 0, []
    for i, day in enumerate(dates, 1):
        print(f"shardflow etl: {day} ({i} of {len(dates)})", flush=True)
        try:
            dataset = load_config(args.config, args.output, day)
            if not args.overwrite and holds_dataset(dataset.output.path):
                print(f"shardflow etl: {day}: {dataset.output.path} is complete; skipped")
                skipped += 1
                continue
            inputs = _check_inputs(dataset, overwrite=True)
        except ConfigError as e:
            print(f"shardflow etl: {day}: error: {e}", file=sys.stderr)
            failed.append(day)
            continue
        if _run_dataset(dataset, inputs, beam_args) == 0:
            done += 1
        else:
            failed.append(day)
    summary = f"{done} written, {skipped} skipped (complete), {len(failed)} failed"
    if failed:
        print(f"shardflow etl: backfill: {summary}: {', '.join(map(str, failed))}", file=sys.stderr)
        return 1
    print(f"shardflow etl: backfill: {summary}")
    return 0


def _run_dataset(dataset: DatasetSpec, inputs: list[str], beam_args: list[str]) -> int:
    options = pipeline_options(beam_args)
    staging = staging_path(dataset.output.path, uuid.uuid4().hex[:12])
    started = time.monotonic()
    size = sum(m.size_in_bytes for r in FileSystems.match(inputs) for m in r.metadata_list)
    runner = options.view_as(StandardOptions).runner
    queries = sum(s.format in formats.QUERY_FORMATS for s in dataset.sources)
    what = [f"{len(inputs)} file(s), {size / 1e6:.1f} MB"] if inputs or not queries else []
    what += [f"{queries} quer{'y' if queries == 1 else 'ies'}"] if queries else []
    print(
        f"shardflow etl: {dataset.name}: reading {' and '.join(what)}, with the {runner}",
        flush=True,
    )
    logger.info("staging under %s", staging)
    reporter = progress.Reporter(f"shardflow etl: {dataset.name}")
    try:
        with reporter:
            with beam.Pipeline(options=options) as p:
                build_etl(p, dataset, staging)
                graph = pipeline_graph(p)
    except Exception as e:  # the job failed: report why, leave nothing half-written
        logger.debug("job failed", exc_info=True)
        discard(staging)
        print(f"shardflow etl: job failed: {_reason(e)}", file=sys.stderr)
        return 1
    template = options.view_as(GoogleCloudOptions).template_location
    if template:  # the job was written (a template, or a flex-template launch), not run
        print(f"shardflow etl: {dataset.name}: job written to {template}; nothing was run")
        return 0
    timings = dict(reporter.timings(), runner=runner)
    write_report(dataset.output.path, graph, timings)
    _report(dataset, time.monotonic() - started)
    return 0


def write_report(output: str, graph: dict, timings: dict) -> None:
    """Writes OUTPUT/report.html from the published dataset (its manifest, statistics and
    rejected records), the job's graph and timings. The dataset is complete without it: a
    report that cannot be written is a warning, not a failed run."""
    from transforms.report import render  # only here: the report's code is only for this

    try:
        manifest = json.loads(_read(f"{output}/{MANIFEST}"))
        entry = manifest.get("statistics")
        statistics = json.loads(_read(f"{output}/{entry['path']}")) if entry else None
        examples = rejected_examples(output, manifest)
        page = render(manifest, statistics, graph, timings, examples).encode("utf-8")
        write_atomically(f"{output}/{REPORT}", page, "text/html")
    except Exception as e:  # noqa: BLE001 - see above
        logger.warning("the run report was not written: %s: %s", type(e).__name__, e)


def _read(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def rejected_examples(output: str, manifest: dict, per_reason: int = 5) -> dict[str, list[dict]]:
    """Up to `per_reason` rejected records of each reason (location and record), in file order."""
    examples: dict[str, list[dict]] = {}
    wanted = len(manifest["rejected"]["reasons"])
    for entry in manifest["rejected"]["files"]:
        with FileSystems.open(
            f"{output}/{entry['path']}", compression_type=CompressionTypes.UNCOMPRESSED
        ) as f:
            for line in f:
                record = json.loads(line)
                found = examples.setdefault(record["reason"], [])
                if len(found) < per_reason:
                    found.append({"location": record["location"], "record": record["record"]})
                if len(examples) == wanted and all(
                    len(v) == per_reason for v in examples.values()
                ):
                    return examples
    return examples


def _reason(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    # Beam wraps worker errors in long chains; the last line names the original error.
    lines = [line for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else text
    # ... and ends it with the step that raised it, which means nothing to a user.
    return re.sub(r" \[while running '[^']*'\]$", "", last)


def _report(dataset: DatasetSpec, seconds: float) -> None:
    with FileSystems.open(f"{dataset.output.path}/{MANIFEST}") as f:
        manifest = json.loads(f.read())
    read = sum(s["records"] for s in manifest["sources"].values())
    print(f"shardflow etl: {dataset.name}: {read} records read in {seconds:.1f}s")
    for name, split in manifest["splits"].items():
        print(f"  {name:<10} {split['records']:>9} records in {len(split['files'])} shard(s)")
    print(f"  {'rejected':<10} {manifest['rejected']['records']:>9} records")
    for reason, n in manifest["rejected"]["reasons"].items():
        print(f"      {n:>7}  {reason}")
    print(f"  {'duplicates':<10} {manifest['duplicates']:>9} records")
    if "joined" in manifest:
        print(f"  {'joined':<10} {manifest['joined']:>9} records merged into another source's")
    transform = manifest.get("transform")
    if transform is not None:
        print(
            f"  transform: {transform['path']}/ analyzed on {transform['analyzed_records']} "
            f"{transform['analyzed_split']} records; the shards hold "
            f"{transform['materialize']} examples"
        )
    print(f"  dataset: {dataset.output.path}")


def exit_process(code: int) -> None:
    """Ends the process with `code`, also when TensorFlow was loaded by a tf.Transform.

    After a tf.Transform analysis the interpreter may crash while it tears down TensorFlow's
    objects (exit status 139 after a successful run). With TensorFlow loaded, the exit
    handlers run (logging, temporary files) and the process ends without that teardown.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if "tensorflow" not in sys.modules:
        sys.exit(code)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    exit_process(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
