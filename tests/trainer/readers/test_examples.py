"""examples/torch/train.py and examples/jax/train.py train on the shapes sample, a few steps on
CPU: the loss falls and the eval split is read through."""

from __future__ import annotations

import json

import pytest

from tests.trainer.datasets import REPO, run_python


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_the_example_trains_on_the_shapes(shapes, framework):
    pytest.importorskip(framework)
    script = REPO / "examples" / framework / "train.py"
    proc = run_python(str(script), str(shapes), "--steps", "60", "--batch-size", "32")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert summary["steps"] == 60
    assert summary["last_loss"] < 0.8 * summary["first_loss"]
    assert summary["eval_accuracy"] > 0.5  # three classes: chance is a third
