"""What MODEL_DIR holds of an earlier run: resumed, refused, or cleared with `--fresh`; and how a
run claims, locks and publishes into it.

The marker. `MODEL_DIR/run.json` is shardflow's record of the folder: the fingerprint of what it
trains (the datasets and their shards' checksums, the model inputs the recipe made, the label,
the model and its sizes), `complete` with the epochs trained, and `wrote`: the names of
MODEL_DIR that shardflow writes (`OUTPUTS`: export/, metrics.json, history.csv, report.html,
logs/, checkpoints/, run.json, each only when it goes to MODEL_DIR) and, where the
checkpoints live elsewhere, their location. `--fresh` deletes only what the marker lists, and
hidden staging entries of those names (`.NAME.incomplete-*`, `.NAME.replaced-*`). A folder
without a marker that holds any of those names was not made by shardflow: it is refused, with or
without --fresh, and nothing in it is deleted. An empty or missing folder, or one that holds
only other names, is fine (the run's entries are written beside them).

The next run with the same --model-dir:
- with the same fingerprint, resumes an interrupted run from its checkpoint, and finds a
  complete one done (nothing to train unless `--epochs` asks for more than it trained); a
  complete folder whose export or metrics.json is missing is not done: it is trained again from
  its last checkpoint and its outputs written anew;
- with another fingerprint (other data, a re-run ETL with other records, another recipe or
  model), or checkpoints without a run.json, is refused with one line naming what differs and
  `--fresh`: a checkpoint of another model cannot be restored into this one;
- with `--fresh`, starts anew: what the marker lists is deleted first.

One writer. The chief holds an exclusive `fcntl.flock` on the MODEL_DIR folder itself (no lock
file among the outputs) for the whole run; the kernel releases it when the process ends, killed
or not. A second run into the folder is refused at once, naming the folder and the writer's pid
(run.json records it when the run claims the folder). On gs:// there is no
lock (GCS has no advisory locks): one writer per gs:// folder is the user's to keep (Vertex AI
jobs each write their own folder).

Publishing. The export is written to a hidden staging folder beside it (`.export.incomplete-PID`)
and renamed into place once complete; an earlier export is moved aside first
(`.export.replaced-PID`) and deleted after, so a run killed between the two renames leaves it
aside, where the next run puts it back. metrics.json, history.csv and report.html are written to
a temporary file and renamed over the old (os.replace); on gs:// an object appears whole when
its upload ends, and a folder is renamed object by object (not atomic). run.json says
`complete` only after all of them are published, and says it no more from the moment
publishing starts: a folder whose run.json says complete holds one run's outputs, whole.

Longer than most modules because the marker, the lock and publishing are one protocol: what
`--fresh` may delete, what resumes and what `complete` promises depend on how a run claims the
folder and publishes into it, so they are kept side by side.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import os
from collections.abc import Iterator, Sequence

import tensorflow as tf

from trainer.config import TrainConfig
from trainer.dataset.manifest import read_file
from trainer.dataset.paths import join
from trainer.keras.inputs import Inputs
from trainer.run.fingerprint import difference, fingerprint
from transforms.contract.layout import (
    REPLACED_TAG,
    STAGED_TAG,
    replaced_name,
    staged_name,
    staged_of,
)
from transforms.ui.errors import UsageError
from transforms.ui.locations import clash

logger = logging.getLogger(__name__)

RUN_FILE = "run.json"
RUN_FILE_LIMIT = 1 << 20  # run.json is a few kilobytes: more is not shardflow's
TRAINING_RUN = "a training run"  # what writes the model folder's files (read_file's `writer`)
EXPORT = "export"
# Every name shardflow writes in MODEL_DIR; the marker lists those a run wrote.
OUTPUTS = (
    EXPORT,
    "metrics.json",
    "history.csv",
    "report.html",
    "logs",
    "checkpoints",
    RUN_FILE,
)
# Outputs a complete run must hold; without one, the run is not reported complete.
REQUIRED = (f"{EXPORT}/saved_model.pb", "metrics.json")


@dataclasses.dataclass(frozen=True)
class Earlier:
    """What MODEL_DIR says of the run before: nothing (`fingerprint` None), or its fingerprint
    and, once it ended, the epochs it trained; `wrote`: the names of MODEL_DIR its marker lists,
    `checkpoints`: where it kept its checkpoints."""

    fingerprint: dict | None = None
    complete: bool = False
    epochs_trained: int = 0
    wrote: tuple[str, ...] = ()
    checkpoints: str | None = None


def check_locations(cfg: TrainConfig, datasets: Sequence[str]) -> None:
    """Refuses (UsageError) a MODEL_DIR, checkpoint or TensorBoard folder that is, is inside or
    holds a dataset the run reads: the next `etl --overwrite` of that dataset would delete the
    model, or `--fresh` the dataset."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    others = [("--data", d) for d in datasets]
    outputs = [("--model-dir", cfg.model_dir), ("the checkpoint folder", cfg.checkpoints)]
    if cfg.logs_dir:
        outputs.append(("the TensorBoard log folder", cfg.logs_dir))
    for output in outputs:
        found = clash([output], others)
        if found:
            raise UsageError(
                f"{found}: a model folder must be apart from the datasets it reads (an ETL run "
                "that replaces the dataset would delete it): choose another --model-dir"
            )


