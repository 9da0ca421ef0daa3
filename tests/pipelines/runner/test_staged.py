"""What a job's workers get from --setup_file, checked first (pipelines/runner/staged.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipelines import etl
from pipelines.config.loader import ConfigError, load_config
from pipelines.runner.options import pipeline_options
from pipelines.runner.staged import check_workers

DATAFLOW = ["--runner", "DataflowRunner", "--project", "p", "--region", "r",
            "--temp_location", "gs://bucket/tmp"]  # fmt: skip


def _config(folder: Path, fmt: str = "tfrecord", transform: bool = False) -> Path:
    (folder / "in.data").write_bytes(b"")
    config = {
        "name": "staged",
        "sources": [{"name": "records", "format": fmt, "path": str(folder / "in.data")}],
        "features": {"x": {"type": "float"}},
        "output": {"path": str(folder / "out")},
    }
    if transform:
        config["transform"] = {"features": {"x": "z_score"}}
    (folder / "c.yaml").write_text(yaml.safe_dump(config))
    return folder / "c.yaml"


def _check(cfg: Path, *flags: str) -> None:
    check_workers(load_config(str(cfg)), pipeline_options(list(flags)))


def test_a_tfrecord_source_on_dataflow_with_only_the_setup_file_is_refused_before_any_work(
    tmp_path, capsys
):
    cfg = _config(tmp_path)

    code = etl.run(["--config", str(cfg), *DATAFLOW, "--setup_file", "./setup.py"])

    err = capsys.readouterr().err
    assert code == 2
    assert "--setup_file: source 'records' (format: tfrecord) needs tfx-bsl on the workers" in err
    assert "--sdk_container_image" in err and "--requirements_file" in err
    assert not (tmp_path / "out").exists()


def test_a_transform_needs_tensorflow_transform_on_the_workers(tmp_path):
    with pytest.raises(ConfigError, match="the transform: section needs tensorflow-transform"):
        _check(_config(tmp_path, "csv", transform=True), *DATAFLOW, "--setup_file", "setup.py")


@pytest.mark.parametrize(
    "flags",
    [
        [*DATAFLOW],  # no --setup_file: the user chose how the workers get the code
        [*DATAFLOW, "--setup_file", "s.py", "--sdk_container_image", "gcr.io/p/etl:1"],
        [*DATAFLOW, "--setup_file", "s.py", "--requirements_file", "r.txt"],
        [*DATAFLOW, "--setup_file", "s.py", "--extra_package", "x.whl"],
        ["--runner", "PortableRunner", "--setup_file", "s.py", "--environment_type", "EXTERNAL"],
        ["--setup_file", "s.py"],  # the local runner: the workers are this environment
    ],
)
def test_workers_given_an_image_requirements_or_their_own_environment_pass(tmp_path, flags):
    _check(_config(tmp_path, transform=True), *flags)


def test_a_config_that_needs_nothing_more_passes(tmp_path):
    _check(_config(tmp_path, "csv"), *DATAFLOW, "--setup_file", "setup.py")
