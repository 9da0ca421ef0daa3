"""`shardflow train` under faults: a corrupt shard, and a run killed with SIGKILL.

The datasets are written by tests.trainer.datasets (independent of trainer/). A corrupt
shard has one byte flipped; the records the trainer can still read are computed here from the
TFRecord framing (u64 length, u32 CRC, payload, u32 CRC), not by the trainer's own scan.
"""

from __future__ import annotations

import json
import math
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainer.datasets import REPO, Dataset, make_rows, write_dataset
from tests.trainer.test_task import EVAL_METRICS
from trainer.task import main

SHARDFLOW = str(Path(sys.executable).with_name("shardflow"))
# 300 rows: train is 240 rows in 2 shards of 120, eval 60 rows in 1 shard.
TRAIN_SHARD = "train/train-00001-of-00002.tfrecord"
RECORD_TO_BREAK = 50


def _env() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO))
    for name in ("TPU_NAME", "TF_CONFIG"):
        env.pop(name, None)
    return env


def _train(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SHARDFLOW, "train", *args], cwd=REPO, env=_env(), capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def _fail(proc: subprocess.CompletedProcess) -> str:
    return f"rc={proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


def _record_offsets(data: bytes) -> list[int]:
    """Start offset of each record of an uncompressed TFRecord file."""
    offsets, at = [], 0
    while at < len(data):
        offsets.append(at)
        (length,) = struct.unpack_from("<Q", data, at)
        at += 8 + 4 + length + 4
    return offsets


def _flip_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x20
    path.write_bytes(bytes(data))


def _corrupt_uncompressed(root: Path) -> Path:
    """Flips a payload byte of record RECORD_TO_BREAK of TRAIN_SHARD (0-based)."""
    shard = root / TRAIN_SHARD
    start = _record_offsets(shard.read_bytes())[RECORD_TO_BREAK]
    _flip_byte(shard, start + 8 + 4 + 10)
    return shard


def _corrupt_gzip(root: Path) -> Path:
    """Flips a byte in the middle of the compressed stream of TRAIN_SHARD.gz."""
    shard = root / (TRAIN_SHARD + ".gz")
    _flip_byte(shard, shard.stat().st_size // 2)
    return shard


def _dataset(tmp_path: Path, compression: str) -> Dataset:
    return write_dataset(tmp_path / "data", make_rows(300), compression=compression)


@pytest.mark.slow
def test_corrupt_gzip_shard_fails_with_one_line_naming_the_file(tmp_path):
    data = _dataset(tmp_path, "gzip")
    shard = _corrupt_gzip(data.root)

    proc = _train("--data", str(data.root), "--model-dir", str(tmp_path / "model"), "--epochs", "1")

    assert proc.returncode == 1, _fail(proc)
    last = proc.stderr.splitlines()[-1]
    assert last.startswith(
        f"shardflow train: corrupt shard {shard}: only 0 of its 120 records can be read "
        "(DataLossError: inflate() failed"
    ), _fail(proc)
    assert last.endswith("; rerun with --skip-corrupt to train without the unreadable records")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "model" / "metrics.json").exists()
    assert not (tmp_path / "model" / "export").exists()


def test_corrupt_uncompressed_shard_fails_with_exit_1_naming_the_file(tmp_path, capsys):
    data = _dataset(tmp_path, "none")
    shard = _corrupt_uncompressed(data.root)

    status = main(["--data", str(data.root), "--model-dir", str(tmp_path / "m"), "--epochs", "1"])

    assert status == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith(
        f"shardflow train: corrupt shard {shard}: only {RECORD_TO_BREAK} of its 120 records "
        "can be read (DataLossError: corrupted record at "
    ), err
    assert not (tmp_path / "m" / "metrics.json").exists()


