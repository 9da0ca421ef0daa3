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

No run writes over or into what it reads: before any work, `--output` and `--rejected` are
checked against each other, the files --input matches (and the files its folder or glob would
match on a later run), --config and --model-dir (`transforms.ui.locations.clash`: real paths,
so a link to an input is caught). Both files are written whole or not at all: to hidden
temporary files beside them (`.predict-*.part`), renamed over --output and then --rejected only
when the run succeeds (exit 0); a failed or interrupted run leaves the old files as they were.
A temporary file that a killed run left (no process holds its lock) is removed by the next run
that writes into the same folder.

With `--data`, the first `--take` examples of a split are served (`trainer.predict`), each line
with the record's key, its label and the answer.

Longer than most modules because it is one command and its promise about files: the checks that
keep --output and --rejected apart from what the run reads, and their locked temporary files
published only on success, belong with the run they guard.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import datetime
import fcntl
import glob
import json
import os
import shutil
import stat
import sys
import tempfile
from typing import IO, TYPE_CHECKING, Callable, Iterable

from transforms.ui.args import ArgumentParser
from transforms.ui.locations import clash
from transforms.ui.safe import mask_logs, shown

if TYPE_CHECKING:
    from transforms.records import Rejected

_PROG = "shardflow predict"


_NO_OUTPUT = "/nonexistent/predict-writes-no-dataset"  # stands for output.path
_TEMP_PREFIX, _TEMP_SUFFIX = ".predict-", ".part"  # the hidden files written before publication

# The moments of a run with --input where a test may stop it (`main(pause_at=...)`): the model
# loaded; the first answers in the temporary files; every answer written, nothing published;
# --output published, --rejected not yet; both published.
PAUSE_POINTS = ("loaded", "writing", "written", "output-published", "published")


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
    p.add_argument("--split", help="--data: the split (default: test)")
    p.add_argument("--take", type=int, help="--data: examples to serve (default: 5)")
    return p


class _Refused(Exception):
    """A bad command line, config, input or model: exit 2 with this one line."""


class _Failed(Exception):
    """A run that cannot finish (an input that cannot be read, records the model cannot
    serve): exit 1 with this one line; nothing is published."""


def main(argv: list[str] | None = None, pause_at: Callable[[str], None] | None = None) -> int:
    """`shardflow predict ARGV`; its exit status. `pause_at`, for tests, is called with each of
    `PAUSE_POINTS` as a run with --input reaches it."""
    parser = build_parser()
    args = parser.parse_args(argv)
    mask_logs()
    if args.data is not None:
        for flag in ("config", "source", "output", "rejected"):
            if getattr(args, flag) is not None:
                parser.error(f"--{flag} goes with --input, not --data")
        from trainer.predict import predict_split

        take = 5 if args.take is None else args.take
        return predict_split(args.model_dir, args.data, args.split or "test", take)
    if args.config is None:
        parser.error("--input needs --config (the config whose source format reads it)")
    for flag in ("split", "take"):
        if getattr(args, flag) is not None:
            parser.error(f"--{flag} goes with --data, not --input")
    try:
        return _predict_input(args, pause_at or (lambda point: None))
    except _Refused as e:
        print(shown(f"{_PROG}: {e}"), file=sys.stderr)
        return 2


def exit_process(code: int) -> None:
    """Ends the process once `main` has returned (`pipelines.cli` calls it): the exit handlers
    run, then the process ends without the interpreter's teardown of TensorFlow and Beam, which
    costs seconds and does nothing a finished run needs (its files are closed)."""
    from pipelines.runner.process import exit_process as end

    end(code)


def _predict_input(args: argparse.Namespace, pause: Callable[[str], None]) -> int:
    dataset, source, paths = _inputs(args)
    with _Outputs(args.output, args.rejected) as files:
        model = _model(args, dataset)
        pause("loaded")
        try:
            counts, reasons = _serve(model, dataset, source, paths, files, pause)
            failed = bool(counts["rejected"] and not counts["predicted"])
            if not failed:
                files.flush()
                pause("written")
                files.publish(pause)
        except _Failed as e:
            print(shown(f"{_PROG}: {e}"), file=sys.stderr)
            return 1
    if not failed:
        pause("published")
    where = f" (in {args.rejected})" if args.rejected and counts["rejected"] and not failed else ""
    print(
        f"{_PROG}: {counts['predicted']} predicted, {counts['rejected']} rejected{where}",
        file=sys.stderr,
    )
    if failed:
        print(shown(f"{_PROG}: {_all_rejected(args, reasons)}"), file=sys.stderr)
        return 1
    return 0


