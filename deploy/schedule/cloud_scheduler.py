"""`shardflow schedule`: a Cloud Scheduler job that launches the ETL's flex template on a cron
schedule.

Cloud Scheduler sends a fixed HTTP request: here, Dataflow's `flexTemplates:launch` with the body
`shardflow submit` would send (`deploy.dataflow.submit.launch_body`), authorized with an OAuth
token of a service account. The body cannot change from run to run, so it names the date
relatively (`date=yesterday` by default: the ETL fills the config's date templates when the job
starts) and sets `skip_complete`, so that a repeated launch does nothing. The Dataflow job name
is fixed too (`shardflow-JOBID`, no timestamp): Dataflow refuses a second job of that name
while the first runs, which keeps runs from overlapping.

    shardflow schedule --job-id penguins-daily --schedule "30 2 * * *" \\
        --scheduler-service-account launcher@P.iam.gserviceaccount.com \\
        --template gs://B/templates/shardflow-etl.json --image IMAGE \\
        --config gs://B/configs/penguins.yaml --project P --region R [--dry-run]

Every flag of `shardflow submit` is accepted (they describe the launch). `--dry-run` prints the
`google.cloud.scheduler_v1.Job` as JSON and sends nothing.
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING

from deploy.dataflow import submit
from transforms.ui.errors import UsageError

if TYPE_CHECKING:  # the Google client (0.9 s to import) only where a job is built
    from google.cloud import scheduler_v1

DATAFLOW = "https://dataflow.googleapis.com"
DEFAULT_SCHEDULER_ENDPOINT = "cloudscheduler.googleapis.com"
JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,500}$")
SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def build_parser():
    parser = submit.build_parser()
    parser.prog = "shardflow schedule"
    parser.usage = (
        "%(prog)s --job-id ID --schedule CRON --scheduler-service-account EMAIL\n"
        "       --template GCS_JSON --config GCS_YAML --image IMAGE --project PROJECT "
        "--region REGION [options]"
    )
    parser.description = (
        "Creates a Cloud Scheduler job that launches the shardflow ETL flex template on a\n"
        "schedule (the launch is described by the flags of `shardflow submit`)."
    )
    parser.epilog = """examples:
  shardflow schedule --job-id penguins-daily --schedule "30 2 * * *" \\
      --scheduler-service-account etl@P.iam.gserviceaccount.com \\
      --template gs://b/templates/etl.json --config gs://b/daily.yaml \\
      --image IMAGE --project P --region us-central1 --dry-run"""
    # The launch's own --dry-run and --api-endpoint become the scheduler job's.
    parser.set_defaults(date="yesterday", skip_complete=True)
    when = parser.add_argument_group("the schedule")
    when.add_argument("--job-id", help="required: the Cloud Scheduler job ID ([A-Za-z0-9_-]+)")
    when.add_argument("--schedule", help='required: a unix-cron schedule, e.g. "30 2 * * *"')
    when.add_argument(
        "--time-zone", default="Etc/UTC", help="time zone of --schedule (default UTC)"
    )
    when.add_argument(
        "--scheduler-service-account",
        help="required: the service account whose OAuth token authorizes the launch (needs "
        "Dataflow Admin)",
    )
    when.add_argument(
        "--scheduler-region", help="region of the Cloud Scheduler job (default: --region)"
    )
    when.add_argument("--description", default="", help="description of the scheduler job")
    return parser


def scheduler_job(args, parent: str) -> scheduler_v1.Job:
    """The Cloud Scheduler job for `args`; raises UsageError for a bad command line."""
    for flag in ("job_id", "schedule", "scheduler_service_account"):
        if not getattr(args, flag):
            raise UsageError(f"--{flag.replace('_', '-')} is required")
    if not JOB_ID_RE.fullmatch(args.job_id):
        raise UsageError(f"--job-id: {args.job_id!r} may hold only letters, digits, _ and -")
    if len(args.schedule.split()) != 5:
        raise UsageError(f"--schedule: {args.schedule!r} is not a 5-field unix-cron schedule")
    if not args.job_name:  # a static body: one Dataflow job name for every launch
        args.job_name = "shardflow-" + re.sub(r"[^a-z0-9]+", "-", args.job_id.lower()).strip("-")
    request = submit.launch_request(args)
    from google.cloud import scheduler_v1

    return scheduler_v1.Job(
        name=f"{parent}/jobs/{args.job_id}",
        description=args.description or f"shardflow ETL of {args.config}",
        schedule=args.schedule,
        time_zone=args.time_zone,
        http_target=scheduler_v1.HttpTarget(
            uri=DATAFLOW + submit.launch_path(request),
            http_method=scheduler_v1.HttpMethod.POST,
            headers={"Content-Type": "application/json"},
            body=json.dumps(submit.launch_body(request), sort_keys=True).encode("utf-8"),
            oauth_token=scheduler_v1.OAuthToken(
                service_account_email=args.scheduler_service_account, scope=SCOPE
            ),
        ),
    )


def make_client(endpoint: str) -> scheduler_v1.CloudSchedulerClient:
    from google.api_core.client_options import ClientOptions
    from google.cloud import scheduler_v1

    options = ClientOptions(api_endpoint=endpoint)
    if endpoint.startswith("http://"):  # a local endpoint: REST, no credentials
        from google.auth.credentials import AnonymousCredentials

        return scheduler_v1.CloudSchedulerClient(
            transport="rest", client_options=options, credentials=AnonymousCredentials()
        )
    return scheduler_v1.CloudSchedulerClient(client_options=options)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)
        if args.project is None or args.region is None:
            raise UsageError(f"--{'project' if args.project is None else 'region'} is required")
        parent = f"projects/{args.project}/locations/{args.scheduler_region or args.region}"
        job = scheduler_job(args, parent)
    except UsageError as e:
        print(f"shardflow schedule: error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(type(job).to_json(job))
        return 0
    endpoint = (
        DEFAULT_SCHEDULER_ENDPOINT
        if args.api_endpoint == submit.DEFAULT_ENDPOINT
        else args.api_endpoint
    )
    try:
        created = make_client(endpoint).create_job(parent=parent, job=job, timeout=60.0)
    except Exception as e:  # the API's answer, or no credentials / no connection
        print(f"shardflow schedule: create failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(created.name or job.name)
    return 0
