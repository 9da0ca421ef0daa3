"""The flags of `shardflow etl`: the command line parser, the tuning options it passes down
typed (`Tuning`), and the dates of a date-partitioned run or backfill."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import re

from pipelines.config.fields import ConfigError
from transforms.tuning import (
    ENCODE_THREADS,
    MIN_SPLIT_BYTES,
    RANGES_PER_WORKER,
    SPILL_BYTES,
    SPLIT_BYTES,
    WRITE_THREADS,
)
from transforms.ui.args import positive_int
from transforms.ui.suggest import did_you_mean

VALIDATE_SAMPLE = 1000  # records of each file source `--validate-only` parses and validates
_MAX_DATES = 3660  # a backfill of ten years at most: beyond, a typo is likelier than a wish


@dataclasses.dataclass(frozen=True)
class Tuning:
    """How a run cuts its work, not what it makes: the dataset's bytes are the same whatever
    these are (`shardflow etl --split-mb/--spill-mb/--progress-seconds`)."""

    split_bytes: int | None = None  # CSV/JSONL/Parquet files larger: read in ranges (None: auto)
    spill_bytes: int | None = None  # encoded bytes a worker gathers before it spills (None: auto)
    progress_seconds: float | None = None  # between progress lines (default: 5 s on a terminal)
    write_threads: int = WRITE_THREADS  # shard pieces a worker process writes at once
    encode_threads: int = ENCODE_THREADS  # helper threads encoding beside a worker's validation


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shardflow etl",
        description="Reads the sources of a dataset config and writes sharded TFRecords.\n"
        "Unknown --flags are Beam pipeline options (--runner, --direct_num_workers, ...).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  shardflow etl --config examples/penguins/penguins.yaml --output out/penguins
  shardflow etl --config penguins.yaml --validate-only
  shardflow etl --config penguins.yaml --output out/trial --limit 1000
  shardflow etl --config daily.yaml --from 2026-11-01 --to 2026-11-26
  shardflow etl --config penguins.yaml --output out/v2 --baseline out/v1
  shardflow etl --config big.yaml --direct_num_workers 8 --direct_running_mode multi_processing
  shardflow etl --config gs://b/c.yaml --runner DataflowRunner --project P --region R \\
                --temp_location gs://b/tmp""",
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
    trial = parser.add_mutually_exclusive_group()
    trial.add_argument(
        "--validate-only",
        action="store_true",
        help=f"check the config, the input paths and OUTPUT, parse and validate the first "
        f"{VALIDATE_SAMPLE} records of each file source, then exit (0: all good, 1: a file "
        f"cannot be read, 2: what is wrong) without writing anything",
    )
    trial.add_argument(
        "--limit", type=positive_int, metavar="N",
        help="read only the first N records of each source (files in name order): a real, "
        "small dataset, marked partial in its manifest (`limit`)",
    )  # fmt: skip
    parser.add_argument(
        "--baseline", metavar="DATASET_URI",
        help="the dataset to compare this run's statistics with for drift (default: the "
        "config's validation.baseline, else the previous date's dataset of a date-partitioned "
        "output)",
    )  # fmt: skip
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
        "--split-mb", type=_megabytes, metavar="MB",
        help=f"CSV, JSON Lines and Parquet files larger than this are read in ranges of about "
        f"this size, spread over the workers (default: the input's size over "
        f"{RANGES_PER_WORKER} ranges per worker, {MIN_SPLIT_BYTES >> 20} to "
        f"{SPLIT_BYTES >> 20} MB)",
    )  # fmt: skip
    tuning.add_argument(
        "--spill-mb", type=_megabytes, metavar="MB",
        help=f"encoded records a worker holds before it sorts and spills them to the staging "
        f"folder (default {SPILL_BYTES >> 20}; half that when local worker processes outnumber "
        f"half the cores)",
    )  # fmt: skip
    tuning.add_argument(
        "--progress-seconds", type=_seconds, metavar="S",
        help="print a progress line every S seconds (default: one line rewritten every second "
        "on a terminal; otherwise lines at 10, 20 and 30 s, then every minute)",
    )  # fmt: skip
    dates = parser.add_argument_group(
        "date partitions: {date}, {YYYY}, {MM}, {DD} in source and output paths"
    )
    dates.add_argument(
        "--date", type=parse_day, metavar="YYYY-MM-DD",
        help="the date to process (also `today` or `yesterday`, in UTC)",
    )  # fmt: skip
    dates.add_argument(
        "--from", dest="first", type=parse_day, metavar="YYYY-MM-DD",
        help="backfill: first date (with --to); one dataset per date, dates already complete "
        "are skipped unless --overwrite",
    )  # fmt: skip
    dates.add_argument("--to", dest="last", type=parse_day, metavar="YYYY-MM-DD", help="last date")
    return parser


def _positive(unit: str):
    """An argparse type: a positive, finite number of `unit` (fractions allowed)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit}") from None
        if not 0 < value < float("inf"):  # NaN too
            raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of {unit}")
        return value

    return parse


_seconds = _positive("seconds")


def _megabytes(text: str) -> int:
    """A size in MB as bytes."""
    return max(1, int(_positive("MB")(text) * 2**20))


def tuning_from(args: argparse.Namespace) -> Tuning:
    return Tuning(args.split_mb, args.spill_mb, args.progress_seconds)


def parse_day(text: str) -> datetime.date:
    today = datetime.datetime.now(datetime.timezone.utc).date()
    if text in ("today", "yesterday"):
        return today if text == "today" else today - datetime.timedelta(days=1)
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            raise ValueError
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date YYYY-MM-DD") from None


def dates_of(args: argparse.Namespace) -> list[datetime.date | None]:
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


def config_error(argv: list[str]) -> str | None:
    """What is wrong with the dates or the config of a `shardflow etl` command line (for a
    backfill, the config of its first date), checked without importing Beam; None when nothing
    is. A bad command line is argparse's to refuse (it exits 2)."""
    from pipelines.config.loader import load_config

    args, _ = build_parser().parse_known_args(argv)
    try:
        load_config(args.config, args.output, dates_of(args)[0])
    except ConfigError as e:
        return str(e)
    return None


def beam_flags(beam_args: list[str], ours: argparse.ArgumentParser) -> list[str]:
    """The Beam pipeline options of an `etl` command line, each one Beam knows: written
    `--like_this` (Beam's spelling) or `--like-this` (ours, translated). A flag that neither we
    nor Beam know is a ConfigError naming the nearest one (Beam would only warn and go on)."""
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    classes = {str(cls): cls for cls in PipelineOptions.__subclasses__()}
    for cls in classes.values():
        cls._add_argparse_args(parser)  # how Beam itself gathers its options
    known = {o for action in parser._actions for o in action.option_strings}
    out = []
    for arg in beam_args:
        name, eq, value = arg.partition("=")
        if not name.startswith("--") or name in known:
            out.append(arg)
            continue
        snake = "--" + name[2:].replace("-", "_")
        if snake in known:
            out.append(snake + eq + value)
            continue
        flags = {o for action in ours._actions for o in action.option_strings if o[:2] == "--"}
        hint = did_you_mean(name, sorted(flags | known))
        raise ConfigError(name, f"unknown flag: neither shardflow etl nor Beam knows it{hint}")
    return out
