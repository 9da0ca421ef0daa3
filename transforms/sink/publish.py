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
checks atomically) and read back. A folder is a dataset only when its `manifest.json` is a
shardflow manifest (`manifest_problem`); a symbolic link at OUTPUT is never followed nor replaced.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import functools
import hashlib
import json
import logging
import os
import shutil
import stat
import sys
from collections.abc import Mapping
from typing import Any, BinaryIO, Callable, Iterator

from apache_beam.io.filesystems import FileSystems

from transforms.contract.layout import FORMAT_VERSION, MANIFEST
from transforms.contract.manifest import Manifest, dumps
from transforms.files import is_remote

logger = logging.getLogger(__name__)

PUBLISHING = ".shardflow-publishing"  # on object stores: a publication of ours is under way


class OutputError(ValueError):
    """OUTPUT exists and is something we must not replace."""


class PublishConflict(OutputError):
    """OUTPUT changed while the run ran: another run published there, or is publishing."""


def staging_path(output: str, run_id: str) -> str:
    parent, name = output.rstrip("/").rsplit("/", 1)
    return f"{parent}/.{name}.incomplete-{run_id}"


# The fields every shardflow manifest has, with their JSON types; a manifest.json without them
# is someone else's file, and its folder is not ours to replace.
_MANIFEST_FIELDS = {"name": str, "features": dict, "sources": dict, "splits": dict}


def manifest_problem(data: bytes) -> str | None:
    """Why `data` is not a shardflow manifest (`format_version` 1 and the fields every manifest
    has); None when it is one."""
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return "not JSON"
    if not isinstance(manifest, dict):
        return "not a JSON object"
    if "format_version" not in manifest:
        return "no format_version"
    version = manifest["format_version"]
    if type(version) is not int or version != FORMAT_VERSION:  # True == 1, but is no version
        return f"format_version {version!r}, not {FORMAT_VERSION}"
    for field, kind in _MANIFEST_FIELDS.items():
        if not isinstance(manifest.get(field), kind):
            what = "a string" if kind is str else "an object"
            return f"{field} missing or not {what}" if field in manifest else f"no {field}"
    return None


@dataclasses.dataclass(frozen=True)
class OutputState:
    """What OUTPUT holds: a dataset (its manifest's sha256 and `created`) or none; on object
    stores also the marker of a publication under way or killed (its text names the publisher's
    staging folder) and the marker's generation (0: no marker)."""

    dataset: str | None = None
    created: str | None = None
    marker: str | None = None
    marker_generation: int = 0


@dataclasses.dataclass(frozen=True)
class Expected:
    """What publication may replace: what OUTPUT held when the run started (`state`), and only
    with `overwrite`. A job that runs later, maybe many times (a Dataflow template), is not
    `pinned` to the start-up state: it may replace any dataset with `overwrite`, none without."""

    state: OutputState = OutputState()
    overwrite: bool = False
    pinned: bool = True

    def unpinned(self) -> Expected:
        return dataclasses.replace(self, pinned=False)


def expect(output: str, overwrite: bool) -> Expected:
    """What a run starting now may replace at OUTPUT. Raises OutputError when OUTPUT is not ours
    to replace (see `check_output`)."""
    return Expected(output_state(output), overwrite)


def check_output(output: str) -> None:
    """Refuses an OUTPUT that is a symbolic link or a file, or holds something other than a
    shardflow dataset: files without a manifest.json, or a manifest.json that is not ours."""
    output_state(output)


def holds_dataset(output: str) -> bool:
    """True when OUTPUT holds a complete shardflow dataset (its manifest.json)."""
    try:
        return output_state(output).dataset is not None
    except OutputError:
        return False


def output_state(output: str) -> OutputState:
    """What OUTPUT holds now; raises OutputError when it is not ours to replace."""
    if is_remote(output):
        return _remote_state(output)
    return _local_state(output)


def _not_ours(output: str, problem: str) -> OutputError:
    return OutputError(
        f"{output!r} holds a {MANIFEST} that is not a shardflow manifest ({problem}); "
        "refusing to replace it"
    )


