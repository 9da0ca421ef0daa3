"""`shardflow predict`: an exported model's answers for new raw records, or for a dataset split.

    shardflow predict --model-dir M --config CONFIG.yaml --input FILE [--source NAME]
                      [--output FILE] [--rejected FILE]
    shardflow predict --model-dir M --data DATASET [--split test] [--take 5]

With `--input`, FILE (a file, glob or folder, local or gs://) is read in the format and options
of the config's source and validated against its features as `shardflow etl` would
(`pipelines.examples`), except that the label is neither required nor checked: new records do
not have one. An image folder's records take no label from their paths. Every valid record is
encoded as a raw tf.train.Example and served by `MODEL_DIR/export`
(`trainer.predict.ServedModel`); each gives one JSON line, in input order:

    {"key": ..., "location": "FILE:LINE", "class": ..., "probabilities": {CLASS: p, ...}}

(`"prediction": value` instead of class and probabilities for a regression). `key` is the
record's key when the config has one, else its location. A rejected record is never dropped:
it goes to `--rejected FILE` (JSON lines, as in a dataset's rejected/ files) or, without it, to
stderr as one line naming its location and reason; a last stderr line counts both.
Exit status: 0 done (rejected records included, as long as one was served), 2 bad command line,
config, input or model, 1 an input that cannot be read, records the model cannot serve, or every
record rejected.

With `--data`, the first `--take` examples of a split are served (`trainer.predict`), each line
with the record's key, its label and the answer.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shutil
import sys
import tempfile
from typing import IO, TYPE_CHECKING

from transforms.ui.args import ArgumentParser

if TYPE_CHECKING:
    from transforms.records import Rejected

_PROG = "shardflow predict"


_NO_OUTPUT = "/nonexistent/predict-writes-no-dataset"  # stands for output.path


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=_PROG,
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""One of --input (new records, with --config) or --data (a dataset split).

examples:
  shardflow predict --model-dir model --config penguins.yaml --input new.csv
  shardflow predict --model-dir model --config penguins.yaml --input 'new/*.jsonl' \\
                    --output answers.jsonl --rejected rejected.jsonl
  shardflow predict --model-dir model --data out/penguins --split test --take 5""",
    )
    p.add_argument("--model-dir", required=True, help="MODEL_DIR of `shardflow train`")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--input", help="new records: a file, glob or folder, local or gs://")
    mode.add_argument("--data", help="a dataset folder or gs:// prefix: serve examples of a split")
    p.add_argument("--config", help="the dataset config whose source format reads --input")
    p.add_argument("--source", help="the config's source to read --input as (several sources)")
    p.add_argument("--output", help="write the answers to this file (default: stdout)")
    p.add_argument("--rejected", help="write rejected records to this file (JSON lines)")
    p.add_argument("--split", default="test", help="--data: the split (default: test)")
    p.add_argument("--take", type=int, default=5, help="--data: examples to serve (default: 5)")
    return p


class _Refused(Exception):
    """A bad command line, config, input or model: exit 2 with this one line."""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.data is not None:
        for flag in ("config", "source", "output", "rejected"):
            if getattr(args, flag) is not None:
                parser.error(f"--{flag} goes with --input, not --data")
        from trainer.predict import predict_split

        return predict_split(args.model_dir, args.data, args.split, args.take)
    if args.config is None:
        parser.error("--input needs --config (the config whose source format reads it)")
    try:
        return _predict_input(args)
    except _Refused as e:
        print(f"{_PROG}: {e}", file=sys.stderr)
        return 2


def _predict_input(args: argparse.Namespace) -> int:
    from pipelines.config.loader import ConfigError, load_config
    from pipelines.examples import Examples, encode_files
    from transforms.files import (
        RECURSIVE_FORMATS,
        CorruptFile,
        FileError,
        match_files,
    )

    try:
        # A date template in the config's paths is filled with today: --input replaces them.
        # Nothing is written to the dataset's OUTPUT: a config without output.path will do.
        dataset = load_config(args.config, _NO_OUTPUT, date=datetime.date.today())
    except ConfigError as e:
        raise _Refused(str(e)) from None
    dataset, source = _for_prediction(dataset, args.source, args.input)
    try:
        paths = match_files(args.input, recursive=source.format in RECURSIVE_FORMATS)
    except FileError as e:  # a pipe or a device
        raise _Refused(f"--input: {e}") from None
    if not paths:
        raise _Refused(f"--input: no files match {args.input!r}")
    import tensorflow as tf

    from trainer.predict import PredictError, ServedModel

    try:
        model = ServedModel(args.model_dir)
    except PredictError as e:
        raise _Refused(str(e)) from None
    mismatch = model.mismatch({f.name: (f.type, f.shape) for f in dataset.features})
    if mismatch:
        raise _Refused(
            f"--config {args.config} does not describe the records the model in "
            f"{args.model_dir} was trained on: {mismatch}"
        )
    counts = {"predicted": 0, "rejected": 0}
    try:
        with _output(args.output, sys.stdout) as out, _output(args.rejected, None) as rejects:
            assert out is not None  # sys.stdout without --output
            for item in encode_files(dataset, source, paths):
                if isinstance(item, Examples):
                    answers = model(item.serialized)
                    for key, where, answer in zip(item.keys, item.locations, answers):
                        row = {"key": key, "location": where, **answer}
                        out.write(json.dumps(row, ensure_ascii=False) + "\n")
                    counts["predicted"] += len(answers)
                else:
                    counts["rejected"] += 1
                    _reject(item, rejects)
    except (FileError, CorruptFile) as e:
        print(f"{_PROG}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{_PROG}: {e.filename or args.input}: {e.strerror or e}", file=sys.stderr)
        return 1
    except tf.errors.InvalidArgumentError as e:
        from trainer.errors import first_line

        print(f"{_PROG}: the model cannot serve these records: {first_line(e)}", file=sys.stderr)
        return 1
    where = f" (in {args.rejected})" if args.rejected and counts["rejected"] else ""
    print(
        f"{_PROG}: {counts['predicted']} predicted, {counts['rejected']} rejected{where}",
        file=sys.stderr,
    )
    if counts["rejected"] and not counts["predicted"]:
        print(
            f"{_PROG}: every record was rejected: none could be served (the reasons above; "
            "new records are read and checked as the config's source reads them)",
            file=sys.stderr,
        )
        return 1
    return 0


