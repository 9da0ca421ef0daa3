"""`shardflow launch-training` (deploy/vertex/launch.py) and the trainer image it runs
(deploy/vertex/Dockerfile).

The job of each machine shape is read back from the `--dry-run` output with the real
`aiplatform_v1.CustomJob` type; a real submission goes to a local CaptureServer through the
real JobServiceClient and must carry exactly the job that --dry-run prints.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import dockerfile
import pytest
from google.cloud import aiplatform_v1
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from deploy.vertex import launch
from tests.services.capture import CaptureServer

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "vertex" / "Dockerfile"
DATA = "gs://b/datasets/penguins"
MODEL_DIR = "gs://b/models/penguins"
IMAGE = "us-docker.pkg.dev/proj/shardflow/trainer:1"
BASE = [
    "--data", DATA, "--model-dir", MODEL_DIR, "--project", "proj", "--region", "us-central1",
    "--image", IMAGE,
]  # fmt: skip
TRAIN = ["--data", DATA, "--model-dir", MODEL_DIR]  # what every replica's trainer gets first
T4 = aiplatform_v1.AcceleratorType.NVIDIA_TESLA_T4


def _dry_run(capsys, *flags: str) -> aiplatform_v1.CustomJob:
    code = launch.main([*BASE, "--dry-run", *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert isinstance(json.loads(out), dict)  # stdout is the job's JSON and nothing else
    return aiplatform_v1.CustomJob.from_json(out)


def _pool(job: aiplatform_v1.CustomJob) -> aiplatform_v1.WorkerPoolSpec:
    (pool,) = job.job_spec.worker_pool_specs
    return pool


# --- the job of each machine shape -----------------------------------------------------------


def test_dry_run_prints_a_one_machine_job_that_trains_into_the_model_dir(capsys):
    job = _dry_run(capsys, "--display-name", "penguins-1")

    pool = _pool(job)
    assert pool.replica_count == 1
    assert pool.machine_spec == aiplatform_v1.MachineSpec(machine_type="n1-standard-4")
    assert pool.container_spec.image_uri == IMAGE
    assert list(pool.container_spec.command) == ["shardflow", "train"]
    assert list(pool.container_spec.args) == TRAIN  # no --strategy: the trainer's auto
    # Vertex AI sets AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR under it.
    assert job.job_spec.base_output_directory.output_uri_prefix == MODEL_DIR
    assert job.display_name == "penguins-1"


def test_one_gpu_runs_on_an_n1_machine_with_the_default_strategy(capsys):
    pool = _pool(_dry_run(capsys, "--accelerator-type", "NVIDIA_TESLA_T4"))

    assert pool.machine_spec == aiplatform_v1.MachineSpec(
        machine_type="n1-standard-8", accelerator_type=T4, accelerator_count=1
    )
    assert list(pool.container_spec.args) == TRAIN


def test_several_gpus_on_one_machine_train_mirrored(capsys):
    # a lowercase, dashed name is accepted; L4 GPUs come built into G2 machines
    pool = _pool(_dry_run(capsys, "--accelerator-type", "nvidia-l4", "--accelerator-count", "4"))

    assert pool.machine_spec == aiplatform_v1.MachineSpec(
        machine_type="g2-standard-48",
        accelerator_type=aiplatform_v1.AcceleratorType.NVIDIA_L4,
        accelerator_count=4,
    )
    assert list(pool.container_spec.args) == [*TRAIN, "--strategy", "mirrored"]


def test_several_replicas_are_a_chief_pool_and_a_worker_pool_training_multi_worker(capsys):
    job = _dry_run(
        capsys, "--replica-count", "3", "--machine-type", "n1-standard-16",
        "--accelerator-type", "NVIDIA_TESLA_T4", "--accelerator-count", "2",
    )  # fmt: skip

    chief, workers = job.job_spec.worker_pool_specs
    assert (chief.replica_count, workers.replica_count) == (1, 2)
    machine = aiplatform_v1.MachineSpec(
        machine_type="n1-standard-16", accelerator_type=T4, accelerator_count=2
    )
    args = [*TRAIN, "--strategy", "multi_worker"]
    for pool in (chief, workers):
        assert pool.machine_spec == machine
        assert pool.container_spec.image_uri == IMAGE
        assert list(pool.container_spec.args) == args
    # one replica failing stops the all-reduce of all: Vertex AI restarts them together
    assert job.job_spec.scheduling.restart_job_on_worker_restart is True
    one = _dry_run(capsys)
    assert one.job_spec.scheduling.restart_job_on_worker_restart is False


def test_a_tpu_job_runs_on_the_tpu_host_machine_type_with_the_tpu_strategy(capsys):
    pool = _pool(_dry_run(capsys, "--accelerator-type", "TPU_V5_LITEPOD"))

    assert pool.replica_count == 1
    assert pool.machine_spec == aiplatform_v1.MachineSpec(
        machine_type="ct5lp-hightpu-4t",
        accelerator_type=aiplatform_v1.AcceleratorType.TPU_V5_LITEPOD,
        accelerator_count=4,
        tpu_topology="2x2",
    )
    assert list(pool.container_spec.args) == [*TRAIN, "--strategy", "tpu"]

    one_chip = _pool(_dry_run(capsys, "--accelerator-type", "TPU_V5_LITEPOD",
                               "--accelerator-count", "1"))  # fmt: skip
    assert (one_chip.machine_spec.machine_type, one_chip.machine_spec.tpu_topology) == (
        "ct5lp-hightpu-1t", "1x1",
    )  # fmt: skip


def test_other_flags_and_arguments_after_double_dash_go_to_the_trainer(capsys):
    pool = _pool(_dry_run(capsys, "--epochs", "20", "--", "--batch-size", "256", "--deterministic"))

    assert list(pool.container_spec.args) == [
        *TRAIN, "--epochs", "20", "--batch-size", "256", "--deterministic",
    ]  # fmt: skip


def test_job_options_are_set_on_the_job(capsys):
    tensorboard = "projects/proj/locations/us-central1/tensorboards/123"
    job = _dry_run(
        capsys,
        "--service-account", "trainer@proj.iam.gserviceaccount.com",
        "--tensorboard", tensorboard,
        "--network", "projects/12345/global/networks/vpc",
        "--labels", "team=ml,env=dev", "--label", "dataset=penguins",
    )  # fmt: skip

    assert job.job_spec.service_account == "trainer@proj.iam.gserviceaccount.com"
    assert job.job_spec.tensorboard == tensorboard
    assert job.job_spec.network == "projects/12345/global/networks/vpc"
    assert dict(job.labels) == {"team": "ml", "env": "dev", "dataset": "penguins"}


def test_the_default_display_name_is_the_dataset_and_the_utc_time(capsys):
    job = _dry_run(capsys)
    assert re.fullmatch(r"shardflow-penguins-\d{8}-\d{6}", job.display_name), job.display_name


# --- a real submission, to a local endpoint --------------------------------------------------


def test_a_submission_posts_exactly_the_dry_run_job(capsys):
    # placeholder names are fine: Vertex AI, not this command, knows which projects exist
    base = [{"proj": "P", "us-central1": "R"}.get(a, a) for a in BASE]
    flags = [
        "--replica-count", "2", "--accelerator-type", "NVIDIA_TESLA_T4", "--display-name",
        "penguins-2", "--labels", "team=ml", "--epochs", "3",
    ]  # fmt: skip
    assert launch.main([*base, *flags, "--dry-run"]) == 0
    expected = aiplatform_v1.CustomJob.from_json(capsys.readouterr().out)

    with CaptureServer() as server:
        code = launch.main([*base, *flags, "--api-endpoint", server.url])
    out, err = capsys.readouterr()

    assert code == 0, err
    (request,) = server.requests
    assert (request.method, request.path) == (
        "POST", "/v1/projects/P/locations/R/customJobs",
    )  # fmt: skip
    # REST JSON carries enums as numbers; the typed parse compares them with the dry run's.
    assert request.body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] in (
        T4.value, "NVIDIA_TESLA_T4",
    )  # fmt: skip
    assert aiplatform_v1.CustomJob.from_json(json.dumps(request.body)) == expected
    assert out == "projects/P/locations/R/customJobs/captured-1\n"


def test_a_refused_job_exits_1_with_one_line_saying_why(capsys):
    def refuse(request):
        raise RuntimeError("quota exceeded for NVIDIA_TESLA_T4")

    with CaptureServer(respond=refuse) as server:
        code = launch.main([*BASE, "--accelerator-type", "NVIDIA_TESLA_T4",
                            "--api-endpoint", server.url])  # fmt: skip
    out, err = capsys.readouterr()

    assert code == 1 and out == ""
    assert len(server.requests) >= 1
    (line,) = err.splitlines()
    assert line.startswith("shardflow launch-training: Vertex AI did not create the job: 500")
    assert "quota exceeded for NVIDIA_TESLA_T4" in line


def test_an_unreachable_endpoint_exits_1(capsys):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = launch.main([*BASE, "--api-endpoint", f"http://127.0.0.1:{port}"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("shardflow launch-training: Vertex AI did not create the job: ")


# --- usage errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, flag, message",
    [
        (["--data", "/local/penguins"], "--data", "gs://"),
        (["--model-dir", "models/penguins"], "--model-dir", "gs://"),
        (["--region", "us-central1-a"], "--region", "us-central1"),
        (["--accelerator-type", "NVIDIA_T4"], "--accelerator-type",
         "did you mean NVIDIA_TESLA_T4?"),
        (["--accelerator-count", "2"], "--accelerator-count", "--accelerator-type"),
        (["--replica-count", "0"], "--replica-count", "'0' must be at least 1"),
        (["--accelerator-type", "TPU_V5_LITEPOD", "--replica-count", "2"], "--replica-count",
         "one TPU host"),
        (["--accelerator-type", "TPU_V5_LITEPOD", "--accelerator-count", "3"],
         "--accelerator-count", "1 or 4 or 8"),
        (["--accelerator-type", "TPU_V5_LITEPOD", "--machine-type", "n1-standard-8"],
         "--machine-type", "ct5lp-hightpu-4t"),
        (["--accelerator-type", "NVIDIA_H100_80GB", "--accelerator-count", "3"],
         "--accelerator-count", "1 or 2 or 4 or 8"),
        (["--labels", "Team=ML"], "--label", "lowercase"),
        (["--tensorboard", "projects/p/locations/us-central1/tensorboards/1"], "--tensorboard",
         "--service-account"),
        # checked with the trainer's own parser
        (["--epochs", "0"], "--epochs", "'0' must be at least 1"),
        (["--epochs", "x"], "--epochs", "'x' is not a whole number"),
        (["--replica-cont", "2"], "--replica-cont", "neither"),
        (["--epocs", "2"], "--epocs", "train` argument; did you mean '--epochs'?"),
        (["--", "--data", "gs://b/other"], "--data", "launch-training"),
    ],
)  # fmt: skip
def test_a_bad_command_line_exits_2_with_one_line_naming_the_flag(capsys, flags, flag, message):
    with CaptureServer() as server:
        code = launch.main([*BASE, *flags, "--api-endpoint", server.url])
    out, err = capsys.readouterr()

    assert code == 2 and out == ""
    assert server.requests == []
    (line,) = err.splitlines()
    assert line.startswith("shardflow launch-training: ")
    assert flag in line and message in line, line


def test_trainer_arguments_are_checked_without_importing_tensorflow():
    # launch-training runs where only the job is submitted; TensorFlow there would only slow
    # it down and write its native start-up lines over the one line this command prints.
    code = (
        "import sys; from deploy.vertex import launch; "
        f"status = launch.main({[*BASE, '--dry-run', '--epochs', '0']!r}); "
        "assert status == 2, status; assert 'tensorflow' not in sys.modules, 'tensorflow'"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    expected = (
        "shardflow launch-training: argument --epochs: '0' must be at least 1 "
        "(an argument for `shardflow train`)"
    )
    assert proc.stderr.splitlines() == [expected]


def test_a_missing_flag_is_named(capsys):
    argv = [a for a in BASE if a not in ("--project", "proj")]
    assert launch.main([*argv, "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "shardflow launch-training: the following arguments are required: --project"
    ]


def test_a_wrong_accelerator_type_lists_valid_ones(capsys):
    assert launch.main([*BASE, "--accelerator-type", "TPU_V9", "--dry-run"]) == 2
    line = capsys.readouterr().err.strip()
    for valid in ("NVIDIA_TESLA_T4", "NVIDIA_H100_80GB", "TPU_V5_LITEPOD"):
        assert valid in line


# --- the trainer image ------------------------------------------------------------------------


def _instructions(name: str) -> list:
    return [c for c in dockerfile.parse_file(str(DOCKERFILE)) if c.cmd.upper() == name]


def test_the_image_is_python_3_11_like_setup_py():
    (base,) = _instructions("FROM")
    assert base.value == ("python:3.11-slim-bookworm",)
    assert 'python_requires=">=3.11,<3.12"' in (REPO / "setup.py").read_text()


def test_the_image_installs_the_trainer_extra_only_and_ends_with_pip_check():
    runs = _instructions("RUN")
    text = " ".join(" ".join(r.value) for r in runs)
    (arg,) = _instructions("ARG")
    assert arg.value == ("EXTRAS=trainer",)  # by default; trainer,transform for tf.Transform
    assert '".[${EXTRAS}]"' in text
    for unwanted in ("apache-beam", "apache_beam", ".[etl]", ".[all]", "-e "):
        assert unwanted not in text
    copied = {src for c in _instructions("COPY") for src in c.value[:-1]}
    assert copied == {
        "setup.py",
        "pipelines/__init__.py",
        "pipelines/cli.py",
        "pipelines/runner/__init__.py",
        "pipelines/runner/forkserver.py",
        "pipelines/runner/quiet.py",
        "transforms/__init__.py",
        "transforms/contract",
        "transforms/ui",
        "trainer",
    }
    assert runs[-1].value[-1].split("&&")[-1].strip() == "pip check"


def image_files(into: Path) -> None:
    """The files the image's COPY instructions put in its WORKDIR, copied under `into`."""
    for c in _instructions("COPY"):
        *sources, dest = c.value
        for source in sources:
            target = into / dest / Path(source).name if dest.endswith("/") else into / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(REPO / source, target)


