"""Scheduled batch runs: an Airflow DAG, a Cloud Scheduler job and a cron line, all running the
ETL of one date partition (`shardflow etl --date ...`) and then training on it."""
