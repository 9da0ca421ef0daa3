"""The trainer in a Vertex AI job: the AIP_ output locations (trainer/config.py) and the cluster
described by CLUSTER_SPEC (trainer/run/strategy.py)."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

from tests.trainer.datasets import run_python
from trainer.config import OutputDirs, output_dirs
from trainer.flags import parse_args
from trainer.run.strategy import StrategyError, adopt_cluster_spec, tf_config_from_cluster_spec

AIP = {
    "AIP_MODEL_DIR": "gs://b/job/model/",
    "AIP_CHECKPOINT_DIR": "gs://b/job/checkpoints/",
    "AIP_TENSORBOARD_LOG_DIR": "gs://b/job/logs/",
}
# Vertex AI's CLUSTER_SPEC on the second replica of worker pool 1 (chief + 2 workers).
CLUSTER_SPEC = {
    "cluster": {
        "workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
        "workerpool1": [
            "cmle-training-workerpool1-ab-0:2222",
            "cmle-training-workerpool1-ab-1:2222",
        ],
    },
    "environment": "cloud",
    "task": {"type": "workerpool1", "index": 1},
}


# --- output locations ------------------------------------------------------------------------


def test_vertex_locations_apply_when_set():
    assert output_dirs(None, AIP) == OutputDirs(
        model_dir="gs://b/job/model",
        checkpoint_dir="gs://b/job/checkpoints",
        logs_dir="gs://b/job/logs",
    )


def test_model_dir_flag_wins_over_aip_model_dir():
    assert output_dirs("gs://b/mine/", AIP).model_dir == "gs://b/mine"


def test_without_vertex_the_locations_are_the_model_dirs_own():
    cfg = parse_args(["--data", "d", "--model-dir", "gs://b/m"], environ={})
    assert (cfg.model_dir, cfg.checkpoint_dir, cfg.logs_dir) == ("gs://b/m", None, None)
    assert cfg.checkpoints == "gs://b/m/checkpoints"


def test_command_line_without_model_dir_takes_the_vertex_locations():
    cfg = parse_args(["--data", "d"], environ=AIP)
    assert cfg.model_dir == "gs://b/job/model"
    assert cfg.checkpoints == "gs://b/job/checkpoints"
    assert cfg.logs_dir == "gs://b/job/logs"


def test_without_model_dir_or_aip_model_dir_the_command_line_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--data", "d"], environ={"AIP_CHECKPOINT_DIR": "gs://b/job/checkpoints/"})
    assert exit_.value.code == 2
    assert "--model-dir is required" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_on_vertex_writes_model_checkpoints_and_logs_where_vertex_says(
    dataset, tmp_path, monkeypatch
):
    base = tmp_path / "job"
    monkeypatch.setenv("AIP_MODEL_DIR", f"{base}/model/")
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", f"{base}/checkpoints/")
    monkeypatch.setenv("AIP_TENSORBOARD_LOG_DIR", f"{base}/logs/")

    proc = run_python(
        "-m", "trainer.task", "--data", str(dataset.root), "--epochs", "1", "--batch-size", "64",
        "--steps-per-epoch", "2",
    )  # fmt: skip

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {p.name for p in base.iterdir()} == {"model", "checkpoints", "logs"}
    assert {p.name for p in (base / "model").iterdir()} == {
        "export", "history.csv", "metrics.json", "report.html", "run.json"
    }  # fmt: skip
    assert (base / "model" / "export" / "saved_model.pb").is_file()
    assert json.loads((base / "model" / "metrics.json").read_text())["steps"] == 2
    assert list((base / "checkpoints").rglob("checkpoint"))  # BackupAndRestore's files
    assert list((base / "logs" / "train").glob("events.out.tfevents.*"))
    assert f"checkpoints in {base}/checkpoints" in proc.stdout
    assert f"TensorBoard logs in {base}/logs" in proc.stdout


# --- CLUSTER_SPEC ----------------------------------------------------------------------------


def test_cluster_spec_becomes_a_tf_config_of_chief_and_workers():
    assert tf_config_from_cluster_spec(json.dumps(CLUSTER_SPEC)) == {
        "cluster": {
            "chief": ["cmle-training-workerpool0-ab-0:2222"],
            "worker": [
                "cmle-training-workerpool1-ab-0:2222",
                "cmle-training-workerpool1-ab-1:2222",
            ],
        },
        "task": {"type": "worker", "index": 1},
    }


def test_the_derived_tf_config_is_what_tensorflow_reads(monkeypatch):
    environ = {"CLUSTER_SPEC": json.dumps(CLUSTER_SPEC)}
    adopt_cluster_spec(environ)
    monkeypatch.setenv("TF_CONFIG", environ["TF_CONFIG"])

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()

    assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    assert resolver.cluster_spec().as_dict() == {
        "chief": ["cmle-training-workerpool0-ab-0:2222"],
        "worker": ["cmle-training-workerpool1-ab-0:2222", "cmle-training-workerpool1-ab-1:2222"],
    }


def test_tf_config_set_by_vertex_is_left_alone():
    environ = {"CLUSTER_SPEC": json.dumps(CLUSTER_SPEC), "TF_CONFIG": '{"cluster": {}}'}
    assert adopt_cluster_spec(environ) is None
    assert environ["TF_CONFIG"] == '{"cluster": {}}'


def test_a_one_machine_cluster_sets_no_tf_config():
    one = {"cluster": {"workerpool0": ["h:2222"]}, "task": {"type": "workerpool0", "index": 0}}
    environ = {"CLUSTER_SPEC": json.dumps(one)}
    assert adopt_cluster_spec(environ) is None
    assert "TF_CONFIG" not in environ


@pytest.mark.parametrize(
    "spec",
    [
        "not json",
        json.dumps({"cluster": {"workerpool0": ["h:1"]}}),  # no task
        json.dumps({"cluster": {"pool9": ["h:1"]}, "task": {"type": "pool9", "index": 0}}),
    ],
)
def test_a_bad_cluster_spec_is_a_strategy_error_naming_it(spec):
    with pytest.raises(StrategyError, match=r"^CLUSTER_SPEC: not a Vertex AI cluster"):
        adopt_cluster_spec({"CLUSTER_SPEC": spec})