@pytest.mark.slow
def test_the_image_files_are_enough_for_the_trainer_commands(tmp_path):
    """Every module of ours the trainer's commands import is in the image: its files alone
    answer `shardflow train --help` and import the trainer's modules (this checkout's own
    modules are kept out of reach)."""
    image_files(tmp_path)
    assert not (tmp_path / "transforms" / "sources").exists()
    script = (
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'Editable' not in "
        "getattr(f, '__name__', type(f).__name__)]\n"
        "import pipelines.cli, trainer.task, trainer.inspect\n"
        "assert trainer.task.__file__.startswith(sys.argv[1]), trainer.task.__file__\n"
        "sys.argv = ['shardflow', 'train', '--help']; pipelines.cli.main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage: shardflow train"), done.stdout[:300]


def test_the_image_entry_point_is_the_command_the_job_runs(capsys):
    (entrypoint,) = _instructions("ENTRYPOINT")
    assert entrypoint.json
    assert list(entrypoint.value) == list(launch.TRAINER_COMMAND) == ["shardflow", "train"]
    # the command `shardflow` runs the trainer (pipelines/cli.py)
    from pipelines.cli import COMMANDS

    assert COMMANDS["train"][:2] == ("trainer.task", "main")
    assert list(_pool(_dry_run(capsys)).container_spec.command) == list(entrypoint.value)


