"""`shardflow etl`: sources → validated, split, sharded TFRecords + manifest.

`build_etl(p, dataset, staging)` only wires the graph; `run(argv)` parses flags (unknown flags are
Beam pipeline options), checks the config and the inputs, runs the job, waits, and reports.
Exit status: 0 done, 2 bad command line or config, 1 the job failed.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import datetime
import json
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
import uuid
from typing import Iterator

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes, FileSystem
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
)

from pipelines import joblog, progress
from pipelines.config import ConfigError, load_config
from pipelines.report.graph import pipeline_graph
from transforms.contract.config import DatasetSpec
from transforms.contract.layout import (
    COMPRESSIONS,
    MANIFEST,
    REJECTED_FILE,
    REPORT,
    STATISTICS,
    TRANSFORM_DIR,
    shard_name,
    shard_suffix,
)
from transforms.contract.manifest import Manifest
from transforms.files import (
    RECURSIVE_FORMATS,
    file_pattern,
    is_input,
    is_remote,
    match_files,
    pattern_root,
)
from transforms.join import JoinByKey
from transforms.prepare import PrepareRecords
from transforms.quality import CountFields, QualityError
from transforms.sink.finalize import PublishDataset
from transforms.sink.output import Expected, OutputError, expect, holds_dataset
from transforms.sink.storage import discard, staging_path, write_atomically
from transforms.sink.write import SPILL_BYTES, WriteShards
from transforms.sources import ranges, registry
from transforms.sources.read import ReadSource
from transforms.stats import MergeStats

logger = logging.getLogger(__name__)

# The DirectRunner of Beam 2.77 first tries the Prism runner, which downloads a binary (no
# network here) and then falls back to the FnApiRunner; we go to the FnApiRunner directly. It
# honours --direct_num_workers and --direct_running_mode like the DirectRunner.
_LOCAL_RUNNERS = {None, "DirectRunner", "direct", "directrunner"}


@dataclasses.dataclass(frozen=True)
class Tuning:
    """How a run cuts its work, not what it makes: the dataset's bytes are the same whatever
    these are (`shardflow etl --split-mb/--spill-mb/--progress-seconds`)."""

    split_bytes: int = ranges.SPLIT_BYTES  # CSV/JSONL/Parquet files larger: read in ranges
    spill_bytes: int = SPILL_BYTES  # encoded bytes a worker gathers before it sorts and spills
    progress_seconds: float | None = None  # between progress lines (default: 5 s on a terminal)


def build_etl(
    p: beam.Pipeline,
    dataset: DatasetSpec,
    staging: str,
    expected: Expected = Expected(),
    tuning: Tuning = Tuning(),
) -> beam.PCollection:
    """Wires the ETL graph; returns the PCollection holding the published manifest.

    `expected`: what publication may replace at OUTPUT (`_check_inputs`); by default nothing.
    """
    chunks, rejected, counts = [], [], []
    for source in dataset.sources:
        read = (
            registry.reader(source.format)(source)
            if source.format in registry.QUERY_FORMATS
            else ReadSource(source, tuning.split_bytes)
        )
        c, r, n = p | f"Read[{source.name}]" >> read
        chunks.append(c)
        rejected.append(r)
        counts.append(n)
    records = chunks | "MergeSources" >> beam.Flatten()
    counts.append(records | "CountFields" >> beam.ParDo(CountFields(dataset)))
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
        from transforms.tf_transform import TransformFeatures

        encoded, transform = encoded | "TransformFeatures" >> TransformFeatures(dataset, staging)
    shards, shard_count = encoded | "WriteShards" >> WriteShards(
        dataset, staging, tuning.spill_bytes
    )
    all_rejected = rejected | "MergeRejected" >> beam.Flatten()
    totals = counts | "MergeCounts" >> beam.Flatten() | "SumCounts" >> beam.CombinePerKey(sum)
    return p | "Publish" >> PublishDataset(
        dataset,
        staging,
        shards,
        shard_count,
        all_rejected,
        totals,
        transform,
        statistics,
        expected=expected,
    )


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Beam options from the leftover flags, with the local runner made explicit."""
    options = PipelineOptions(beam_args)
    standard = options.view_as(StandardOptions)
    if standard.runner in _LOCAL_RUNNERS:
        standard.runner = "FnApiRunner"
    return options


