"""The JAX reader: this process's share of the split, batches ahead on the device, exact
resumption by step, one pass without shuffling, and a model that learns from it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from trainer.readers import jax_batches  # noqa: E402  (after the skip)


def _ids(batches) -> list[list[int]]:
    return [np.asarray(b["id"]).tolist() for b in batches]


def test_processes_read_disjoint_shares_in_as_many_steps(dataset):
    shares = [
        _ids(jax_batches(str(dataset.root), "train", 16, shuffle=False, process_index=i,
                         process_count=3))
        for i in range(3)
    ]  # fmt: skip
    flat = [sorted(sum(share, [])) for share in shares]
    assert sorted(sum(flat, [])) == sorted(r["id"] for r in dataset.rows["train"])
    assert len({len(share) for share in shares}) == 1


def test_the_default_process_is_jaxs_own(dataset):
    assert jax.process_index() == 0 and jax.process_count() == 1
    everything = _ids(jax_batches(str(dataset.root), "eval", 7, shuffle=False, deterministic=True))
    assert sum(everything, []) == [r["id"] for r in dataset.rows["eval"]]
    assert [len(b) for b in everything] == [7] * 8 + [4]


def test_a_resumed_run_gets_the_batches_that_follow_across_epochs(dataset):
    full = _ids(itertools.islice(jax_batches(str(dataset.root), "train", 32, seed=9), 30))
    for start in (3, 8, 17):
        resumed = jax_batches(str(dataset.root), "train", 32, seed=9, start_step=start)
        assert _ids(itertools.islice(resumed, 30 - start)) == full[start:]
    epochs = [sorted(sum(full[i * 8 : (i + 1) * 8], [])) for i in range(3)]
    assert epochs[0] == epochs[1] == sorted(r["id"] for r in dataset.rows["train"])
    assert full[:8] != full[8:16]


def test_numbers_are_on_the_device_and_strings_stay_numpy(dataset):
    batch = next(jax_batches(str(dataset.root), "train", 16))
    assert isinstance(batch["flipper_mm"], jax.Array) and batch["flipper_mm"].shape == (16,)
    assert isinstance(batch["embedding"], jax.Array) and batch["embedding"].shape == (16, 4)
    assert isinstance(batch["sex"], np.ndarray) and batch["sex"].dtype == object
    assert batch["species"].dtype == np.int64  # kept as numpy: JAX would narrow it


def test_a_linear_model_learns_the_penguins_species(dataset):
    batches = jax_batches(str(dataset.root), "train", 32, seed=0)

    def inputs(batch):
        flipper = (jax.numpy.asarray(batch["flipper_mm"]) - 200.0) / 20.0
        island = jax.nn.one_hot(np.asarray(batch["island"]), 4)
        return jax.numpy.concatenate([flipper[:, None], island, flipper[:, None] * island], 1)

    def loss(w, x, y):
        logits = x @ w
        return -jax.numpy.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1).mean()

    grad = jax.jit(jax.grad(loss))
    w = jax.numpy.zeros((9, 3))
    for batch in itertools.islice(batches, 400):
        w = w - 0.5 * grad(w, inputs(batch), jax.numpy.asarray(batch["species"]))
    right = total = 0
    for batch in jax_batches(str(dataset.root), "eval", 64, shuffle=False):
        predicted = np.asarray((inputs(batch) @ w).argmax(1))
        right += int((predicted == np.asarray(batch["species"])).sum())
        total += len(predicted)
    assert total == 60 and right / total > 0.85


_ON_TWO_DEVICES = """
import json, sys
import jax
import numpy as np
from trainer.readers import jax_batches

root, out = sys.argv[1], {"devices": len(jax.local_devices())}
for size in (8, 7):  # 8 splits in two; 7 does not: each batch goes whole to the first device
    batches = list(jax_batches(root, "eval", size, shuffle=False, deterministic=True))
    out[size] = {
        "ids": [np.asarray(b["id"]).tolist() for b in batches],
        "flipper": [np.asarray(b["flipper_mm"]).tolist() for b in batches],
        "rows": [[s.data.shape[0] for s in b["embedding"].addressable_shards] for b in batches],
    }
mesh = jax.sharding.Mesh(np.array(jax.local_devices()), ("d",))
copies = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())  # given: replicated
batch = next(jax_batches(root, "eval", 7, shuffle=False, sharding=copies))
out["given"] = [s.data.shape[0] for s in batch["flipper_mm"].addressable_shards]
print(json.dumps(out))
"""


def test_batches_split_along_the_batch_over_the_local_devices(dataset):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",  # before JAX starts
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(root),
    }
    done = subprocess.run(
        [sys.executable, "-c", _ON_TWO_DEVICES, str(dataset.root)],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["devices"] == 2
    for size in (8, 7):
        here = list(jax_batches(str(dataset.root), "eval", size, shuffle=False,
                                deterministic=True))  # fmt: skip
        assert got[str(size)]["ids"] == [np.asarray(b["id"]).tolist() for b in here]
        assert got[str(size)]["flipper"] == [np.asarray(b["flipper_mm"]).tolist() for b in here]
    # each device holds half of every batch that splits evenly; batches of 7 stay whole
    assert got["8"]["rows"] == [[4, 4]] * 7 + [[2, 2]]
    assert got["7"]["rows"] == [[7]] * 8 + [[2, 2]]
    assert got["given"] == [7, 7]  # a given sharding: each device a whole copy


def test_a_process_that_leaves_batches_unread_exits_cleanly_every_time(dataset):
    """The child above leaves its last iterator unread; its reading and decoding threads must
    have ended before the process exits (else 1 run in about 20 aborted with "terminate called
    without an active exception"). 16 runs, 4 at a time."""
    import concurrent.futures
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(root),
    }

    def run(_):
        done = subprocess.run(
            [sys.executable, "-c", _ON_TWO_DEVICES, str(dataset.root)],
            cwd=root, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        return done.returncode, done.stderr[-300:]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(16)))
    assert [r for r in results if r[0] != 0] == []
