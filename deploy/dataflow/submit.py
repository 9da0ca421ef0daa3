"""`shardflow submit`: launches the ETL's Dataflow flex template.

`launch_request(args)` builds the `LaunchFlexTemplateRequest` from the command line, with no I/O;
`launch_path(request)` and `launch_body(request)` are the REST call it becomes
(`POST https://dataflow.googleapis.com` + path, with the JSON body), which a Cloud Scheduler job
can send as it is. `main(argv)` sends the request with the Dataflow client library, prints it
(`--dry-run`), or prints the commands that build the image and the template spec
(`--print-build-commands`).

Exit status: 0 launched (or printed), 2 bad command line (one line naming the flag), 1 the
launch request failed.
"""

from __future__ import annotations

import argparse
import datetime
import re
import shlex
import sys
from typing import TYPE_CHECKING, Any

from transforms.ui.args import ArgumentParser, positive_int
from transforms.ui.errors import UsageError

if TYPE_CHECKING:  # the Google client (0.4 s to import) only where a request is built
    from google.cloud.dataflow_v1beta3 import LaunchFlexTemplateRequest

DEFAULT_ENDPOINT = "dataflow.googleapis.com"
# The REST binding of FlexTemplatesService.LaunchFlexTemplate (google/dataflow/v1beta3).
LAUNCH_HTTP_RULE = {
    "method": "post",
    "uri": "/v1b3/projects/{project_id}/locations/{location}/flexTemplates:launch",
    "body": "*",
}
DOCKERFILE = "deploy/dataflow/Dockerfile"
CLOUDBUILD = "deploy/dataflow/cloudbuild.yaml"
METADATA = "deploy/dataflow/metadata.json"
LAUNCH_TIMEOUT_S = 120.0