def _check_inputs(dataset: DatasetSpec, overwrite: bool = False) -> tuple[list[str], Expected]:
    """The input files of every source, and what the run may replace at OUTPUT when it publishes
    (what OUTPUT holds now, and only with `overwrite`). Raises ConfigError when a source has no
    files, when OUTPUT is inside a source's input, when it is not a dataset (a symbolic link, a
    file, a folder holding other things or someone else's manifest.json), or when it holds a
    complete dataset and `overwrite` is not given.
    """
    files = []
    for i, source in enumerate(dataset.sources):
        recursive = source.format in RECURSIVE_FORMATS
        matched = match_files(source.path, recursive) if source.path is not None else []
        if source.path is not None and not matched:
            raise ConfigError(f"sources[{i}].path", f"no files match {source.path!r}")
        files += matched
    _check_output_outside_inputs(dataset)
    try:
        expected = expect(dataset.output.path, overwrite)
    except OutputError as e:
        raise ConfigError("output.path", str(e)) from None
    if not overwrite and expected.state.dataset is not None:
        raise ConfigError(
            "output.path",
            f"{dataset.output.path!r} already holds a dataset ({MANIFEST}); "
            "give --overwrite to replace it",
        )
    return files, expected


# One file of each kind a dataset holds, at each depth (shards of every compression): a source
# whose pattern matches one of them would read the dataset back on the next run.
_DATASET_FILES = (
    MANIFEST,
    REPORT,
    STATISTICS,
    "schema.pbtxt",
    *(shard_name("train", 0, 1, shard_suffix(c)) for c in COMPRESSIONS),
    REJECTED_FILE,
    f"{TRANSFORM_DIR}/transform_fn/saved_model.pb",
    f"{TRANSFORM_DIR}/transformed_metadata/schema.pbtxt",
)


def _check_output_outside_inputs(dataset: DatasetSpec) -> None:
    """Raises ConfigError when a source's files would include the dataset at OUTPUT, or its
    staging siblings: each rerun would read the previous dataset as input."""
    output = dataset.output.path
    for i, source in enumerate(dataset.sources):
        if source.path is not None and _reads_back(source.path, source.format, output):
            raise ConfigError(
                "output.path",
                f"{output!r} is inside the input of sources[{i}] ({source.path!r}); the next "
                "run would read this dataset back",
            )


def _reads_back(path: str, source_format: str, output: str) -> bool:
    """Whether the files of a source `path` would include files of a dataset at `output`,
    matched as `transforms.files.match_files` matches them (Beam's glob, dot names skipped)."""
    if is_remote(path) != is_remote(output):
        return False
    pattern, root = file_pattern(path, source_format in RECURSIVE_FORMATS), pattern_root(path)
    if not is_remote(path):  # compare real paths: either side may be reached through a link
        real = os.path.realpath(root)
        pattern, root = real + pattern[len(root) :], real
        output = os.path.realpath(output)
    output = output.rstrip("/")
    if f"{root}/".startswith(f"{output}/"):  # the source is in OUTPUT (a file or folder of it)
        return True
    parent, base = output.rsplit("/", 1)
    folders = (output, f"{parent}/.{base}.incomplete-0", f"{parent}/.{base}.replaced-0")
    matches = re.compile(FileSystem.translate_pattern(pattern)).match
    files = [f"{folder}/{name}" for folder in folders for name in _DATASET_FILES]
    return any(matches(file) and is_input(file, root) for file in files)


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
        "--verbose",
        action="store_true",
        help="print the runner's log and, when the job fails, its traceback (by default they "
        "go to a log file that a failed run names)",
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
    tuning = parser.add_argument_group(
        "tuning (the dataset's bytes are the same whatever these are)"
    )
    tuning.add_argument(
        "--split-mb", type=_megabytes, default=ranges.SPLIT_BYTES, metavar="MB",
        help=f"CSV, JSON Lines and Parquet files larger than this are read in ranges of about "
        f"this size, spread over the workers (default {ranges.SPLIT_BYTES >> 20})",
    )  # fmt: skip
    tuning.add_argument(
        "--spill-mb", type=_megabytes, default=SPILL_BYTES, metavar="MB",
        help=f"encoded records a worker holds before it sorts and spills them to the staging "
        f"folder (default {SPILL_BYTES >> 20})",
    )  # fmt: skip
    tuning.add_argument(
        "--progress-seconds", type=_seconds, metavar="S",
        help="seconds between progress lines (default 5 on a terminal, 60 otherwise)",
    )  # fmt: skip
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


