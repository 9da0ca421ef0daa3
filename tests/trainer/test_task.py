"""`python -m trainer.task` end to end: train, metrics, export, resume, profile, exit codes."""

import copy
import json
import shutil
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from tests.trainer.datasets import (
    FEATURES,
    make_rows,
    run_python,
    to_example,
    write_dataset,
)
from trainer.recipe.kinds import embedding_width
from trainer.task import main

CLASSES = FEATURES["species"]["values"]
# what metrics.json's eval holds for a classifier: the model's and the baseline's
# (trainer.run.evaluate)
EVAL_METRICS = ["accuracy", "baseline_accuracy", "loss", "macro_f1", "records"]


def _fail(proc: subprocess.CompletedProcess) -> str:
    return f"rc={proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


@pytest.mark.slow
def test_training_exits_0_writes_metrics_and_exports(trained, dataset):
    model_dir, proc = trained
    assert proc.returncode == 0, _fail(proc)

    metrics = json.loads((model_dir / "metrics.json").read_text())

    assert sorted(metrics) == [
        "batch_size",
        "best_epoch",
        "checkpoint_bytes",
        "class_counts",
        "class_weight",
        "classes",
        "classes_from",
        "corrupt_files",
        "dataset",
        "dropout",
        "early_stopping",
        "epochs",
        "epochs_trained",
        "eval",
        "eval_classes",
        "examples_per_sec",
        "features",
        "initial_epoch",
        "initial_step",
        "jit_compile",
        "label",
        "learning_rate",
        "mixed_precision",
        "model",
        "model_inputs",
        "not_model_inputs",
        "records_without_label",
        "replicas",
        "skipped_records",
        "steps",
        "steps_per_epoch",
        "steps_per_execution",
        "stopped_early",
        "strategy",
        "task",
        "train",
        "train_records",
        "validation",
        "warnings",
        "weight_decay",
    ]
    # CPU defaults; every feature but the label and the image is a model input
    assert (metrics["jit_compile"], metrics["mixed_precision"]) == (False, "float32")
    assert metrics["steps_per_execution"] == 1
    assert "island" in metrics["model_inputs"] and "body_mass_g__present" in metrics["model_inputs"]
    assert list(metrics["not_model_inputs"]) == ["photo"]
    assert metrics["model"] == "built-in"
    # tags (a string list without values): its train tokens as its vocabulary, embedded
    assert metrics["features"]["tags"] == {
        "inputs": ["tags"], "as": "embedded tokens", "ids": "vocabulary", "size": 7,
        "width": embedding_width(7),
    }  # fmt: skip
    assert metrics["features"]["photo"] == {"left_out": metrics["not_model_inputs"]["photo"]}
    assert (metrics["early_stopping"], metrics["best_epoch"], metrics["epochs_trained"]) == (
        False, 1, 1,
    )  # fmt: skip
    # the baseline always answers train's majority class
    train_labels = [r["species"] for r in dataset.rows["train"]]
    majority = max(CLASSES, key=train_labels.count)
    eval_labels = [r["species"] for r in dataset.rows["eval"]]
    assert metrics["eval"]["baseline_accuracy"] == eval_labels.count(majority) / 60
    assert metrics["class_counts"] == {c: train_labels.count(c) for c in CLASSES}
    assert metrics["class_weight"] == "none"
    by_class = metrics["eval_classes"]
    assert by_class["confusion_matrix"]["classes"] == ["Adelie", "Chinstrap", "Gentoo"]
    assert sum(map(sum, by_class["confusion_matrix"]["matrix"])) == 60  # every eval record once
    assert by_class["accuracy"] == pytest.approx(metrics["eval"]["accuracy"], abs=1e-6)
    assert (metrics["classes"], metrics["classes_from"]) == (
        ["Adelie", "Chinstrap", "Gentoo"],
        "config",
    )
    assert metrics["initial_step"] == 0
    assert (metrics["epochs"], metrics["initial_epoch"], metrics["batch_size"]) == (1, 0, 32)
    assert metrics["steps_per_epoch"] == 8  # ceil(240 train records / 32)
    assert metrics["steps"] == 8  # optimizer steps in all
    assert (metrics["skipped_records"], metrics["corrupt_files"]) == (0, [])
    assert (metrics["label"], metrics["task"]) == ("species", "classification")
    assert (metrics["strategy"], metrics["replicas"]) == ("DefaultDistributionStrategy", 1)
    assert sorted(metrics["train"]) == ["accuracy", "loss"]
    assert sorted(metrics["eval"]) == EVAL_METRICS
    assert metrics["examples_per_sec"] > 0
    assert (model_dir / "export" / "saved_model.pb").is_file()
    assert (model_dir / "checkpoints").is_dir()
    assert f"model exported to {model_dir}/export" in proc.stdout.splitlines()


