"""The baselines of benchmarks/gpu_feed.py read what the readers read: its tf.train.Example
built from a descriptor (no TensorFlow on the GPU machine) parses records as TensorFlow's does,
and its per-record reader yields the records' values; its account of where the cores went
tells a busy loader worker from an idle one."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from benchmarks.gpu_feed import Cores, example_class, per_record_dataset
from trainer.dataset.framing import read_shard
from trainer.dataset.union import load_datasets
from trainer.readers.stream import Reader

torch = pytest.importorskip("torch")


def test_the_example_message_parses_as_tensorflow_does(dataset):
    data = load_datasets(str(dataset.root))
    shard = data.shards("train")[0]
    records = [r for run in read_shard(shard, data.wbits) for r in run][:20]
    Example = example_class()
    for record in records:
        ours, theirs = Example.FromString(record), tf.train.Example.FromString(record)
        assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
            deterministic=True
        )
        assert set(ours.features.feature) == set(theirs.features.feature)


def test_the_per_record_reader_yields_each_record_in_file_order(dataset):
    data = load_datasets(str(dataset.root))
    shard = data.shards("eval")[0]
    rows = iter(per_record_dataset([shard.path], dict(data.features)))
    got = [next(rows) for _ in range(shard.records)]
    reader = Reader(str(dataset.root), "eval", shard.records, shuffle=False, deterministic=True)
    want = next(reader.batches(reader.layout(), 0))
    assert [int(r["id"]) for r in got] == want["id"].tolist()
    np.testing.assert_allclose([r["flipper_mm"] for r in got], want["flipper_mm"], rtol=1e-6)


def test_cores_counts_a_busy_worker_and_not_an_idle_one():
    import subprocess
    import sys
    import time

    spin = "import time\nend = time.perf_counter() + 2.5\nwhile time.perf_counter() < end: pass"
    busy = subprocess.Popen([sys.executable, "-c", spin])  # not forked: JAX may hold threads
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2.5)"])
    try:
        time.sleep(0.6)  # both started
        cores = Cores([busy.pid, idle.pid])
        time.sleep(0.8)
        spent = cores.since()
    finally:
        busy.wait(), idle.wait()
    each = spent["each"]
    assert each[busy.pid] > 0.3  # near 1 core, less on a loaded machine
    assert each[idle.pid] < 0.05
    assert spent["training_process"] < 0.2  # this process slept
    assert 0 < spent["machine_busy"] <= 1
