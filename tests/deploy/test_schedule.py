"""Schedules: the commands of one date and the cron line, each parsed with the real `shardflow`
parsers. The Airflow DAG, imported and run by Airflow itself: tests/deploy/test_airflow.py."""

from __future__ import annotations

import datetime
import re
import shlex
from pathlib import Path

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

from deploy.schedule.commands import DailyJob, etl_command
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
