"""The flags of `shardflow etl` (pipelines/flags.py): the tuning options, typed."""

from __future__ import annotations

import pytest

from pipelines.flags import Tuning, build_parser, tuning_from
from transforms.sink.write import SPILL_BYTES
from transforms.sources.ranges import SPLIT_BYTES


def test_without_tuning_flags_the_defaults_are_taken():
    args = build_parser().parse_args(["--config", "c.yaml"])
    assert tuning_from(args) == Tuning() == Tuning(SPLIT_BYTES, SPILL_BYTES, None)
    assert (SPLIT_BYTES, SPILL_BYTES) == (64 << 20, 32 << 20)


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