@pytest.mark.slow
def test_skip_corrupt_trains_on_the_rest_and_counts_the_skipped_records(tmp_path, caplog):
    data = _dataset(tmp_path, "none")
    shard = _corrupt_uncompressed(data.root)
    model_dir = tmp_path / "model"
    skipped = 120 - RECORD_TO_BREAK

    status = main(
        ["--data", str(data.root), "--model-dir", str(model_dir), "--epochs", "2",
         "--batch-size", "32", "--skip-corrupt"]
    )  # fmt: skip

    assert status == 0
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert (metrics["skipped_records"], metrics["corrupt_files"]) == (skipped, [str(shard)])
    steps = math.ceil((240 - skipped) / 32)
    assert (metrics["steps_per_epoch"], metrics["steps"]) == (steps, 2 * steps)
    assert sorted(metrics["eval"]) == EVAL_METRICS
    assert (
        f"split 'train': corrupt shard {shard}: skipping {skipped} of its 120 records "
        f"({RECORD_TO_BREAK} readable)"
    ) in caplog.messages
    assert f"--skip-corrupt: {skipped} records skipped in all" in caplog.messages


@pytest.mark.slow
def test_skip_corrupt_on_a_gzip_shard_skips_the_whole_file(tmp_path, caplog):
    # The reader decompresses in blocks of 256 KiB: a bad block in a small shard loses all of it.
    data = _dataset(tmp_path, "gzip")
    shard = _corrupt_gzip(data.root)
    model_dir = tmp_path / "model"

    status = main(
        ["--data", str(data.root), "--model-dir", str(model_dir), "--epochs", "1",
         "--batch-size", "32", "--skip-corrupt"]
    )  # fmt: skip

    assert status == 0
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert (metrics["skipped_records"], metrics["corrupt_files"]) == (120, [str(shard)])
    assert (metrics["steps_per_epoch"], metrics["steps"]) == (4, 4)  # ceil(120 / 32)
    assert (
        f"split 'train': corrupt shard {shard}: skipping 120 of its 120 records (0 readable)"
    ) in caplog.messages
    assert (model_dir / "export" / "saved_model.pb").is_file()


def test_skip_corrupt_with_every_train_shard_corrupt_exits_2(tmp_path, capsys):
    data = write_dataset(tmp_path / "data", make_rows(40), splits={"train": 1}, compression="gzip")
    shard = data.root / "train/train-00000-of-00001.tfrecord.gz"
    _flip_byte(shard, shard.stat().st_size // 2)

    status = main(["--data", str(data.root), "--model-dir", str(tmp_path / "m"), "--skip-corrupt"])

    assert status == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"shardflow train: {data.root}: split 'train': no readable records left"
    )


RESUME_ARGS = ("--epochs", "3", "--steps-per-epoch", "100", "--batch-size", "16", "--deterministic")