def _reject(record: Rejected, rejects: IO[str] | None) -> None:
    """A rejected record to the --rejected file, or one line on stderr."""
    if rejects is not None:
        rejects.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
    else:
        print(f"{_PROG}: rejected {record.location}: {record.reason}", file=sys.stderr)


def _for_prediction(dataset, source_name: str | None, path: str):
    """The dataset and source that read `path`: the label neither required nor checked, an
    image folder's label not taken from the path."""
    from transforms.sources.registry import QUERY_FORMATS

    files = [s for s in dataset.sources if s.format not in QUERY_FORMATS]
    names = [s.name for s in files]
    if source_name is not None and source_name not in names:
        every = [s.name for s in dataset.sources]
        why = "it reads a database, not files" if source_name in every else f"it has {every}"
        raise _Refused(f"--source: the config's source {source_name!r} cannot read --input ({why})")
    if not files:
        raise _Refused("--config: every source reads a database; predict reads files")
    if source_name is None:
        source = _source_of(path, files)
    else:
        source = files[names.index(source_name)]
    options = source.options
    if source.format == "images":
        from transforms.sources.images import ImagesOptions

        options = dataclasses.replace(source.options_as(ImagesOptions), label_from="none")
    source = dataclasses.replace(source, path=path, options=options)
    features = tuple(f for f in dataset.features if f.name != dataset.label)
    sources = tuple(source if s.name == source.name else s for s in dataset.sources)
    return dataclasses.replace(dataset, sources=sources, features=features), source


def _source_of(path: str, sources: list):
    """The source whose format fits `path`'s extension (the first such), else the first."""
    from transforms.sources.registry import formats_of_name

    wanted = formats_of_name(path)
    if not wanted and os.path.isdir(path):
        wanted = ("images",)
    found = next((s for fmt in wanted for s in sources if s.format == fmt), None)
    if found is not None or not wanted:
        return found or sources[0]
    first = wanted[0]
    formats = ", ".join(f"{s.name!r} ({s.format})" for s in sources)
    raise _Refused(
        f"--input: {path} is {first} by its name, and no source of the config reads {first} "
        f"(its sources: {formats}): new records come in the format of the source they stand "
        "for; convert them, or give --source NAME to read them as that source does"
    )


class _output:
    """A text stream for JSON lines: `default` without a path; with one, a file written whole or
    not at all. It is written to a temporary file, then renamed to a local path or copied to a
    gs:// object (which appears only once complete)."""

    def __init__(self, path: str | None, default: IO[str] | None):
        self._path = path
        self._default = default
        self._file: IO[str] | None = None
        self._temp = ""

    def __enter__(self) -> IO[str] | None:
        if self._path is None:
            return self._default
        remote = "://" in self._path
        folder = None if remote else os.path.dirname(os.path.abspath(self._path))
        try:
            fd, self._temp = tempfile.mkstemp(prefix=".predict-", suffix=".part", dir=folder)
        except OSError as e:
            raise _Refused(f"cannot write {self._path!r}: {e.strerror or e}") from None
        self._file = os.fdopen(fd, "w", encoding="utf-8")
        return self._file

    def __exit__(self, kind, value, traceback) -> None:
        if self._file is None:
            return
        assert self._path is not None  # a file is opened for a path only
        self._file.close()
        try:
            if kind is None and "://" in self._path:
                from apache_beam.io.filesystems import FileSystems

                with open(self._temp, "rb") as f, FileSystems.create(self._path) as out:
                    shutil.copyfileobj(f, out, 1 << 20)
            elif kind is None:
                os.replace(self._temp, self._path)
        finally:
            if os.path.exists(self._temp):
                os.unlink(self._temp)
