"""File locations of file-based sources, local or `gs://`, through Beam's FileSystems.

A source `path` is a file, a glob or a folder. A folder means the files directly inside it, or,
for the formats in `RECURSIVE_FORMATS` (folder trees such as class subfolders of images), every
file under it at any depth (Beam's `folder/**`, which works alike on local disks and `gs://`).
Dot files, files inside dot folders below the source's root (editor and notebook leftovers, our
own staging folders) and `gs://` folder-marker objects (names ending in `/`) are never inputs.
Compressed inputs (`.gz`, `.bz2`, ...) are decompressed by extension.

Beam's glob syntax: `*` and `?` stay within one folder level, `**` spans any number of levels,
and `**/` needs at least one folder (`photos/**/*.png` skips `photos/a.png`; `photos/**` does not).

The errors every file format raises live here too: `FileError` (a file that cannot be read as
configured) and `CorruptFile` (a compressed input that does not decompress); and the one way a
step writes a file, whole or not at all (`create_file`), which the sink and the analyze step's
spill files share.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import io
import logging
import os
import stat
import zlib
from typing import BinaryIO, Iterator

from transforms.ui.safe import masked

logger = logging.getLogger(__name__)

_GLOB_CHARS = set("*?[")
# Formats whose folder paths are trees: every file under the folder is an input.
RECURSIVE_FORMATS = ("images",)


def file_pattern(path: str, recursive: bool = False) -> str:
    """The glob that lists the files of `path` (a folder becomes `folder/*`, or `folder/**`)."""
    if any(c in path for c in _GLOB_CHARS):
        return path
    wildcard = "**" if recursive else "*"
    if "://" in path:
        return path + wildcard if path.endswith("/") else path
    if os.path.isdir(path):
        return os.path.join(path, wildcard)
    return path


def pattern_root(path: str) -> str:
    """The folder that the files of `path` are named relative to, without a trailing `/`.

    A folder is its own root; a file's root is its folder; a glob's root is the folder part
    before its first wildcard (`photos/*/*.jpg` and `photos/**` → `photos`).
    """
    glob_at = min((path.index(c) for c in _GLOB_CHARS if c in path), default=None)
    if glob_at is not None:
        return path[:glob_at].rsplit("/", 1)[0]
    if path.endswith("/"):
        return path.rstrip("/")
    if not is_remote(path) and os.path.isdir(path):
        return path
    return path.rsplit("/", 1)[0]


def relative_path(path: str, root: str) -> str:
    """`path` relative to `root` (its file name when it is not under `root`)."""
    prefix = root.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else path.rsplit("/", 1)[-1]


FILE_SCHEMES = ("gs", "file")  # the URI schemes of file locations, besides local paths


def redacted(location: str) -> str:
    """`location` with the password of a URI's user info hidden (`user:***@host`), and the
    value of a secret query parameter (`?token=***`): what a message may repeat of it
    (`transforms.ui.safe.masked`, the one rule of every command)."""
    return masked(location)


def location_problem(path: str) -> str | None:
    """Why `path` is not a file location shardflow reads (a URI of another scheme: a database,
    a web address), its password never repeated; None for a local path or gs://."""
    scheme, sep, _ = path.partition("://")
    if not sep or scheme.lower() in FILE_SCHEMES:
        return None
    return (
        f"{redacted(path)!r} is not a file location (a local path or gs://...); a database is "
        "read with format: sql"
    )


def is_remote(path: str) -> bool:
    """A URI of a remote filesystem (gs://...), as opposed to a local path."""
    return "://" in path


def is_hidden(path: str) -> bool:
    """Dot files (editor swap files, `.DS_Store`, our own staging folders) are never inputs."""
    return path.rstrip("/").rsplit("/", 1)[-1].startswith(".")


def is_input(path: str, root: str | None = None) -> bool:
    """Whether a matched path is an input: not a folder marker, no dot name below `root`."""
    if path.endswith("/"):
        return False
    if root is None:
        return not is_hidden(path)
    return not any(part.startswith(".") for part in relative_path(path, root).split("/"))


