"""Schedules: the Airflow DAG's structure and commands, the cron line; each command parses with
the real `shardflow` parsers and targets the dataset of its date."""

from __future__ import annotations

import datetime
import importlib.util
import re
import shlex
import sys
import types
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, WorkerOptions

from deploy.schedule.commands import AIRFLOW_DATE, DailyJob, etl_command, fill
from pipelines.config.loader import load_config
from pipelines.flags import build_parser

SCHEDULE = Path(__file__).resolve().parents[2] / "deploy" / "schedule"
VARIABLES = {
    "shardflow_config": "gs://b/configs/daily.yaml",
    "shardflow_dataset": "gs://b/datasets/daily/{YYYY}/{MM}/{DD}",
    "shardflow_model_dir": "gs://b/models/daily/{date}",
    "shardflow_project": "proj",
    "shardflow_temp_location": "gs://b/tmp",
    "shardflow_trainer_image": "us-docker.pkg.dev/proj/shardflow/trainer:1",
}


class _Task:
    def __init__(self, task_id: str, bash_command: str, **kwargs):
        self.task_id, self.bash_command, self.downstream = task_id, bash_command, []
        _Dag.current.tasks[task_id] = self

    def __rshift__(self, other: "_Task") -> "_Task":
        self.downstream.append(other.task_id)
        return other


class _Dag:
    current: "_Dag"

    def __init__(self, dag_id: str, **kwargs):
        self.dag_id, self.kwargs, self.tasks = dag_id, kwargs, {}

    def __enter__(self):
        _Dag.current = self
        return self

    def __exit__(self, *exc):
        return False


class _Variable:
    values: dict[str, str] = {}

    @classmethod
    def get(cls, key, *default):
        if key in cls.values:
            return cls.values[key]
        if default:
            return default[0]
        raise KeyError(f"Variable {key} does not exist")


def _load_dag(monkeypatch, variables: dict[str, str]):
    """Imports the DAG file against a stand-in of the Airflow 3 API it uses (DAG, Variable,
    BashOperator): Airflow itself does not fit in the test environment."""
    sdk = types.ModuleType("airflow.sdk")
    sdk.DAG, sdk.Variable = _Dag, _Variable
    bash = types.ModuleType("airflow.providers.standard.operators.bash")
    bash.BashOperator = _Task
    for name in ("airflow", "airflow.providers", "airflow.providers.standard",
                 "airflow.providers.standard.operators"):  # fmt: skip
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "airflow.sdk", sdk)
    monkeypatch.setitem(sys.modules, bash.__name__, bash)
    monkeypatch.setattr(_Variable, "values", variables)
    spec = importlib.util.spec_from_file_location("shardflow_dag", SCHEDULE / "shardflow_dag.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def _render(command: str, day: datetime.date) -> list[str]:
    """What Airflow runs: its date expressions rendered for the run's logical date."""
    values = {
        AIRFLOW_DATE["{date}"]: day.isoformat(),
        AIRFLOW_DATE["{YYYY}"]: day.strftime("%Y"),
        AIRFLOW_DATE["{MM}"]: day.strftime("%m"),
        AIRFLOW_DATE["{DD}"]: day.strftime("%d"),
    }
    argv = shlex.split(command)
    assert not [a for a in argv if "{{" in fill(a, values)], argv  # nothing left unrendered
    return [fill(a, values) for a in argv]


def test_the_dag_runs_the_etl_of_each_day_then_trains_on_that_days_dataset(monkeypatch, tmp_path):
    dag = _load_dag(monkeypatch, dict(VARIABLES))
    assert dag.dag_id == "shardflow_daily"
    assert dag.kwargs["schedule"] == "@daily" and dag.kwargs["catchup"] is True
    assert dag.kwargs["max_active_runs"] == 1
    assert list(dag.tasks) == ["etl", "train"] and dag.tasks["etl"].downstream == ["train"]

    day = datetime.date(2026, 11, 25)
    etl = _render(dag.tasks["etl"].bash_command, day)
    assert etl[:2] == ["shardflow", "etl"]
    args, beam_args = build_parser().parse_known_args(etl[2:])
    assert (args.config, args.date, args.skip_complete) == (
        VARIABLES["shardflow_config"],
        day,
        True,
    )
    options = PipelineOptions(beam_args)
    cloud = options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location) == (
        "proj",
        "us-central1",
        "gs://b/tmp",
    )
    assert beam_args[beam_args.index("--runner") + 1] == "DataflowRunner"
    assert "--setup_file" in beam_args  # no ETL image set: the package ships as setup.py

    train = _render(dag.tasks["train"].bash_command, day)
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


def test_the_dag_uses_the_etl_image_when_given_and_names_a_missing_variable(monkeypatch):
    variables = dict(VARIABLES, shardflow_etl_image="us-docker.pkg.dev/proj/shardflow/etl:1")
    dag = _load_dag(monkeypatch, variables)
    _, beam_args = build_parser().parse_known_args(
        _render(dag.tasks["etl"].bash_command, datetime.date(2026, 1, 2))[2:]
    )
    worker = PipelineOptions(beam_args).view_as(WorkerOptions)
    assert worker.sdk_container_image == variables["shardflow_etl_image"]
    assert "--setup_file" not in beam_args

    del variables["shardflow_config"]
    with pytest.raises(KeyError, match="shardflow_config"):
        _load_dag(monkeypatch, variables)


def test_etl_command_for_a_literal_date():
    fields = {name.removeprefix("shardflow_"): value for name, value in VARIABLES.items()}
    job = DailyJob(**fields, region="europe-west4")
    argv = etl_command(job, "2026-02-03")
    args, beam_args = build_parser().parse_known_args(argv[2:])
    assert args.date == datetime.date(2026, 2, 3)
    assert PipelineOptions(beam_args).view_as(GoogleCloudOptions).region == "europe-west4"


_FIELD = {"minute": (0, 59), "hour": (0, 23), "day": (1, 31), "month": (1, 12), "weekday": (0, 7)}


def test_the_cron_line_is_valid_and_runs_yesterdays_partition_once():
    lines = [
        line for line in (SCHEDULE / "crontab").read_text().splitlines()
        if line.strip() and not line.startswith("#") and not re.match(r"^\w+=", line)
    ]  # fmt: skip
    assert len(lines) == 1
    fields = lines[0].split(None, 6)
    for text, (name, (low, high)) in zip(fields[:5], _FIELD.items()):
        assert text == "*" or low <= int(text) <= high, (name, text)
    user, command = fields[5], fields[6]
    assert user == "shardflow"
    argv = shlex.split(command)
    assert "flock" in argv and "-n" in argv  # no overlapping runs
    start = argv.index(".venv/bin/shardflow")
    end = argv.index(">>")
    assert argv[start + 1] == "etl"
    args, beam_args = build_parser().parse_known_args(argv[start + 2 : end])
    today = datetime.datetime.now(datetime.timezone.utc).date()
    assert args.date in (today - datetime.timedelta(days=1), today) and args.skip_complete
    assert beam_args == []