def _inputs(args: argparse.Namespace):
    """The dataset and source that read --input, and its files; refuses (_Refused) a bad config,
    an --input that matches nothing, and outputs that clash with what the run reads."""
    from pipelines.config.loader import ConfigError, load_config
    from transforms.files import RECURSIVE_FORMATS, FileError, match_files

    try:
        # A date template in the config's paths is filled with today: --input replaces them.
        # Nothing is written to the dataset's OUTPUT: a config without output.path will do.
        dataset = load_config(args.config, _NO_OUTPUT, date=datetime.date.today())
    except ConfigError as e:
        raise _Refused(str(e)) from None
    dataset, source = _for_prediction(dataset, args.source, args.input)
    recursive = source.format in RECURSIVE_FORMATS
    try:
        paths = match_files(args.input, recursive=recursive)
    except FileError as e:  # a pipe or a device
        raise _Refused(f"--input: {e}") from None
    if not paths:
        raise _Refused(f"--input: no files match {args.input!r}")
    _check_outputs(args, paths, recursive)
    return dataset, source, paths


def _model(args: argparse.Namespace, dataset):
    """The served model of --model-dir, once it is known to read the config's records."""
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
    return model


def _serve(model, dataset, source, paths: list[str], files: _Outputs, pause):
    """Writes the answers for the records of `paths` (stdout without --output) and the rejected
    records; their counts and the reasons of the rejections. Raises _Failed for an input that
    cannot be read or records the model cannot serve."""
    import tensorflow as tf

    from pipelines.examples import Examples, encode_files
    from transforms.files import CorruptFile, FileError

    counts = {"predicted": 0, "rejected": 0}
    reasons: collections.Counter[str] = collections.Counter()
    try:
        for item in encode_files(dataset, source, paths):
            if isinstance(item, Examples):
                answers = model(item.serialized)
                files.answer(
                    {"key": key, "location": where, **answer}
                    for key, where, answer in zip(item.keys, item.locations, answers)
                )
                if not counts["predicted"]:
                    files.flush()
                    pause("writing")
                counts["predicted"] += len(answers)
            else:
                counts["rejected"] += 1
                reasons[item.reason] += 1
                files.reject(item)
    except (FileError, CorruptFile) as e:
        raise _Failed(str(e)) from None
    except BrokenPipeError:
        raise  # stdout's reader has gone: the command line says so (pipelines.cli)
    except OSError as e:  # an input that cannot be read (writing raises _Failed)
        raise _Failed(f"{e.filename or source.path}: {e.strerror or e}") from None
    except tf.errors.InvalidArgumentError as e:
        from trainer.errors import first_line

        raise _Failed(f"the model cannot serve these records: {first_line(e)}") from None
    return counts, reasons


def _all_rejected(args: argparse.Namespace, reasons: collections.Counter[str]) -> str:
    """The last line of a run whose every record was rejected (nothing is published)."""
    if args.rejected is None:
        why = "the reasons above"
    else:
        common = ", ".join(f"{reason!r} ({n})" for reason, n in reasons.most_common(3))
        why = f"most often: {common}"
    unwritten = [flag for flag in ("--output", "--rejected") if getattr(args, flag[2:])]
    written = f"; nothing written to {' or '.join(unwritten)}" if unwritten else ""
    return (
        f"every record was rejected: none could be served ({why}; new records are read and "
        f"checked as the config's source reads them){written}"
    )


def _check_outputs(args: argparse.Namespace, paths: list[str], recursive: bool) -> None:
    """Refuses (_Refused) an --output or --rejected that is, holds or is inside what the run
    reads (an input file, --config, --model-dir), that --input would read on a later run (a
    file of its folder or glob), that is the other output, that is a folder, or whose folder
    is missing: before any work, so nothing is touched."""
    from transforms.files import source_reads

    reads = source_reads(args.input, recursive)
    outputs = [("--output", args.output), ("--rejected", args.rejected)]
    inputs = [("--input", path) for path in paths]
    inputs += [("--config", args.config), ("--model-dir", args.model_dir)]
    found = clash(outputs, [])
    if found:
        raise _Refused(f"{found}: the answers and the rejected records need two files apart")
    found = clash(outputs, inputs)
    if found:
        raise _Refused(
            f"{found}: predict never writes over or into what it reads; choose another "
            f"{found.split()[0]}"
        )
    for flag, path in outputs:
        if path is None:
            continue
        if not path:
            raise _Refused(f"{flag}: an empty path; name the file to write")
        if reads(path):
            raise _Refused(
                f"{flag} {path!r} is among the files --input {args.input!r} reads: the next "
                f"run would read it as new records; choose another {flag}"
            )
        if "://" in path:
            continue
        if os.path.isdir(path) or path.endswith("/"):
            raise _Refused(f"{flag} {path!r}: is a folder; name the file to write")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            missing = "does not exist" if not os.path.lexists(folder) else "is not a folder"
            raise _Refused(
                f"{flag} {path!r}: its folder {folder!r} {missing}; create it or choose "
                f"another {flag}"
            )


