"""The argument types every command shares (transforms/ui/args.py)."""

import argparse

import pytest

from transforms.ui.args import between, positive_int, whole_number


@pytest.mark.parametrize(("text", "why"), [
    ("x", "'x' is not a whole number"),
    ("1.5", "'1.5' is not a whole number"),
    ("-1", "'-1' must be at least 0"),
    ("1001", "'1001' must be at most 1,000"),
])  # fmt: skip
def test_between_names_the_bound_a_number_breaks(text, why):
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{why}$"):
        between(0, 1000)(text)


def test_between_keeps_both_bounds_and_no_upper_one_when_none():
    assert [between(0, 1000)(t) for t in ("0", "1000", " 7 ")] == [0, 1000, 7]
    assert between(1)("10000000000") == 10**10
    assert whole_number("-3") == -3


def test_positive_int_is_between_1_and_no_bound():
    assert positive_int("1") == 1
    with pytest.raises(argparse.ArgumentTypeError, match="^'0' must be at least 1$"):
        positive_int("0")