def _local_state(output: str) -> OutputState:
    if os.path.islink(output):
        raise OutputError(
            f"{output!r} is a symbolic link (to {os.path.realpath(output)!r}); give the real "
            "folder: a link is never followed nor replaced"
        )
    if not os.path.exists(output):
        return OutputState()
    if not os.path.isdir(output):
        raise OutputError(f"{output!r} is a file")
    path = os.path.join(output, MANIFEST)
    try:
        # lstat first: a FIFO would block the open; a link in a dataset is never ours
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise _not_ours(output, "not a file")
        with open(os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        if os.listdir(output):
            raise OutputError(
                f"{output!r} is a non-empty folder without {MANIFEST}; refusing to replace it"
            ) from None
        return OutputState()
    except OSError as e:  # unreadable: whose it is cannot be told
        raise _not_ours(output, f"cannot read it: {e.strerror}") from None
    return _dataset_state(output, data)


def _dataset_state(output: str, data: bytes, **marker: Any) -> OutputState:
    problem = manifest_problem(data)
    if problem is not None:
        raise _not_ours(output, problem)
    created = json.loads(data).get("created")
    return OutputState(hashlib.sha256(data).hexdigest(), str(created), **marker)


def _remote_state(output: str) -> OutputState:
    output = output.rstrip("/")
    _, _, rest = output.partition("://")
    if "/" not in rest:
        raise OutputError(f"{output!r} is a bucket root; give a folder inside the bucket")
    objects = _objects(output)
    if not objects:
        return OutputState()
    marker = {}
    if f"{output}/{PUBLISHING}" in objects:
        found = _read_object(f"{output}/{PUBLISHING}")
        if found is not None:
            text, generation = found
            marker = {"marker": text.decode("utf-8", "replace"), "marker_generation": generation}
    manifest = _read_object(f"{output}/{MANIFEST}") if f"{output}/{MANIFEST}" in objects else None
    if manifest is not None:
        return _dataset_state(output, manifest[0], **marker)
    if not marker:
        raise OutputError(f"{output!r} holds files but no {MANIFEST}; refusing to replace it")
    return OutputState(**marker)


def _objects(folder: str) -> list[str]:
    """Every object under a remote folder, at any depth, sorted."""
    result = FileSystems.match([folder.rstrip("/") + "/**"])[0]
    return sorted(m.path for m in result.metadata_list)


def _blob(path: str):
    """A google-cloud-storage Blob of a gs:// path, through a client made as Beam makes its own
    (credentials and endpoint alike); made anew each time, as Beam does, so that it follows the
    environment (an emulator) of the moment."""
    from apache_beam.io.gcp.gcsio import GcsIO, parse_gcs_path

    bucket, name = parse_gcs_path(path)
    return GcsIO().client.bucket(bucket).blob(name)


def _read_object(path: str) -> tuple[bytes, int] | None:
    """An object's bytes and generation (the bytes of that very generation); None if absent."""
    from google.api_core.exceptions import NotFound, PreconditionFailed

    for _ in range(3):  # replaced between the two requests: read the new one
        blob = _blob(path)
        try:
            blob.reload()
            return blob.download_as_bytes(if_generation_match=blob.generation), blob.generation
        except NotFound:
            return None
        except PreconditionFailed:
            continue
    raise OSError(f"{path} keeps changing; could not read it")


# A seam for tests, set by them only: called just before `publish` touches OUTPUT, so that a test
# can kill the run between write and publish, or change OUTPUT meanwhile (tests/services/pause.py).
before_publish: Callable[[], None] | None = None


def publish(
    staging: str, output: str, manifest: Manifest | Mapping[str, Any], expected: Expected
) -> None:
    """Moves the staged dataset to OUTPUT, replacing only what `expected` allows there.

    `manifest` is written as OUTPUT's manifest.json (`Manifest.to_json`; a plain mapping, as
    tests give, is written the same way).

    Raises OutputError, and publishes nothing, when OUTPUT holds something else now: something
    that is not a dataset, or a dataset that another run published while this one ran
    (PublishConflict, also while another run is publishing there).
    """
    if before_publish is not None:
        before_publish()
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
        now = _local_state(output)
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
    old = staging.replace(".incomplete-", ".replaced-")
    os.rename(output, old)
    if os.path.islink(old):
        os.rename(old, output)
        raise OutputError(f"{output!r} became a symbolic link while this run published")
    os.rename(staging, output)
    return old


_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


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
    now = _remote_state(output)
    _check_replaceable(output, expected, now)  # before touching anything
    # A marker that was not there at start (or not this one) is another run's publication.
    start = expected.state.marker_generation if expected.pinned else now.marker_generation
    if now.marker_generation != start:
        raise _publishing_elsewhere(output, now.marker)
    generation = _claim(marker, staging, start)
    try:
        # OUTPUT is this run's now: check again what it holds. The marker is read back too, for
        # stores (emulators) that ignore the precondition of the claim.
        now = _remote_state(output)
        if now.marker != staging:
            raise _publishing_elsewhere(output, now.marker)
        _check_replaceable(output, expected, now)
    except BaseException:
        _release(marker, generation)
        raise
    old = _objects(output)
    staged = _objects(staging)
    targets = [output + path[len(staging) :] for path in staged]
    if manifest in old:
        _delete([manifest])
    if staged:
        FileSystems.copy(staged, targets)
    stale = sorted(set(old) - set(targets) - {manifest, marker})
    if stale:
        _delete(stale)
    with create_file(manifest, "application/json") as f:
        f.write(body)
    # The dataset is published: what is left is tidying up, which must not fail the run.
    try:
        _delete([marker])
        _delete([staging + "/"])
    except OSError as e:
        logger.warning("dataset published, but %s (delete it at leisure)", e)


def _publishing_elsewhere(output: str, marker: str | None) -> PublishConflict:
    run = marker.rsplit(".incomplete-", 1)[-1] if marker else "unknown"
    return PublishConflict(f"{output!r} is being published by another run ({run})")


def _claim(marker: str, staging: str, generation: int) -> int:
    """Creates the publishing marker (naming `staging`) only if its generation is still
    `generation` (0: there is none); returns the marker's new generation. Raises
    PublishConflict when another run got there first."""
    from google.api_core.exceptions import PreconditionFailed

    blob = _blob(marker)
    try:
        blob.upload_from_string(
            staging.encode("utf-8"), content_type="text/plain", if_generation_match=generation
        )
        return blob.generation
    except PreconditionFailed:
        found = _read_object(marker)
        if found is not None and found[0] == staging.encode("utf-8"):  # ours: a retried upload
            return found[1]
        raise _publishing_elsewhere(
            marker.rsplit("/", 1)[0], found[0].decode("utf-8", "replace") if found else None
        ) from None


def _release(marker: str, generation: int) -> None:
    """Deletes this run's marker after a refused publication, unless another run's replaced it."""
    from google.api_core.exceptions import GoogleAPIError, NotFound, PreconditionFailed

    try:
        _blob(marker).delete(if_generation_match=generation)
    except (NotFound, PreconditionFailed):
        pass  # not ours any more: the other run's to keep
    except (GoogleAPIError, OSError) as e:  # the publication already failed: say and go on
        logger.warning("could not delete %s: %s", marker, e)


def _delete(paths: list[str]) -> None:
    """FileSystems.delete, failing with an OSError naming what could not be deleted."""
    try:
        FileSystems.delete(paths)
    except OSError:
        raise
    except Exception as e:  # gcsio's batch delete fails so when no retry got an answer
        more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
        raise OSError(f"could not delete {paths[0]}{more}: {type(e).__name__}: {e}") from e


@contextlib.contextmanager
def create_file(path: str, mime_type: str) -> Iterator[BinaryIO]:
    """`FileSystems.create(path)` for the block: closed after it, abandoned if it or the close
    fails (see `abandon`)."""
    f = FileSystems.create(path, mime_type=mime_type)
    try:
        yield f
        f.close()
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


def discard(staging: str) -> None:
    """Removes a staging folder after a failed run (what a reader could never see anyway)."""
    try:
        delete_folder(staging)
    except OSError as e:  # the run already failed; leave the hidden folder and say so
        logger.warning("could not remove staging folder %s: %s", staging, e)


def delete_folder(folder: str) -> None:
    """Deletes a folder and everything under it; nothing if there is none."""
    if is_remote(folder):
        if _objects(folder):  # an object store has no folders: delete what is under it
            _delete([folder + "/"])
    elif FileSystems.exists(folder):
        _delete([folder])


def write_atomically(path: str, data: bytes, mime_type: str) -> None:
    """Writes a whole file at once: a local one under a temporary name, then renamed; an object
    (gs://) is created whole by its upload anyway."""
    if is_remote(path):
        with create_file(path, mime_type) as f:
            f.write(data)
        return
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temporary, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
