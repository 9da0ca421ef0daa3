"""`shardflow train` on each distribution strategy (trainer/run/strategy.py, trainer/run/fit.py).

multi_worker: a real two-process cluster on 127.0.0.1 (TF_CONFIG, worker 0 is the chief).
mirrored: the real `--strategy mirrored` flag in a process with two logical CPU devices.
tpu: there is no TPU here; what is tested is that asking for one fails fast with one line, and
the lockstep input (whole batches, repeated eval, fixed eval steps) that TPUStrategy shares with
MultiWorkerMirroredStrategy, exercised on the multi-worker cluster.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.services.ports import free_ports
from tests.trainer.datasets import FEATURES, REPO, Dataset
from tests.trainer.test_task import EVAL_METRICS
from trainer.run import strategy as strategies
from trainer.run.report import read_history
from trainer.run.strategy import StrategyError, get_strategy, strategy_name

CLASSES = FEATURES["species"]["values"]
EPOCHS = 2
BATCH = 32
TIMEOUT = 420  # seconds per process: the machine is shared, a cluster start is slow


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO))
    for name in ("TF_CONFIG", "TPU_NAME"):
        env.pop(name, None)
    # Nothing may probe a real metadata server (a TPU name is looked up there).
    env.update(NO_GCE_CHECK="true", GCE_METADATA_HOST=f"127.0.0.1:{_closed_port()}")
    env.update(extra)
    return env


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (connections are refused)."""
    return free_ports(1)[0]


def _train(data: Path, model_dir: Path, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "trainer.task", "--data", str(data), "--model-dir", str(model_dir),
        *args,
    ]  # fmt: skip


def _fail(proc: subprocess.CompletedProcess) -> str:
    return f"rc={proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


def _run_together(
    commands: list[tuple[list[str], dict]], stop_on_failure: bool = True
) -> list[subprocess.CompletedProcess]:
    """Runs the processes at the same time; with `stop_on_failure`, one failing stops them all.

    Processes still running after TIMEOUT are killed (and report a negative return code).
    """
    procs = [
        subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for cmd, env in commands
    ]
    deadline = time.monotonic() + TIMEOUT
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if stop_on_failure and any(p.returncode not in (None, 0) for p in procs):
            break  # a worker that failed leaves its peers waiting in a collective forever
        time.sleep(0.5)
    for p in procs:
        if p.poll() is None:
            p.kill()
    done = []
    for (cmd, _), p in zip(commands, procs):
        out, err = p.communicate()
        done.append(subprocess.CompletedProcess(cmd, p.returncode, out, err))
    return done


