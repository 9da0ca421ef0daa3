"""The one "did you mean" rule of every error message that refuses a name."""

from __future__ import annotations

import argparse

import pytest

from transforms.ui.args import unrecognized_hint
from transforms.ui.suggest import did_you_mean, flag_hint, nearest

TYPES = ("int", "float", "string", "bytes", "image")


@pytest.mark.parametrize(
    "typed, choices, expected",
    [
        ("integr", TYPES, "int"),
        ("flaot", TYPES, "float"),
        ("CSV", ("csv", "jsonl"), "csv"),  # case
        ("--direct-num-workers", ("--direct_num_workers", "--runner"), "--direct_num_workers"),
        ("trian", ("etl", "train", "inspect"), "train"),
        ("zzz", ("csv", "jsonl"), None),  # nothing close
        ("int", TYPES, None),  # already valid: nothing to suggest
    ],
)
def test_the_nearest_name(typed, choices, expected):
    assert nearest(typed, choices) == expected


def test_the_hint_is_a_sentence_end_or_nothing():
    assert did_you_mean("jsnol", ("csv", "jsonl")) == "; did you mean 'jsonl'?"
    assert did_you_mean("zzz", ("csv", "jsonl")) == ""


def test_an_unknown_flag_of_every_command_is_answered_with_the_nearest_one(capsys):
    from deploy.predict import build_parser as predict_parser
    from trainer.flags import build_parser as train_parser
    from trainer.flags import inspect_parser

    for parser, typed, meant in (
        (train_parser(), ["--data", "d", "--model-dir", "m", "--epocs", "3"], "--epochs"),
        (inspect_parser(), ["d", "--takes", "2"], "--take"),
        (predict_parser(), ["--model-dir", "m", "--data", "d", "--splt", "test"], "--split"),
    ):
        with pytest.raises(SystemExit) as e:
            parser.parse_args(typed)
        assert e.value.code == 2
        last = capsys.readouterr().err.splitlines()[-1]
        assert last.endswith(f"unrecognized arguments: {typed[-2]} {typed[-1]}; "
                             f"did you mean {meant!r}?")  # fmt: skip


def test_the_flag_hint_is_the_nearest_flag_of_all_the_parsers_and_none_when_none_is_close():
    own, other = argparse.ArgumentParser(), argparse.ArgumentParser()
    own.add_argument("--project")
    other.add_argument("--epochs")
    assert flag_hint(["--epocs"], own, other) == "; did you mean '--epochs'?"
    assert flag_hint(["--epochs=3"], own) == ""  # nothing close
    assert flag_hint(["positional", "--PROJECT"], own, other) == "; did you mean '--project'?"
    assert unrecognized_hint(own, "unrecognized arguments: --projct x") == (
        "; did you mean '--project'?"
    )
    assert unrecognized_hint(own, "the following arguments are required: --projct") == ""