@pytest.mark.slow
def test_export_serves_raw_examples_without_the_label(trained):
    model_dir, proc = trained
    assert proc.returncode == 0, _fail(proc)
    serve = tf.saved_model.load(str(model_dir / "export")).signatures["serving_default"]
    rows = make_rows(6, seed=42)
    rows[0].update(body_mass_g=None, sex=None, tags=[])  # missing optional values serve too
    no_label = {k: v for k, v in FEATURES.items() if k != "species"}
    examples = tf.constant([to_example(r, no_label).SerializeToString() for r in rows])

    outputs = serve(examples=examples)

    probabilities = outputs["probabilities"].numpy()
    assert sorted(outputs) == ["classes", "probabilities"]
    assert probabilities.shape == (6, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), np.ones(6), rtol=1e-5)
    assert [c.decode() for c in outputs["classes"].numpy()] == [
        CLASSES[i] for i in probabilities.argmax(axis=1)
    ]


@pytest.mark.slow
def test_rerun_with_more_epochs_resumes_from_the_checkpoint(trained, tmp_path):
    model_dir, proc = trained
    assert proc.returncode == 0, _fail(proc)
    resumed_dir = tmp_path / "model"
    shutil.copytree(model_dir, resumed_dir)
    data = json.loads((model_dir / "metrics.json").read_text())["dataset"]

    proc = run_python(
        "-m", "trainer.task", "--data", data, "--model-dir", str(resumed_dir),
        "--epochs", "2", "--batch-size", "32", "--deterministic",
    )  # fmt: skip

    assert proc.returncode == 0, _fail(proc)
    metrics = json.loads((resumed_dir / "metrics.json").read_text())
    assert (metrics["initial_epoch"], metrics["epochs"]) == (1, 2)
    assert "Epoch 2/2" in proc.stdout
    assert "Epoch 1/2" not in proc.stdout


@pytest.mark.slow
def test_profile_input_prints_json_as_last_line(dataset, tmp_path):
    proc = run_python(
        "-m", "trainer.task", "--data", str(dataset.root), "--profile-input",
        "--batch-size", "16", "--profile-batches", "10",
    )  # fmt: skip

    assert proc.returncode == 0, _fail(proc)
    result = json.loads(proc.stdout.splitlines()[-1])
    assert {"input_examples_per_sec", "model_examples_per_sec", "input_bound"} <= set(result)
    assert result["input_examples_per_sec"] > 0 and result["model_examples_per_sec"] > 0
    assert result["input_bound"] is (
        result["input_examples_per_sec"] < result["model_examples_per_sec"]
    )
    assert (result["batch_size"], result["batches"]) == (16, 10)
    assert result["host_examples_per_sec"] > 0 and result["images"] == []
    assert (result["jit_compile"], result["mixed_precision"], result["steps_per_execution"]) == (
        False,
        "float32",
        1,
    )


def test_missing_manifest_exits_2_with_one_line(tmp_path, capsys):
    status = main(["--data", str(tmp_path), "--model-dir", str(tmp_path / "model")])

    assert status == 2
    assert capsys.readouterr().err == (
        f"shardflow train: {tmp_path}: no manifest.json at {tmp_path}/manifest.json, "
        "the run is incomplete or this is not a shardflow dataset\n"
    )
    assert not (tmp_path / "model").exists()


