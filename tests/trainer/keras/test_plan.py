"""The input pipeline's knobs derived from the manifest and the flags (trainer/keras/plan.py)."""

from __future__ import annotations

import os

import pytest

from tests.trainer.datasets import make_rows, write_dataset
from trainer.dataset.manifest import load_manifest
from trainer.flags import parse_args
from trainer.keras.input import DEFAULT_READ_BATCH, INPUTS
from trainer.keras.plan import InputFlags, default_read_batch, plan_input, record_size


@pytest.fixture(scope="module")
def sized(tmp_path_factory):
    """The same 3,000 rows, gzip and uncompressed: train 2,400 rows in 8 shards."""
    rows = make_rows(3000)
    out = {}
    for compression in ("gzip", "none"):
        root = tmp_path_factory.mktemp(compression)
        write_dataset(root, rows, compression=compression, splits={"train": 8, "eval": 1})
        out[compression] = load_manifest(str(root))
    return out


def test_record_size_is_exact_uncompressed_and_sampled_when_compressed(sized):
    exact = record_size(sized["none"], "train")
    sampled = record_size(sized["gzip"], "train")
    files = sized["none"].splits["train"].files
    assert exact == (sum(f.bytes for f in files) - 16 * 2400) // 2400
    assert abs(sampled - exact) <= 0.1 * exact  # the first 256 records of the first shard


def test_defaults_come_from_the_dataset(sized):
    plan = plan_input(sized["none"], InputFlags())
    assert plan.shuffle_buffer == 2400  # 10,000 records, but the split holds 2,400
    assert plan.read_batch == 1  # a small split is shuffled record by record
    assert [default_read_batch(n) for n in (2400, 10_000, 64_000, 10**6)] == [1, 5, 32, 32]
    assert DEFAULT_READ_BATCH == 32
    assert plan.cycle_length == min(8, max(4, os.cpu_count()))
    assert plan.cache is False  # the size of the model inputs is not known: nothing cached
    assert plan.ram_budget_bytes >= 256 * 2**20
    # two workers share the 8 shards: each reads 4
    assert plan_input(sized["none"], InputFlags(), workers=2).cycle_length == 4


def test_flags_win_over_the_defaults(sized):
    flags = InputFlags(shuffle_buffer=50, read_batch=4, cycle_length=2, block_length=3)
    plan = plan_input(sized["none"], flags)
    assert (plan.shuffle_buffer, plan.read_batch, plan.cycle_length, plan.block_length) == (
        50,
        4,
        2,
        3,
    )


def test_fixed_model_inputs_that_fit_a_quarter_of_the_budget_are_cached(sized):
    m = sized["none"]
    plan = plan_input(m, InputFlags(), input_bytes=100)
    assert (plan.cache, plan.read_batch) == (INPUTS, 8)  # runs of 8 records, parsed once
    assert plan_input(m, InputFlags(ram_budget_mb=1), input_bytes=200).cache is False
    assert plan_input(m, InputFlags(cache="none"), input_bytes=100).cache is False
    assert plan_input(m, InputFlags(read_batch=3), input_bytes=100).read_batch == 3


def test_the_shuffle_buffer_fits_a_quarter_of_the_ram_budget(sized):
    m = sized["none"]
    plan = plan_input(m, InputFlags(ram_budget_mb=1))
    assert plan.ram_budget_bytes == 2**20
    assert plan.shuffle_buffer == 2**20 // 4 // plan.record_bytes < 2400
    assert plan.shuffle_buffer * plan.record_bytes <= 2**20 // 4


def test_memory_cache_moves_to_a_local_file_when_the_split_is_too_big(sized, tmp_path, caplog):
    m = sized["none"]
    assert plan_input(m, InputFlags(cache="memory")).cache == "memory"
    split_mb = 2400 * record_size(m, "train") / 2**20
    assert split_mb > 0.5  # more than half of a 1 MB budget
    plan = plan_input(m, InputFlags(cache="memory", ram_budget_mb=1), cache_dir=str(tmp_path))
    assert plan.cache == str(tmp_path / "train.cache")
    assert "caching to a local file instead" in caplog.text
    disk = plan_input(m, InputFlags(cache="disk"), cache_dir=str(tmp_path))
    assert disk.cache == str(tmp_path / "train.cache")


def test_input_flags_on_the_command_line():
    cfg = parse_args(
        ["--data", "d", "--model-dir", "m", "--read-batch", "8", "--cycle-length", "3",
         "--block-length", "2", "--shuffle-buffer", "100", "--cache", "--input-ram-mb", "64",
         "--checkpoint-every", "50"]
    )  # fmt: skip
    assert cfg.input == InputFlags(
        shuffle_buffer=100, read_batch=8, cycle_length=3, block_length=2, cache="memory",
        ram_budget_mb=64,
    )  # fmt: skip
    assert parse_args(["--data", "d", "--model-dir", "m"]).input.cache == "auto"
    assert cfg.checkpoint_every == 50
    assert parse_args(["--data", "d", "--model-dir", "m", "--cache", "disk"]).input.cache == "disk"
    defaults = parse_args(["--data", "d", "--model-dir", "m"])
    assert defaults.input == InputFlags() and defaults.checkpoint_every is None
