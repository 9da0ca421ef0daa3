"""Dataflow: the classic job that Beam's own DataflowRunner builds for the ETL (written offline,
staged on the GCS emulator), the flex template launch (`shardflow submit`: the request it prints,
and the REST call it sends to a local endpoint), the image's Dockerfile and the template's
metadata, and the launcher that maps template parameters to `shardflow etl` flags."""

from __future__ import annotations

import datetime
import importlib.metadata
import io
import json
import re
import shlex
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import apache_beam
import dockerfile
import pytest
import yaml
from apache_beam.io.filesystems import FileSystems
from apache_beam.portability.api import beam_runner_api_pb2
from google.cloud.dataflow_v1beta3 import (
    FlexTemplateRuntimeEnvironment,
    LaunchFlexTemplateRequest,
    TemplateMetadata,
)

from deploy.dataflow import launcher, submit
from tests.services.capture import CaptureServer

REPO = Path(__file__).resolve().parents[2]
DATAFLOW = REPO / "deploy" / "dataflow"
PROJECT = "shardflow-test-project"
REGION = "us-central1"
IMAGE = "us-central1-docker.pkg.dev/shardflow-test-project/shardflow/etl:20261126"
TEMPLATE = "gs://shardflow-test/templates/shardflow.json"
CONFIG = "gs://shardflow-test/configs/penguins_daily.yaml"


# --- (a) the classic job, built by Beam's DataflowRunner --------------------------------------

CSV = "id,name,value\n1,ann,1.5\n2,bob,x\n3,cy,3.0\n"


