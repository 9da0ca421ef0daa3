"""`shardflow train` keeps its memory bounded over epochs (trainer/task.py, trainer/keras/input.py).

One run of several epochs with evaluation on a dataset large enough for the shuffle buffer and
the input pipelines to matter. The process's resident set (VmRSS in /proc/PID/status) is sampled
every 0.2 s, and each sample is assigned to the epoch whose progress lines (Keras verbose=2:
`Epoch k/N` when it begins, `S/S - ...` once its training and evaluation are done) bracket it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.trainer.datasets import REPO, make_rows, write_dataset

ROWS = 30_000  # 24,000 train records in 2 shards, 6,000 eval records in 1
EPOCHS = 8
BATCH = 128
SAMPLE_SECONDS = 0.2
# Measured here: the per-epoch peak rises by ~1 MB per epoch in a saw-tooth that falls back
# every 6 to 15 epochs (+20-25 MB from epoch 2 to epoch 8, +26 MB from epoch 3 to 60, flat at
# the end). A leaked per-epoch pipeline (eval dataset, iterator with its buffers) costs more.
GROWTH_LIMIT_MB = 50
TIMEOUT = 420


def _rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return None  # gone, or a zombie without VmRSS


def _run_sampled(args: list[str]) -> tuple[int, list[tuple[float, str]], list[tuple[float, float]]]:
    """Runs `python ARGS`; returns (exit code, timed stdout lines, timed RSS samples in MB)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO))
    env.pop("TF_CONFIG", None)
    env.pop("TPU_NAME", None)
    proc = subprocess.Popen(
        [sys.executable, *args], cwd=REPO, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    lines: list[tuple[float, str]] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append((time.monotonic(), line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    samples: list[tuple[float, float]] = []
    deadline = time.monotonic() + TIMEOUT
    while proc.poll() is None and time.monotonic() < deadline:
        rss = _rss_mb(proc.pid)
        if rss is not None:
            samples.append((time.monotonic(), rss))
        time.sleep(SAMPLE_SECONDS)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    reader.join(timeout=10)
    return proc.returncode, lines, samples


def _per_epoch_peaks(
    lines: list[tuple[float, str]], samples: list[tuple[float, float]]
) -> list[float]:
    """The highest RSS sampled during each epoch (training and its evaluation)."""
    begins = [t for t, line in lines if re.match(r"Epoch \d+/\d+$", line)]
    ends = [t for t, line in lines if re.match(r"\d+/\d+ - ", line)]
    assert len(begins) == len(ends) == EPOCHS, [line for _, line in lines]
    peaks = []
    for begin, end in zip(begins, ends):
        during = [rss for t, rss in samples if begin <= t <= end]
        # An epoch shorter than a sampling period: the sample closest to its end stands in.
        peaks.append(max(during) if during else min(samples, key=lambda s: abs(s[0] - end))[1])
    return peaks


@pytest.mark.slow
def test_memory_stops_growing_after_the_first_epochs(tmp_path: Path):
    data = write_dataset(tmp_path / "data", make_rows(ROWS))
    model_dir = tmp_path / "model"

    code, lines, samples = _run_sampled(
        ["-m", "trainer.task", "--data", str(data.root), "--model-dir", str(model_dir),
         "--epochs", str(EPOCHS), "--batch-size", str(BATCH)]
    )  # fmt: skip

    assert code == 0, "\n".join(line for _, line in lines[-20:])
    peaks = _per_epoch_peaks(lines, samples)
    report = ", ".join(f"epoch {i}: {mb:.0f} MB" for i, mb in enumerate(peaks, 1))
    print(f"peak RSS per epoch: {report}")  # shown with pytest -rP
    settled = max(peaks[:2])  # shuffle buffers filled, eval pipeline built and run once
    late = max(peaks[EPOCHS // 2 :])
    assert late - settled <= GROWTH_LIMIT_MB, report
    assert (model_dir / "metrics.json").is_file()
