"""The commands a schedule runs for one date: the ETL of that date's partition, then training.

Paths hold the date templates of dataset configs (`{date}`, `{YYYY}`, `{MM}`, `{DD}`). The ETL
gets the date itself (`--date`) and fills the config's templates; the trainer gets the dataset
and model paths with the date filled in by the scheduler (for Airflow, with its own template
expressions, so that a backfill of past dates trains on each date's dataset).
"""

from __future__ import annotations

import dataclasses
import shlex

# What Airflow renders for each date template (its `ds`, YYYY-MM-DD, at run time). No quote
# inside: Airflow renders the bash command (quoted by shlex.join) before the shell reads it.
AIRFLOW_DATE = {
    "{date}": "{{ ds }}",
    "{YYYY}": "{{ ds[0:4] }}",
    "{MM}": "{{ ds[5:7] }}",
    "{DD}": "{{ ds[8:10] }}",
}


@dataclasses.dataclass(frozen=True)
class DailyJob:
    """What a daily schedule needs to know."""

    config: str  # the dataset config (gs://), its paths holding date templates
    dataset: str  # where the ETL writes one date's dataset: the config's output.path
    model_dir: str  # where each date's model goes, e.g. gs://b/models/daily/{date}
    project: str
    region: str
    temp_location: str  # gs:// folder for Dataflow's temporary and staging files
    trainer_image: str  # the deploy/vertex image
    runner: str = "DataflowRunner"  # or DirectRunner: the ETL on the scheduler's own worker
    etl_image: str | None = None  # the deploy/dataflow image as SDK container; else --setup_file
    setup_file: str = "./setup.py"
    etl_args: tuple[str, ...] = ()  # more Beam options, e.g. ("--max_num_workers", "20")
    train_args: tuple[str, ...] = ()  # more launch-training flags, e.g. ("--machine-type", ...)


def fill(text: str, values: dict[str, str]) -> str:
    for token, value in values.items():
        text = text.replace(token, value)
    return text


def etl_command(job: DailyJob, date: str) -> list[str]:
    """`shardflow etl` on Dataflow (or `job.runner`) for `date` (YYYY-MM-DD, `yesterday`, or a
    template expression); it waits for the job and does nothing for a date already complete."""
    etl = ["shardflow", "etl", "--config", job.config, "--date", date, "--skip-complete"]
    if job.runner not in ("DataflowRunner", "dataflow"):  # local: the scheduler's worker
        return [*etl, "--runner", job.runner, *job.etl_args]
    if not job.temp_location:
        raise ValueError("a Dataflow job needs a temp location (shardflow_temp_location)")
    workers = (
        ["--sdk_container_image", job.etl_image, "--sdk_location", "container"]
        if job.etl_image
        else ["--setup_file", job.setup_file]
    )
    return [
        *etl, "--runner", "DataflowRunner", "--project", job.project, "--region", job.region,
        "--temp_location", job.temp_location, *workers, *job.etl_args,
    ]  # fmt: skip


def train_command(job: DailyJob, dates: dict[str, str]) -> list[str]:
    """`shardflow launch-training` on the dataset of the date that `dates` fills in."""
    return [
        "shardflow", "launch-training", "--data", fill(job.dataset, dates),
        "--model-dir", fill(job.model_dir, dates), "--project", job.project,
        "--region", job.region, "--image", job.trainer_image, *job.train_args,
    ]  # fmt: skip


def airflow_commands(job: DailyJob) -> tuple[str, str]:
    """The bash commands of the DAG's two tasks, with Airflow's date expressions."""
    return (
        shlex.join(etl_command(job, AIRFLOW_DATE["{date}"])),
        shlex.join(train_command(job, AIRFLOW_DATE)),
    )