def match_files(path: str, recursive: bool = False) -> list[str]:
    """The sorted input files of `path`; empty when nothing matches."""
    from apache_beam.io.filesystems import FileSystems  # Beam: only once files are touched

    problem = location_problem(path)
    if problem is not None:
        raise FileError(problem)
    if not is_remote(path) and "/" not in path and any(c in path for c in _GLOB_CHARS):
        path = f"./{path}"  # Beam's local glob of a bare `*.csv` matches nothing; `./*.csv` does
    results = FileSystems.match([file_pattern(path, recursive)])[0].metadata_list
    root = pattern_root(path)
    files = sorted(m.path for m in results if is_input(m.path, root))
    for file in files if not is_remote(path) else []:
        kind = special_kind(file)
        if kind is not None:
            raise FileError(
                f"{file}: is {kind}, not a regular file: only regular files are read "
                "(a pipe or a device has no end); move it out of the source's path"
            )
    return files


_SPECIAL = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_kind(path: str) -> str | None:
    """What a local path is when it is not a regular file (it or the file a link points to): a
    pipe, a device or a socket, which a reader would wait on or read without end; else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # gone or unreadable: the reader says so
    for test, kind in _SPECIAL:
        if test(mode):
            return kind
    return None


def open_file(path: str) -> BinaryIO:
    """A file as a standard binary stream, decompressed by extension (`.gz`, `.bz2`, ...).

    gzip and bzip2 are decompressed with Python's own modules, which notice a stream that ends
    early (Beam's reader does not): reading a truncated or corrupt file raises `CorruptFile`.
    """
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    kind = CompressionTypes.detect_compression_type(path)
    if kind in (CompressionTypes.GZIP, CompressionTypes.BZIP2):
        raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
        inner = gzip.GzipFile(fileobj=raw) if kind == CompressionTypes.GZIP else bz2.BZ2File(raw)
        return io.BufferedReader(_Raw(inner, path), 1 << 20)
    stream = FileSystems.open(path, compression_type=CompressionTypes.AUTO)
    if isinstance(stream, io.IOBase):
        return stream
    return io.BufferedReader(_Raw(stream, path), 1 << 20)


class FileError(ValueError):
    """A whole file cannot be read as configured (e.g. a broken header): the job fails."""


class CorruptFile(OSError):
    """A compressed input that ends early or does not decompress: the job fails, naming it."""


class _Raw(io.RawIOBase):
    """A decompressing reader as a standard raw stream (Beam's CompressedFile lacks
    readable/readinto), so that `io.TextIOWrapper` and friends accept it; decompression errors
    become `CorruptFile` naming the file."""

    def __init__(self, stream, path: str):
        self._stream = stream
        self._path = path

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            data = self._stream.read(len(b))
        except (EOFError, OSError, zlib.error) as e:
            raise CorruptFile(f"{self._path}: truncated or corrupt compressed file: {e}") from None
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()


@contextlib.contextmanager
def create_file(path: str, mime_type: str) -> Iterator[BinaryIO]:
    """`FileSystems.create(path)` for the block: closed after it, abandoned if it or the close
    fails (see `abandon`). What is written is stored as it is, whatever the name's extension
    (a shard named `.gz` is compressed already)."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    f = FileSystems.create(
        path, mime_type=mime_type, compression_type=CompressionTypes.UNCOMPRESSED
    )
    try:
        yield f
        f.close()
    except OSError as e:
        abandon(f, path)
        if e.errno in (errno.ENOSPC, errno.EDQUOT) and not e.filename:  # say where
            raise OSError(e.errno, f"{e.strerror} (writing {path})") from None
        raise
    except BaseException:
        abandon(f, path)
        raise


def abandon(f: BinaryIO, path: str) -> None:
    """Gives up a file whose write or close failed, so that nothing completes it later.

    A gs:// writer (google-cloud-storage's BlobWriter) left unclosed uploads what it holds when
    it is garbage-collected: at the latest when the process exits, after the run has failed and
    discarded its staging folder, retrying each upload up to its retry deadline (120 s).
    `terminate()` cancels its upload session instead and closes it. Local files are left as
    they are (a staging folder is removed whole).
    """
    terminate = getattr(f, "terminate", None)
    if terminate is None:
        return
    try:
        terminate()
    except Exception as e:  # the write already failed; this only tidies up, so say and go on
        logger.warning("could not cancel the upload of %s: %s", path, e)