def _setup_argument(name: str):
    """An argument of setup.py's setup() call, evaluated from its source (setup() is not run)."""
    tree = ast.parse((REPO / "setup.py").read_text())
    names: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            names[node.targets[0].id] = eval(compile(ast.Expression(node.value), "setup", "eval"),
                                             {}, names)  # fmt: skip
    (call,) = [n.value for n in tree.body if isinstance(getattr(n, "value", None), ast.Call)]
    (value,) = [k.value for k in call.keywords if k.arg == name]
    return eval(compile(ast.Expression(value), "setup", "eval"), {}, names)


def _extras() -> dict[str, list[str]]:
    return _setup_argument("extras_require")


def _install_requires() -> list[str]:
    return _setup_argument("install_requires")


def _installed_closure(requirements: list[str]) -> set[str]:
    """The distributions these requirements install, as this environment resolved them."""
    seen: set[tuple[str, frozenset]] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = importlib.metadata.distribution(req.name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for sub in map(Requirement, requires):
            extras = req.extras or {""}
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in extras):
                todo.append(sub)
    return {name for name, _ in seen}


def test_the_trainer_extra_installs_no_apache_beam():
    closure = _installed_closure(_extras()["trainer"] + _install_requires())
    assert "tensorflow" in closure and "xxhash" in closure
    assert "apache-beam" not in closure
    assert "apache-beam" in _installed_closure(_extras()["transform"])


def test_several_datasets_and_a_date_range_go_to_every_replica(capsys):
    daily = "gs://b/daily/{2026-11-01..2026-11-26}"
    code = launch.main(["--data", DATA, daily, *BASE[2:], "--dry-run", "--display-name", "days"])
    out, err = capsys.readouterr()
    assert code == 0, err
    pool = _pool(aiplatform_v1.CustomJob.from_json(out))
    assert list(pool.container_spec.args) == ["--data", DATA, daily, "--model-dir", MODEL_DIR]
    assert launch.main(["--data", DATA, "/local/day", *BASE[2:], "--dry-run"]) == 2
    assert "--data: '/local/day' is not a gs://BUCKET/PATH location" in capsys.readouterr().err
