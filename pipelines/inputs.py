"""The checks before a run reads anything: every source has files, OUTPUT is not inside a
source's input, and OUTPUT holds nothing the run may not replace."""

from __future__ import annotations

import os

from pipelines.config.loader import ConfigError
from transforms.contract.config import DatasetSpec
from transforms.contract.layout import (
    COMPRESSIONS,
    MANIFEST,
    REJECTED_FILE,
    REPORT,
    SCHEMA,
    STATISTICS,
    STATISTICS_PROTO,
    TRANSFORM_DIR,
    replaced_name,
    shard_name,
    shard_suffix,
    staged_name,
)
from transforms.files import (
    RECURSIVE_FORMATS,
    FileError,
    is_remote,
    match_files,
    pattern_root,
    source_reads,
)
from transforms.sink.output import Expected, OutputError, expect

# One file of each kind a dataset holds, at each depth (shards of every compression): a source
# whose pattern matches one of them would read the dataset back on the next run.
_DATASET_FILES = (
    MANIFEST,
    REPORT,
    STATISTICS,
    STATISTICS_PROTO,
    SCHEMA,
    *(shard_name("train", 0, 1, shard_suffix(c)) for c in COMPRESSIONS),
    REJECTED_FILE,
    f"{TRANSFORM_DIR}/transform_fn/saved_model.pb",
    f"{TRANSFORM_DIR}/transformed_metadata/schema.pbtxt",
)


def check_inputs(dataset: DatasetSpec, overwrite: bool = False) -> tuple[list[str], Expected]:
    """The input files of every source, and what the run may replace at OUTPUT when it publishes
    (what OUTPUT holds now, and only with `overwrite`). Raises ConfigError when a source has no
    files, when OUTPUT is inside a source's input, when it is not a dataset (a symbolic link, a
    file, a folder holding other things or someone else's manifest.json), or when it holds a
    complete dataset and `overwrite` is not given.
    """
    files = []
    for i, source in enumerate(dataset.sources):
        recursive = source.format in RECURSIVE_FORMATS
        try:
            matched = match_files(source.path, recursive) if source.path is not None else []
        except FileError as e:  # a pipe or a device among the files: refused before any work
            raise ConfigError(f"sources[{i}].path", str(e)) from None
        if source.path is not None and not matched:
            raise ConfigError(f"sources[{i}].path", f"no files match {source.path!r}")
        files += matched
    check_output_outside_inputs(dataset)
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


def check_output_outside_inputs(dataset: DatasetSpec) -> None:
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
    """Whether the files of a source `path` would include files of a dataset at `output`, or
    of its staging folders, matched as `transforms.files.match_files` matches them."""
    if is_remote(path) != is_remote(output):
        return False
    root = pattern_root(path)
    if not is_remote(path):  # compare real paths: either side may be reached through a link
        root, output = os.path.realpath(root), os.path.realpath(output)
    output = output.rstrip("/")
    if f"{root}/".startswith(f"{output}/"):  # the source is in OUTPUT (a file or folder of it)
        return True
    parent, base = output.rsplit("/", 1)
    folders = (output, f"{parent}/{staged_name(base, 0)}", f"{parent}/{replaced_name(base, 0)}")
    reads = source_reads(path, source_format in RECURSIVE_FORMATS)
    return any(reads(f"{folder}/{name}") for folder in folders for name in _DATASET_FILES)