# Dataflow's rule for job names; project IDs and regions as Google Cloud names them.
JOB_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,1022}[a-z0-9])?$")
PROJECT_RE = re.compile(r"^([a-z0-9.-]+:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$")
REGION_RE = re.compile(r"^[a-z]+(-[a-z]+)+[0-9]+$")
LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
DATE_RE = re.compile(r"^([0-9]{4}-[0-9]{2}-[0-9]{2}|today|yesterday)$")
_SLUG_MAX = 40


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        one_line=True,  # main() prints the error as one line and exits 2
        prog="shardflow submit",
        usage="%(prog)s --template GCS_JSON --config GCS_YAML --image IMAGE --project PROJECT "
        "--region REGION [options]\n"
        "       %(prog)s --print-build-commands --template GCS_JSON --image IMAGE",
        description="Launches the shardflow ETL flex template on Dataflow\n(the template built "
        f"from {DOCKERFILE} and {METADATA}).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  shardflow submit --template gs://b/templates/etl.json --config gs://b/penguins.yaml \\
                   --image IMAGE --project P --region us-central1 --dry-run
  shardflow submit --template gs://b/templates/etl.json --config gs://b/daily.yaml \\
                   --image IMAGE --project P --region us-central1 \\
                   --date yesterday --skip-complete""",
    )
    job = parser.add_argument_group("the dataset")
    job.add_argument(
        "--config", help="required: the dataset config (YAML) in Cloud Storage: gs://..."
    )
    job.add_argument("--output", help="overrides output.path of the config: gs://...")
    job.add_argument(
        "--overwrite", action="store_true", help="replace the dataset already at OUTPUT"
    )
    job.add_argument(
        "--date", help="fills the config's date templates: YYYY-MM-DD, today or yesterday (UTC)"
    )
    job.add_argument(
        "--skip-complete",
        action="store_true",
        help="do nothing when OUTPUT already holds a complete dataset",
    )
    job.add_argument(
        "--parameter",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another template parameter, e.g. a Beam pipeline option such as "
        "max_num_workers=20 (repeatable)",
    )
    where = parser.add_argument_group("the Dataflow job")
    where.add_argument(
        "--template", help="required: the template spec file: gs://BUCKET/.../NAME.json"
    )
    where.add_argument(
        "--image",
        help="required: the image built from the Dockerfile (the template's image): the "
        "workers run it (environment.sdk_container_image)",
    )
    where.add_argument("--project", help="required: the Google Cloud project ID")
    where.add_argument("--region", help="required: the Dataflow region, e.g. us-central1")
    where.add_argument(
        "--job-name",
        help="Dataflow job name ([a-z]([-a-z0-9]*[a-z0-9])?); default: "
        "shardflow-CONFIGNAME-YYYYMMDD-HHMMSS (the config file's name, UTC time)",
    )
    where.add_argument("--temp-location", help="gs:// folder for temporary files")
    where.add_argument("--staging-location", help="gs:// folder for staged files")
    where.add_argument("--service-account", help="service account e-mail the workers run as")
    where.add_argument("--num-workers", type=positive_int, help="initial number of workers")
    where.add_argument("--max-workers", type=positive_int, help="maximum number of workers")
    where.add_argument("--machine-type", help="worker machine type, e.g. n2-standard-4")
    where.add_argument("--network", help="Compute Engine network of the workers")
    where.add_argument("--subnetwork", help="subnetwork of the workers (regions/R/subnetworks/S)")
    where.add_argument(
        "--label",
        "--labels",
        dest="label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label of the job (repeatable; KEY=VALUE,KEY=VALUE also; --labels is the same)",
    )
    how = parser.add_argument_group("how")
    how.add_argument(
        "--validate-only", action="store_true", help="Dataflow checks the request, starts nothing"
    )
    how.add_argument(
        "--dry-run",
        action="store_true",
        help="print the LaunchFlexTemplateRequest as JSON and send nothing",
    )
    how.add_argument(
        "--api-endpoint",
        default=DEFAULT_ENDPOINT,
        help=f"Dataflow API endpoint (default {DEFAULT_ENDPOINT}, with Application Default "
        "Credentials); an http:// URL is a local endpoint, reached over REST without credentials",
    )
    how.add_argument(
        "--print-build-commands",
        action="store_true",
        help="print the commands (run at the repository root) that build --image and the "
        "template spec --template, and exit",
    )
    return parser


def _require(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        if not getattr(args, name):
            raise UsageError(f"--{name.replace('_', '-')} is required")


def _gcs(args: argparse.Namespace, name: str) -> None:
    value = getattr(args, name)
    if value is not None and not re.fullmatch(r"gs://[^/\s]+/?\S*", value):
        flag = f"--{name.replace('_', '-')}"
        raise UsageError(f"{flag}: {value!r} is not a gs://BUCKET/... path")


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    pairs = {}
    if flag == "--label":  # labels hold no commas: KEY=VALUE,KEY=VALUE is several
        values = [part for value in values for part in value.split(",") if part]
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag}: {item!r} is not NAME=VALUE")
        pairs[key] = value
    return pairs


def default_job_name(config: str, now: datetime.datetime) -> str:
    """`shardflow-NAME-YYYYMMDD-HHMMSS`: NAME from the config file's name, `now` in UTC."""
    stem = config.rstrip("/").rsplit("/", 1)[-1]
    stem = stem.rsplit(".", 1)[0] if "." in stem else stem  # without its extension
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")[:_SLUG_MAX].strip("-")
    stamp = now.astimezone(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return "-".join(part for part in ("shardflow", slug, stamp) if part)


def _check_launch(args: argparse.Namespace) -> None:
    _require(args, "template", "config", "image", "project", "region")
    for name in ("template", "config", "output", "temp_location", "staging_location"):
        _gcs(args, name)
    if not PROJECT_RE.fullmatch(args.project):
        raise UsageError(f"--project: {args.project!r} is not a Google Cloud project ID")
    if not REGION_RE.fullmatch(args.region):
        raise UsageError(f"--region: {args.region!r} is not a region such as us-central1")
    if args.job_name is not None and not JOB_NAME_RE.fullmatch(args.job_name):
        raise UsageError(
            f"--job-name: {args.job_name!r} must match [a-z]([-a-z0-9]*[a-z0-9])? "
            "(at most 1024 characters)"
        )
    if args.date is not None and not DATE_RE.fullmatch(args.date):
        raise UsageError(f"--date: {args.date!r} is not YYYY-MM-DD, today or yesterday")
    if (args.num_workers and args.max_workers) and args.num_workers > args.max_workers:
        raise UsageError(
            f"--num-workers: {args.num_workers} is more than --max-workers {args.max_workers}"
        )
    for key, value in _pairs(args.label, "--label").items():
        if not LABEL_KEY_RE.fullmatch(key) or not LABEL_VALUE_RE.fullmatch(value):
            raise UsageError(
                f"--label: {key}={value} is not a label (lowercase letters, digits, _ and -)"
            )


def launch_request(
    args: argparse.Namespace, now: datetime.datetime | None = None
) -> LaunchFlexTemplateRequest:
    """The request that launches the template for `args` (from `build_parser()`).

    Raises UsageError for a bad command line. `now` names the default job (UTC; default: now).
    """
    from google.cloud.dataflow_v1beta3 import (
        FlexTemplateRuntimeEnvironment,
        LaunchFlexTemplateParameter,
        LaunchFlexTemplateRequest,
    )

    _check_launch(args)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    parameters = {"config": args.config}
    if args.output:
        parameters["output"] = args.output
    if args.overwrite:
        parameters["overwrite"] = "true"
    if args.date:
        parameters["date"] = args.date
    if args.skip_complete:
        parameters["skip_complete"] = "true"
    extra = _pairs(args.parameter, "--parameter")
    clash = sorted(set(extra) & (set(parameters) | {"sdk_container_image"}))
    if clash:
        raise UsageError(f"--parameter: {clash[0]!r} has its own flag")
    parameters.update(extra)
    fields = {
        "sdk_container_image": args.image,
        "temp_location": args.temp_location,
        "staging_location": args.staging_location,
        "service_account_email": args.service_account,
        "num_workers": args.num_workers,
        "max_workers": args.max_workers,
        "machine_type": args.machine_type,
        "network": args.network,
        "subnetwork": args.subnetwork,
        "additional_user_labels": _pairs(args.label, "--label"),
    }
    environment = FlexTemplateRuntimeEnvironment(
        {name: value for name, value in fields.items() if value}
    )
    return LaunchFlexTemplateRequest(
        project_id=args.project,
        location=args.region,
        validate_only=args.validate_only,
        launch_parameter=LaunchFlexTemplateParameter(
            job_name=args.job_name or default_job_name(args.config, now),
            container_spec_gcs_path=args.template,
            parameters=parameters,
            environment=environment,
        ),
    )


def _transcoded(request: LaunchFlexTemplateRequest) -> dict[str, Any]:
    from google.api_core import path_template

    return path_template.transcode([LAUNCH_HTTP_RULE], type(request).pb(request))


def launch_path(request: LaunchFlexTemplateRequest) -> str:
    """The REST path: /v1b3/projects/P/locations/R/flexTemplates:launch."""
    return _transcoded(request)["uri"]


def launch_body(request: LaunchFlexTemplateRequest) -> dict[str, Any]:
    """The REST JSON body of `request` (the request without its path fields), as the client
    library sends it: camelCase names, enums as numbers, default values left out."""
    from google.protobuf import json_format

    body = _transcoded(request)["body"]
    return json_format.MessageToDict(body, use_integers_for_enums=True)


def build_commands(template: str, image: str, project: str | None) -> list[list[str]]:
    """The commands that build and push the image, then write the template spec."""
    project_flags = ["--project", project] if project else []
    return [
        ["gcloud", "builds", "submit", "--config", CLOUDBUILD,
         "--substitutions", f"_IMAGE={image}", *project_flags, "."],
        ["gcloud", "dataflow", "flex-template", "build", template, "--image", image,
         "--sdk-language", "PYTHON", "--metadata-file", METADATA, *project_flags],
    ]  # fmt: skip


def make_client(endpoint: str):
    """A FlexTemplatesServiceClient for `endpoint`: Google's with Application Default
    Credentials, or a local http:// one over REST without credentials."""
    from google.api_core.client_options import ClientOptions
    from google.cloud.dataflow_v1beta3 import FlexTemplatesServiceClient

    options = ClientOptions(api_endpoint=endpoint)
    if endpoint.startswith("http://"):
        from google.auth.credentials import AnonymousCredentials

        return FlexTemplatesServiceClient(
            transport="rest", client_options=options, credentials=AnonymousCredentials()
        )
    return FlexTemplatesServiceClient(client_options=options)


def _launch(request: LaunchFlexTemplateRequest, endpoint: str):
    """Sends `request`; raises RuntimeError saying why it failed."""
    import requests
    from google.api_core import exceptions as api_exceptions
    from google.auth import exceptions as auth_exceptions

    try:
        client = make_client(endpoint)
        return client.launch_flex_template(request=request, timeout=LAUNCH_TIMEOUT_S)
    except auth_exceptions.DefaultCredentialsError:
        raise RuntimeError(
            "no Google Cloud credentials: run `gcloud auth application-default login` or set "
            "GOOGLE_APPLICATION_CREDENTIALS"
        ) from None
    except api_exceptions.GoogleAPICallError as e:
        raise RuntimeError(str(e)) from None
    except (api_exceptions.RetryError, auth_exceptions.GoogleAuthError) as e:
        raise RuntimeError(str(e)) from None
    except requests.RequestException as e:
        raise RuntimeError(f"cannot reach {endpoint}: {type(e).__name__}") from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)
        if args.print_build_commands:
            _require(args, "template", "image")
            _gcs(args, "template")
            for command in build_commands(args.template, args.image, args.project):
                print(shlex.join(command))
            return 0
        request = launch_request(args)
    except UsageError as e:
        print(f"shardflow submit: error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(type(request).to_json(request))
        return 0
    try:
        response = _launch(request, args.api_endpoint)
    except RuntimeError as e:
        print(f"shardflow submit: launch failed: {e}", file=sys.stderr)
        return 1
    name = request.launch_parameter.job_name
    if args.validate_only:
        print(f"shardflow submit: the launch of {name} is valid; nothing was started")
        return 0
    job = response.job
    if not job.id:
        print(f"shardflow submit: launch failed: no job in the answer for {name}", file=sys.stderr)
        return 1
    print(job.id)
    print(
        f"shardflow submit: launched {job.name or name}: https://console.cloud.google.com/"
        f"dataflow/jobs/{args.region}/{job.id}?project={args.project}",
        file=sys.stderr,
    )
    return 0
