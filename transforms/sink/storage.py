"""Files and objects of a dataset being written, local or gs://: created whole or abandoned,
listed, deleted; and the name of a run's staging folder.

Every write goes through Beam's FileSystems; the few object-store requests FileSystems cannot
make (an object's generation, a conditional upload) go through a google-cloud-storage client
made as Beam makes its own (`gcs_blob`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.contract.layout import staged_name
from transforms.files import create_file, is_remote, special_kind

logger = logging.getLogger(__name__)
_DELETE_THREADS = 16  # local files deleted at once


def staging_path(output: str, run_id: str) -> str:
    parent, name = output.rstrip("/").rsplit("/", 1)
    return f"{parent}/{staged_name(name, run_id)}"


def discard(staging: str) -> None:
    """Removes a staging folder after a failed run (what a reader could never see anyway)."""
    try:
        delete_folder(staging)
    except OSError as e:  # the run already failed; leave the hidden folder and say so
        logger.warning("could not remove staging folder %s: %s", staging, e)


def delete_folder(folder: str) -> None:
    """Deletes a folder and everything under it; nothing if there is none."""
    if is_remote(folder):
        if list_objects(folder):  # an object store has no folders: delete what is under it
            delete_paths([folder + "/"])
    elif FileSystems.exists(folder):
        # its files on several threads: freeing the pages of gigabytes of spill files keeps one
        # thread busy for seconds
        files = [os.path.join(root, name) for root, _, names in os.walk(folder) for name in names]
        with ThreadPoolExecutor(_DELETE_THREADS) as pool:
            list(pool.map(os.remove, files))
        delete_paths([folder])


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


def delete_paths(paths: list[str]) -> None:
    """FileSystems.delete, failing with an OSError naming what could not be deleted."""
    try:
        FileSystems.delete(paths)
    except OSError:
        raise
    except Exception as e:  # gcsio's batch delete fails so when no retry got an answer
        more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
        raise OSError(f"could not delete {paths[0]}{more}: {type(e).__name__}: {e}") from e


def list_objects(folder: str) -> list[str]:
    """Every object under a remote folder, at any depth, sorted."""
    result = FileSystems.match([folder.rstrip("/") + "/**"])[0]
    return sorted(m.path for m in result.metadata_list)


def gcs_blob(path: str):
    """A google-cloud-storage Blob of a gs:// path, through a client made as Beam makes its own
    (credentials and endpoint alike); made anew each time, as Beam does, so that it follows the
    environment (an emulator) of the moment."""
    from apache_beam.io.gcp.gcsio import GcsIO, parse_gcs_path

    bucket, name = parse_gcs_path(path)
    return GcsIO().client.bucket(bucket).blob(name)


def read_object(path: str) -> tuple[bytes, int] | None:
    """An object's bytes and generation (the bytes of that very generation); None if absent."""
    from google.api_core.exceptions import NotFound, PreconditionFailed

    for _ in range(3):  # replaced between the two requests: read the new one
        blob = gcs_blob(path)
        try:
            blob.reload()
            return blob.download_as_bytes(if_generation_match=blob.generation), blob.generation
        except NotFound:
            return None
        except PreconditionFailed:
            continue
    raise OSError(f"{path} keeps changing; could not read it")


# The most read of one of a dataset's small files (manifest.json, statistics.json, schema.pbtxt,
# a --schema file): a real one is kilobytes to a few megabytes.
READ_LIMIT = 256 << 20


def read_if_exists(path: str, limit: int = READ_LIMIT) -> bytes | None:
    """The bytes of a local or remote file; None when there is none. ValueError naming the file,
    unread, when a local one is not a regular file (a FIFO would never end, a link to /dev/zero
    never stop) or when it holds more than `limit` bytes."""
    if not FileSystems.exists(path):
        return None
    if not is_remote(path):
        kind = special_kind(path) or ("a folder" if os.path.isdir(path) else None)
        if kind is not None:
            raise ValueError(f"{path}: is {kind}, not a regular file: refused unread")
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path}: larger than {limit:,} bytes: refused (not a file of a dataset)")
    return data
