"""The daily DAG run by Airflow itself (deploy/schedule/shardflow_dag.py).

Airflow, from the package registry at the versions `requirements-airflow.txt` pins, in its own
virtual environment (it does not fit in the project's: its dependencies pin others), with SQLite
metadata in a temporary AIRFLOW_HOME. The DAG file and `commands.py` are copied into the DAGs
folder, as the DAG's docstring tells a user to do, and configured with Airflow Variables (set as
AIRFLOW_VAR_ environment variables). Airflow's own `DagBag` imports the folder with no import
error; `airflow dags test` then runs one date's DAG: the ETL task runs `shardflow etl` of that
date's partition (the DirectRunner, on the worker itself) and publishes the dataset to Cloud
Storage (the emulator), and the training task prints the Vertex AI job it would launch on that
dataset (`--dry-run`). With the Variables of a Dataflow schedule, the DAG Airflow loads is
checked task by task: its tasks' commands, rendered for a date as Airflow renders them (Jinja,
with `ds` and `logical_date`), parse with the real `shardflow` parsers and target that date.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, WorkerOptions

from pipelines.config.loader import load_config
from pipelines.flags import build_parser
from tests.deploy.test_schedule import VARIABLES  # a Dataflow schedule's
from tests.services import clean_env
from tests.services.gcs import GcsEmulator

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "deploy" / "schedule" / "requirements-airflow.txt"
BUCKET = "shardflow-test"
DAY = "2026-11-05"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def airflow(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(the `airflow` command, the environment of an Airflow home with its database made)."""
    base = tmp_path_factory.mktemp("airflow")
    python = clean_env.new_env(base / "venv")
    clean_env.pip_install(python, "-r", str(REQUIREMENTS))
    dags = base / "dags"
    dags.mkdir()
    for name in ("shardflow_dag.py", "commands.py"):
        shutil.copy(ROOT / "deploy" / "schedule" / name, dags / name)
    env = clean_env.minimal_env(
        python,
        AIRFLOW_HOME=str(base / "home"),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
    )
    airflow = python.parent / "airflow"
    done = subprocess.run(
        [str(airflow), "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return airflow, env


def _variables(tmp_path: Path) -> dict[str, str]:
    """A config whose input and output hold the date, and the DAG's Variables for it."""
    (tmp_path / "in" / DAY).mkdir(parents=True)
    rows = ["id,x,y"] + [f"{i},{i * 0.5},{'a' if i % 3 else 'b'}" for i in range(200)]
    (tmp_path / "in" / DAY / "part.csv").write_text("\n".join(rows) + "\n")
    dataset = f"gs://{BUCKET}/daily/{{date}}"
    (tmp_path / "daily.yaml").write_text(
        "name: daily\n"
        f"sources: [{{name: events, format: csv, path: '{tmp_path}/in/{{date}}/*.csv'}}]\n"
        "key: id\n"
        "features: {id: {type: int}, x: {type: float}, y: {type: string}}\n"
        "label: y\n"
        "splits: {train: 0.8, eval: 0.2}\n"
        f"output: {{path: '{dataset}'}}\n"
    )
    variables = {
        "shardflow_config": str(tmp_path / "daily.yaml"),
        "shardflow_dataset": dataset,
        "shardflow_model_dir": f"gs://{BUCKET}/models/{{date}}",
        "shardflow_project": "proj",
        "shardflow_region": "us-central1",
        "shardflow_trainer_image": "us-docker.pkg.dev/proj/shardflow/trainer:1",
        "shardflow_runner": "DirectRunner",
        "shardflow_train_args": "--dry-run",
    }
    return {f"AIRFLOW_VAR_{k.upper()}": v for k, v in variables.items()}


def test_airflow_imports_the_dag_and_runs_one_date_end_to_end(
    airflow, gcs_emulator: GcsEmulator, tmp_path
):
    command, env = airflow
    env = {
        **env,
        **gcs_emulator.env,
        **_variables(tmp_path),
        # the tasks run `shardflow` (installed where the workers run: here, this venv)
        "PATH": os.pathsep.join([env["PATH"], str(Path(sys.executable).parent)]),
    }
    python = command.parent / "python"
    dags = env["AIRFLOW__CORE__DAGS_FOLDER"]
    code = (
        "import json, sys; from airflow.dag_processing.dagbag import DagBag\n"
        "bag = DagBag(sys.argv[1])\n"
        "print(json.dumps({'errors': bag.import_errors, 'dags': sorted(bag.dag_ids),"
        " 'tasks': [t.task_id for t in bag.get_dag('shardflow_daily').tasks]}))"
    )
    imported = subprocess.run(
        [str(python), "-c", code, dags], env=env, capture_output=True, text=True, timeout=300
    )
    assert imported.returncode == 0, imported.stderr[-3000:]
    found = json.loads(imported.stdout.strip().splitlines()[-1])
    assert found == {"errors": {}, "dags": ["shardflow_daily"], "tasks": ["etl", "train"]}

    run = subprocess.run(
        [str(command), "dags", "test", "shardflow_daily", DAY],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]

    # the ETL of that date's partition, published where the training task reads it
    client = gcs_emulator.client()
    manifest = json.loads(
        client.bucket(BUCKET).blob(f"daily/{DAY}/manifest.json").download_as_text()
    )
    assert sum(s["records"] for s in manifest["splits"].values()) == 200
    # the training task: the job it would launch, on that date's dataset and model folder
    assert f"gs://{BUCKET}/daily/{DAY}" in output and f"gs://{BUCKET}/models/{DAY}" in output
    assert '"workerPoolSpecs"' in output


_LOAD = """
import datetime, json, sys
import jinja2
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(sys.argv[1])
day = datetime.datetime.fromisoformat(sys.argv[2]).replace(tzinfo=datetime.timezone.utc)
dag = bag.get_dag("shardflow_daily")
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}}
if dag is not None:
    out |= {
        "schedule": str(dag.schedule), "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "tasks": {
            t.task_id: {
                "argv": jinja2.Template(t.bash_command).render(ds=sys.argv[2], logical_date=day),
                "downstream": sorted(t.downstream_task_ids),
            }
            for t in dag.tasks
        },
    }
print(json.dumps(out))
"""


def _load_dag(airflow, variables: dict[str, str], day: str) -> dict:
    """The DAG as Airflow's DagBag loads it with `variables`: its settings, import errors and
    each task's command rendered for `day`."""
    command, env = airflow
    env = {**env, **{f"AIRFLOW_VAR_{k.upper()}": v for k, v in variables.items()}}
    done = subprocess.run(
        [str(command.parent / "python"), "-c", _LOAD, env["AIRFLOW__CORE__DAGS_FOLDER"], day],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_on_dataflow_the_dag_runs_each_days_etl_then_trains_on_that_days_dataset(airflow, tmp_path):
    dag = _load_dag(airflow, VARIABLES, "2026-11-25")
    assert dag["errors"] == {}
    assert (dag["schedule"], dag["catchup"], dag["max_active_runs"]) == ("@daily", True, 1)
    assert sorted(dag["tasks"]) == ["etl", "train"] and dag["tasks"]["etl"]["downstream"] == [
        "train"
    ]

    day = datetime.date(2026, 11, 25)
    etl = shlex.split(dag["tasks"]["etl"]["argv"])
    assert etl[:2] == ["shardflow", "etl"]
    args, beam_args = build_parser().parse_known_args(etl[2:])
    config = VARIABLES["shardflow_config"]
    assert (args.config, args.date, args.skip_complete) == (config, day, True)
    cloud = PipelineOptions(beam_args).view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location) == (
        "proj",
        "us-central1",
        "gs://b/tmp",
    )
    assert beam_args[beam_args.index("--runner") + 1] == "DataflowRunner"
    assert "--setup_file" in beam_args  # no ETL image set: the package ships as setup.py

    train = shlex.split(dag["tasks"]["train"]["argv"])
    assert train[:2] == ["shardflow", "launch-training"]
    data = train[train.index("--data") + 1]
    assert data == "gs://b/datasets/daily/2026/11/25"
    assert train[train.index("--model-dir") + 1] == "gs://b/models/daily/2026-11-25"
    assert train[train.index("--image") + 1] == VARIABLES["shardflow_trainer_image"]
    # the ETL writes where training reads: the config's output for that date is --data
    cfg = tmp_path / "daily.yaml"
    cfg.write_text(
        "name: daily\nsources: [{name: e, format: csv, path: 'gs://b/in/{date}/*.csv'}]\n"
        "features: {x: {type: int}}\n"
        f"output: {{path: '{VARIABLES['shardflow_dataset']}'}}\n"
    )
    assert load_config(str(cfg), date=day).output.path == data


def test_the_dag_uses_the_etl_image_when_given_and_names_a_missing_variable(airflow):
    image = "us-docker.pkg.dev/proj/shardflow/etl:1"
    dag = _load_dag(airflow, {**VARIABLES, "shardflow_etl_image": image}, "2026-01-02")
    _, beam_args = build_parser().parse_known_args(shlex.split(dag["tasks"]["etl"]["argv"])[2:])
    assert PipelineOptions(beam_args).view_as(WorkerOptions).sdk_container_image == image
    assert "--setup_file" not in beam_args

    missing = {k: v for k, v in VARIABLES.items() if k != "shardflow_config"}
    errors = _load_dag(airflow, missing, "2026-01-02")["errors"]
    assert len(errors) == 1 and "shardflow_config" in next(iter(errors.values()))
