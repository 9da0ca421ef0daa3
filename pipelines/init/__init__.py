"""`shardflow init`: writes a commented dataset config inferred from the records of a user's files.

This module holds the command line only, and imports nothing heavy, so that `shardflow init
--help` answers at once; the work is `pipelines.init.write`, imported when the command runs.
Exit status: 0 written, 2 a bad command line or input (no files match, an unknown file type,
an unreadable or empty file, an existing --output without --force). `shardflow init` ends its
process with `exit_process`.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys

from transforms.ui.args import ArgumentParser, positive_int

DEFAULT_SAMPLE = 1_000_000  # records read of a source at most (`--sample`)
WHOLE_BYTES = 64 << 20  # bytes of a source's files (as stored) read at most: more are sampled


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="shardflow init",
        description="Writes a dataset config inferred from the records of your files: the format\n"
        "and its options, each feature's type, shape, whether it may be missing, the values of\n"
        "categories, and a likely key and label, each with a comment saying why. Check it, then\n"
        "run `shardflow etl --config CONFIG.yaml --validate-only`.\n"
        "Formats by file name: .csv .tsv .txt (delimiter sniffed), .jsonl .ndjson .json,\n"
        ".parquet, .avro, .tfrecord .tfrecords (tf.train.Example); .gz and friends are read.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  shardflow init --source 'data/penguins*.csv' --output penguins.yaml
  shardflow init --source data/measurements.csv --source data/islands.jsonl > penguins.yaml
  shardflow init --source data/events/ --sample 100000 --output events.yaml --force
  shardflow init --source 'gs://bucket/trips/*.parquet' --name trips --output trips.yaml""",
    )
    parser.add_argument(
        "--source", action="append", nargs="+", required=True, metavar="FILE_OR_GLOB",
        help="a file, glob or folder of one format (local or gs://); repeat for more sources. "
        "Files that one --source names one by one (a glob the shell expanded) are one source",
    )  # fmt: skip
    parser.add_argument(
        "--output", default="-", metavar="CONFIG.yaml",
        help="the config file to write; '-' (the default) writes it to stdout. Source paths in "
        "it are relative to its folder (to the current folder for stdout)",
    )  # fmt: skip
    parser.add_argument(
        "--sample", type=positive_int, default=DEFAULT_SAMPLE, metavar="N",
        help=f"the most records to read of each source (default {DEFAULT_SAMPLE:,}): a source "
        f"of at most N records and {WHOLE_BYTES >> 20} MB is read whole, a larger one in pieces "
        "spread over all of its files. A `values:` list is closed only where all was read",
    )  # fmt: skip
    parser.add_argument(
        "--name", help="the dataset's name, [a-z0-9_-]+ (default: from the --output file name, "
        "else from the first source)",
    )  # fmt: skip
    parser.add_argument("--force", action="store_true", help="replace an existing --output file")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    from pipelines.config.fields import ConfigError
    from pipelines.init.write import write_config

    try:
        report = write_config(args, argv)
    except ConfigError as e:
        print(f"shardflow init: error: {e}", file=sys.stderr)
        return 2
    for line in report:
        print(f"shardflow init: {line}", file=sys.stderr)
    return 0


def exit_process(code: int) -> None:
    """Ends the process of `shardflow init` (pipelines.cli calls it once `main` has returned and
    stdout is flushed): the exit handlers run (logging, temporary files), then the process ends
    without the interpreter's teardown. The samples were read with pyarrow (the CSV reader and
    Parquet files run on Arrow's C++ thread pools), whose threads, torn down with the
    interpreter, can abort a process whose work is done ("terminate called without an active
    exception" after the config was written; apache/arrow#34314, #39862).
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(code)