def _megabytes(text: str) -> int:
    """A size in MB (fractions allowed) as bytes."""
    try:
        mb = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of MB") from None
    if not mb > 0 or mb == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of MB")
    return max(1, int(mb * 2**20))


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return seconds


def _tuning(args: argparse.Namespace) -> Tuning:
    return Tuning(args.split_mb, args.spill_mb, args.progress_seconds)


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
    with joblog.captured(verbose=args.verbose), _noticing_interrupts():
        try:
            return _run(args, beam_args)
        except KeyboardInterrupt:
            pass
        except Exception:
            if not _INTERRUPTED.is_set():
                raise
        # Ctrl-C (Beam may have wrapped the KeyboardInterrupt of a step in an error of its own)
        print("shardflow etl: interrupted; nothing published", file=sys.stderr)
        return 130


_INTERRUPTED = threading.Event()  # set by SIGINT (Ctrl-C) during `run`


@contextlib.contextmanager
def _noticing_interrupts() -> Iterator[None]:
    """For the block: SIGINT sets _INTERRUPTED, then raises KeyboardInterrupt as usual."""
    _INTERRUPTED.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        _INTERRUPTED.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _run(args: argparse.Namespace, beam_args: list[str]) -> int:
    try:
        dates = _dates(args)
        if len(dates) > 1:
            return _backfill(args, beam_args, dates)
        dataset = load_config(args.config, args.output, dates[0])
        if args.skip_complete and not args.overwrite and holds_dataset(dataset.output.path):
            print(f"shardflow etl: {dataset.output.path} is complete; skipped")
            return 0
        inputs, expected = _check_inputs(dataset, args.overwrite)
    except ConfigError as e:
        print(f"shardflow etl: error: {e}", file=sys.stderr)
        return 2
    if args.validate_only:
        print(f"shardflow etl: {dataset.name}: config valid; {len(inputs)} input file(s)")
        return 0
    return _run_dataset(dataset, inputs, beam_args, expected, _tuning(args))


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
            inputs, expected = _check_inputs(dataset, args.overwrite)
        except ConfigError as e:
            print(f"shardflow etl: {day}: error: {e}", file=sys.stderr)
            failed.append(day)
            continue
        if args.validate_only:
            print(f"shardflow etl: {day}: config valid; {len(inputs)} input file(s)")
            done += 1
            continue
        if _run_dataset(dataset, inputs, beam_args, expected, _tuning(args)) == 0:
            done += 1
        else:
            failed.append(day)
    written = "valid" if args.validate_only else "written"
    summary = f"{done} {written}, {skipped} skipped (complete), {len(failed)} failed"
    if failed:
        print(f"shardflow etl: backfill: {summary}: {', '.join(map(str, failed))}", file=sys.stderr)
        return 1
    print(f"shardflow etl: backfill: {summary}")
    return 0


def _run_dataset(
    dataset: DatasetSpec,
    inputs: list[str],
    beam_args: list[str],
    expected: Expected,
    tuning: Tuning = Tuning(),
) -> int:
    options = pipeline_options(beam_args)
    staging = staging_path(dataset.output.path, uuid.uuid4().hex[:12])
    started = time.monotonic()
    size = sum(m.size_in_bytes for r in FileSystems.match(inputs) for m in r.metadata_list)
    runner = options.view_as(StandardOptions).runner
    queries = sum(s.format in registry.QUERY_FORMATS for s in dataset.sources)
    what = [f"{len(inputs)} file(s), {size / 1e6:.1f} MB"] if inputs or not queries else []
    what += [f"{queries} quer{'y' if queries == 1 else 'ies'}"] if queries else []
    print(
        f"shardflow etl: {dataset.name}: reading {' and '.join(what)}, with the {runner}",
        flush=True,
    )
    logger.info("staging under %s", staging)
    reporter = progress.Reporter(f"shardflow etl: {dataset.name}", interval=tuning.progress_seconds)
    try:
        with reporter:
            with beam.Pipeline(options=options) as p:
                build_etl(p, dataset, staging, expected, tuning)
                graph = pipeline_graph(p)
    except BaseException as e:  # failed or interrupted: leave nothing half-written
        discard(staging)
        if not isinstance(e, Exception) or _INTERRUPTED.is_set():
            raise  # said by `run`
        # A refusal of the data or of OUTPUT says all there is to say in its one line.
        details = "" if isinstance(e, (QualityError, OutputError)) else joblog.failure(e)
        print(f"shardflow etl: job failed: {_reason(e)}{details}", file=sys.stderr)
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
    from pipelines.report.page import (
        render,  # only here: the report's code is only for this
    )

    try:
        manifest = Manifest.from_json(_read(f"{output}/{MANIFEST}"))
        entry = manifest.statistics
        statistics = json.loads(_read(f"{output}/{entry.path}")) if entry else None
        examples = rejected_examples(output, manifest)
        page = render(manifest.to_dict(), statistics, graph, timings, examples).encode("utf-8")
        write_atomically(f"{output}/{REPORT}", page, "text/html")
    except Exception as e:  # noqa: BLE001 - see above
        logger.warning("the run report was not written: %s: %s", type(e).__name__, e)