def _worker_config(cluster: dict, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


def _progress(stdout: str) -> list[tuple[int, int]]:
    """Keras' verbose=2 epoch lines `STEPS/STEPS - ...` as (steps done, steps per epoch)."""
    return [(int(a), int(b)) for a, b in re.findall(r"^(\d+)/(\d+) - ", stdout, re.M)]


def _records(dataset: Dataset, split: str) -> list[bytes]:
    files = [str(dataset.root / f["path"]) for f in dataset.manifest["splits"][split]["files"]]
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


# --- multi_worker: two local worker processes -----------------------------------------------


@pytest.fixture(scope="module")
def two_workers(dataset, tmp_path_factory):
    """(model dir, [worker 0, worker 1]): one --strategy multi_worker run on two processes."""
    model_dir = tmp_path_factory.mktemp("multi_worker")
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    args = ("--strategy", "multi_worker", "--epochs", str(EPOCHS), "--batch-size", str(BATCH))
    commands = [
        (
            # --deterministic: the eval records each worker takes are known (see below).
            _train(dataset.root, model_dir, *args, "--deterministic"),
            _env(TF_CONFIG=_worker_config(cluster, i)),
        )
        for i in range(2)
    ]
    return model_dir, _run_together(commands)


@pytest.mark.slow
def test_multi_worker_both_workers_exit_0_and_take_the_same_steps(two_workers, dataset):
    model_dir, workers = two_workers
    for worker in workers:
        assert worker.returncode == 0, _fail(worker)
    steps = math.ceil(dataset.manifest["splits"]["train"]["records"] / BATCH)  # 240 / 32 -> 8

    # Every worker logs each epoch's steps; all-reduce makes each step wait for all workers,
    # so equal counts mean both consumed the same number of (per-replica) batches.
    assert [_progress(w.stdout) for w in workers] == [[(steps, steps)] * EPOCHS] * 2
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert (metrics["replicas"], metrics["batch_size"]) == (2, BATCH)
    assert (metrics["steps_per_epoch"], metrics["steps"]) == (steps, steps * EPOCHS)
    assert (metrics["epochs"], metrics["initial_epoch"]) == (EPOCHS, 0)
    assert "model exported to" in workers[0].stdout
    assert "model exported to" not in workers[1].stdout


@pytest.mark.slow
def test_multi_worker_metrics_name_the_strategy(two_workers):
    model_dir, workers = two_workers
    assert workers[0].returncode == 0, _fail(workers[0])
    metrics = json.loads((model_dir / "metrics.json").read_text())
    # The class behind tf.distribute.MultiWorkerMirroredStrategy is CollectiveAllReduceStrategy;
    # metrics.json gives the public name (trainer.run.strategy.strategy_name).
    assert metrics["strategy"] == "MultiWorkerMirroredStrategy"


@pytest.mark.slow
def test_multi_worker_non_chief_leaves_nothing_in_the_model_dir(two_workers):
    model_dir, workers = two_workers
    assert all(w.returncode == 0 for w in workers), _fail(workers[1])

    # Worker 1 wrote its (collective) export and logs to a local temporary folder and removed
    # it; BackupAndRestore keeps only the chief's checkpoints.
    assert {p.name for p in model_dir.iterdir()} == {
        "checkpoints", "export", "history.csv", "logs", "metrics.json", "report.html", "run.json"
    }  # fmt: skip
    assert [p.name for p in (model_dir / "checkpoints").iterdir()] == ["chief"]


@pytest.mark.slow
def test_multi_worker_export_serves_examples_of_the_dataset(two_workers, dataset):
    model_dir, workers = two_workers
    assert workers[0].returncode == 0, _fail(workers[0])
    serve = tf.saved_model.load(str(model_dir / "export")).signatures["serving_default"]

    outputs = serve(examples=tf.constant(_records(dataset, "eval")[:5]))

    probabilities = outputs["probabilities"].numpy()
    assert probabilities.shape == (5, len(CLASSES))
    np.testing.assert_allclose(probabilities.sum(axis=1), np.ones(5), rtol=1e-5)
    assert [c.decode() for c in outputs["classes"].numpy()] == [
        CLASSES[i] for i in probabilities.argmax(axis=1)
    ]


@pytest.mark.slow
def test_multi_worker_eval_runs_whole_global_batches_in_lockstep(two_workers, dataset):
    """Lockstep eval (MultiWorkerMirrored and TPU): repeat, drop the remainder, fixed steps.

    60 eval records, global batch 32: 60 // 32 = 1 step. The eval split is one shard, fewer
    than the workers, so each worker reads it all and keeps every 2nd record: worker 0 takes
    records 0, 2, ..., 30 and worker 1 records 1, 3, ..., 31 — the first 32 records together.
    The last epoch's validation (history.csv) is therefore that of the final (exported) model
    on exactly those 32 records; metrics.json's eval, scored after training on every worker
    alone, covers all 60.
    """
    model_dir, workers = two_workers
    assert workers[0].returncode == 0, _fail(workers[0])
    metrics = json.loads((model_dir / "metrics.json").read_text())
    serve = tf.saved_model.load(str(model_dir / "export")).signatures["serving_default"]
    records = _records(dataset, "eval")
    labels = np.array([CLASSES.index(r["species"]) for r in dataset.rows["eval"]])

    def loss_and_accuracy(n: int) -> tuple[float, float]:
        p = serve(examples=tf.constant(records[:n]))["probabilities"].numpy()
        chosen = np.clip(p[np.arange(n), labels[:n]], 1e-7, 1.0)
        return float(-np.log(chosen).mean()), float((p.argmax(axis=1) == labels[:n]).mean())

    eval_steps = len(records) // BATCH
    loss, accuracy = loss_and_accuracy(eval_steps * BATCH)
    last = read_history(str(model_dir / "history.csv"))[-1]
    assert last["val_loss"] == pytest.approx(loss, rel=1e-4)
    assert last["val_accuracy"] == pytest.approx(accuracy, abs=1e-6)
    whole_loss, whole_accuracy = loss_and_accuracy(len(records))
    assert whole_loss != pytest.approx(loss, rel=1e-4)
    assert metrics["eval"]["loss"] == pytest.approx(whole_loss, rel=1e-4)
    assert metrics["eval"]["accuracy"] == pytest.approx(whole_accuracy, abs=1e-6)
    assert metrics["eval"]["records"] == len(records)


# --- auto ------------------------------------------------------------------------------------


@pytest.fixture
def no_cluster(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.delenv("TF_CONFIG", raising=False)


def _tf_config(workers: int, chief: bool = False) -> str:
    cluster = {"worker": [f"127.0.0.1:{2000 + i}" for i in range(workers)]}
    if chief:
        cluster["chief"] = ["127.0.0.1:1999"]
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})


