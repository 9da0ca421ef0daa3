"""The dataset a run's statistics are compared with for drift: named (--baseline, the config's
`validation.baseline`), or, for a date-partitioned output, the latest complete dataset of the
dates before the run's."""

from __future__ import annotations

import argparse
import datetime

from pipelines.config.loader import ConfigError, load_config
from transforms.contract.config import DatasetSpec
from transforms.sink.output import holds_dataset
from transforms.sink.storage import read_if_exists
from transforms.validation.check import read_dataset
from transforms.validation.schema import read_schema

LOOK_BACK_DAYS = 31  # a date-partitioned run's default baseline: the latest complete date


def find_baseline(args: argparse.Namespace, dataset: DatasetSpec) -> str | None:
    """The dataset compared with for drift: --baseline, else the config's
    `validation.baseline`, else the latest complete dataset of the 31 dates before a
    date-partitioned output's; None without one. Checked here, before the job (the job reads
    it again where it validates): ConfigError when a named one cannot be read or its schema
    does not parse; a date's that cannot be is left out, with a note."""
    uri = args.baseline or dataset.validation.baseline
    where: str | None = "--baseline" if args.baseline else "validation.baseline"
    if uri is None and dataset.date is not None:
        uri = _previous_dataset(args, dataset)
        where = None
    if uri is None:
        return None
    try:
        _, _, schema = read_dataset(read_if_exists, uri)
        if schema is not None:
            read_schema(schema.encode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        if where is not None:
            raise ConfigError(where, str(e)) from None
        print(f"shardflow etl: {dataset.name}: no drift: the previous date's {e}", flush=True)
        return None
    print(f"shardflow etl: {dataset.name}: drift against {uri}", flush=True)
    return uri.rstrip("/")


def _previous_dataset(args: argparse.Namespace, dataset: DatasetSpec) -> str | None:
    assert dataset.date is not None  # asked for a date-partitioned output only
    today = datetime.date.fromisoformat(dataset.date)
    for back in range(1, LOOK_BACK_DAYS + 1):
        day = today - datetime.timedelta(days=back)
        path = load_config(args.config, args.output, day).output.path
        if path == dataset.output.path:
            return None  # no date in the output's path
        if holds_dataset(path):
            return path
    print(
        f"shardflow etl: {dataset.name}: no drift: no complete dataset in the "
        f"{LOOK_BACK_DAYS} dates before {dataset.date}",
        flush=True,
    )
    return None
