"""File locations of file-based sources, local or `gs://`, through Beam's FileSystems.

A source `path` is a file, a glob or a folder (all files directly inside it, dot files excepted).
Compressed inputs (`.gz`, `.bz2`, ...) are decompressed by extension.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

_GLOB_CHARS = set("*?[")


def file_pattern(path: str) -> str:
    """The glob that lists the files of `path` (a folder becomes `folder/*`)."""
    if any(c in path for c in _GLOB_CHARS):
        return path
    if "://" in path:
        return path + "*" if path.endswith("/") else path
    if os.path.isdir(path):
        return os.path.join(path, "*")
    return path


def is_remote(path: str) -> bool:
    """A URI of a remote filesystem (gs://...), as opposed to a local path."""
    return "://" in path


def is_hidden(path: str) -> bool:
    """Dot files (editor swap files, `.DS_Store`, our own staging folders) are never inputs."""
    return path.rstrip("/").rsplit("/", 1)[-1].startswith(".")


def match_files(path: str) -> list[str]:
    """The sorted files of `path`; empty when nothing matches."""
    results = FileSystems.match([file_pattern(path)])[0].metadata_list
    return sorted(m.path for m in results if not is_hidden(m.path))


def open_file(path: str) -> BinaryIO:
    return FileSystems.open(path, compression_type=CompressionTypes.AUTO)