@pytest.mark.parametrize(
    ("tf_config", "choice"),
    [
        (_tf_config(2), "multi_worker"),
        (_tf_config(1, chief=True), "multi_worker"),
        (_tf_config(1), "default"),  # a one-task cluster is one machine
        (None, "default"),
    ],
)
def test_auto_picks_multi_worker_for_a_cluster_of_several_tasks(
    no_cluster, monkeypatch, tf_config, choice
):
    if tf_config is not None:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    assert strategies._auto_choice() == choice


def test_auto_prefers_a_tpu_named_by_tpu_name(no_cluster, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", _tf_config(2))
    monkeypatch.setenv("TPU_NAME", "grpc://10.0.0.2:8470")
    assert strategies._auto_choice() == "tpu"


def test_auto_with_a_tf_config_that_is_not_json_is_a_clear_error(no_cluster, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "worker=2")
    with pytest.raises(StrategyError, match=r"^TF_CONFIG: not a JSON object with a `cluster`$"):
        strategies._auto_choice()


def test_strategy_name_is_the_public_name(no_cluster):
    assert strategy_name(get_strategy("default")) == "DefaultDistributionStrategy"
    assert strategy_name(tf.distribute.MirroredStrategy(["/cpu:0"])) == "MirroredStrategy"


# --- mirrored ----------------------------------------------------------------------------------

# Two logical CPU devices, then the unmodified CLI: `mirrored` must find both by itself.
TWO_LOGICAL_CPUS = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import trainer.task
sys.exit(trainer.task.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_mirrored_flag_mirrors_over_all_logical_cpus(dataset, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", TWO_LOGICAL_CPUS,
         *_train(dataset.root, tmp_path, "--strategy", "mirrored", "--epochs", "1",
                 "--batch-size", str(BATCH))[3:]],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip

    assert proc.returncode == 0, _fail(proc)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert (metrics["strategy"], metrics["replicas"]) == ("MirroredStrategy", 2)
    assert (metrics["batch_size"], metrics["steps_per_epoch"], metrics["steps"]) == (BATCH, 8, 8)
    assert _progress(proc.stdout) == [(8, 8)]
    assert sorted(metrics["eval"]) == EVAL_METRICS
    assert (tmp_path / "export" / "saved_model.pb").is_file()


# --- tpu (no TPU here) -------------------------------------------------------------------------


def test_tpu_at_an_address_that_refuses_connections_fails_at_once(no_cluster, monkeypatch):
    port = _closed_port()
    monkeypatch.setenv("TPU_NAME", f"grpc://127.0.0.1:{port}")
    started = time.monotonic()

    with pytest.raises(StrategyError) as error:
        get_strategy("tpu")

    assert time.monotonic() - started < 5
    assert str(error.value) == (
        f"--strategy tpu: no TPU at 'grpc://127.0.0.1:{port}' (TPU_NAME, or 'local' when unset): "
        "[Errno 111] Connection refused"
    )


def test_tpu_address_without_a_port_is_a_clear_error(no_cluster, monkeypatch):
    monkeypatch.setenv("TPU_NAME", "grpc://10.0.0.2")
    with pytest.raises(StrategyError, match=r"'grpc://10.0.0.2' is not grpc://HOST:PORT$"):
        get_strategy("tpu")


def test_tpu_name_without_a_metadata_server_is_a_clear_error(no_cluster, monkeypatch):
    # A TPU *name* is resolved through the GCE metadata server; off GCE there is none.
    monkeypatch.setenv("TPU_NAME", "my-tpu")
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{_closed_port()}")
    with pytest.raises(StrategyError, match=r"^--strategy tpu: no TPU at 'my-tpu' .*refused"):
        get_strategy("tpu")


@pytest.mark.slow
def test_tpu_flag_without_a_tpu_exits_1_with_one_line(dataset, tmp_path):
    cases = {
        "unset": None,
        "refused": f"grpc://127.0.0.1:{_closed_port()}",
        "name": "my-tpu",
    }
    commands = []
    for case, tpu_name in cases.items():
        env = _env(**({"TPU_NAME": tpu_name} if tpu_name else {}))
        commands.append((_train(dataset.root, tmp_path / case, "--strategy", "tpu"), env))
    started = time.monotonic()

    procs = _run_together(commands, stop_on_failure=False)

    assert time.monotonic() - started < TIMEOUT
    for (case, tpu_name), proc in zip(cases.items(), procs):
        assert proc.returncode == 1, _fail(proc)
        ours = [line for line in proc.stderr.splitlines() if line.startswith("shardflow train:")]
        address = tpu_name or "local"
        assert len(ours) == 1 and ours == proc.stderr.splitlines()[-1:], _fail(proc)
        assert ours[0].startswith(
            f"shardflow train: training failed: StrategyError: --strategy tpu: no TPU at "
            f"{address!r} (TPU_NAME, or 'local' when unset): "
        ), case
        assert "Traceback" not in proc.stderr, case
        assert not (tmp_path / case).exists(), case
