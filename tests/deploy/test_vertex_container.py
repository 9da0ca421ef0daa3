"""The trainer as Vertex AI runs it: the image as its Dockerfile builds it, the job's own replicas.

`shardflow launch-training` runs every replica in the trainer image (deploy/vertex/Dockerfile):
its files copied into WORKDIR and installed with the `trainer` extra into a Python with no Beam.
Here that image's Python is a fresh virtual environment built the same way (the Dockerfile's COPY
instructions, then `pip install ".[trainer]"`; the GPU image adds `tensorflow[and-cuda]`, the
same TensorFlow with CUDA's libraries). A two-replica job is printed by `launch-training --dry-run
--replica-count 2`, and each of its worker pools is started as Vertex AI starts a replica: the
pool's container command and args, its env, AIP_MODEL_DIR / AIP_CHECKPOINT_DIR /
AIP_TENSORBOARD_LOG_DIR under the job's base output directory, and a CLUSTER_SPEC naming both
replicas (here on 127.0.0.1), from the image's WORKDIR. No Cloud Storage runs here for
TensorFlow, so the job's bucket, gs://b/, is a local folder: the one change made to the job's
arguments and variables. The two processes train with MultiWorkerMirroredStrategy; the chief
exports; with `--deterministic`, the model's train and eval metrics are those of a one-process run
of the same arguments (within 1e-3; measured: 1e-7). A worker killed after the chief's first
checkpoint makes the chief exit 1 at once; every replica started again (as Vertex AI restarts the
job, `restartJobOnWorkerRestart`) resumes from that checkpoint and ends with the same model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import dockerfile
import pytest
from google.cloud import aiplatform_v1

from tests.deploy.test_vertex import DOCKERFILE, image_files
from tests.services import clean_env
from tests.services.ports import free_ports
from tests.trainer.datasets import make_rows, write_dataset

BUCKET = "gs://b/"
DATA = BUCKET + "datasets/penguins"
MODEL_DIR = BUCKET + "models/penguins"
TRAIN_ARGS = ["--epochs", "2", "--batch-size", "32", "--checkpoint-every", "3", "--deterministic"]
TIMEOUT_S = 420
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> tuple[Path, Path]:
    """(the image's python, its WORKDIR): the Dockerfile's files, installed as it installs them."""
    base = tmp_path_factory.mktemp("trainer-image")
    commands = dockerfile.parse_file(str(DOCKERFILE))
    (workdir_instruction,) = [c for c in commands if c.cmd.upper() == "WORKDIR"]
    workdir = base / "root" / workdir_instruction.value[0].lstrip("/")
    image_files(workdir)
    (arg,) = [c for c in commands if c.cmd.upper() == "ARG"]
    name, _, extras = arg.value[0].partition("=")
    assert name == "EXTRAS"
    python = clean_env.new_env(base / "python")
    clean_env.pip_install(python, f".[{extras}]", cwd=workdir)
    return python, workdir


def _local(value: str, bucket: Path) -> str:
    return value.replace(BUCKET, f"{bucket}/")


def _replica_env(
    python: Path, pool: aiplatform_v1.WorkerPoolSpec, job: aiplatform_v1.CustomJob,
    cluster: Mapping[str, list[str]], index: int, bucket: Path,
) -> dict[str, str]:  # fmt: skip
    """What Vertex AI sets in replica 0 of worker pool `index`."""
    base = job.job_spec.base_output_directory.output_uri_prefix.rstrip("/")
    env = clean_env.minimal_env(
        python,
        AIP_MODEL_DIR=f"{base}/model/",
        AIP_CHECKPOINT_DIR=f"{base}/checkpoints/",
        AIP_TENSORBOARD_LOG_DIR=f"{base}/logs/",
        CLUSTER_SPEC=json.dumps(
            {
                "cluster": dict(cluster),
                "environment": "cloud",
                "task": {"type": f"workerpool{index}", "index": 0},
            }
        ),
        CUDA_VISIBLE_DEVICES="",
        NO_GCE_CHECK="true",  # nothing here may look for a metadata server
    )
    env |= {e.name: e.value for e in pool.container_spec.env}
    return {k: _local(v, bucket) for k, v in env.items()}


def _replicas(
    job: aiplatform_v1.CustomJob, python: Path, workdir: Path, bucket: Path
) -> list[tuple[list[str], dict[str, str], Path]]:
    """(command, env, working folder) of replica 0 of each worker pool, on fresh ports."""
    pools = list(job.job_spec.worker_pool_specs)
    cluster = {f"workerpool{i}": [f"127.0.0.1:{port}"] for i, port in enumerate(free_ports(2))}
    return [
        (
            [_local(a, bucket) for a in (*pool.container_spec.command, *pool.container_spec.args)],
            _replica_env(python, pool, job, cluster, i, bucket),
            workdir,
        )
        for i, pool in enumerate(pools)
    ]


def _start(commands) -> list[subprocess.Popen]:
    """The replicas started, each writing its output to a temporary file (`_output`)."""
    procs = []
    for command, env, cwd in commands:
        log = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        proc.log = log  # type: ignore[attr-defined]
        procs.append(proc)
    return procs


def _output(proc: subprocess.Popen) -> str:
    proc.log.seek(0)  # type: ignore[attr-defined]
    return proc.log.read()  # type: ignore[attr-defined]


def _run_together(commands: list[tuple[list[str], dict[str, str], Path]]) -> list[tuple[int, str]]:
    """Runs the replicas at once; one failing stops the others. (return code, output) each."""
    procs = _start(commands)
    deadline = time.monotonic() + TIMEOUT_S
    while any(p.poll() is None for p in procs):
        if time.monotonic() > deadline or any(p.returncode not in (None, 0) for p in procs):
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.2)  # a poll of the processes, bounded by the deadline
    return [(p.returncode, _output(p)) for p in procs]


@pytest.fixture(scope="module")
def job_run(image, tmp_path_factory):
    """The two-replica job of `launch-training --dry-run`, run as Vertex AI runs it; and a
    one-process `--deterministic` run of the same trainer arguments in this environment."""
    python, workdir = image
    base = tmp_path_factory.mktemp("vertex")
    bucket = base / "gcs" / "b"
    write_dataset(bucket / "datasets" / "penguins", make_rows(300))
    argv = ["--data", DATA, "--model-dir", MODEL_DIR, "--project", "p", "--region", "us-central1",
            "--image", "us-docker.pkg.dev/p/r/trainer:1", "--replica-count", "2", "--dry-run",
            "--", *TRAIN_ARGS]  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from deploy.vertex import launch; "
         "sys.exit(launch.main(sys.argv[1:]))", *argv],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    job = aiplatform_v1.CustomJob.from_json(out.stdout)
    pools = list(job.job_spec.worker_pool_specs)
    commands = _replicas(job, python, workdir, bucket)
    replicas = _run_together(commands)
    alone = base / "alone"
    single = subprocess.run(
        [sys.executable, "-m", "trainer.task", "--data", str(bucket / "datasets" / "penguins"),
         "--model-dir", str(alone), *TRAIN_ARGS],
        capture_output=True, text=True, timeout=TIMEOUT_S,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""),
    )  # fmt: skip
    assert single.returncode == 0, single.stderr[-3000:]
    return job, pools, commands, replicas, bucket, alone, (python, workdir)


@pytest.fixture(scope="module")
def restarted_run(job_run, tmp_path_factory):
    """The same job with its worker killed after the chief's first checkpoint: the chief exits
    on its own; then every replica is started again, as Vertex AI restarts a job whose replica
    failed (restartJobOnWorkerRestart). (chief's return code and output, the restarted
    replicas' (return code, output), the model folder)."""
    job, *_, (python, workdir) = job_run
    bucket = tmp_path_factory.mktemp("vertex-restart") / "gcs" / "b"
    write_dataset(bucket / "datasets" / "penguins", make_rows(300))
    model_dir = bucket / "models" / "penguins"
    chief, worker = _start(_replicas(job, python, workdir, bucket))
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not list(model_dir.glob("checkpoints/**/checkpoint")):  # its only outside sign
            assert chief.poll() is None and worker.poll() is None, "a replica ended early"
            assert time.monotonic() < deadline, "no checkpoint"
            time.sleep(0.05)
        os.killpg(worker.pid, signal.SIGKILL)  # the worker's machine is lost
        chief_code = chief.wait(timeout=120)
    finally:
        for proc in (chief, worker):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    chief_output = _output(chief)
    assert not (model_dir / "metrics.json").exists()
    restarted = _run_together(_replicas(job, python, workdir, bucket))
    return (chief_code, chief_output), restarted, model_dir


def test_the_image_has_the_trainer_and_no_beam(image):
    python, workdir = image
    code = "import trainer.task, importlib.util as u; print(u.find_spec('apache_beam'))"
    done = subprocess.run(
        [str(python), "-P", "-c", code], cwd=workdir, env=clean_env.minimal_env(python),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "None"


def test_the_replicas_run_exactly_the_printed_job(job_run, image):
    job, pools, commands, replicas, bucket, *_ = job_run
    assert len(pools) == 2 and [p.replica_count for p in pools] == [1, 1]
    for pool, (command, env, cwd) in zip(pools, commands):
        assert pool.container_spec.image_uri == "us-docker.pkg.dev/p/r/trainer:1"
        printed = [*pool.container_spec.command, *pool.container_spec.args]
        assert command == [_local(a, bucket) for a in printed]
        assert printed[:2] == ["shardflow", "train"] and "--deterministic" in printed
        assert cwd == image[1]


def test_two_replicas_train_multi_worker_and_the_chief_exports(job_run):
    job, pools, commands, replicas, bucket, alone, _ = job_run
    for code, output in replicas:
        assert code == 0, output[-4000:]
    (chief_code, chief), (_, worker) = replicas
    assert "model exported to" in chief and "model exported to" not in worker
    for output in (chief, worker):  # the cluster came from CLUSTER_SPEC alone, as on Vertex AI
        assert "TF_CONFIG set from Vertex AI's CLUSTER_SPEC" in output
    model_dir = bucket / "models" / "penguins"
    assert (model_dir / "export" / "saved_model.pb").is_file()
    assert sorted(p.name for p in (bucket / "models").iterdir()) == ["penguins"]
    metrics = json.loads((model_dir / "metrics.json").read_text())
    single = json.loads((alone / "metrics.json").read_text())
    assert (metrics["replicas"], single["replicas"]) == (2, 1)
    assert "MultiWorkerMirrored" in metrics["strategy"] or "Collective" in metrics["strategy"]
    assert (metrics["steps"], metrics["batch_size"]) == (single["steps"], single["batch_size"])
    assert metrics["eval"]["records"] == single["eval"]["records"] == 60
    assert metrics["eval"]["accuracy"] > metrics["eval"]["baseline_accuracy"]
    # --deterministic: the replicas train on the batches, dropout masks and order of the one
    # process (trainer.keras.input, trainer.keras.layers.SeededDropout): the same model
    for split in ("train", "eval"):
        for name, value in single[split].items():
            assert abs(metrics[split][name] - value) < 1e-3, (split, name, metrics[split], value)


def test_a_lost_worker_stops_the_chief_and_the_restarted_job_resumes_to_the_same_model(
    job_run, restarted_run
):
    (chief_code, chief), replicas, model_dir = restarted_run
    assert chief_code == 1, chief[-3000:]  # at once, with one line: not a hang
    assert "shardflow train: training failed" in chief
    for code, output in replicas:
        assert code == 0, output[-4000:]
        assert "resuming after step" in output  # every replica, from the chief's checkpoint
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["initial_step"] > 0 and metrics["initial_step"] % 3 == 0
    single = json.loads((job_run[5] / "metrics.json").read_text())
    assert metrics["steps"] == single["steps"]
    for split in ("train", "eval"):
        for name, value in single[split].items():
            assert abs(metrics[split][name] - value) < 1e-3, (split, name, metrics[split], value)
