"""`shardflow launch-training`: runs `shardflow train` as a Vertex AI custom job.

`build_job` turns the flags into a `google.cloud.aiplatform_v1.CustomJob` and sends nothing:
worker pool 0 is the chief (one replica), pool 1 holds the other replicas of `--replica-count`;
every replica runs the trainer image (deploy/vertex/Dockerfile) with `shardflow train --data ...
--model-dir ...` and a `--strategy` that fits the machines (see `trainer_strategy`). The job's
base output directory is `--model-dir`, so Vertex AI sets AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and
AIP_TENSORBOARD_LOG_DIR under it and the trainer writes the usual MODEL_DIR layout. `--dry-run`
prints the job as JSON (`CustomJob.to_json`) and nothing else; otherwise `submit` creates it with
the JobServiceClient of the region and the job's resource name is printed.

Flags this command does not define, and everything after `--`, are passed on to `shardflow
train` (checked with the trainer's own parser, trainer.flags, which needs no TensorFlow).
Exit status: 0 success, 2 for a bad command line (one line naming the flag), 1 when Vertex AI
refuses the job or cannot be reached.

Longer than most modules because it is one command: its flags, their checks (each error names
the flag), the machine and accelerator they resolve to, and the CustomJob built from them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import difflib
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, overload

from trainer.flags import build_parser as trainer_parser
from transforms.ui.args import ArgumentParser, positive_int
from transforms.ui.errors import UsageError
from transforms.ui.suggest import flag_hint

if TYPE_CHECKING:
    from google.cloud import aiplatform_v1

# The Google client libraries are imported where a job is built or sent, so that
# `shardflow launch-training --help` answers at once.

PROG = "shardflow launch-training"
# The trainer image's ENTRYPOINT (deploy/vertex/Dockerfile); set as the container's command too,
# so the job runs the trainer whatever the image's own entry point is.
TRAINER_COMMAND = ("shardflow", "train")
# Seconds to wait for Vertex AI to accept the job.
CREATE_TIMEOUT = 120.0

DEFAULT_MACHINE_TYPE = "n1-standard-4"
# GPUs that attach to N1 machines in any count (1, 2, 4 or 8): this machine type unless given.
N1_GPUS = frozenset(
    {"NVIDIA_TESLA_K80", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P4",
     "NVIDIA_TESLA_T4"}
)  # fmt: skip
N1_GPU_MACHINE_TYPE = "n1-standard-8"
# GPUs built into their machine types: GPUs per machine -> machine type.
GPU_MACHINES: Mapping[str, Mapping[int, str]] = {
    "NVIDIA_TESLA_A100": {
        1: "a2-highgpu-1g", 2: "a2-highgpu-2g", 4: "a2-highgpu-4g", 8: "a2-highgpu-8g",
        16: "a2-megagpu-16g",
    },
    "NVIDIA_A100_80GB": {
        1: "a2-ultragpu-1g", 2: "a2-ultragpu-2g", 4: "a2-ultragpu-4g", 8: "a2-ultragpu-8g",
    },
    "NVIDIA_L4": {
        1: "g2-standard-8", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96",
    },
    "NVIDIA_H100_80GB": {
        1: "a3-highgpu-1g", 2: "a3-highgpu-2g", 4: "a3-highgpu-4g", 8: "a3-highgpu-8g",
    },
    "NVIDIA_H100_MEGA_80GB": {8: "a3-megagpu-8g"},
    "NVIDIA_H200_141GB": {8: "a3-ultragpu-8g"},
    "NVIDIA_B200": {8: "a4-highgpu-8g"},
    "NVIDIA_GB200": {4: "a4x-highgpu-4g"},
}  # fmt: skip
# Single-host TPU slices: (accelerator type, chips) -> (machine type, TPU topology). The trainer's
# TPUStrategy drives the TPU of its own host (`local`), so a TPU job has one replica.
TPU_HOSTS: Mapping[tuple[str, int], tuple[str, str | None]] = {
    ("TPU_V2", 8): ("cloud-tpu", None),
    ("TPU_V3", 8): ("cloud-tpu", None),
    ("TPU_V4_POD", 4): ("ct4p-hightpu-4t", "2x2x1"),
    ("TPU_V5_LITEPOD", 1): ("ct5lp-hightpu-1t", "1x1"),
    ("TPU_V5_LITEPOD", 4): ("ct5lp-hightpu-4t", "2x2"),
    ("TPU_V5_LITEPOD", 8): ("ct5lp-hightpu-8t", "2x4"),
}
TPU_DEFAULT_CHIPS = {"TPU_V2": 8, "TPU_V3": 8, "TPU_V4_POD": 4, "TPU_V5_LITEPOD": 4}

_GCS = re.compile(r"^gs://[^/\s]+(/\S*)?$")
# Loose on purpose: Vertex AI names the exact rules; what is checked here would break a URL path.
_REGION = re.compile(r"^[A-Za-z0-9][\w-]*$")
_ZONE = re.compile(r"[0-9]-[a-z]$")  # us-central1-a: a zone
_PROJECT = re.compile(r"^[A-Za-z0-9][\w.:-]*$")
_TENSORBOARD = re.compile(r"^projects/[^/\s]+/locations/[^/\s]+/tensorboards/[^/\s]+$")
_NETWORK = re.compile(r"^projects/[^/\s]+/global/networks/[^/\s]+$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
_IMAGE = re.compile(r"^[^\s-]\S*$")
# Flags of `shardflow train` that this command sets itself.
_OWN_TRAINER_FLAGS = ("--data", "--model-dir")
_UNSPECIFIED = "ACCELERATOR_TYPE_UNSPECIFIED"


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """The validated command line of `shardflow launch-training`."""

    data: tuple[str, ...]  # one or more datasets (or date ranges) read as one
    model_dir: str
    project: str
    region: str
    image: str
    machine_type: str | None = None
    accelerator_type: str | None = None  # an aiplatform_v1.AcceleratorType name
    accelerator_count: int | None = None
    replica_count: int = 1
    display_name: str | None = None  # None: derived from the dataset's name and the time
    service_account: str | None = None
    tensorboard: str | None = None
    network: str | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    trainer_args: tuple[str, ...] = ()  # more `shardflow train` arguments
    api_endpoint: str | None = None  # None: REGION-aiplatform.googleapis.com
    dry_run: bool = False


@dataclasses.dataclass(frozen=True)
class Machine:
    """The machine of every replica."""

    machine_type: str
    accelerator_type: str | None = None
    accelerator_count: int = 0
    tpu_topology: str | None = None

    @property
    def is_tpu(self) -> bool:
        return bool(self.accelerator_type and self.accelerator_type.startswith("TPU_"))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `shardflow launch-training` (its own flags only)."""
    p = ArgumentParser(
        one_line=True,  # main() prints the error as one line and exits 2
        prog=PROG,
        description="Run `shardflow train` on a dataset as a Vertex AI custom job.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""Other flags, and all arguments after `--`, are passed to `shardflow train`
(e.g. --epochs 20 --batch-size 256).

examples:
  shardflow launch-training --data gs://b/penguins --model-dir gs://b/model \\
      --project P --region us-central1 --image us-docker.pkg.dev/P/r/trainer:1 --dry-run
  shardflow launch-training --data gs://b/penguins --model-dir gs://b/model \\
      --project P --region us-central1 --image IMAGE --accelerator-type NVIDIA_L4 \\
      --replica-count 2 -- --epochs 20""",
        allow_abbrev=False,
    )
    p.add_argument(
        "--data",
        required=True,
        nargs="+",
        metavar="URI",
        help="the dataset, gs://BUCKET/PATH; several (or a {FIRST..LAST} date range) are read "
        "as one",
    )
    p.add_argument(
        "--model-dir",
        required=True,
        metavar="URI",
        help="gs:// folder for export/, metrics.json, checkpoints/ and logs/; also the job's "
        "base output directory",
    )
    p.add_argument("--project", required=True, help="Google Cloud project of the job")
    p.add_argument("--region", required=True, help="Vertex AI region, e.g. us-central1")
    p.add_argument(
        "--image",
        required=True,
        help="the trainer image built from deploy/vertex/Dockerfile, e.g. "
        "us-docker.pkg.dev/PROJECT/REPO/trainer:TAG",
    )
    machines = p.add_argument_group("machines")
    machines.add_argument(
        "--machine-type",
        help=f"default: {DEFAULT_MACHINE_TYPE}; {N1_GPU_MACHINE_TYPE} with N1 GPUs (T4, V100, "
        "P100, P4, K80); the machine that holds the GPUs or TPU chips otherwise (README)",
    )
    machines.add_argument(
        "--accelerator-type",
        metavar="TYPE",
        help="a Vertex AI accelerator type, e.g. NVIDIA_TESLA_T4, NVIDIA_L4, NVIDIA_H100_80GB, "
        "TPU_V5_LITEPOD (default: none)",
    )
    machines.add_argument(
        "--accelerator-count",
        type=positive_int,
        metavar="N",
        help="accelerators per replica (default: 1 GPU; the default slice of a TPU type)",
    )
    machines.add_argument(
        "--replica-count",
        type=positive_int,
        default=1,
        metavar="N",
        help="machines in all: 1 chief plus N-1 workers, trained with --strategy multi_worker "
        "(default 1)",
    )
    job = p.add_argument_group("job")
    job.add_argument("--display-name", help="default: shardflow-DATASET-YYYYMMDD-HHMMSS (UTC)")
    job.add_argument("--service-account", metavar="EMAIL", help="the account the job runs as")
    job.add_argument(
        "--tensorboard",
        metavar="NAME",
        help="Vertex AI TensorBoard to upload logs to: projects/P/locations/R/tensorboards/ID "
        "(needs --service-account)",
    )
    job.add_argument(
        "--network", metavar="NAME", help="peered VPC network: projects/NUMBER/global/networks/N"
    )
    job.add_argument(
        "--label",
        "--labels",
        dest="labels",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label of the job (repeatable; KEY=VALUE,KEY=VALUE also; --labels is the same)",
    )
    job.add_argument(
        "--dry-run",
        action="store_true",
        help="print the CustomJob as JSON and send nothing",
    )
    job.add_argument(
        "--api-endpoint",
        metavar="HOST|URL",
        help="advanced: the Vertex AI API endpoint (default: REGION-aiplatform.googleapis.com); "
        "an http:// URL is reached over REST without credentials",
    )
    return p


def parse_args(argv: Sequence[str]) -> LaunchConfig:
    """Parses and checks the command line; raises UsageError (or SystemExit from argparse)."""
    argv = list(argv)
    after = []
    if "--" in argv:
        cut = argv.index("--")
        argv, after = argv[:cut], argv[cut + 1 :]
    args, unknown = build_parser().parse_known_args(argv)
    cfg = LaunchConfig(
        data=tuple(_gcs("--data", uri) for uri in args.data),
        model_dir=_gcs("--model-dir", args.model_dir),
        project=_match("--project", args.project, _PROJECT, "a Google Cloud project ID"),
        region=_region(args.region),
        image=_match("--image", args.image, _IMAGE, "an image reference"),
        machine_type=args.machine_type,
        accelerator_type=_accelerator(args.accelerator_type) if args.accelerator_type else None,
        accelerator_count=args.accelerator_count,
        replica_count=args.replica_count,
        display_name=_display_name(args.display_name),
        service_account=_match("--service-account", args.service_account, _EMAIL, "an email"),
        tensorboard=_match(
            "--tensorboard", args.tensorboard, _TENSORBOARD, "projects/P/locations/R/tensorboards/N"
        ),
        network=_match("--network", args.network, _NETWORK, "projects/NUMBER/global/networks/N"),
        labels=_labels(args.labels),
        trainer_args=tuple(unknown + after),
        api_endpoint=args.api_endpoint,
        dry_run=args.dry_run,
    )
    if cfg.tensorboard and not cfg.service_account:
        raise UsageError(
            "--tensorboard: Vertex AI uploads TensorBoard logs only for a job with "
            "--service-account"
        )
    _check_trainer_args(cfg)
    return cfg


def resolve_machine(cfg: LaunchConfig) -> Machine:
    """The machine type, accelerators and TPU topology of each replica."""
    name, count, machine_type = cfg.accelerator_type, cfg.accelerator_count, cfg.machine_type
    if name is None:
        if count is not None:
            raise UsageError("--accelerator-count: needs --accelerator-type")
        return Machine(machine_type or DEFAULT_MACHINE_TYPE)
    if name in TPU_DEFAULT_CHIPS:
        chips = count or TPU_DEFAULT_CHIPS[name]
        if (name, chips) not in TPU_HOSTS:
            sizes = sorted(c for n, c in TPU_HOSTS if n == name)
            raise UsageError(
                f"--accelerator-count: {name} runs on one host of "
                f"{' or '.join(map(str, sizes))} chips, not {chips}"
            )
        host_type, topology = TPU_HOSTS[(name, chips)]
        if cfg.replica_count > 1:
            raise UsageError(
                f"--replica-count: a {name} job runs on one TPU host, not {cfg.replica_count}"
            )
        if machine_type and machine_type != host_type:
            raise UsageError(
                f"--machine-type: {chips} {name} chips come with machine type {host_type}, "
                f"not {machine_type}"
            )
        return Machine(host_type, name, chips, topology)
    if name in GPU_MACHINES:
        by_count = GPU_MACHINES[name]
        if machine_type:
            per_machine = {m: c for c, m in by_count.items()}.get(machine_type, 1)
            return Machine(machine_type, name, count or per_machine)
        count = count or min(by_count)
        if count not in by_count:
            raise UsageError(
                f"--accelerator-count: {name} comes {' or '.join(map(str, by_count))} to a "
                f"machine, not {count}"
            )
        return Machine(by_count[count], name, count)
    if name in N1_GPUS:
        return Machine(machine_type or N1_GPU_MACHINE_TYPE, name, count or 1)
    if not machine_type:
        raise UsageError(f"--machine-type: required with --accelerator-type {name}")
    return Machine(machine_type, name, count or 1)


def trainer_strategy(machine: Machine, replica_count: int) -> str | None:
    """The trainer's --strategy for these machines; None leaves it to the trainer (`auto`)."""
    if machine.is_tpu:
        return "tpu"
    if replica_count > 1:
        return "multi_worker"  # MultiWorkerMirrored also uses every GPU of each replica
    if machine.accelerator_count > 1:
        return "mirrored"
    return None


def trainer_args(cfg: LaunchConfig, machine: Machine) -> list[str]:
    """The arguments of `shardflow train` in every replica."""
    strategy = trainer_strategy(machine, cfg.replica_count)
    # The user's own arguments come last, so a --strategy among them wins.
    return [
        "--data", *cfg.data, "--model-dir", cfg.model_dir,
        *(["--strategy", strategy] if strategy else []),
        *cfg.trainer_args,
    ]  # fmt: skip


def build_job(cfg: LaunchConfig, now: datetime.datetime | None = None) -> aiplatform_v1.CustomJob:
    """The CustomJob that runs the trainer as `cfg` says (nothing is sent)."""
    from google.cloud import aiplatform_v1

    machine = resolve_machine(cfg)
    machine_spec = aiplatform_v1.MachineSpec(machine_type=machine.machine_type)
    if machine.accelerator_type:
        # proto-plus ships no type hints, so the Enum class's name lookup is unknown to mypy.
        machine_spec.accelerator_type = aiplatform_v1.AcceleratorType[machine.accelerator_type]  # type: ignore[misc]
        machine_spec.accelerator_count = machine.accelerator_count
    if machine.tpu_topology:
        machine_spec.tpu_topology = machine.tpu_topology
    container = aiplatform_v1.ContainerSpec(
        image_uri=cfg.image, command=list(TRAINER_COMMAND), args=trainer_args(cfg, machine)
    )
    pools = [
        aiplatform_v1.WorkerPoolSpec(
            machine_spec=machine_spec, replica_count=replicas, container_spec=container
        )
        for replicas in (1, cfg.replica_count - 1)  # the chief, then the workers
        if replicas
    ]
    spec = aiplatform_v1.CustomJobSpec(
        worker_pool_specs=pools,
        base_output_directory=aiplatform_v1.GcsDestination(output_uri_prefix=cfg.model_dir),
    )
    for field in ("service_account", "tensorboard", "network"):
        if getattr(cfg, field):
            setattr(spec, field, getattr(cfg, field))
    if cfg.replica_count > 1:
        # A replica that fails stops the others' all-reduce (they exit 1 at once): Vertex AI
        # then restarts every replica, and they resume together from the chief's checkpoint.
        spec.scheduling = aiplatform_v1.Scheduling(restart_job_on_worker_restart=True)
    return aiplatform_v1.CustomJob(
        display_name=cfg.display_name or default_display_name(cfg.data[0], now),
        job_spec=spec,
        labels=dict(cfg.labels),
    )


def default_display_name(data: str, now: datetime.datetime | None = None) -> str:
    """shardflow-DATASET-YYYYMMDD-HHMMSS: the dataset folder's name and the UTC time."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    dataset = data.rstrip("/").rsplit("/", 1)[-1]
    return f"shardflow-{dataset}-{now:%Y%m%d-%H%M%S}"[-128:]


def to_json(job: aiplatform_v1.CustomJob) -> str:
    """The job as JSON, with enum names and only the fields that are set."""
    from google.cloud import aiplatform_v1

    return aiplatform_v1.CustomJob.to_json(
        job, use_integers_for_enums=False, always_print_fields_with_no_presence=False
    )


def submit(
    job: aiplatform_v1.CustomJob, project: str, region: str, api_endpoint: str | None = None
) -> aiplatform_v1.CustomJob:
    """Creates the job in projects/PROJECT/locations/REGION; returns the created job."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform_v1

    endpoint = api_endpoint or f"{region}-aiplatform.googleapis.com"
    if endpoint.startswith("http://"):
        # A plain-HTTP endpoint is a local stand-in for the API: REST, and no credentials to leak.
        client = aiplatform_v1.JobServiceClient(
            transport="rest",
            client_options={"api_endpoint": endpoint},
            credentials=AnonymousCredentials(),
        )
    else:
        client = aiplatform_v1.JobServiceClient(client_options={"api_endpoint": endpoint})
    with client:
        return client.create_custom_job(
            parent=f"projects/{project}/locations/{region}",
            custom_job=job,
            timeout=CREATE_TIMEOUT,
        )


def main(argv: list[str] | None = None) -> int:
    """Runs `shardflow launch-training`; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_args(argv)
        job = build_job(cfg)
    except SystemExit as e:  # argparse said why, in one line
        return e.code if isinstance(e.code, int) else 2
    except UsageError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    if cfg.dry_run:
        print(to_json(job))
        return 0
    import requests
    from google.api_core.exceptions import GoogleAPICallError, RetryError
    from google.auth.exceptions import GoogleAuthError

    try:
        created = submit(job, cfg.project, cfg.region, cfg.api_endpoint)
    except GoogleAuthError as e:
        print(f"{PROG}: no usable Google Cloud credentials: {_first_line(e)}", file=sys.stderr)
        return 1
    except (GoogleAPICallError, RetryError, requests.RequestException) as e:
        print(f"{PROG}: Vertex AI did not create the job: {_first_line(e)}", file=sys.stderr)
        return 1
    print(created.name)
    return 0


def _check_trainer_args(cfg: LaunchConfig) -> None:
    """Raises UsageError when `shardflow train` would refuse the arguments passed on to it."""
    if not cfg.trainer_args:
        return
    for arg in cfg.trainer_args:
        for flag in _OWN_TRAINER_FLAGS:
            if arg == flag or arg.startswith(flag + "="):
                raise UsageError(f"{flag}: give it to launch-training, not after `--`")
    parser = trainer_parser()
    parser.exit_on_error = False
    try:
        _, unknown = parser.parse_known_args(
            ["--data", *cfg.data, "--model-dir", cfg.model_dir, *cfg.trainer_args]
        )
    except argparse.ArgumentError as e:
        raise UsageError(f"{e} (an argument for `shardflow train`)") from None
    if unknown:
        hint = flag_hint(unknown[:1], build_parser(), parser)
        raise UsageError(
            f"{unknown[0]}: neither a launch-training flag nor a `shardflow train` argument{hint}"
        )


def _gcs(flag: str, value: str) -> str:
    if not _GCS.match(value):
        raise UsageError(f"{flag}: {value!r} is not a gs://BUCKET/PATH location (Vertex AI "
                         "reads and writes Cloud Storage)")  # fmt: skip
    return value.rstrip("/")


def _region(value: str) -> str:
    if not _REGION.match(value) or _ZONE.search(value):
        raise UsageError(f"--region: {value!r} is not a region such as us-central1")
    return value


@overload
def _match(flag: str, value: str, pattern: re.Pattern, what: str) -> str: ...
@overload
def _match(flag: str, value: str | None, pattern: re.Pattern, what: str) -> str | None: ...
def _match(flag: str, value: str | None, pattern: re.Pattern, what: str) -> str | None:
    """The value when it matches (None stays None); else UsageError naming the flag."""
    if value is not None and not pattern.match(value):
        raise UsageError(f"{flag}: {value!r} is not {what}")
    return value


def _accelerator(value: str) -> str:
    """The AcceleratorType name for a flag value (case and - or _ as you like)."""
    from google.cloud import aiplatform_v1

    name = value.strip().upper().replace("-", "_")
    names = [n for n in aiplatform_v1.AcceleratorType.__members__ if n != _UNSPECIFIED]
    if name in names:
        return name
    # Names holding every word of the value (T4 -> NVIDIA_TESLA_T4), else the closest spelling.
    words = set(name.split("_"))
    close = sorted((n for n in names if words <= set(n.split("_"))), key=len)
    close = close or difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise UsageError(
        f"--accelerator-type: {value!r} is not a Vertex AI accelerator type; {hint}valid types "
        "include NVIDIA_TESLA_T4, NVIDIA_L4, NVIDIA_H100_80GB, TPU_V5_LITEPOD "
        f"({len(names)} in all)"
    )


def _display_name(value: str | None) -> str | None:
    if value is not None and not 0 < len(value) <= 128:
        raise UsageError("--display-name: must be 1 to 128 characters")
    return value


def _labels(values: list[str]) -> dict[str, str]:
    """K=V pairs; keys and values as Vertex AI takes them (lowercase, digits, _ and -)."""
    labels = {}
    for item in (part for value in values for part in value.split(",") if part):
        key, sep, val = item.partition("=")
        if not sep or not _label_part(key, first_letter=True) or not _label_part(val):
            raise UsageError(
                f"--label: {item!r} is not KEY=VALUE of lowercase letters, digits, _ and - "
                "(a key starts with a letter; 63 characters at most)"
            )
        labels[key] = val
    return labels


def _label_part(text: str, first_letter: bool = False) -> bool:
    if len(text) > 63 or (first_letter and not (text and text[0].islower())):
        return False
    return all(c.islower() or c.isdigit() or c in "_-" for c in text)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
