"""Atomic publication of a dataset: staging folder → OUTPUT, `manifest.json` last.

The whole dataset is written under a hidden sibling of OUTPUT (`.NAME.incomplete-RUNID`). On a
local disk, publication is a directory rename; a previous dataset is swapped with the staged one
in one `renameat2(RENAME_EXCHANGE)` call (Linux; elsewhere, or on file systems without it, two
renames, with a moment without a dataset) and then deleted, its manifest first. A reader sees the
old dataset or the new one, never a mix, and on Linux never neither. On object
stores (gs://), where there is no rename, a dataset is complete when its `manifest.json` exists:
a hidden marker object (`.shardflow-publishing`) is written first, then the old manifest is
deleted (the old dataset stops being one), the staged objects are copied over OUTPUT, objects of
the old dataset that the new one lacks are deleted, the new manifest is written last, and the
marker and the staging objects are deleted. A run that fails before publication leaves the
previous dataset as it was; one killed while publishing leaves OUTPUT without a manifest but with
the marker, which tells the next run that OUTPUT is its own to replace.

Publication replaces only what the run was allowed to replace when it started (`Expected`, taken
by `expect` in the start-up check): nothing, or, with `--overwrite`, the dataset OUTPUT held
then. A dataset that another run published meanwhile is never replaced: the check is repeated
at publication, while the run holds OUTPUT alone, so that no other run can publish between the
check and the rename. On a local disk that is an exclusive `flock` on OUTPUT's parent folder
(held for the renames only; a lock file would be left next to OUTPUT); on gs:// it is the marker,
created only if it is still what the run saw at start (a generation precondition, which GCS
checks atomically) and read back. What OUTPUT holds, and whether it may be replaced, is told by
`transforms.sink.output`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import logging
import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any, Callable, Iterator

from apache_beam.io.filesystems import FileSystems

from transforms.contract.layout import MANIFEST, REPLACED_TAG, STAGED_TAG
from transforms.contract.manifest import Manifest, dumps
from transforms.files import create_file, is_remote
from transforms.sink.output import (
    PUBLISHING,
    Expected,
    OutputError,
    OutputState,
    PublishConflict,
    local_state,
    remote_state,
)
from transforms.sink.storage import delete_paths, gcs_blob, list_objects, read_object

logger = logging.getLogger(__name__)
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def publish(
    staging: str,
    output: str,
    manifest: Manifest | Mapping[str, Any],
    expected: Expected,
    before: Callable[[], None] | None = None,
) -> None:
    """Moves the staged dataset to OUTPUT, replacing only what `expected` allows there.

    `manifest` is written as OUTPUT's manifest.json (`Manifest.to_json`; a plain mapping, as
    tests give, is written the same way).

    Raises OutputError, and publishes nothing, when OUTPUT holds something else now: something
    that is not a dataset, or a dataset that another run published while this one ran
    (PublishConflict, also while another run is publishing there).

    `before` is called just before OUTPUT is touched: tests give one to kill the run between
    write and publish, or to change OUTPUT meanwhile (tests/services/pause.py).
    """
    if before is not None:
        before()
    text = manifest.to_json() if isinstance(manifest, Manifest) else dumps(manifest)
    body = text.encode("utf-8")
    try:
        if is_remote(output):
            _publish_remote(staging, output, body, expected)
        else:
            _publish_local(staging, output, body, expected)
    except OutputError as e:  # the run fails with this one line: name the setting it is about
        raise type(e)(f"output.path: {e}; nothing published") from None


def _check_replaceable(output: str, expected: Expected, now: OutputState) -> None:
    """Raises PublishConflict unless `expected` allows replacing what OUTPUT holds `now`."""
    if now.dataset is None:  # nothing to lose (also where the start-up dataset was deleted)
        return
    if expected.overwrite and (not expected.pinned or now.dataset == expected.state.dataset):
        return
    created = f"its {MANIFEST} created {now.created}"
    if expected.pinned:
        raise PublishConflict(
            f"{output!r} was published by another run ({created}) while this one ran"
        )
    raise PublishConflict(f"{output!r} holds a dataset ({created}) and --overwrite was not given")


def _publish_local(staging: str, output: str, body: bytes, expected: Expected) -> None:
    with open(os.path.join(staging, MANIFEST), "wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    parent = os.path.dirname(output)
    os.makedirs(parent, exist_ok=True)
    with _locked(parent):
        now = local_state(output)
        _check_replaceable(output, expected, now)
        if not os.path.lexists(output):
            _rename_new(staging, output)
            return
        old = _swap(staging, output)
    # the old dataset stops looking like one before the (slower) removal of its files
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(old, MANIFEST))
    shutil.rmtree(old)


@contextlib.contextmanager
def _locked(folder: str) -> Iterator[None]:
    """Holds an exclusive `flock` on `folder` for the block (released when its descriptor is
    closed, also when the process dies). Where the file system has no flock (some network file
    systems), the block runs unlocked, with a warning: the state is still checked just before
    the rename."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:
            if e.errno not in (errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            logger.warning("could not lock %s (%s); publishing without the lock", folder, e)
        yield
    finally:
        os.close(fd)


def _rename_new(staging: str, output: str) -> None:
    """Renames the staged dataset to OUTPUT, where there was nothing: never over something that
    appeared meanwhile (renameat2 RENAME_NOREPLACE, where there is one)."""
    try:
        if _rename2(staging, output, _RENAME_NOREPLACE):
            return
    except FileExistsError:
        raise OutputError(f"{output!r} appeared while this run published") from None
    os.rename(staging, output)


def _swap(staging: str, output: str) -> str:
    """Puts the staged dataset at OUTPUT; returns where the previous one went. A symbolic link
    put at OUTPUT after the check (by hand: runs hold the lock) is put back, never followed."""
    if exchange(staging, output):
        if os.path.islink(staging):
            exchange(staging, output)
            raise OutputError(f"{output!r} became a symbolic link while this run published")
        return staging
    old = staging.replace(STAGED_TAG, REPLACED_TAG)
    os.rename(output, old)
    if os.path.islink(old):
        os.rename(old, output)
        raise OutputError(f"{output!r} became a symbolic link while this run published")
    os.rename(staging, output)
    return old


def exchange(a: str, b: str) -> bool:
    """Swaps two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    return _rename2(a, b, _RENAME_EXCHANGE)


def _rename2(a: str, b: str, flags: int) -> bool:
    """renameat2(a, b, flags); False where the system or the file system lacks it."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # the file system can't
        return False
    raise OSError(err, os.strerror(err), a, None, b)


@functools.cache
def _renameat2():
    """libc's renameat2 (glibc 2.28+), or None."""
    if not sys.platform.startswith("linux"):
        return None
    function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if function is not None:
        function.argtypes = [
            ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint
        ]  # fmt: skip
        function.restype = ctypes.c_int
    return function


def _publish_remote(staging: str, output: str, body: bytes, expected: Expected) -> None:
    manifest, marker = f"{output}/{MANIFEST}", f"{output}/{PUBLISHING}"
    now = remote_state(output)
    _check_replaceable(output, expected, now)  # before touching anything
    # A marker that was not there at start (or not this one) is another run's publication.
    start = expected.state.marker_generation if expected.pinned else now.marker_generation
    if now.marker_generation != start:
        raise _publishing_elsewhere(output, now.marker)
    generation = _claim(marker, staging, start)
    try:
        # OUTPUT is this run's now: check again what it holds. The marker is read back too, for
        # stores (emulators) that ignore the precondition of the claim.
        now = remote_state(output)
        if now.marker != staging:
            raise _publishing_elsewhere(output, now.marker)
        _check_replaceable(output, expected, now)
    except BaseException:
        _release(marker, generation)
        raise
    old = list_objects(output)
    staged = list_objects(staging)
    targets = [output + path[len(staging) :] for path in staged]
    if manifest in old:
        delete_paths([manifest])
    if staged:
        FileSystems.copy(staged, targets)
    stale = sorted(set(old) - set(targets) - {manifest, marker})
    if stale:
        delete_paths(stale)
    with create_file(manifest, "application/json") as f:
        f.write(body)
    # The dataset is published: what is left is tidying up, which must not fail the run.
    try:
        delete_paths([marker])
        delete_paths([staging + "/"])
    except OSError as e:
        logger.warning("dataset published, but %s (delete it at leisure)", e)


def _publishing_elsewhere(output: str, marker: str | None) -> PublishConflict:
    run = marker.rsplit(STAGED_TAG, 1)[-1] if marker else "unknown"
    return PublishConflict(f"{output!r} is being published by another run ({run})")


def _claim(marker: str, staging: str, generation: int) -> int:
    """Creates the publishing marker (naming `staging`) only if its generation is still
    `generation` (0: there is none); returns the marker's new generation. Raises
    PublishConflict when another run got there first."""
    from google.api_core.exceptions import PreconditionFailed

    blob = gcs_blob(marker)
    try:
        blob.upload_from_string(
            staging.encode("utf-8"), content_type="text/plain", if_generation_match=generation
        )
        return blob.generation
    except PreconditionFailed:
        found = read_object(marker)
        if found is not None and found[0] == staging.encode("utf-8"):  # ours: a retried upload
            return found[1]
        raise _publishing_elsewhere(
            marker.rsplit("/", 1)[0], found[0].decode("utf-8", "replace") if found else None
        ) from None


def _release(marker: str, generation: int) -> None:
    """Deletes this run's marker after a refused publication, unless another run's replaced it."""
    from google.api_core.exceptions import GoogleAPIError, NotFound, PreconditionFailed

    try:
        gcs_blob(marker).delete(if_generation_match=generation)
    except (NotFound, PreconditionFailed):
        pass  # not ours any more: the other run's to keep
    except (GoogleAPIError, OSError) as e:  # the publication already failed: say and go on
        logger.warning("could not delete %s: %s", marker, e)
