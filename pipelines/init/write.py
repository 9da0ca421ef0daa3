"""The work of `shardflow init`: sample the sources, infer the config, check it, write it.

The config is checked before it is written, with the ETL's own code: it must load
(`pipelines.config.loader.parse_config`), and the sampled records are read, validated and encoded
against it (`pipelines.examples.encode_files`); a record the config would reject is told, in
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
from pipelines.init.infer import guess_key, guess_label, infer_features
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
        f"wrote {where}: {len(samples)} source(s), {len(kept)} feature(s) from {records} sampled "
        f"record(s); check it, then run shardflow etl --config "
        f"{shlex.quote(config_name or 'CONFIG.yaml')} --validate-only"
    ]
    return lines + [f"warning: {w}" for w in warnings]


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
    """What the config `text` (at `folder`) would reject of the sampled records, a line per
    reason; also what the sources' parsers rejected. The ETL's own validation does the work."""
    from pipelines.examples import Examples, encode_files

    try:
        dataset = parse_config(yaml.safe_load(text), base_dir=folder)
    except ConfigError as e:  # a bug of inference: its config must load
        raise RuntimeError(f"the inferred config does not load: {e}\n{text}") from None
    lines = []
    for source, sample in zip(dataset.sources, samples):
        reasons: collections.Counter = collections.Counter()
        first: dict[str, str] = {}
        for path, count in sample.reads:
            for item in encode_files(dataset, source, [path], limit=count):
                if not isinstance(item, Examples):
                    reasons[item.reason] += 1
                    first.setdefault(item.reason, item.location)
        for reason, n in reasons.most_common(5):
            lines.append(
                f"{source.name}: {n} of {sample.records} sampled records would be rejected: "
                f"{reason} (first at {first[reason]})"
            )
    return lines
