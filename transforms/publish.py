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
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import errno
import functools
import json
import logging
import os
import shutil
import sys
import time
from collections import Counter
from typing import Any, BinaryIO, Iterator

from apache_beam.io.filesystems import FileSystems

from transforms.files import is_remote
from transforms.records import ignored_counter, read_counter
from transforms.spec import DatasetSpec

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
REPORT = "report.html"  # written after publication, from the published dataset
PUBLISHING = ".shardflow-publishing"  # on object stores: a publication of ours is under way
FORMAT_VERSION = 1


class OutputError(ValueError):
    """OUTPUT exists and is something we must not replace."""


def staging_path(output: str, run_id: str) -> str:
    parent, name = output.rstrip("/").rsplit("/", 1)
    return f"{parent}/.{name}.incomplete-{run_id}"


def check_output(output: str) -> None:
    """Refuses an OUTPUT that exists, is not empty and holds no shardflow manifest."""
    if is_remote(output):
        _, _, rest = output.rstrip("/").partition("://")
        if "/" not in rest:
            raise OutputError(f"{output!r} is a bucket root; give a folder inside the bucket")
        objects = set(_objects(output))
        ours = {f"{output.rstrip('/')}/{name}" for name in (MANIFEST, PUBLISHING)}
        if objects and not objects & ours:
            raise OutputError(f"{output!r} holds files but no {MANIFEST}; refusing to replace it")
        return
    if os.path.isfile(output):
        raise OutputError(f"{output!r} is a file")
    if os.path.isdir(output) and os.listdir(output):
        if not os.path.isfile(os.path.join(output, MANIFEST)):
            raise OutputError(
                f"{output!r} is a non-empty folder without {MANIFEST}; refusing to replace it"
            )


def holds_dataset(output: str) -> bool:
    """True when OUTPUT holds a complete dataset (its manifest.json)."""
    return FileSystems.exists(f"{output.rstrip('/')}/{MANIFEST}")


def _objects(folder: str) -> list[str]:
    """Every object under a remote folder, at any depth, sorted."""
    result = FileSystems.match([folder.rstrip("/") + "/**"])[0]
    return sorted(m.path for m in result.metadata_list)


