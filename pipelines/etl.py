"""`shardflow etl`: sources → validated, split, sharded TFRecords + manifest.

`build_etl(p, dataset, staging)` only wires the graph; `run(argv)` parses flags (unknown flags are
Beam pipeline options; `pipelines.flags`), checks the config and the inputs (`pipelines.inputs`),
runs the job, waits, and reports (`pipelines.summary`, `pipelines.report`).
Exit status: 0 done, 2 bad command line or config, 1 the job failed.

Longer than most modules because it is the command from flags to exit status: `build_etl`'s
graph, and each way a run goes (one date, a `--from`/`--to` backfill, `--validate-only`, a job
that fails or is interrupted), which share the same checks, staging and report.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import logging
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from typing import Callable, Iterator, cast

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    StandardOptions,
)

from pipelines.baseline import find_baseline
from pipelines.config.loader import ConfigError, load_config
from pipelines.examples import SampleRejected, likely_cause, sample_report
from pipelines.flags import Tuning, beam_flags, build_parser, dates_of, tuning_from
from pipelines.inputs import check_inputs
from pipelines.report.graph import pipeline_graph
from pipelines.report.writer import write_report
from pipelines.runner import joblog, progress, workers
from pipelines.runner.options import (
    encode_threads,
    parallelism,
    pipeline_options,
    spill_bytes,
    write_threads,
)
from pipelines.runner.process import exit_process
from pipelines.runner.staged import check_workers
from pipelines.summary import failure_reason, print_summary, refusal
from transforms.contract.config import DatasetSpec
from transforms.facts.merge import AnalyzeFacts
from transforms.files import CorruptFile, FileError, match_files
from transforms.join import JoinByKey
from transforms.prepare_records import MergeStats, PrepareRecords
from transforms.quality import CountFields
from transforms.sink.finalize import PublishDataset, WriteFactsFn
from transforms.sink.output import Expected, holds_dataset
from transforms.sink.rejected import WriteRejected
from transforms.sink.storage import discard, staging_path
from transforms.sink.write import SPILL_BYTES, WriteShards
from transforms.sources import ranges, registry
from transforms.sources.read import FirstRecords, ReadSource
from transforms.sources.text import TextOptions, regex_note
from transforms.ui.safe import mask_logs, shown

logger = logging.getLogger(__name__)
_INTERRUPTED = threading.Event()  # set by SIGINT (Ctrl-C) during `run`


def build_etl(
    p: beam.Pipeline,
    dataset: DatasetSpec,
    staging: str,
    expected: Expected = Expected(),
    tuning: Tuning = Tuning(),
    baseline: str | None = None,
    before_publish: Callable[[], None] | None = None,
) -> beam.PCollection:
    """Wires the ETL graph; returns the PCollection holding the published manifest.

    `expected`: what publication may replace at OUTPUT (`check_inputs`); by default nothing.
    `baseline`: the dataset (URI) the statistics are compared with for drift.
    `before_publish`: for tests, called just before publication touches OUTPUT.
    """
    chunks, counts = [], []
    rejected = {}  # by the step that rejected them
    for source in dataset.sources:
        if source.format in registry.QUERY_FORMATS:
            c, r, n = p | f"Read[{source.name}]" >> registry.reader(source.format)(source)
            if dataset.limit is not None:  # the query is read whole, then cut
                c, r, n = (c, r) | f"First[{source.name}]" >> FirstRecords(
                    source.name, dataset.limit
                )
        else:
            read = ReadSource(source, tuning.split_bytes or ranges.SPLIT_BYTES, dataset.limit)
            c, r, n = p | f"Read[{source.name}]" >> read
        chunks.append(c)
        rejected[f"Read[{source.name}]"] = r
        counts.append(n)
    records = chunks | "MergeSources" >> beam.Flatten()
    counts.append(records | "CountFields" >> beam.ParDo(CountFields(dataset)))
    if dataset.combine == "join":
        encoded, invalid, join_counts, stats, facts = records | "JoinSources" >> JoinByKey(
            dataset, staging, tuning.encode_threads
        )
        counts.append(join_counts)
    else:
        encoded, invalid, stats, facts = records | "PrepareRecords" >> PrepareRecords(
            dataset, staging, tuning.encode_threads
        )
    rejected["JoinSources" if dataset.combine == "join" else "PrepareRecords"] = invalid
    statistics = stats | "MergeStatistics" >> beam.CombineGlobally(MergeStats())
    analyzed = (
        facts
        | "AnalyzeFacts" >> AnalyzeFacts(dataset.vocabulary_cap)
        | "WriteFacts"
        >> beam.ParDo(WriteFactsFn(dataset, staging), beam.pvalue.AsSingleton(statistics))
    )
    transform = None
    if dataset.transform is not None:
        # Imported here: tf.Transform brings TensorFlow (seconds and hundreds of MB), which
        # datasets without a transform never need.
        from transforms.tf_transform import TransformFeatures

        encoded, transform = encoded | "TransformFeatures" >> TransformFeatures(dataset, staging)
    shards, shard_count = encoded | "WriteShards" >> WriteShards(
        dataset, staging, tuning.spill_bytes or SPILL_BYTES, write_threads=tuning.write_threads
    )
    rejected_files = rejected | "WriteRejected" >> WriteRejected(
        staging, dataset.output.shard_bytes
    )
    totals = counts | "MergeCounts" >> beam.Flatten() | "SumCounts" >> beam.CombinePerKey(sum)
    inputs = {
        "shards": shards,
        "shard_count": shard_count,
        "rejected": rejected_files,
        "counts": totals,
        "statistics": statistics,
        "facts": analyzed,
    }
    if transform is not None:
        inputs["transform"] = transform
    return inputs | "Publish" >> PublishDataset(
        dataset, staging, expected=expected, baseline=baseline, before_publish=before_publish
    )


def run(argv: list[str] | None = None, before_publish: Callable[[], None] | None = None) -> int:
    """`shardflow etl ARGV`; its exit code. `before_publish`, for tests, is called in each
    run just before publication touches OUTPUT (in the process that publishes)."""
    # Keras, which a tf.Transform imports, writes its config file to KERAS_HOME (~/.keras by
    # default): this command's process keeps it in the temp location.
    os.environ.setdefault("KERAS_HOME", os.path.join(tempfile.gettempdir(), "shardflow-keras"))
    mask_logs()
    parser = build_parser()
    args, beam_args = parser.parse_known_args(argv)
    try:
        beam_args = beam_flags(beam_args, parser)
    except ConfigError as e:
        print(f"shardflow etl: error: {e}", file=sys.stderr)
        return 2
    with joblog.captured(verbose=args.verbose), _noticing_interrupts():
        try:
            return _run(args, beam_args, before_publish)
        except KeyboardInterrupt:
            pass
        except Exception:
            if not _INTERRUPTED.is_set():
                raise
        # Ctrl-C (Beam may have wrapped the KeyboardInterrupt of a step in an error of its own)
        print("shardflow etl: interrupted; nothing published", file=sys.stderr)
        return 130


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


def _run(
    args: argparse.Namespace, beam_args: list[str], before_publish: Callable[[], None] | None
) -> int:
    started = time.monotonic()
    options = pipeline_options(beam_args)
    if not args.validate_only:  # local worker processes are forked: have their server get ready
        workers.start_forkserver(options)
    try:
        dates = dates_of(args)
        if len(dates) > 1:
            # --from/--to: a range of dates, none of them None
            return _backfill(args, beam_args, cast("list[datetime.date]", dates), before_publish)
        dataset = _limited(load_config(args.config, args.output, dates[0]), args)
        _warn_of(dataset)
        check_workers(dataset, options)
        if args.skip_complete and not args.overwrite and holds_dataset(dataset.output.path):
            print(f"shardflow etl: {dataset.output.path} is complete; skipped")
            return 0
        # --validate-only writes nothing: a dataset at OUTPUT is said, not refused (the
        # edit-then-check loop goes on after the first run)
        inputs, expected = check_inputs(dataset, args.overwrite or args.validate_only)
        baseline = find_baseline(args, dataset)
    except ConfigError as e:
        print(f"shardflow etl: error: {e}", file=sys.stderr)
        return 2
    if args.validate_only:
        print(f"shardflow etl: {dataset.name}: config valid; {len(inputs)} input file(s)")
        if expected.state.dataset is not None and not args.overwrite:
            print(
                f"shardflow etl: note: {dataset.output.path} already holds a dataset: a run "
                "needs --overwrite to replace it (or --skip-complete to keep it)"
            )
        try:
            lines = sample_report(dataset)
        except (FileError, CorruptFile) as e:
            print(f"shardflow etl: {e}", file=sys.stderr)
            return 1
        except SampleRejected as e:
            *sampled, why = str(e).split("\n")
            print("\n".join(sampled))
            print(f"shardflow etl: error: {why}", file=sys.stderr)
            return 2
        print("\n".join(lines))
        return 0
    tuning = tuning_from(args)
    return _run_dataset(
        dataset, inputs, beam_args, expected, tuning, started, baseline, before_publish
    )


def _limited(dataset: DatasetSpec, args: argparse.Namespace) -> DatasetSpec:
    """The dataset of `etl --limit N`: N records of each source at most."""
    return dataset if args.limit is None else dataclasses.replace(dataset, limit=args.limit)


def _warn_of(dataset: DatasetSpec) -> None:
    """Prints the config's warnings: what it asks for that works, but not as one may expect."""
    for i, source in enumerate(dataset.sources):
        opts = source.options
        note = regex_note(opts.regex) if isinstance(opts, TextOptions) else None
        if note is not None:
            print(f"shardflow etl: warning: sources[{i}] {source.name!r}: {note}", file=sys.stderr)


