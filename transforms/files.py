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
import glob
import gzip
import io
import logging
import os
import re
import stat
import zlib
from typing import BinaryIO, Callable, Iterator

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
    """The sorted input files of `path`; empty when nothing matches. A URI is matched by Beam's
    file system of its scheme, a local path by `local_matches` (the same rule, no Beam)."""
    problem = location_problem(path)
    if problem is not None:
        raise FileError(problem)
    path = _in_folder(path)
    pattern = file_pattern(path, recursive)
    if is_remote(path):
        from apache_beam.io.filesystems import FileSystems  # Beam: only for a URI

        matched = [m.path for m in FileSystems.match([pattern])[0].metadata_list]
    else:
        matched = local_matches(pattern)
    root = pattern_root(path)
    files = sorted(m for m in matched if is_input(m, root))
    for file in files if not is_remote(path) else []:
        kind = special_kind(file)
        if kind is not None:
            raise FileError(
                f"{file}: is {kind}, not a regular file: only regular files are read "
                "(a pipe or a device has no end); move it out of the source's path"
            )
    return files


def local_matches(pattern: str) -> list[str]:
    """The local files (not folders) that a pattern names, by the rule of Beam's file systems:
    a pattern without a wildcard names one file (or nothing); otherwise every file under the
    folder before the first wildcard is listed (links to folders not followed) and kept when its
    whole path matches, `*` and `?` within one path segment, `**` across segments, `[...]` a
    set of characters (`[!...]` negated). A trailing `/` means `/*`."""
    if pattern.endswith("/"):
        pattern += "*"
    cut = min((pattern.index(c) for c in _GLOB_CHARS if c in pattern), default=None)
    if cut is None:
        return [pattern] if os.path.exists(pattern) else []
    folder = os.path.dirname(pattern[:cut])
    if not folder or not os.path.exists(folder):
        return []
    matches = re.compile(glob_regex(pattern)).match
    return [
        path
        for top, _, names in os.walk(folder)
        for name in names
        if matches(path := os.path.join(top, name))
    ]


def _in_folder(path: str) -> str:
    """A bare local glob (`*.csv`) as the working folder's (`./*.csv`)."""
    if not is_remote(path) and "/" not in path and any(c in path for c in _GLOB_CHARS):
        return f"./{path}"
    return path


def source_reads(path: str, recursive: bool = False) -> Callable[[str], bool]:
    """Whether a file (which need not exist) is among those a source `path` names
    (`match_files`: its glob, or its folder's files, flat or `recursive`; dot names below its
    root skipped): the pattern made once, each file tested against it. Local paths are
    compared as real paths: a link or `..` does not hide a match."""
    path = _in_folder(path)
    remote = is_remote(path)
    pattern, root = file_pattern(path, recursive), pattern_root(path)
    if not remote:
        real = os.path.realpath(root)
        pattern, root = glob.escape(real) + pattern[len(root) :], real
    matches = re.compile(glob_regex(pattern)).match

    def reads(file: str) -> bool:
        if is_remote(file) != remote:
            return False
        if not remote:
            file = os.path.join(os.path.realpath(os.path.dirname(file)), os.path.basename(file))
        return matches(file) is not None and is_input(file, root)

    return reads


def glob_regex(pattern: str) -> str:
    """The regular expression of a whole path that `pattern` matches (`local_matches`)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*" and pattern[i : i + 1] == "*":
            out.append(".*")
            i += 1
        elif c == "*":
            out.append(r"[^/\\]*")
        elif c == "?":
            out.append(r"[^/\\]")
        elif c == "[":
            end = i + (pattern[i : i + 1] == "!")
            end += pattern[end : end + 1] == "]"
            end = pattern.find("]", end)
            if end < 0:
                out.append(re.escape(c))
                continue
            chars = pattern[i:end].replace("\\", "\\\\")
            i = end + 1
            if chars.startswith("!"):
                chars = "^" + chars[1:]
            elif chars.startswith("^"):
                chars = "\\" + chars
            out.append(f"[{chars}]")
        else:
            out.append(re.escape(c))
    return "(?ms)" + "".join(out) + r"\Z"


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
    kind = compression_of(path)
    if kind in ("gzip", "bzip2"):
        raw = open_raw(path)
        inner = gzip.GzipFile(fileobj=raw) if kind == "gzip" else bz2.BZ2File(raw)
        return io.BufferedReader(_Raw(inner, path), 1 << 20)
    if kind is None and not is_remote(path):
        return open(path, "rb")  # noqa: SIM115 - the caller closes it
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    stream = FileSystems.open(path, compression_type=CompressionTypes.AUTO)
    if isinstance(stream, io.IOBase):
        return stream
    return io.BufferedReader(_Raw(stream, path), 1 << 20)


# The whole-file compressions, told by a name's last ending (Beam's rule), declared once: the
# formats' modules take them from here (`transforms.sources.registry.FILE_COMPRESSIONS`). gzip
# and bzip2 are undone by Python's modules (`open_file`), the others by Beam's CompressedFile.
COMPRESSION_ENDINGS = {
    ".gz": "gzip", ".bz2": "bzip2", ".deflate": "deflate", ".zst": "zstd", ".zstd": "zstd",
    ".xz": "lzma", ".lzma": "lzma",
}  # fmt: skip


def compression_of(path: str) -> str | None:
    """The whole-file compression that the name's ending tells (`gzip`, ...); None: none."""
    lower = path.lower()
    return next(
        (kind for ending, kind in COMPRESSION_ENDINGS.items() if lower.endswith(ending)), None
    )


def open_raw(path: str) -> BinaryIO:
    """A file's bytes as they are stored (seekable): a local file with `open`, a URI with
    Beam's file system of its scheme."""
    if not is_remote(path):
        return open(path, "rb")  # noqa: SIM115 - the caller closes it
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


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
