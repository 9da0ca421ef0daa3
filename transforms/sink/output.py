"""What OUTPUT holds, and what a run may replace there.

A folder is a dataset only when its `manifest.json` is a shardflow manifest
(`transforms.contract.manifest.manifest_problem`); a symbolic link at OUTPUT is never followed
nor replaced; a folder of other files is never replaced. `expect` takes, when a run starts, what
it may replace at publication (`Expected`): nothing, or, with `--overwrite`, the dataset OUTPUT
held then. On object stores OUTPUT may also hold the marker of a publication under way
(`PUBLISHING`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import threading
from typing import Any, Callable

from transforms.contract.layout import MANIFEST
from transforms.contract.manifest import manifest_problem
from transforms.files import is_remote
from transforms.sink.storage import list_objects, read_object

PUBLISHING = ".shardflow-publishing"  # on object stores: a publication of ours is under way
STORAGE_ANSWER_S = 30.0  # how long the checks before a run wait for Cloud Storage to answer


class OutputError(ValueError):
    """OUTPUT exists and is something we must not replace."""


class PublishConflict(OutputError):
    """OUTPUT changed while the run ran: another run published there, or is publishing."""


@dataclasses.dataclass(frozen=True)
class OutputState:
    """What OUTPUT holds: a dataset (its manifest's sha256 and `created`) or none; on object
    stores also the marker of a publication under way or killed (its text names the publisher's
    staging folder) and the marker's generation (0: no marker). `partial`: the dataset is the
    trial of `etl --limit` (its manifest's `limit`)."""

    dataset: str | None = None
    created: str | None = None
    partial: bool = False
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
    if not is_remote(output):
        _check_writable(output)
    return Expected(output_state(output, bounded=True), overwrite)


def _check_writable(output: str) -> None:
    """OutputError, before any work, for a local OUTPUT a run could not publish: a mount point
    (the dataset is staged beside OUTPUT and renamed over it, which a mount point refuses), or
    a place whose nearest existing folder cannot be written (permissions, a read-only file
    system)."""
    if os.path.ismount(output):
        raise OutputError(
            f"{output!r} is a mount point: a dataset is staged beside OUTPUT and renamed over "
            "it, which a mount point refuses; give a folder inside it"
        )
    folder = os.path.dirname(os.path.abspath(output))
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(
            f"{output!r} cannot be written: {folder!r} is not writable (its permissions, or a "
            "read-only file system); nothing was read"
        )


def check_output(output: str) -> None:
    """Refuses an OUTPUT that is a symbolic link or a file, or holds something other than a
    shardflow dataset: files without a manifest.json, or a manifest.json that is not ours."""
    output_state(output)


def holds_dataset(output: str) -> bool:
    """True when OUTPUT holds a complete shardflow dataset (its manifest.json): not the partial
    one of `etl --limit`, which `--skip-complete` and a backfill do not skip."""
    try:
        state = output_state(output)
    except OutputError:
        return False
    return state.dataset is not None and not state.partial


def output_state(output: str, bounded: bool = False) -> OutputState:
    """What OUTPUT holds now; raises OutputError when it is not ours to replace. `bounded`: an
    object store that does not answer within STORAGE_ANSWER_S is an OutputError (the checks
    before a run; the publication itself keeps the client's own retries)."""
    if is_remote(output):
        return remote_state(output, bounded)
    return local_state(output)


def _not_ours(output: str, problem: str) -> OutputError:
    return OutputError(
        f"{output!r} holds a {MANIFEST} that is not a shardflow manifest ({problem}); "
        "refusing to replace it"
    )


def local_state(output: str) -> OutputState:
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
    raw = json.loads(data)
    partial = raw.get("limit") is not None
    return OutputState(hashlib.sha256(data).hexdigest(), str(raw.get("created")), partial, **marker)


def _answered(call: Callable[[], Any], output: str) -> Any:
    """What `call` returns, when the object store answers within STORAGE_ANSWER_S; else, or
    when it fails, OutputError naming OUTPUT (its client retries a dead endpoint for minutes,
    then raises a traceback's worth of errors)."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except Exception as e:  # noqa: BLE001 - said below, in one line
            result["error"] = e

    worker = threading.Thread(target=run, daemon=True, name="output-check")
    worker.start()
    worker.join(STORAGE_ANSWER_S)
    if worker.is_alive():
        raise OutputError(
            f"{output!r}: Cloud Storage did not answer in {STORAGE_ANSWER_S:g} s (no network, or "
            "its endpoint is down); nothing was read or written"
        )
    if "error" in result:
        e = result["error"]
        first = (str(e).splitlines() or [type(e).__name__])[0][:300]
        raise OutputError(f"{output!r}: cannot be listed: {first}")
    return result["value"]


def remote_state(output: str, bounded: bool = False) -> OutputState:
    output = output.rstrip("/")
    _, _, rest = output.partition("://")
    if "/" not in rest:
        raise OutputError(f"{output!r} is a bucket root; give a folder inside the bucket")
    objects = _answered(lambda: list_objects(output), output) if bounded else list_objects(output)
    if not objects:
        return OutputState()
    marker: dict[str, Any] = {}
    if f"{output}/{PUBLISHING}" in objects:
        found = read_object(f"{output}/{PUBLISHING}")
        if found is not None:
            text, generation = found
            marker = {"marker": text.decode("utf-8", "replace"), "marker_generation": generation}
    manifest = read_object(f"{output}/{MANIFEST}") if f"{output}/{MANIFEST}" in objects else None
    if manifest is not None:
        return _dataset_state(output, manifest[0], **marker)
    if not marker:
        raise OutputError(f"{output!r} holds files but no {MANIFEST}; refusing to replace it")
    return OutputState(**marker)