def _backfill(
    args: argparse.Namespace,
    beam_args: list[str],
    dates: list[datetime.date],
    before_publish: Callable[[], None] | None,
) -> int:
    """Runs the dataset of every date in turn: complete ones are skipped (unless --overwrite;
    as with --skip-complete), a failed date does not stop the others. Exit 0 when every date is
    done, else 1."""
    first = load_config(args.config, args.output, dates[0])  # a bad config: exit 2 at once
    _warn_of(first)
    check_workers(first, pipeline_options(beam_args))
    where = "--output" if args.output else "output.path"
    probe = load_config(args.config, args.output, dates[0] + datetime.timedelta(days=1))
    if probe.output.path == first.output.path:
        raise ConfigError(
            where,
            f"{first.output.path!r} has no date template ({{date}} or {{YYYY}}, {{MM}}, "
            "{DD}): every date would write the same dataset",
        )
    # Every date's dataset, before any work: two dates of the range must never share one (a
    # template of the year alone repeats within a year), or the second would be skipped as
    # complete, or replace the first with --overwrite.
    seen: dict[str, datetime.date] = {}
    for day in dates:
        path = load_config(args.config, args.output, day).output.path
        if path in seen:
            raise ConfigError(
                where,
                f"gives {path!r} for both {seen[path]} and {day}: every date of --from/--to "
                "needs a dataset of its own (a template with {date}, or {YYYY}, {MM} and {DD})",
            )
        seen[path] = day
    done, skipped, failed = 0, 0, []
    for i, day in enumerate(dates, 1):
        started = time.monotonic()
        print(f"shardflow etl: {day} ({i} of {len(dates)})", flush=True)
        try:
            dataset = _limited(load_config(args.config, args.output, day), args)
            if not args.overwrite and holds_dataset(dataset.output.path):
                print(f"shardflow etl: {day}: {dataset.output.path} is complete; skipped")
                skipped += 1
                continue
            inputs, expected = check_inputs(dataset, args.overwrite)
            baseline = find_baseline(args, dataset)
        except ConfigError as e:
            print(f"shardflow etl: {day}: error: {e}", file=sys.stderr)
            failed.append(day)
            continue
        if args.validate_only:
            print(f"shardflow etl: {day}: config valid; {len(inputs)} input file(s)")
            done += 1
            continue
        tuning = tuning_from(args)
        ran = _run_dataset(
            dataset, inputs, beam_args, expected, tuning, started, baseline, before_publish
        )
        if ran == 0:
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
    tuning: Tuning,
    started: float,
    baseline: str | None = None,
    before_publish: Callable[[], None] | None = None,
) -> int:
    """Runs the job of one dataset, checked since `started` (time.monotonic()), and reports."""
    options = pipeline_options(beam_args)
    staging = staging_path(dataset.output.path, uuid.uuid4().hex[:12])
    size = sum(m.size_in_bytes for r in FileSystems.match(inputs) for m in r.metadata_list)
    runner = options.view_as(StandardOptions).runner
    if tuning.split_bytes is None:
        split = ranges.split_size(size, parallelism(options))
        tuning = dataclasses.replace(tuning, split_bytes=split)
    tuning = dataclasses.replace(
        tuning,
        spill_bytes=tuning.spill_bytes or spill_bytes(options),
        write_threads=write_threads(options),
        encode_threads=encode_threads(options),
    )
    queries = sum(s.format in registry.QUERY_FORMATS for s in dataset.sources)
    what = [f"{len(inputs)} file(s), {size / 1e6:.1f} MB"] if inputs or not queries else []
    what += [f"{queries} quer{'y' if queries == 1 else 'ies'}"] if queries else []
    print(
        f"shardflow etl: {dataset.name}: reading {' and '.join(what)}, with the {runner}",
        flush=True,
    )
    logger.info("staging under %s", staging)
    reporter = progress.Reporter(
        f"shardflow etl: {dataset.name}", interval=tuning.progress_seconds, total_bytes=size
    )
    checked = round(time.monotonic() - started, 3)
    checks = {"name": "checks: config, inputs and OUTPUT", "seconds": checked}
    try:
        with reporter, workers.local_workers():
            with beam.Pipeline(options=options) as p:
                build_etl(p, dataset, staging, expected, tuning, baseline, before_publish)
                graph = pipeline_graph(p)
    except BaseException as e:  # failed or interrupted: leave nothing half-written
        discard(staging)
        if not isinstance(e, Exception) or _INTERRUPTED.is_set():
            raise  # said by `run`
        refused = refusal(e)
        if refused is None:
            details = joblog.failure(e)
        else:  # a refusal's line says all there is to say; the data's, with its likely cause
            details = _likely_cause(dataset) if refused == "QualityError" else ""
        # the job log's details are a worker's text: masked and escaped as a whole line
        print(shown(f"shardflow etl: job failed: {failure_reason(e)}{details}"), file=sys.stderr)
        return 1
    template = options.view_as(GoogleCloudOptions).template_location
    if template:  # the job was written (a template, or a flex-template launch), not run
        print(f"shardflow etl: {dataset.name}: job written to {template}; nothing was run")
        return 0
    timings = dict(reporter.timings(), runner=runner)
    timings["steps"] = [checks, *timings["steps"], *progress.finishing_steps(p.result)]
    write_report(dataset.output.path, graph, timings)
    print_summary(dataset, time.monotonic() - started)
    return 0


def _likely_cause(dataset: DatasetSpec) -> str:
    """What the first file of a source suggests is wrong with its options (a UTF-16 file read
    as UTF-8, another delimiter), as the end of a refusal's line; "" when nothing does."""
    for i, source in enumerate(dataset.sources):
        if source.path is None or source.format not in ("csv", "jsonl", "text"):
            continue
        try:
            paths = match_files(source.path)
        except (FileError, OSError):
            continue
        cause = likely_cause(source, paths[0]) if paths else None
        if cause is not None:
            return f" (sources[{i}] {source.name!r}: {cause})"
    return ""


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    exit_process(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