def read(cfg: TrainConfig) -> Earlier:
    """The earlier run's record in MODEL_DIR; UsageError (one line, nothing deleted) when the
    folder is not one shardflow made: a file, a run.json that is not shardflow's, names
    shardflow writes without a run.json, or checkpoints without a record of their run."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    model_dir = cfg.model_dir
    if tf.io.gfile.exists(model_dir) and not tf.io.gfile.isdir(model_dir):
        raise UsageError(
            f"--model-dir {model_dir}: is a file, not a folder: choose a new or empty folder, "
            "or a model folder"
        )
    path = join(model_dir, RUN_FILE)
    if tf.io.gfile.exists(path):
        earlier = _marker(cfg, path)
        _refuse_foreign_checkpoints(cfg, earlier)
        return earlier
    names = _entries(model_dir)
    ours = sorted(n for n in names if n in OUTPUTS or staged_of(n) is not None)
    if ours:
        held = ", ".join(f"{n}/" if tf.io.gfile.isdir(join(model_dir, n)) else n for n in ours)
        raise UsageError(
            f"--model-dir {model_dir}: is not a model folder (no {RUN_FILE}) but holds {held}, "
            "which shardflow did not write and would write over: nothing was deleted; choose "
            "another --model-dir (a new or empty folder)"
        )
    _refuse_foreign_checkpoints(cfg, Earlier())
    return Earlier()


def claim(cfg: TrainConfig, inputs: Inputs, chief: bool, before: Earlier) -> Earlier:
    """Makes MODEL_DIR this run's: cleared with --fresh (what its marker lists), refused
    (UsageError, one line) when it is not a model folder or an earlier run there trained
    something else; returns what the earlier run left. The chief holds the folder's lock and
    reads the folder anew; another worker goes by `before`, what it read before the cluster
    started: from then on the chief writes the folder (a run.json staged and renamed, --fresh
    clearing), and a worker reading it then would find it half-written."""
    mine = fingerprint(cfg, inputs)
    earlier = read(cfg) if chief else before
    if cfg.fresh:
        if chief:
            clear(cfg, earlier)
        earlier = Earlier()
    elif earlier.fingerprint is not None and earlier.fingerprint != mine:
        what = difference(earlier.fingerprint, mine)
        raise UsageError(
            f"--model-dir {cfg.model_dir}: holds a run of {what}: rerun with --fresh to "
            "start anew, or choose another --model-dir"
        )
    if chief:
        _recover(cfg)
        record(cfg, mine, complete=earlier.complete, epochs_trained=earlier.epochs_trained)
    return earlier


def record(cfg: TrainConfig, mine: dict, complete: bool, epochs_trained: int) -> None:
    """Writes MODEL_DIR/run.json, the folder's marker (a temporary file renamed into place)."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    tf.io.gfile.makedirs(cfg.model_dir)
    body = {
        "fingerprint": mine,
        "complete": complete,
        "epochs_trained": epochs_trained,
        "wrote": list(_wrote(cfg)),
        # inside MODEL_DIR, `wrote` names them (the folder may be copied or moved elsewhere)
        "checkpoints": None if _inside(cfg.checkpoints, cfg) else cfg.checkpoints,
        "pid": os.getpid(),  # the writer, named when a second run finds the folder locked
    }
    write_text(join(cfg.model_dir, RUN_FILE), json.dumps(body, indent=1, sort_keys=True) + "\n")


