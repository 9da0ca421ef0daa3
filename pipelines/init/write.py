"""The work of `shardflow init`: read the sources, infer the config, check it, write it.

The config is checked before it is written, with the ETL's own code: it must load
(`pipelines.config.loader.parse_config`), and every record read is validated against it as the
ETL's prepare step does (`transforms.prepare`); a record the config would reject is told, in
the config's header and on stderr, instead of being found by the first run.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shlex
import sys
import tempfile

import yaml

from pipelines.config.fields import ConfigError
from pipelines.config.loader import NAME_RE, parse_config
from pipelines.init.guess import guess_key, guess_label, suggest_classes
from pipelines.init.infer import infer_features
from pipelines.init.render import render
from pipelines.init.sample import Sample, find_sources, read_sample
from transforms.files import is_remote


def write_config(args: argparse.Namespace, argv: list[str]) -> list[str]:
    """Writes the config the command line asks for; returns the lines to tell the user.
    Raises ConfigError for a bad command line or input."""
    to_stdout = args.output in ("-", None)
    if not to_stdout:
        _check_output(args.output, args.force)
    if args.name is not None and not NAME_RE.fullmatch(args.name):
        raise ConfigError("--name", f"{args.name!r} must match [a-z0-9_-]+")
    samples = find_sources(args.source)
    for sample in samples:
        read_sample(sample, args.sample)
    features = infer_features(samples)
    key = guess_key(features, samples)
    label = guess_label(features, key)
    suggest_classes(features, label)
    if to_stdout:
        folder, config_name = os.getcwd(), None
        name = args.name or dataset_name(samples[0].name)
    else:
        folder = os.path.dirname(os.path.abspath(args.output))
        config_name = args.output
        name = args.name or dataset_name(os.path.basename(args.output).split(".")[0])

    def text(warnings: list[str]) -> str:
        return render(
            samples,
            features,
            key,
            label,
            name=name,
            folder=folder,
            command=shlex.join(["shardflow", "init", *argv]),
            config_name=config_name,
            warnings=warnings,
        )

    warnings = rejections(text([]), folder, samples)
    config = text(warnings)
    if to_stdout:
        sys.stdout.write(config)
        sys.stdout.flush()
    else:
        _write(args.output, config)
    kept = [f for f in features if f.type is not None]
    records = sum(s.records for s in samples)
    where = "stdout" if to_stdout else args.output
    lines = [
        f"wrote {where}: {len(samples)} source(s), {len(kept)} feature(s) from {records:,} "
        f"record(s) read; check it, then run shardflow etl --config "
        f"{shlex.quote(config_name or 'CONFIG.yaml')} --validate-only"
    ]
    lines += [read_line(s) for s in samples]
    return lines + [f"warning: {w}" for w in warnings]


def read_line(sample: Sample) -> str:
    """What init read of a source: `survey: read all 2,700 records of survey.csv`."""
    count = len(sample.files)
    if count == 1:
        where = os.path.basename(sample.files[0])
    else:
        where = f"the {count:,} files of {sample.path}"
    if sample.whole:
        return f"{sample.name}: read {sample.describe(where)}"
    return (
        f"{sample.name}: sampled {sample.describe(where)}; not every record read, so no "
        "`values:` list is closed"
    )


def dataset_name(text: str) -> str:
    """A dataset name ([a-z0-9_-]+) from a file or source name."""
    return re.sub(r"[^a-z0-9_-]+", "_", text.lower()).strip("_-") or "dataset"


def _check_output(path: str, force: bool) -> None:
    if is_remote(path):
        raise ConfigError("--output", f"{path!r}: the config is written to a local file")
    if os.path.isdir(path):
        raise ConfigError("--output", f"{path!r} is a folder; name the config file to write")
    if os.path.lexists(path) and not force:
        raise ConfigError("--output", f"{path!r} exists; give --force to replace it")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigError("--output", f"{path!r}: the folder {folder!r} does not exist")


def _write(path: str, text: str) -> None:
    """Writes the config whole or not at all (a temporary file renamed over `path`)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".init-", suffix=".yaml", dir=folder)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as `open` would make it, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def rejections(text: str, folder: str, samples: list[Sample]) -> list[str]:
    """What the config `text` (at `folder`) would reject of the records read, a line per
    reason; also what the sources' parsers rejected. The ETL's own validation does the work."""
    from transforms.keys import KeyMaker
    from transforms.prepare import Preparer, batch_of_chunk

    try:
        dataset = parse_config(yaml.safe_load(text), base_dir=folder)
    except ConfigError as e:  # a bug of inference: its config must load
        raise RuntimeError(f"the inferred config does not load: {e}\n{text}") from None
    preparer = Preparer(dataset)
    key_maker = KeyMaker(dataset) if dataset.key is not None else None
    lines = []
    for index, (source, sample) in enumerate(zip(dataset.sources, samples)):
        reasons: collections.Counter = collections.Counter()
        first: dict[str, str] = {}
        found = list(sample.rejected)
        for piece, chunk in sample.chunks:
            batch, rejected = batch_of_chunk(chunk, index, key_maker)
            rejected += preparer.validate(batch)[1]
            found += [(piece, r) for r in rejected]
        for piece, r in found:
            reasons[r.reason] += 1
            first.setdefault(r.reason, piece.where(r.location))
        total = sample.records + len(sample.rejected)
        for reason, n in reasons.most_common(5):
            lines.append(
                f"{source.name}: {n:,} of {total:,} records read would be rejected: "
                f"{reason} (first at {first[reason]})"
            )
    return lines
