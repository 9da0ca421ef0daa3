"""Airflow DAG `shardflow_daily`: each day, the ETL of that day's partition on Dataflow, then a
Vertex AI training job on the new dataset.

Copy this file and `deploy/schedule/commands.py` (or install shardflow) where the scheduler reads
DAGs, and set the Airflow Variables read below (`airflow variables set shardflow_config gs://...`;
`shardflow_dataset` is the config's output.path, with its date template). Optional:
`shardflow_runner` (DataflowRunner; DirectRunner runs the ETL on the Airflow worker itself),
`shardflow_etl_args` and `shardflow_train_args` (more flags of `shardflow etl` and
`shardflow launch-training`, e.g. `--max_num_workers 20`, `--machine-type n1-standard-8`).
The workers need the `shardflow` command (`pip install 'shardflow[etl,deploy]'`) and Google
credentials. `catchup=True` makes Airflow run every day since `start_date`: a backfill, one
dataset per date; a retried or repeated ETL task does nothing for a date already complete
(`--skip-complete`). Written for Airflow 3 (`airflow.sdk`), and importable by Airflow 2.
"""

from __future__ import annotations

import datetime
import shlex
from typing import TYPE_CHECKING

try:  # Airflow 3
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.sdk import DAG, Variable
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.models import Variable
    from airflow.operators.bash import BashOperator

if TYPE_CHECKING:  # type-checked against the package's module
    from deploy.schedule.commands import DailyJob, airflow_commands
else:
    try:
        from deploy.schedule.commands import DailyJob, airflow_commands
    except ImportError:  # the module copied next to this file
        from commands import DailyJob, airflow_commands


def _job() -> DailyJob:
    get = Variable.get  # (key, default) positionally: the same call in Airflow 2 and 3
    return DailyJob(
        config=get("shardflow_config"),
        dataset=get("shardflow_dataset"),
        model_dir=get("shardflow_model_dir"),
        project=get("shardflow_project"),
        region=get("shardflow_region", "us-central1"),
        temp_location=get("shardflow_temp_location", ""),  # Dataflow's (commands.py checks)
        trainer_image=get("shardflow_trainer_image"),
        etl_image=get("shardflow_etl_image", None),
        runner=get("shardflow_runner", "DataflowRunner"),
        etl_args=tuple(shlex.split(get("shardflow_etl_args", ""))),
        train_args=tuple(shlex.split(get("shardflow_train_args", ""))),
    )


etl_command, train_command = airflow_commands(_job())

with DAG(
    dag_id="shardflow_daily",
    description="shardflow: daily ETL partition on Dataflow, then training on Vertex AI",
    schedule="@daily",
    start_date=datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc),
    catchup=True,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": datetime.timedelta(minutes=10)},
    tags=["shardflow"],
) as dag:
    etl = BashOperator(task_id="etl", bash_command=etl_command)
    train = BashOperator(task_id="train", bash_command=train_command)
    etl >> train