def build_manifest(
    dataset: DatasetSpec,
    shards: list[dict[str, Any]],
    rejected_file: dict[str, Any],
    reasons: Counter,
    counts: dict[str, int],
    transform: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest: counts, files with sizes and checksums, the schema. Checks the ledger.

    `transform` is the `transform` section (tf.Transform output), or None without one; its
    analyzed records must be exactly the train split's.
    """
    splits: dict[str, Any] = {}
    duplicates = counts.get("duplicates", 0)
    for name in dataset.split_names:
        files = sorted((s for s in shards if s["split"] == name), key=lambda s: s["path"])
        duplicates += sum(s.get("duplicates", 0) for s in files)
        splits[name] = {
            "records": sum(s["records"] for s in files),
            "files": [
                {k: s[k] for k in ("path", "records", "bytes", "sha256")} for s in files
            ],
        }
    sources = {
        s.name: {
            "format": s.format,
            "records": counts.get(read_counter(s.name), 0),
            "ignored_fields": _ignored_fields(counts, s.name),
        }
        for s in dataset.sources
    }
    read = sum(v["records"] for v in sources.values())
    written = sum(v["records"] for v in splits.values())
    joined = counts.get("joined", 0)
    accounted = written + rejected_file["records"] + duplicates + joined
    if read != accounted:
        raise RuntimeError(
            f"ledger does not balance: read {read} records, accounted for {accounted} "
            f"(written {written}, rejected {rejected_file['records']}, duplicates {duplicates}, "
            f"joined {joined})"
        )
    if transform is not None:
        train = splits[transform["analyzed_split"]]["records"]
        if transform["analyzed_records"] != train:
            raise RuntimeError(
                f"tf.Transform analyzed {transform['analyzed_records']} records, but the "
                f"{transform['analyzed_split']} split holds {train}"
            )
    manifest = {
        "format_version": FORMAT_VERSION,
        "name": dataset.name,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config_sha256": dataset.config_sha256,
        "compression": dataset.output.compression,
        "compression_level": dataset.output.compression_level,
        "features": {f.name: f.to_manifest() for f in dataset.features},
        "label": dataset.label,
        "key": dataset.key,
        "combine": dataset.combine,
        "sources": sources,
        "splits": splits,
        "rejected": {
            "records": rejected_file["records"],
            "reasons": dict(sorted(reasons.items())),
            "files": [{k: rejected_file[k] for k in ("path", "records", "bytes", "sha256")}],
        },
        "duplicates": duplicates,
        "transform": transform,
    }
    if dataset.combine == "join":
        manifest["joined"] = joined
    if dataset.date is not None:
        manifest["date"] = dataset.date
    return manifest


def _ignored_fields(counts: dict[str, int], source_name: str) -> dict[str, int]:
    """{field: records holding a value in it} of a source's fields that no feature reads."""
    prefix = ignored_counter(source_name, "")
    return {k[len(prefix) :]: n for k, n in sorted(counts.items()) if k.startswith(prefix)}


class QualityError(RuntimeError):
    """More records were rejected than `output.max_rejected[_fraction]` allows."""


def check_rejections(dataset: DatasetSpec, manifest: dict[str, Any]) -> None:
    """Raises QualityError when the rejected records exceed the output's limits."""
    out = dataset.output
    read = sum(s["records"] for s in manifest["sources"].values())
    rejected = manifest["rejected"]["records"]
    fraction = rejected / read if read else 0.0
    if out.max_rejected is not None and rejected > out.max_rejected:
        raise QualityError(
            f"{rejected} of {read} records rejected, more than output.max_rejected "
            f"({out.max_rejected}); no dataset published"
        )
    if out.max_rejected_fraction is not None and fraction > out.max_rejected_fraction:
        raise QualityError(
            f"{rejected} of {read} records rejected ({fraction:.2%}), more than "
            f"output.max_rejected_fraction ({out.max_rejected_fraction:g}); "
            "no dataset published"
        )


# For the fault tests only: when set to a file path, `publish` creates that file and waits (up
# to a minute) before publishing, so that a test can kill the run between write and publish.
PAUSE_BEFORE_PUBLISH = "SHARDFLOW_TEST_PAUSE_BEFORE_PUBLISH"


def _pause_before_publish() -> None:
    flag = os.environ.get(PAUSE_BEFORE_PUBLISH)
    if flag:
        with open(flag, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)


def publish(staging: str, output: str, manifest: dict[str, Any]) -> None:
    """Moves the staged dataset to OUTPUT, replacing a previous dataset there."""
    _pause_before_publish()
    body = (json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode("utf-8")
    if is_remote(output):
        _publish_remote(staging, output, body)
    else:
        _publish_local(staging, output, body)


def _publish_local(staging: str, output: str, body: bytes) -> None:
    with open(os.path.join(staging, MANIFEST), "wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    if not os.path.exists(output):
        os.makedirs(os.path.dirname(output), exist_ok=True)
        os.rename(staging, output)
        return
    check_output(output)
    if exchange(staging, output):
        old = staging  # now holds the previous dataset
    else:
        old = staging.replace(".incomplete-", ".replaced-")
        os.rename(output, old)
        os.rename(staging, output)
    # the old dataset stops looking like one before the (slower) removal of its files
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(old, MANIFEST))
    shutil.rmtree(old)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: str, b: str) -> bool:
    """Swaps two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
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
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        function.restype = ctypes.c_int
    return function


def _publish_remote(staging: str, output: str, body: bytes) -> None:
    check_output(output)
    manifest, marker = f"{output}/{MANIFEST}", f"{output}/{PUBLISHING}"
    old = _objects(output)
    staged = _objects(staging)
    targets = [output + path[len(staging) :] for path in staged]
    with create_file(marker, "text/plain") as f:
        f.write(staging.encode("utf-8"))
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