class _Outputs:
    """The --output and --rejected files (None where not asked for), written to hidden
    temporary files beside them and published by `publish` alone: renamed over a local path,
    copied to a gs:// object (which appears only once complete). On leaving the block, what was
    not published is removed. Each temporary file is locked while its run lives: one that no
    process holds is a killed run's, and is removed first."""

    def __init__(self, output: str | None, rejected: str | None):
        self._paths = [output, rejected]
        self._temps: list[str | None] = [None, None]
        self._files: list[IO[str] | None] = [None, None]

    def answer(self, rows: Iterable[dict]) -> None:
        """Answers to --output, or stdout without it."""
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        if self._files[0] is None:
            sys.stdout.write(text)
        else:
            self._write(0, text)

    def reject(self, record: Rejected) -> None:
        """A rejected record to --rejected, or one line on stderr."""
        if self._files[1] is None:
            print(shown(f"{_PROG}: rejected {record.location}: {record.reason}"), file=sys.stderr)
        else:
            self._write(1, json.dumps(record.to_json(), ensure_ascii=False) + "\n")

    def _write(self, i: int, text: str) -> None:
        f = self._files[i]
        assert f is not None
        try:
            f.write(text)
        except OSError as e:  # a full disk, a quota
            raise _Failed(f"cannot write {self._paths[i]!r}: {e.strerror or e}") from None

    def __enter__(self) -> _Outputs:
        try:
            for i, path in enumerate(self._paths):
                if path is not None:
                    self._open(i, path)
        except BaseException:
            self._discard()
            raise
        return self

    def _open(self, i: int, path: str) -> None:
        folder = None if "://" in path else os.path.dirname(os.path.abspath(path))
        if folder is not None:
            _remove_abandoned(folder)
        try:
            fd, self._temps[i] = tempfile.mkstemp(
                prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX, dir=folder
            )
        except OSError as e:
            raise _Refused(f"cannot write {path!r}: {e.strerror or e}") from None
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._files[i] = os.fdopen(fd, "w", encoding="utf-8")

    def flush(self) -> None:
        """What was written so far, on disk (before a publication or a pause)."""
        for f, path in zip(self._files, self._paths):
            if f is None:
                continue
            try:
                f.flush()
                os.fsync(f.fileno())
            except OSError as e:
                raise _Failed(f"cannot write {path!r}: {e.strerror or e}") from None

    def publish(self, pause: Callable[[str], None]) -> None:
        """Puts each file in place, --output first (still locked while it is renamed)."""
        for i, path in enumerate(self._paths):
            temp, f = self._temps[i], self._files[i]
            if path is None or temp is None or f is None:
                continue
            try:
                if "://" in path:  # the local copy is removed on leaving the block
                    from apache_beam.io.filesystems import FileSystems

                    f.close()
                    with open(temp, "rb") as data, FileSystems.create(path) as out:
                        shutil.copyfileobj(data, out, 1 << 20)
                else:
                    os.replace(temp, path)
                    self._temps[i] = None
            except OSError as e:
                raise _Failed(f"cannot write {path!r}: {e.strerror or e}") from None
            f.close()
            if i == 0:
                pause("output-published")

    def __exit__(self, *exc) -> None:
        self._discard()

    def _discard(self) -> None:
        for i, temp in enumerate(self._temps):
            f = self._files[i]
            if f is not None:
                f.close()
            if temp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
            self._temps[i] = None


def _remove_abandoned(folder: str) -> None:
    """Removes the temporary files of runs that were killed before they could (no process
    holds their lock) from `folder`."""
    for temp in glob.glob(os.path.join(glob.escape(folder), f"{_TEMP_PREFIX}*{_TEMP_SUFFIX}")):
        try:  # ours are regular files: a link, a folder or a pipe of that name is left alone
            fd = os.open(temp, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue  # gone meanwhile, a link, or not ours to read
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        except BlockingIOError:
            pass  # a live run writes it
        finally:
            os.close(fd)


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


if __name__ == "__main__":
    exit_process(main(sys.argv[1:]))