def _kill_after_first_checkpoint(data: Path, model_dir: Path, args: tuple[str, ...]) -> None:
    """Starts `shardflow train`, SIGKILLs it once its first checkpoint exists."""
    killed = subprocess.Popen(
        [SHARDFLOW, "train", "--data", str(data), "--model-dir", str(model_dir), *args],
        cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Polling: the only outside sign of a checkpoint is its file.
        deadline = time.monotonic() + 90
        while not list(model_dir.glob("checkpoints/**/checkpoint")):
            assert killed.poll() is None, "training ended before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint after 90 s"
            time.sleep(0.05)
        assert killed.poll() is None, "training finished before it could be killed"
        killed.send_signal(signal.SIGKILL)
    finally:
        killed.kill()
        killed.wait()
    assert killed.returncode == -signal.SIGKILL
    assert not (model_dir / "metrics.json").exists()


@pytest.mark.slow
def test_killed_training_resumes_and_ends_with_the_same_step_count(tmp_path):
    data = write_dataset(tmp_path / "data", make_rows(200), splits={"train": 2})
    clean_dir, killed_dir = tmp_path / "clean", tmp_path / "killed"
    _kill_after_first_checkpoint(data.root, killed_dir, RESUME_ARGS)

    resumed = _train("--data", str(data.root), "--model-dir", str(killed_dir), *RESUME_ARGS)
    # The uninterrupted run in this process: one TensorFlow start-up less.
    clean = main(["--data", str(data.root), "--model-dir", str(clean_dir), *RESUME_ARGS])

    assert resumed.returncode == 0, _fail(resumed)
    assert clean == 0
    after_kill = json.loads((killed_dir / "metrics.json").read_text())
    uninterrupted = json.loads((clean_dir / "metrics.json").read_text())
    assert uninterrupted["initial_epoch"] == 0
    assert 1 <= after_kill["initial_epoch"] < 3  # resumed from a checkpoint, not from scratch
    assert "Epoch 1/3" not in resumed.stdout
    for run in (after_kill, uninterrupted):
        assert (run["epochs"], run["steps_per_epoch"], run["steps"]) == (3, 100, 300)
    assert (killed_dir / "export" / "saved_model.pb").is_file()


@pytest.mark.slow
def test_checkpoint_every_n_steps_resumes_a_killed_run_mid_epoch(tmp_path):
    args = ("--epochs", "2", "--steps-per-epoch", "200", "--batch-size", "16",
            "--checkpoint-every", "40")  # fmt: skip
    data = write_dataset(tmp_path / "data", make_rows(200), splits={"train": 2})
    model_dir = tmp_path / "m"
    _kill_after_first_checkpoint(data.root, model_dir, args)

    resumed = _train("--data", str(data.root), "--model-dir", str(model_dir), *args)

    assert resumed.returncode == 0, _fail(resumed)
    metrics = json.loads((model_dir / "metrics.json").read_text())
    # resumed at a 40-step checkpoint, inside an epoch, not at an epoch's start
    assert metrics["initial_step"] % 40 == 0 and metrics["initial_step"] % 200 != 0
    assert (metrics["epochs"], metrics["steps_per_epoch"], metrics["steps"]) == (2, 200, 400)


@pytest.mark.slow
def test_a_killed_deterministic_run_resumes_on_exactly_the_examples_of_an_uninterrupted_one(
    tmp_path,
):
    """The resumed input starts after the batches trained on: the same examples in the same
    order give bit-identical weights, hence identical predictions of the two exports."""
    import numpy as np
    import tensorflow as tf

    from tests.trainer.datasets import FEATURES, to_example

    args = ("--epochs", "2", "--steps-per-epoch", "30", "--batch-size", "16",
            "--checkpoint-every", "7", "--deterministic")  # fmt: skip
    data = write_dataset(tmp_path / "data", make_rows(200), splits={"train": 2})
    killed_dir, clean_dir = tmp_path / "killed", tmp_path / "clean"
    _kill_after_first_checkpoint(data.root, killed_dir, args)
    resumed = _train("--data", str(data.root), "--model-dir", str(killed_dir), *args)
    assert resumed.returncode == 0, _fail(resumed)
    assert main(["--data", str(data.root), "--model-dir", str(clean_dir), *args]) == 0

    metrics = json.loads((killed_dir / "metrics.json").read_text())
    assert metrics["initial_step"] > 0 and metrics["initial_step"] % 7 == 0  # mid-run
    assert f"the input skips the {metrics['initial_step']} batches" in resumed.stderr
    checkpoints = sum(
        p.stat().st_size for p in (killed_dir / "checkpoints").rglob("*") if p.is_file()
    )
    assert metrics["checkpoint_bytes"] == checkpoints > 0
    examples = tf.constant(
        [to_example(r, {k: v for k, v in FEATURES.items() if k != "species"}).SerializeToString()
         for r in make_rows(32, seed=5)]
    )  # fmt: skip
    served = [
        tf.saved_model.load(str(d / "export")).signatures["serving_default"](examples=examples)
        for d in (killed_dir, clean_dir)
    ]
    assert np.array_equal(served[0]["probabilities"], served[1]["probabilities"])
