"""The one "did you mean" rule of every error message that refuses a name."""

from __future__ import annotations

import pytest

from transforms.contract.suggest import did_you_mean, nearest

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
