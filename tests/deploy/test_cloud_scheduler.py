"""`shardflow schedule`: the Cloud Scheduler job that launches the ETL's flex template."""

from __future__ import annotations

import base64
import datetime
import json

import pytest
from google.cloud import dataflow_v1beta3, scheduler_v1

from deploy.dataflow import launcher, submit
from deploy.schedule.cloud_scheduler import main
from pipelines.flags import build_parser
from tests.services.capture import CaptureServer

FLAGS = [
    "--job-id", "penguins-daily", "--schedule", "30 2 * * *",
    "--scheduler-service-account", "launcher@proj-1.iam.gserviceaccount.com",
    "--template", "gs://b/templates/shardflow-etl.json",
    "--image", "us-docker.pkg.dev/proj-1/r/shardflow-etl:1",
    "--config", "gs://b/configs/penguins.yaml", "--project", "proj-1", "--region", "europe-west4",
    "--max-workers", "8",
]  # fmt: skip


def _dry_run(capsys, *extra: str) -> scheduler_v1.Job:
    assert main([*FLAGS, *extra, "--dry-run"]) == 0
    return scheduler_v1.Job.from_json(capsys.readouterr().out)


def test_the_job_posts_the_launch_of_yesterdays_partition_with_a_service_account_token(capsys):
    job = _dry_run(capsys)
    assert job.name == "projects/proj-1/locations/europe-west4/jobs/penguins-daily"
    assert (job.schedule, job.time_zone) == ("30 2 * * *", "Etc/UTC")
    target = job.http_target
    assert target.http_method == scheduler_v1.HttpMethod.POST
    assert target.uri == (
        "https://dataflow.googleapis.com/v1b3/projects/proj-1/locations/europe-west4/"
        "flexTemplates:launch"
    )
    assert target.oauth_token.service_account_email == "launcher@proj-1.iam.gserviceaccount.com"
    body = json.loads(target.body)
    launch = body["launchParameter"]
    assert launch["containerSpecGcsPath"] == "gs://b/templates/shardflow-etl.json"
    assert launch["jobName"] == "shardflow-penguins-daily"  # fixed: launches never overlap
    assert launch["parameters"] == {
        "config": "gs://b/configs/penguins.yaml", "date": "yesterday", "skip_complete": "true"
    }  # fmt: skip
    assert launch["environment"]["maxWorkers"] == 8

    # the body is exactly what `shardflow submit` sends for the same launch
    assert submit.main([*FLAGS[6:], "--date", "yesterday", "--skip-complete",
                        "--job-name", "shardflow-penguins-daily", "--dry-run"]) == 0  # fmt: skip
    request = dataflow_v1beta3.LaunchFlexTemplateRequest.from_json(capsys.readouterr().out)
    assert body == submit.launch_body(request)

    # and the launcher turns its parameters into flags the ETL accepts, the date relative
    argv = launcher.etl_args([f"--{k}={v}" for k, v in launch["parameters"].items()])
    args, _ = build_parser().parse_known_args(argv)
    today = datetime.datetime.now(datetime.timezone.utc).date()
    assert args.skip_complete and args.date in (today - datetime.timedelta(days=1), today)


def test_a_given_date_and_time_zone_are_kept(capsys):
    job = _dry_run(capsys, "--date", "today", "--time-zone", "Europe/Paris")
    assert job.time_zone == "Europe/Paris"
    assert json.loads(job.http_target.body)["launchParameter"]["parameters"]["date"] == "today"


def test_the_job_is_created_through_the_scheduler_api(capsys):
    expected = _dry_run(capsys)
    with CaptureServer() as server:
        assert main([*FLAGS, "--api-endpoint", server.url]) == 0
    assert capsys.readouterr().out.strip() == expected.name
    (request,) = server.requests
    assert (request.method, request.path) == (
        "POST",
        "/v1/projects/proj-1/locations/europe-west4/jobs",
    )
    sent = scheduler_v1.Job.from_json(json.dumps(request.body))
    assert sent == expected
    assert base64.b64decode(request.body["httpTarget"]["body"]) == expected.http_target.body


@pytest.mark.parametrize(
    "drop, extra, message",
    [
        ("--schedule", [], "--schedule is required"),
        ("--scheduler-service-account", [], "--scheduler-service-account is required"),
        (None, ["--schedule", "every day"], "--schedule: 'every day' is not a 5-field"),
        (None, ["--job-id", "a b"], "--job-id: 'a b' may hold only"),
        ("--config", [], "--config"),
    ],
)
def test_usage_errors_exit_2_with_one_line(capsys, drop, extra, message):
    flags = list(FLAGS)
    if drop:
        i = flags.index(drop)
        del flags[i : i + 2]
    assert main([*flags, *extra, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_a_failed_create_exits_1_saying_why(capsys):
    def refuse(request):
        raise RuntimeError("permission denied")

    with CaptureServer(refuse) as server:
        assert main([*FLAGS, "--api-endpoint", server.url]) == 1
    assert "create failed" in capsys.readouterr().err