def _write_config(tmp_path: Path, output: str) -> Path:
    (tmp_path / "rows.csv").write_text(CSV)
    config = {
        "name": "tiny",
        "sources": [{"name": "rows", "format": "csv", "path": "rows.csv"}],
        "key": "id",
        "features": {"id": {"type": "int"}, "name": {"type": "string"}, "value": {"type": "float"}},
        "output": {"path": output},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _read_gcs(path: str) -> bytes:
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return f.read()


def _dataflow_options(tmp_path: Path, root: str) -> list[str]:
    """Beam options of a Dataflow job written to tmp_path/job.json and staged under `root`."""
    return [
        "--runner", "DataflowRunner", "--project", PROJECT, "--region", REGION,
        "--job_name", "shardflow-tiny-test",
        "--temp_location", f"{root}/tmp", "--staging_location", f"{root}/staging",
        "--template_location", str(tmp_path / "job.json"),
        "--setup_file", str(REPO / "setup.py"),
        "--sdk_container_image", IMAGE,
    ]  # fmt: skip


@pytest.mark.slow
def test_dataflow_runner_writes_the_etl_job_with_our_package_and_image(gcs_emulator, tmp_path):
    from pipelines.etl import run

    root = f"gs://shardflow-test/dataflow-{uuid.uuid4().hex[:8]}"
    output = f"{root}/tiny"
    # `shardflow etl ... --runner DataflowRunner --template_location FILE`: Beam's DataflowRunner
    # builds, stages and writes the job, and submits nothing.
    config = str(_write_config(tmp_path, output))
    assert run(["--config", config, *_dataflow_options(tmp_path, root)]) == 0
    job_file = tmp_path / "job.json"
    job = json.loads(job_file.read_text())

    assert job["name"] == "shardflow-tiny-test"
    options = job["environment"]["sdkPipelineOptions"]["options"]
    assert options["project"] == PROJECT
    assert options["region"] == REGION
    # Beam puts each job's files in a folder of its own under the locations.
    assert options["temp_location"].startswith(f"{root}/tmp/shardflow-tiny-test.")
    assert options["setup_file"] == str(REPO / "setup.py")
    assert options["sdk_container_image"] == IMAGE
    assert "use_runner_v2" in job["environment"]["experiments"]
    (pool,) = job["environment"]["workerPools"]
    (harness,) = pool["sdkHarnessContainerImages"]
    assert harness["containerImage"] == IMAGE
    # The SDK expects the image to be built on the Beam image our Dockerfile starts from.
    (base,) = [c for c in harness["capabilities"] if c.startswith("beam:version:sdk_base:")]
    (from_,) = _commands("FROM")
    assert base == f"beam:version:sdk_base:{from_.value[0]}"

    # The package ships as the sdist of setup.py, staged with the job.
    packages = {p["name"]: p["location"] for p in pool["packages"]}
    prefix = f"storage.googleapis.com/{root[len('gs://') :]}/staging/shardflow-tiny-test."
    assert packages["workflow.tar.gz"].startswith(prefix)
    sdist_path = "gs://" + packages["workflow.tar.gz"].split("/", 1)[1]
    with tarfile.open(fileobj=io.BytesIO(_read_gcs(sdist_path))) as sdist:
        members = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    shipped = {
        "setup.py",
        "pipelines/etl.py",
        "transforms/sink/write.py",
        "transforms/sources/csv.py",
        "transforms/contract/layout.py",
        "deploy/dataflow/launcher.py",
    }
    assert shipped <= members

    # The pipeline proto Dataflow runs holds the ETL's labelled steps.
    assert options["pipelineUrl"].startswith(f"{root}/staging/shardflow-tiny-test.")
    pipeline = beam_runner_api_pb2.Pipeline.FromString(_read_gcs(options["pipelineUrl"]))
    names = {t.unique_name for t in pipeline.components.transforms.values()}
    for step in ("Read[rows]", "MergeSources", "PrepareRecords", "WriteShards", "Publish"):
        assert step in names, f"{step} not in the job's pipeline"
    # A template run stages the job; it writes no dataset.
    assert not FileSystems.exists(f"{output}/manifest.json")


@pytest.mark.slow
def test_flex_launch_of_a_gcs_config_writes_the_job_and_exits_0(gcs_emulator, tmp_path):
    # What the flex template launcher does on its VM: the launcher module with the template's
    # parameters as --name=value and the launch's options, the config and its data on GCS.
    root = f"gs://shardflow-test/dataflow-{uuid.uuid4().hex[:8]}"
    config = _write_config(tmp_path, f"{root}/tiny")
    for local in (config, tmp_path / "rows.csv"):
        with FileSystems.create(f"{root}/configs/{local.name}") as f:
            f.write(local.read_bytes())
    argv = [f"--config={root}/configs/tiny.yaml", f"--output={root}/datasets/tiny",
            "--overwrite=false"]  # fmt: skip
    options = _dataflow_options(tmp_path, root)
    argv += [f"{flag}={value}" for flag, value in zip(options[::2], options[1::2])]
    assert launcher.main(argv) == 0
    assert json.loads((tmp_path / "job.json").read_text())["name"] == "shardflow-tiny-test"
    assert not FileSystems.exists(f"{root}/datasets/tiny/manifest.json")


# --- (b) `shardflow submit --dry-run` ---------------------------------------------------------


def _submit_args(*extra: str) -> list[str]:
    return [
        "--template", TEMPLATE, "--config", CONFIG, "--image", IMAGE,
        "--project", PROJECT, "--region", REGION, *extra,
    ]  # fmt: skip


def test_dry_run_prints_the_launch_request_and_nothing_else(capsys):
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    code = submit.main(_submit_args(
        "--output", "gs://shardflow-test/datasets/penguins", "--overwrite", "--date", "yesterday",
        "--temp-location", "gs://shardflow-test/tmp", "--staging-location",
        "gs://shardflow-test/staging", "--service-account", "etl@p.iam.gserviceaccount.com",
        "--max-workers", "20", "--num-workers", "2", "--machine-type", "n2-standard-4",
        "--subnetwork", "regions/us-central1/subnetworks/etl", "--label", "team=ml",
        "--labels", "env=dev,tier=gold",
        "--parameter", "experiments=use_runner_v2", "--dry-run",
    ))  # fmt: skip
    after = datetime.datetime.now(datetime.timezone.utc)
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    request = LaunchFlexTemplateRequest.from_json(out)  # stdout is the request, nothing else
    assert request.project_id == PROJECT and request.location == REGION
    assert not request.validate_only
    launch = request.launch_parameter
    assert launch.container_spec_gcs_path == TEMPLATE
    assert dict(launch.parameters) == {
        "config": CONFIG,
        "output": "gs://shardflow-test/datasets/penguins",
        "overwrite": "true",
        "date": "yesterday",
        "experiments": "use_runner_v2",
    }
    env = launch.environment
    assert env.sdk_container_image == IMAGE
    assert env.temp_location == "gs://shardflow-test/tmp"
    assert env.staging_location == "gs://shardflow-test/staging"
    assert env.service_account_email == "etl@p.iam.gserviceaccount.com"
    assert (env.num_workers, env.max_workers) == (2, 20)
    assert env.machine_type == "n2-standard-4"
    assert env.subnetwork == "regions/us-central1/subnetworks/etl"
    assert not env.network
    # --label and --labels are one flag, as with launch-training; commas part several
    assert dict(env.additional_user_labels) == {"team": "ml", "env": "dev", "tier": "gold"}
    # Default job name: the config file's name and the UTC time of the launch.
    match = re.fullmatch(r"shardflow-penguins-daily-(\d{8}-\d{6})", launch.job_name)
    assert match, launch.job_name
    stamp = datetime.datetime.strptime(match[1], "%Y%m%d-%H%M%S").replace(
        tzinfo=datetime.timezone.utc
    )
    assert before <= stamp <= after


def test_dry_run_leaves_out_what_was_not_given(capsys):
    assert submit.main(_submit_args("--job-name", "nightly-etl", "--dry-run")) == 0
    request = LaunchFlexTemplateRequest.from_json(capsys.readouterr().out)
    launch = request.launch_parameter
    assert launch.job_name == "nightly-etl"
    assert dict(launch.parameters) == {"config": CONFIG}
    assert launch.environment == FlexTemplateRuntimeEnvironment(sdk_container_image=IMAGE)


@pytest.mark.parametrize(
    "config, expected",
    [
        ("gs://b/configs/penguins_daily.yaml", "shardflow-penguins-daily-20261126-071500"),
        ("gs://b/c/Sales.Q4.v2.yml", "shardflow-sales-q4-v2-20261126-071500"),
        ("gs://b/c/2026 data!.yaml", "shardflow-2026-data-20261126-071500"),
        ("gs://b/c/___.yaml", "shardflow-20261126-071500"),
        ("gs://b/c/" + "x" * 80 + ".yaml", "shardflow-" + "x" * 40 + "-20261126-071500"),
    ],
)
def test_default_job_name_is_a_valid_dataflow_name(config, expected):
    plus_one = datetime.timezone(datetime.timedelta(hours=1))
    now = datetime.datetime(2026, 11, 26, 8, 15, 0, tzinfo=plus_one)
    name = submit.default_job_name(config, now)
    assert name == expected
    assert submit.JOB_NAME_RE.match(name)


def test_the_command_sends_a_dry_run_to_stdout_only():
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "submit", *_submit_args("--dry-run")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    request = LaunchFlexTemplateRequest.from_json(proc.stdout)
    assert request.launch_parameter.container_spec_gcs_path == TEMPLATE


@pytest.mark.parametrize(
    "change, flag",
    [
        (["--config", None], "--config"),
        (["--image", None], "--image"),
        (["--project", None], "--project"),
        (["--config", "configs/local.yaml"], "--config"),
        (["--template", "/tmp/spec.json"], "--template"),
        (["--region", "moon"], "--region"),
        (["--project", "My_Project"], "--project"),
        (["--job-name", "Nightly_ETL"], "--job-name"),
        (["--job-name", "etl-"], "--job-name"),
        (["--output", "out/penguins"], "--output"),
        (["--temp-location", "/tmp"], "--temp-location"),
        (["--max-workers", "0"], "--max-workers"),
        (["--num-workers", "many"], "--num-workers"),
        (["--date", "26/11/2026"], "--date"),
        (["--label", "Team=ml"], "--label"),
        (["--parameter", "novalue"], "--parameter"),
        (["--parameter", "config=gs://b/other.yaml"], "--parameter"),
        (["--bogus", "1"], "--bogus"),
    ],
)
def test_bad_usage_exits_2_with_one_line_naming_the_flag(capsys, change, flag):
    args = _submit_args("--dry-run")
    name, value = change
    if name in args:
        i = args.index(name)
        args[i : i + 2] = [] if value is None else [name, value]
    else:
        args += [name, value]
    assert submit.main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("shardflow submit: error: ")
    assert flag in err


# --- (c) a real launch, to a local endpoint ---------------------------------------------------

JOB_ID = "2026-11-26_07_15_00-1234567890"


def _answer_with_a_job(request):
    launch = request.body["launchParameter"]
    return {"job": {"id": JOB_ID, "name": launch["jobName"], "projectId": PROJECT,
                    "location": REGION, "type": "JOB_TYPE_BATCH"}}  # fmt: skip


def test_submit_posts_the_launch_and_prints_the_job_id(capsys):
    argv = _submit_args(
        "--output", "gs://shardflow-test/datasets/penguins", "--skip-complete",
        "--job-name", "shardflow-penguins-1", "--max-workers", "8",
    )  # fmt: skip
    with CaptureServer(_answer_with_a_job) as server:
        code = submit.main(argv + ["--api-endpoint", server.url])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == f"{JOB_ID}\n"
    assert f"dataflow/jobs/{REGION}/{JOB_ID}?project={PROJECT}" in err
    (sent,) = server.requests
    assert sent.method == "POST"
    assert sent.path == f"/v1b3/projects/{PROJECT}/locations/{REGION}/flexTemplates:launch"
    assert sent.body == {
        "launchParameter": {
            "jobName": "shardflow-penguins-1",
            "containerSpecGcsPath": TEMPLATE,
            "parameters": {
                "config": CONFIG,
                "output": "gs://shardflow-test/datasets/penguins",
                "skip_complete": "true",
            },
            "environment": {"maxWorkers": 8, "sdkContainerImage": IMAGE},
        }
    }
    # What a scheduler would send is exactly what the client library sent.
    request = submit.launch_request(submit.build_parser().parse_args(argv))
    assert submit.launch_body(request) == sent.body
    assert submit.launch_path(request) == sent.path


def test_a_refused_launch_exits_1_and_says_why(capsys):
    def refuse(request):
        raise ValueError("template spec not found")

    with CaptureServer(refuse) as server:
        code = submit.main(_submit_args("--api-endpoint", server.url))
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.startswith("shardflow submit: launch failed: ") and "500" in err
    assert len(server.requests) == 1


def test_an_unreachable_endpoint_exits_1(capsys):
    with CaptureServer() as server:
        url = server.url  # the port is closed once the server is gone
    assert submit.main(_submit_args("--api-endpoint", url)) == 1
    assert f"cannot reach {url}" in capsys.readouterr().err


def test_print_build_commands_names_the_files_of_the_repository(capsys):
    assert submit.main(["--print-build-commands", "--template", TEMPLATE, "--image", IMAGE,
                        "--project", PROJECT]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    build, template = (shlex.split(line) for line in lines)
    assert build[:5] == ["gcloud", "builds", "submit", "--config", submit.CLOUDBUILD]
    assert f"_IMAGE={IMAGE}" in build and build[-1] == "."
    assert template[:5] == ["gcloud", "dataflow", "flex-template", "build", TEMPLATE]
    flags = dict(zip(template[5::2], template[6::2]))
    assert flags == {"--image": IMAGE, "--sdk-language": "PYTHON",
                     "--metadata-file": submit.METADATA, "--project": PROJECT}  # fmt: skip
    assert (REPO / submit.METADATA).is_file()
    cloudbuild = yaml.safe_load((REPO / submit.CLOUDBUILD).read_text())
    (step,) = cloudbuild["steps"]
    assert step["args"][:3] == ["build", "-f", submit.DOCKERFILE]
    assert (REPO / submit.DOCKERFILE).is_file()
    assert cloudbuild["images"] == ["${_IMAGE}"]


# --- (d) the image and the template metadata --------------------------------------------------


def _commands(cmd: str) -> list:
    return [c for c in dockerfile.parse_file(str(DATAFLOW / "Dockerfile")) if c.cmd == cmd]


def test_image_is_the_beam_sdk_image_of_our_beam_and_python():
    (base,) = _commands("FROM")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert base.value[0] == f"apache/beam_python{python}_sdk:{apache_beam.__version__}"
    # ... which is also the Beam that setup.py's etl extra pins.
    requires = importlib.metadata.requires("shardflow")
    pins = [r for r in requires if r.startswith("apache-beam") and "etl" in r]
    assert pins and all(f"=={apache_beam.__version__};" in r.replace(" ", "") for r in pins)
    (entrypoint,) = _commands("ENTRYPOINT")
    assert entrypoint.json and list(entrypoint.value) == ["/opt/apache/beam/boot"]


def test_image_holds_the_flex_template_launcher_and_our_package():
    launchers = [c for c in _commands("COPY") if any(f.startswith("--from=") for f in c.flags)]
    (copy,) = launchers
    assert copy.flags[0].startswith(
        f"--from=gcr.io/dataflow-templates-base/python{sys.version_info.major}"
        f"{sys.version_info.minor}-template-launcher-base"
    )
    assert list(copy.value) == ["/opt/google/dataflow/python_template_launcher"] * 2

    (workdir,) = _commands("WORKDIR")
    root = workdir.value[0].rstrip("/")
    copied = set()
    for c in _commands("COPY"):
        if c in launchers:
            continue
        *sources, _ = c.value
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            copied.add(source.strip("./"))
    assert {"setup.py", "pipelines", "transforms", "deploy"} <= copied

    env = {}
    for c in _commands("ENV"):
        env.update(zip(c.value[::2], c.value[1::2]))
    for name in ("FLEX_TEMPLATE_PYTHON_PY_FILE", "FLEX_TEMPLATE_PYTHON_SETUP_FILE"):
        path = env[name]
        assert path.startswith(root + "/"), f"{name}={path} is outside {root}"
        relative = path[len(root) + 1 :]
        assert (REPO / relative).is_file(), f"{name}={path}: no {relative} in the repository"
        assert relative.split("/")[0] in copied, f"{name}={path} is not copied into the image"
    assert env["FLEX_TEMPLATE_PYTHON_PY_FILE"].endswith("/deploy/dataflow/launcher.py")
    assert "FLEX_TEMPLATE_PYTHON_REQUIREMENTS_FILE" not in env  # installed in the image instead


def test_image_installs_the_etl_extra_and_ends_with_pip_check():
    runs = [" ".join(c.value) for c in _commands("RUN")]
    installs = [i for i, run in enumerate(runs) if re.search(r"pip install .*\.\[etl\]", run)]
    assert installs, runs
    assert "etl" in importlib.metadata.metadata("shardflow").get_all("Provides-Extra")
    assert "pip check" in runs[-1] and installs[-1] < len(runs) - 1


def _metadata() -> TemplateMetadata:
    # from_json rejects unknown fields and enum values: the file is valid TemplateMetadata.
    return TemplateMetadata.from_json((DATAFLOW / "metadata.json").read_text())


def test_metadata_declares_what_the_launcher_maps():
    metadata = _metadata()
    assert metadata.name and metadata.description
    params = {p.name: p for p in metadata.parameters}
    assert set(params) == set(launcher.PARAMETERS)
    assert not params["config"].is_optional
    assert all(p.is_optional for name, p in params.items() if name != "config")
    assert all(p.help_text and p.label and p.regexes for p in params.values())


@pytest.mark.parametrize(
    "name, good, bad",
    [
        ("config", ["gs://b/configs/c.yaml"], ["configs/c.yaml", "/abs/c.yaml", "gs://b/c\n.yaml"]),
        ("output", ["gs://b/datasets/penguins"], ["out/penguins", "s3://b/x"]),
        ("overwrite", ["true", "false"], ["yes", "True ", "1"]),
        ("skip_complete", ["true", "false"], ["no"]),
        ("date", ["2026-11-26", "today", "yesterday"], ["26/11/2026", "tomorrow"]),
    ],
)
def test_metadata_regexes_accept_what_the_etl_takes(name, good, bad):
    (param,) = [p for p in _metadata().parameters if p.name == name]
    for value in good:
        assert all(re.search(r, value) for r in param.regexes), value
    for value in bad:
        assert not all(re.search(r, value) for r in param.regexes), value


def test_launcher_maps_template_parameters_to_etl_flags():
    from pipelines.flags import build_parser

    argv = [
        "--config=gs://b/c.yaml", "--output=gs://b/out", "--overwrite=true", "--date=yesterday",
        "--skip_complete=false", "--runner=DataflowRunner", "--project=p", "--region=r",
        "--setup_file=/template/setup.py", "--template_location=gs://b/staging/job_object",
    ]  # fmt: skip
    args = launcher.etl_args(argv)
    assert args == [
        "--config", "gs://b/c.yaml", "--output", "gs://b/out", "--date", "yesterday",
        "--overwrite", "--runner=DataflowRunner", "--project=p", "--region=r",
        "--setup_file=/template/setup.py", "--template_location=gs://b/staging/job_object",
    ]  # fmt: skip
    # ... which `shardflow etl` reads as meant: its flags, and the rest as Beam options.
    parsed, beam_args = build_parser().parse_known_args(args)
    assert (parsed.config, parsed.output, parsed.overwrite) == ("gs://b/c.yaml", "gs://b/out", True)
    assert not parsed.skip_complete
    assert beam_args == args[7:]
    empty_output = ["--config=gs://b/c.yaml", "--output="]
    assert launcher.etl_args(empty_output) == ["--config", "gs://b/c.yaml"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--output=gs://b/out"], "'config' is required"),
        (["--config=gs://b/c.yaml", "--overwrite=yes"], "--overwrite"),
        (["--config=gs://b/c.yaml", "--skip_complete"], "--skip_complete"),
    ],
)
def test_launcher_refuses_bad_parameters_with_exit_2(capsys, argv, message):
    with pytest.raises(launcher.ParameterError, match=re.escape(message)):
        launcher.etl_args(argv)
    assert launcher.main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert message in line


def test_submit_parameters_are_declared_in_the_metadata(capsys):
    argv = _submit_args("--output", "gs://b/o", "--overwrite", "--date", "today",
                        "--skip-complete", "--dry-run")  # fmt: skip
    assert submit.main(argv) == 0
    request = LaunchFlexTemplateRequest.from_json(capsys.readouterr().out)
    declared = {p.name for p in _metadata().parameters}
    assert set(request.launch_parameter.parameters) == declared
