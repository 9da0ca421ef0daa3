"""Fixtures of the trainer tests: the dataset of tests/trainer/datasets.py, one training run, and
the same dataset with a tf.Transform output (shards raw, and a copy with transformed shards)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.trainer.datasets import (
    Dataset,
    add_transform,
    make_rows,
    run_python,
    write_dataset,
)


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> Dataset:
    """300 rows: train in 2 gzip shards (240 rows), eval in 1 (60 rows)."""
    return write_dataset(tmp_path_factory.mktemp("penguins"), make_rows(300))


@pytest.fixture(scope="session")
def trained(dataset, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One epoch of `python -m trainer.task` on the dataset: (model dir, finished process)."""
    model_dir = tmp_path_factory.mktemp("model")
    proc = run_python(
        "-m", "trainer.task",
        "--data", str(dataset.root),
        "--model-dir", str(model_dir),
        "--epochs", "1",
        "--batch-size", "32",
        "--deterministic",
    )  # fmt: skip
    return model_dir, proc


@pytest.fixture(scope="session")
def tft_datasets(tmp_path_factory) -> tuple[Dataset, Dataset]:
    """(raw, materialized): the 300 rows with DATASET/transform/ analyzed on train by tft_beam.

    `raw` holds raw shards (`materialize: raw`); `materialized` the same splits as transformed
    examples, one shard each (`materialize: transformed`). Never modify them: copy first.
    """
    base = tmp_path_factory.mktemp("penguins_tft")
    raw = add_transform(write_dataset(base / "raw", make_rows(300)), base / "transformed")
    manifest = json.loads((base / "transformed" / "manifest.json").read_text())
    return raw, Dataset(root=base / "transformed", manifest=manifest, rows=raw.rows)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes more than 10 s (still runs in CI)")