def test_dataset_without_train_files_exits_2(tmp_path, capsys):
    written = write_dataset(tmp_path, make_rows(20), splits={"eval": 1})

    status = main(["--data", str(written.root), "--model-dir", str(tmp_path / "model")])

    assert status == 2
    assert capsys.readouterr().err == (
        f"shardflow train: {written.root}: split 'train' has no files or no records\n"
    )


def test_dataset_with_a_missing_shard_exits_2(dataset, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(dataset.root, broken)
    (broken / "train/train-00001-of-00002.tfrecord.gz").unlink()

    assert main(["--data", str(broken), "--model-dir", str(tmp_path / "model")]) == 2
    assert capsys.readouterr().err == (
        f"shardflow train: {broken}: split 'train': 1 listed file(s) missing, "
        f"e.g. {broken}/train/train-00001-of-00002.tfrecord.gz\n"
    )


def test_dataset_without_label_exits_2(tmp_path, capsys):
    written = write_dataset(tmp_path, make_rows(20), label=None)
    assert main(["--data", str(written.root), "--model-dir", str(tmp_path / "m")]) == 2
    assert capsys.readouterr().err == (
        f"shardflow train: {written.root}: the manifest has no label to train on\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--epochs", "0"],
        ["--strategy", "horovod"],
        ["--hidden-units", "64,x"],
        [],  # no --model-dir and no --profile-input
    ],
)
def test_bad_command_line_exits_2(dataset, args, capsys):
    assert main(["--data", str(dataset.root), *args]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("shardflow train: error: ")


def test_label_value_outside_the_manifest_values_fails_the_run_with_1(tmp_path, capsys):
    written = write_dataset(tmp_path / "data", make_rows(40))
    manifest = copy.deepcopy(written.manifest)
    manifest["features"]["species"]["values"] = ["Adelie", "Chinstrap"]  # data also has Gentoo
    (written.root / "manifest.json").write_text(json.dumps(manifest))

    status = main(
        ["--data", str(written.root), "--model-dir", str(tmp_path / "m"), "--epochs", "1"]
    )

    assert status == 1
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .startswith(
            "shardflow train: training failed: InvalidArgumentError: assertion failed: "
            "[label species: a value is not one of the manifest values]"
        )
    )


# Two logical CPUs stand in for two GPUs: MirroredStrategy then has two replicas.
MIRRORED_ON_TWO_CPUS = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import trainer.task
trainer.task.get_strategy = lambda name: tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
sys.exit(trainer.task.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_training_on_two_replicas_splits_the_global_batch(dataset, tmp_path):
    proc = run_python(
        "-c", MIRRORED_ON_TWO_CPUS, "--data", str(dataset.root), "--model-dir", str(tmp_path),
        "--epochs", "1", "--batch-size", "32",
    )  # fmt: skip

    assert proc.returncode == 0, _fail(proc)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert (metrics["strategy"], metrics["replicas"]) == ("MirroredStrategy", 2)
    assert (metrics["batch_size"], metrics["steps_per_epoch"]) == (32, 8)
    assert sorted(metrics["eval"]) == EVAL_METRICS
    assert (tmp_path / "export" / "saved_model.pb").is_file()


def test_trainer_never_imports_apache_beam_nor_tf_transform_unless_a_dataset_has_one():
    modules = (
        "trainer.task, trainer.keras.input, trainer.keras.model, trainer.run.export, "
        "trainer.inspect, trainer.dataset.manifest, trainer.keras.features, trainer.run.strategy, "
        "trainer.keras.transform, trainer.predict, trainer.flags, trainer.config, trainer.errors, "
        "trainer.keras.inputs, trainer.run.fit, trainer.run.profile, trainer.recipe.rules"
    )
    proc = run_python(
        "-c",
        f"import {modules}, sys; assert 'apache_beam' not in sys.modules; "
        "assert 'tensorflow_transform' not in sys.modules",
        timeout=120,
    )
    assert proc.returncode == 0, _fail(proc)
