"""The flags of `shardflow etl` (pipelines/flags.py): the tuning options, typed."""

from __future__ import annotations

import pytest

from pipelines.config.fields import ConfigError
from pipelines.flags import Tuning, beam_flags, build_parser, tuning_from
from transforms.sink.write import SPILL_BYTES
from transforms.sources.ranges import MIN_SPLIT_BYTES, SPLIT_BYTES, split_size


def test_without_tuning_flags_the_defaults_are_taken():
    args = build_parser().parse_args(["--config", "c.yaml"])
    assert tuning_from(args) == Tuning() == Tuning(None, None, None)  # None: chosen for the run
    assert SPILL_BYTES == 32 << 20


def test_the_automatic_range_size_gives_each_worker_eight_ranges_within_bounds():
    assert (MIN_SPLIT_BYTES, SPLIT_BYTES) == (4 << 20, 64 << 20)
    assert split_size(1 << 30, 16) == 8 << 20  # 1 GB over 16 workers: 128 ranges
    assert split_size(1 << 30, 4) == 32 << 20
    assert split_size(1 << 30, 1) == 64 << 20  # one worker: the largest ranges
    assert split_size(243 << 20, 16) == 4 << 20  # never smaller than 4 MB
    assert split_size(0, 0) == 4 << 20


@pytest.mark.parametrize(
    "flags, workers",
    [
        ([], 1),  # in process
        (["--direct_num_workers", "16", "--direct_running_mode", "multi_processing"], 16),
        (["--direct_num_workers", "3", "--direct_running_mode", "multi_threading"], 3),
        (
            [
                "--runner",
                "DataflowRunner",
                "--max_num_workers",
                "10",
                "--machine_type",
                "n2-standard-8",
            ],
            80,
        ),  # fmt: skip
        (["--runner", "DataflowRunner", "--num_workers", "5"], 5),
    ],
)
def test_parallelism_counts_the_workers_the_runner_will_use(flags, workers):
    from pipelines.runner.options import parallelism, pipeline_options

    assert parallelism(pipeline_options(flags)) == workers


def test_tuning_flags_become_bytes_and_seconds():
    args = build_parser().parse_args(
        ["--config", "c.yaml", "--split-mb", "0.5", "--spill-mb", "2", "--progress-seconds", ".25"]
    )
    assert tuning_from(args) == Tuning(
        split_bytes=1 << 19, spill_bytes=2 << 20, progress_seconds=0.25
    )
    tiny = build_parser().parse_args(["--config", "c.yaml", "--split-mb", "1e-9"])
    assert tuning_from(tiny).split_bytes == 1  # never 0 bytes


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--split-mb", "0", "'0' must be a positive number of MB"),
        ("--spill-mb", "-1", "'-1' must be a positive number of MB"),
        ("--split-mb", "inf", "'inf' must be a positive number of MB"),
        ("--spill-mb", "nan", "'nan' must be a positive number of MB"),
        ("--split-mb", "ten", "'ten' is not a number of MB"),
        ("--progress-seconds", "0", "'0' must be a positive number of seconds"),
        ("--progress-seconds", "soon", "'soon' is not a number of seconds"),
    ],
)
def test_a_bad_tuning_value_is_refused_naming_its_flag(flag, value, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--config", "c.yaml", flag, value])
    assert exit_.value.code == 2
    assert f"argument {flag}: {message}" in capsys.readouterr().err


def test_local_worker_processes_share_the_cores_for_writing(monkeypatch):
    from pipelines.runner.options import pipeline_options, write_threads

    monkeypatch.setattr("os.cpu_count", lambda: 16)
    local = ["--direct_running_mode", "multi_processing", "--direct_num_workers"]
    assert write_threads(pipeline_options([])) == 4  # one process: 4 threads
    assert write_threads(pipeline_options(local + ["4"])) == 4
    assert write_threads(pipeline_options(local + ["8"])) == 2
    assert write_threads(pipeline_options(local + ["16"])) == 1
    assert write_threads(pipeline_options(local + ["64"])) == 1
    dataflow = ["--runner", "DataflowRunner", "--max_num_workers", "100"]
    assert write_threads(pipeline_options(dataflow)) == 4  # a process per vCPU, storage latency
    monkeypatch.setattr("os.cpu_count", lambda: 2)  # the launching machine's cores do not count
    assert write_threads(pipeline_options(dataflow)) == 4


def test_many_local_worker_processes_spill_half_as_much(monkeypatch):
    from pipelines.runner.options import pipeline_options, spill_bytes

    monkeypatch.setattr("os.cpu_count", lambda: 16)
    local = ["--direct_running_mode", "multi_processing", "--direct_num_workers"]
    assert spill_bytes(pipeline_options([])) == SPILL_BYTES
    assert spill_bytes(pipeline_options(local + ["8"])) == SPILL_BYTES
    assert spill_bytes(pipeline_options(local + ["16"])) == SPILL_BYTES // 2
    assert spill_bytes(pipeline_options(["--runner", "DataflowRunner"])) == SPILL_BYTES


def test_encoders_use_no_helper_threads_where_worker_processes_fill_the_cores(monkeypatch):
    from pipelines.runner.options import encode_threads, pipeline_options

    monkeypatch.setattr("os.cpu_count", lambda: 16)
    local = ["--direct_running_mode", "multi_processing", "--direct_num_workers"]
    assert encode_threads(pipeline_options([])) == 2
    assert encode_threads(pipeline_options(local + ["8"])) == 2
    assert encode_threads(pipeline_options(local + ["16"])) == 0
    assert encode_threads(pipeline_options(["--runner", "DataflowRunner"])) == 2


@pytest.mark.parametrize(
    "beam_args, expected",
    [
        (["--runner=DirectRunner", "--direct_num_workers", "2"],
         ["--runner=DirectRunner", "--direct_num_workers", "2"]),
        # our spelling, with dashes, is taken for Beam's snake_case
        (["--direct-num-workers", "2", "--temp-location=gs://b/tmp"],
         ["--direct_num_workers", "2", "--temp_location=gs://b/tmp"]),
    ],
)  # fmt: skip
def test_beam_options_are_taken_in_either_spelling(beam_args, expected):
    assert beam_flags(beam_args, build_parser()) == expected


@pytest.mark.parametrize(
    "flag, hint",
    [("--overwirte", "--overwrite"), ("--direct_num_worker", "--direct_num_workers")],
)
def test_a_flag_nobody_knows_is_an_error_naming_the_nearest(flag, hint):
    with pytest.raises(ConfigError) as e:
        beam_flags([flag, "x"], build_parser())
    assert str(e.value) == (
        f"{flag}: unknown flag: neither shardflow etl nor Beam knows it; did you mean {hint!r}?"
    )