def _read(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def rejected_examples(
    output: str, manifest: Manifest, per_reason: int = 5
) -> dict[str, list[dict]]:
    """Up to `per_reason` rejected records of each reason (location and record), in file order."""
    examples: dict[str, list[dict]] = {}
    wanted = len(manifest.rejected.reasons)
    for entry in manifest.rejected.files or ():
        with FileSystems.open(
            f"{output}/{entry.path}", compression_type=CompressionTypes.UNCOMPRESSED
        ) as f:
            for line in f:
                record = json.loads(line)
                found = examples.setdefault(record["reason"], [])
                if len(found) < per_reason:
                    found.append({"location": record["location"], "record": record["record"]})
                if len(examples) == wanted and all(len(v) == per_reason for v in examples.values()):
                    return examples
    return examples


def _reason(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    # Beam wraps worker errors in long chains; the last line names the original error.
    lines = [line for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else text
    # ... and ends it with the step that raised it, which means nothing to a user.
    return re.sub(r" \[while running '[^']*'\]$", "", last)


_TOP_REASONS = 5


def _short(text: str, most: int = 120) -> str:
    """`text` on one line and at most `most` characters (field names and reasons come from data)."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\n", "\\n")
    return text if len(text) <= most else text[: most - 1] + "…"


def _report(dataset: DatasetSpec, seconds: float) -> None:
    with FileSystems.open(f"{dataset.output.path}/{MANIFEST}") as f:
        manifest = Manifest.from_json(f.read())
    read = sum(s.records for s in manifest.sources.values())
    print(f"shardflow etl: {dataset.name}: {read} records read in {seconds:.1f}s")
    for name, split in manifest.splits.items():
        print(f"  {name:<10} {split.records:>9} records in {len(split.files)} shard(s)")
    print(f"  {'rejected':<10} {manifest.rejected.records:>9} records")
    reasons = sorted(manifest.rejected.reasons.items(), key=lambda item: (-item[1], item[0]))
    for reason, n in reasons[:_TOP_REASONS]:
        print(f"      {n:>7}  {_short(reason)}")
    if len(reasons) > _TOP_REASONS:
        rest = sum(n for _, n in reasons[_TOP_REASONS:])
        print(f"      {rest:>7}  ({len(reasons) - _TOP_REASONS} more reasons: see the manifest)")
    for name, source in manifest.sources.items():
        ignored = source.ignored_fields or {}
        if ignored:
            fields = ", ".join(f"{_short(f, 40)} ({n})" for f, n in list(ignored.items())[:8])
            more = f" and {len(ignored) - 8} more" if len(ignored) > 8 else ""
            print(f"  ignored fields of {name} (records holding a value): {fields}{more}")
    print(f"  {'duplicates':<10} {manifest.duplicates:>9} records")
    if manifest.joined is not None:
        print(f"  {'joined':<10} {manifest.joined:>9} records merged into another source's")
    transform = manifest.transform
    if transform is not None:
        print(
            f"  transform: {transform.path}/ analyzed on {transform.analyzed_records} "
            f"{transform.analyzed_split} records; the shards hold "
            f"{transform.materialize} examples"
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