def clear(cfg: TrainConfig, earlier: Earlier) -> None:
    """Deletes what the marker of MODEL_DIR lists (--fresh), staging entries of those names, and
    the checkpoints where the marker says the earlier run kept them; nothing else."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    wrote = set(earlier.wrote)
    paths = [join(cfg.model_dir, n) for n in _entries(cfg.model_dir) if n in wrote]
    paths += [
        join(cfg.model_dir, n)
        for n in _entries(cfg.model_dir)
        if staged_of(n) in wrote | {RUN_FILE}
    ]
    if earlier.checkpoints == cfg.checkpoints:
        paths.append(cfg.checkpoints)
    # the marker last: a folder never holds outputs of ours without it (another worker reads it)
    marker = join(cfg.model_dir, RUN_FILE)
    for path in sorted(paths, key=lambda p: p == marker):
        _remove(path)
    logger.info("--fresh: cleared what an earlier run left in %s", cfg.model_dir)


@contextlib.contextmanager
def locked(cfg: TrainConfig, chief: bool) -> Iterator[None]:
    """Holds MODEL_DIR's lock (the chief, a local folder) while the block runs; UsageError at
    once when another process holds it. gs:// folders are not locked."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    if not chief or "://" in cfg.model_dir:
        yield
        return
    import fcntl  # POSIX; trainer runs on Linux and macOS

    read(cfg)  # a file, or a folder shardflow did not make, is refused before it is touched
    os.makedirs(cfg.model_dir, exist_ok=True)
    # The folder itself is locked: no lock file among the outputs, and the kernel releases
    # the lock when the process ends, however it ends.
    fd = os.open(cfg.model_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            holder = _writer(cfg)
            by = f" (pid {holder})" if holder else ""
            raise UsageError(
                f"--model-dir {cfg.model_dir}: another `shardflow train` is writing to it{by}: "
                "wait for it to end, or choose another --model-dir"
            ) from None
        yield
    finally:
        os.close(fd)  # releases the lock


def _writer(cfg: TrainConfig) -> int | None:
    """The pid run.json names as its writer, when that process is alive (a run holding the
    lock has not always claimed the folder yet: run.json may still be an earlier run's)."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    try:
        record = read_file(join(cfg.model_dir, RUN_FILE), RUN_FILE_LIMIT, None, TRAINING_RUN)
        pid = json.loads(record).get("pid")
        if isinstance(pid, int):
            os.kill(pid, 0)
            return pid
    except (OSError, ValueError, AttributeError):
        pass
    return None


def missing_outputs(cfg: TrainConfig) -> list[str]:
    """The outputs of a complete run that MODEL_DIR lacks (`REQUIRED`)."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    return [n for n in REQUIRED if not tf.io.gfile.exists(join(cfg.model_dir, n))]


def staging(cfg: TrainConfig, name: str) -> str:
    """A hidden location beside MODEL_DIR/NAME to write it before it is published."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    path = join(cfg.model_dir, staged_name(name, os.getpid()))
    _remove(path)
    return path


def publish_folder(cfg: TrainConfig, name: str, staged: str) -> str:
    """Renames the complete folder `staged` to MODEL_DIR/NAME, the earlier one moved aside first
    and deleted after; returns the published path."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    final = join(cfg.model_dir, name)
    aside = join(cfg.model_dir, replaced_name(name, os.getpid()))
    if tf.io.gfile.exists(final):
        _remove(aside)
        tf.io.gfile.rename(final, aside)
    tf.io.gfile.rename(staged, final)
    _remove(aside)
    return final


def write_text(path: str, text: str) -> None:
    """Writes `path` whole or not at all: a temporary file beside it, renamed over it (a gs://
    object appears only when its upload ends)."""
    if "://" in path:
        with tf.io.gfile.GFile(path, "w") as f:
            f.write(text)
        return
    folder, name = os.path.split(path)
    temp = os.path.join(folder, staged_name(name, os.getpid()))
    try:
        with open(temp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.remove(temp)


def discard_staging(cfg: TrainConfig) -> None:
    """Deletes what this process staged in MODEL_DIR and did not publish (a failed run)."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    mine = f"{STAGED_TAG}{os.getpid()}"
    for name in _entries(cfg.model_dir):
        if name.endswith(mine) and staged_of(name) in OUTPUTS:
            _remove(join(cfg.model_dir, name))


def _marker(cfg: TrainConfig, path: str) -> Earlier:
    """The marker at `path`, or UsageError when it is not one shardflow wrote."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    model_dir = cfg.model_dir
    why = None
    found: object = None
    if tf.io.gfile.isdir(path):
        why = "a folder"
    else:
        try:  # a FIFO or a link to /dev/zero named run.json: refused unread (ManifestError)
            found = json.loads(read_file(path, RUN_FILE_LIMIT, None, TRAINING_RUN))
        except (json.JSONDecodeError, UnicodeDecodeError):
            why = "not JSON"
    if why is None and not (isinstance(found, dict) and isinstance(found.get("fingerprint"), dict)):
        why = "no fingerprint of a run in it"
    if why is not None or not isinstance(found, dict):
        raise UsageError(
            f"--model-dir {cfg.model_dir}: {RUN_FILE} is not shardflow's record of a run "
            f"({why}), so what the folder holds cannot be told apart from your own files: "
            "nothing was deleted; choose another --model-dir (a new or empty folder)"
        )
    wrote = found.get("wrote")
    if not isinstance(wrote, list):  # a marker of before `wrote`: its run wrote every name
        wrote = [n for n in OUTPUTS if n != "checkpoints" or _inside(cfg.checkpoints, cfg)]
    checkpoints = found.get("checkpoints")
    if "checkpoints" not in found:  # ... and kept its checkpoints where this run does
        checkpoints = cfg.checkpoints
    elif not isinstance(checkpoints, str):
        checkpoints = join(model_dir, "checkpoints") if "checkpoints" in wrote else None
    return Earlier(
        found["fingerprint"],
        bool(found.get("complete")),
        int(found.get("epochs_trained") or 0),
        tuple(n for n in wrote if n in OUTPUTS),
        checkpoints,
    )


def _refuse_foreign_checkpoints(cfg: TrainConfig, earlier: Earlier) -> None:
    """Checkpoints no marker claims cannot be resumed from, nor deleted."""
    if earlier.checkpoints == cfg.checkpoints or not _has_checkpoint(cfg.checkpoints):
        return
    raise UsageError(
        f"--model-dir {cfg.model_dir}: the checkpoint folder {cfg.checkpoints} holds files of a "
        f"run that says nothing of what it trained (no {RUN_FILE} claims them): nothing was "
        "deleted; move them away, or choose another --model-dir"
    )


def _wrote(cfg: TrainConfig) -> tuple[str, ...]:
    """The names of MODEL_DIR this run writes."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    left_out = set()
    if not _inside(cfg.checkpoints, cfg):
        left_out.add("checkpoints")
    if cfg.logs_dir and cfg.logs_dir != join(cfg.model_dir, "logs"):
        left_out.add("logs")
    return tuple(n for n in OUTPUTS if n not in left_out)


def _inside(path: str, cfg: TrainConfig) -> bool:
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    return path == join(cfg.model_dir, "checkpoints")


def _recover(cfg: TrainConfig) -> None:
    """Under the lock: puts back an export that a killed run moved aside and had not replaced,
    and deletes what killed runs staged."""
    assert cfg.model_dir is not None  # parse_args requires it of a run that trains
    names = _entries(cfg.model_dir)
    for name in names:
        if staged_of(name) == EXPORT and REPLACED_TAG in name and EXPORT not in names:
            tf.io.gfile.rename(join(cfg.model_dir, name), join(cfg.model_dir, EXPORT))
            names.append(EXPORT)
            logger.info("put back %s: a killed run had moved it aside", EXPORT)
    for name in _entries(cfg.model_dir):
        if staged_of(name) in OUTPUTS:
            _remove(join(cfg.model_dir, name))


def _entries(folder: str) -> list[str]:
    if not tf.io.gfile.isdir(folder):
        return []
    return [n.rstrip("/") for n in tf.io.gfile.listdir(folder)]


def _remove(path: str) -> None:
    if not tf.io.gfile.exists(path):
        return
    if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
    else:
        tf.io.gfile.remove(path)


def _has_checkpoint(folder: str) -> bool:
    return tf.io.gfile.exists(folder) and any(names for _, _, names in tf.io.gfile.walk(folder))
