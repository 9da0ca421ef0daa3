"""The bytes of a dataset's files, local or on Cloud Storage, without TensorFlow.

A local path is opened with `open`; a `gs://bucket/object` URI with google-cloud-storage (its
client is made once per process, on the first remote read). Both give a binary stream read in
large pieces. Locations are joined and made absolute by the trainer's one rule
(trainer.dataset.paths). A dataset's small files are read whole only when they are regular files
within a size limit (`read_bytes`, `not_regular`): a FIFO, a link to /dev/zero or a huge file is
refused before it is opened, never read until memory runs out.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import stat
from collections.abc import Iterator
from typing import IO, Any

from trainer.dataset.paths import join, normalize_root
from transforms.contract.manifest import ManifestError

__all__ = [
    "exists", "is_remote", "join", "names_in", "normalize_root", "not_regular", "open_read",
    "read_bytes", "same_file_key",
]  # fmt: skip

GCS = "gs://"


def is_remote(path: str) -> bool:
    """True for a gs:// URI."""
    return path.startswith(GCS)


def exists(path: str) -> bool:
    """True when the file exists (a local one of any kind: `read_bytes` refuses what is no
    regular file, naming it); ManifestError for a location that is neither a local path nor
    gs:// (no other storage is read), or that Cloud Storage refuses."""
    if is_remote(path):
        with _named_errors(path):
            return _blob(path).exists()
    if "://" in path:
        raise ManifestError(
            f"{path}: not a dataset location: give a local folder or gs://BUCKET/PREFIX"
        )
    return os.path.exists(path)


def open_read(path: str) -> IO[bytes]:
    """A binary stream of the file's bytes."""
    if is_remote(path):
        return _blob(path).open("rb")
    return open(path, "rb")


def read_bytes(path: str, limit: int, listed: int | None = None, writer: str = "the ETL") -> bytes:
    """The whole file, when it is a regular file of at most `limit` bytes (and of `listed`
    bytes when its manifest lists its size); else ManifestError naming it, before it is opened
    (`writer`: what writes such a file, named when it is too large). A file that cannot be
    read (missing, no permission, the bucket refuses) is a ManifestError naming it too."""
    with _named_errors(path):
        check_size(path, size(path), limit, listed, writer)
        with open_read(path) as f:
            data = f.read(limit + 1)
    if len(data) > limit:
        raise ManifestError(f"{path}: grew past {limit:,} bytes while it was read: refused")
    check_size(path, len(data), limit, listed, writer)
    return data


def names_in(folder: str) -> set[str]:
    """The names of the files and folders directly in `folder` (empty when there is none)."""
    if is_remote(folder):
        bucket, _, prefix = folder[len(GCS) :].partition("/")
        prefix = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
        with _named_errors(folder):
            blobs = _client().list_blobs(bucket, prefix=prefix, delimiter="/")
            names = {b.name[len(prefix) :] for b in blobs}
            names |= {p[len(prefix) :].rstrip("/") for p in blobs.prefixes}
        return {n for n in names if n}
    return set(os.listdir(folder)) if os.path.isdir(folder) else set()


@contextlib.contextmanager
def _named_errors(path: str) -> Iterator[None]:
    """Turns an error of the file system or of Cloud Storage into a ManifestError naming
    `path`."""
    remote = importlib.import_module("google.api_core.exceptions") if is_remote(path) else None
    try:
        yield
    except OSError as e:
        raise ManifestError(f"{path}: cannot be read: {e.strerror or e}") from None
    except Exception as e:
        if remote is None or not isinstance(e, remote.GoogleAPIError):
            raise
        raise ManifestError(f"{path}: cannot be read: {type(e).__name__}: {e}") from None


def size(path: str) -> int:
    """The size of a file in bytes, local (`local_size`) or on Cloud Storage."""
    if is_remote(path):
        with _named_errors(path):
            blob = _blob(path)
            blob.reload()
            return blob.size or 0
    return local_size(path)


def local_size(path: str) -> int:
    """The size of a local file; ManifestError naming it when it is missing, a folder, or no
    regular file (a FIFO, a device, a socket: what a link to /dev/zero is)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise ManifestError(f"{path}: cannot be read: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ManifestError(f"{path}: is a folder, not a file: not a shardflow dataset")
    if not stat.S_ISREG(st.st_mode):
        raise ManifestError(f"{path}: {_kind(st.st_mode)}, not a regular file: refused unread")
    return st.st_size


def check_size(
    path: str, size: int, limit: int, listed: int | None = None, writer: str = "the ETL"
) -> None:
    """ManifestError when `size` is over `limit`, or is not the `listed` one; `writer` is what
    writes such a file (the ETL, a training run)."""
    if size > limit:
        raise ManifestError(
            f"{path}: {size:,} bytes, more than the {limit:,} a reader reads of it: refused "
            f"unread (not a file {writer} writes)"
        )
    if listed is not None and size != listed:
        raise ManifestError(
            f"{path}: {size:,} bytes where the manifest lists {listed:,}: changed after "
            "publication; rerun the ETL"
        )


def not_regular(path: str) -> str | None:
    """Why a local file that exists is no regular file (`a FIFO`, ...); None for a regular
    file, a missing one and a remote one."""
    if is_remote(path):
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else _kind(mode)


def _kind(mode: int) -> str:
    kinds = {
        stat.S_ISDIR: "a folder",
        stat.S_ISFIFO: "a FIFO (named pipe)",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((what for test, what in kinds.items() if test(mode)), "a special file")


def same_file_key(path: str) -> Any:
    """What two names of one file share: a local file's device and inode (a symbolic or hard
    link, `..` or a trailing slash do not hide it; its real path when it does not exist), a
    URI's text without a trailing slash."""
    if "://" in path:
        scheme, _, rest = path.partition("://")
        return f"{scheme.lower()}://{rest.rstrip('/')}"
    try:
        st = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return (st.st_dev, st.st_ino)


def _blob(uri: str) -> Any:
    bucket, _, name = uri[len(GCS) :].partition("/")
    return _client().bucket(bucket).blob(name)


@functools.cache
def _client() -> Any:
    # imported for gs:// datasets only
    return importlib.import_module("google.cloud.storage").Client()
