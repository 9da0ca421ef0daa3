"""`shardflow validate DATASET`: the anomalies of an existing dataset, recomputed from its
statistics against a schema and a baseline dataset, without running the ETL again.

The schema is `--schema`, else the config's `validation.schema` (`--config`), else the
dataset's config with what the baseline's schema learned from data, else the dataset's own
schema.pbtxt; the baseline is `--baseline`, else the config's, else the one the run compared
with; the limits and the anomaly kinds that block are the config's `validation:` section
(defaults without `--config`). The dataset's share of rejected records (its manifest's) is
checked too (`rejected_rate`). Prints one line per anomaly; exit 1 when one of them blocks, 0
otherwise, 2 for a bad command line or dataset. Every printed line goes out through
`transforms.ui.safe.shown` (feature names and values come from data; a URI may hold a password).
This module holds the command line only: `--help` imports neither Beam nor TensorFlow.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys

from transforms.ui.args import ArgumentParser
from transforms.ui.safe import mask_logs, shown

_PROG = "shardflow validate"


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=_PROG,
        description="Recompute the anomalies of a dataset (schema, drift, skew) from its "
        "statistics,\nwithout running the ETL again. Exit 1 when an anomaly blocks.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  shardflow validate out/penguins
  shardflow validate gs://b/events/2026-11-26 --baseline gs://b/events/2026-11-25
  shardflow validate out/penguins --config penguins.yaml --schema curated/schema.pbtxt --json""",
    )
    p.add_argument("dataset", metavar="DATASET_URI", help="the dataset folder, local or gs://")
    p.add_argument(
        "--baseline", metavar="DATASET_URI",
        help="the dataset to compare with for drift (default: the config's validation.baseline, "
        "else the one the run compared with)",
    )  # fmt: skip
    p.add_argument(
        "--config", metavar="CONFIG.yaml",
        help="the dataset config whose `validation:` section gives the limits and what blocks",
    )  # fmt: skip
    p.add_argument(
        "--schema", metavar="SCHEMA.pbtxt",
        help="a curated schema (TFDV text format) to check against",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the anomalies as a JSON list")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    mask_logs()
    from pipelines.config.fields import ConfigError

    try:
        return _validate(args)
    except (ConfigError, ValueError, OSError) as e:
        print(shown(f"{_PROG}: error: {e}"), file=sys.stderr)
        return 2


def _difference(config, manifest) -> str | None:
    """The first way a config's dataset differs from a manifest's: its name, a feature one of
    them lacks, a feature's type; None when they describe the same dataset."""
    if config.name != manifest.name:
        return f"name {config.name!r}, not {manifest.name!r}"
    theirs = {name: f.type for name, f in manifest.features.items()}
    ours = {f.name: f.type for f in config.features}
    for name in sorted(theirs.keys() | ours.keys()):
        if name not in ours:
            return f"no feature {name!r}"
        if name not in theirs:
            return f"a feature {name!r} the dataset does not have"
        if ours[name] != theirs[name]:
            return f"feature {name!r} is {ours[name]}, {theirs[name]} in the dataset"
    return None


def _validate(args: argparse.Namespace) -> int:
    from pipelines.config.fields import ConfigError
    from pipelines.config.loader import load_config
    from pipelines.config.validation import schema_text_of
    from transforms.contract.config import ValidationSpec
    from transforms.sink.storage import read_if_exists as read
    from transforms.validation.check import Baseline, describe, read_dataset, validate

    dataset = args.dataset.rstrip("/")
    manifest, statistics, own_schema = read_dataset(read, dataset)
    spec = ValidationSpec()
    if args.config is not None:  # a date-partitioned config: the dataset's date
        day = None if manifest.date is None else datetime.date.fromisoformat(manifest.date)
        config = load_config(args.config, output=dataset, date=day)
        other = _difference(config, manifest)
        if other is not None:
            raise ConfigError(
                "--config",
                f"{args.config} describes another dataset than {dataset} ({other}): give the "
                "config the dataset was made with",
            )
        spec = config.validation
    if args.schema is not None:
        text = schema_text_of(args.schema, read, "--schema")
        spec = dataclasses.replace(spec, schema=args.schema, schema_text=text)
    baseline = None
    recorded = manifest.validation.baseline if manifest.validation is not None else None
    uri = args.baseline or spec.baseline or recorded
    if uri is not None:
        _, base_statistics, base_schema = read_dataset(read, uri)
        baseline = Baseline(uri.rstrip("/"), base_statistics, base_schema)
    result = validate(spec, manifest, statistics, baseline, own_schema)
    blocking = result.blocking
    if args.json:
        anomalies = json.dumps([a.to_dict() for a in result.anomalies], indent=1, sort_keys=True)
        print(shown(anomalies, json=True))
    else:
        against = f", drift against {baseline.uri}" if baseline is not None else ""
        found = len(result.anomalies)
        print(
            shown(
                f"{dataset}: {found} anomal{'y' if found == 1 else 'ies'} ({len(blocking)} "
                f"blocking; schema: {result.schema_from}{against})"
            )
        )
        for anomaly in result.anomalies:
            mark = "BLOCKING " if anomaly.blocking else ""
            print(shown(f"  {mark}{describe(anomaly)}"))
    return 1 if blocking else 0
