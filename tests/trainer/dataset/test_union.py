"""Several datasets as one input (trainer/dataset/union.py): `--data A B` and date ranges."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.trainer.datasets import make_rows, run_python, write_dataset
from trainer.dataset.manifest import ManifestError, load_manifest
from trainer.dataset.union import expand, load_datasets
from trainer.flags import parse_args


def test_a_date_range_stands_for_one_uri_per_day_written_like_its_ends():
    assert expand(["gs://b/daily/{2026-11-30..2026-12-02}/"]) == [
        "gs://b/daily/2026-11-30/",
        "gs://b/daily/2026-12-01/",
        "gs://b/daily/2026-12-02/",
    ]
    assert expand(["out/{2024/02/28..2024/03/01}", "other"]) == [
        "out/2024/02/28",
        "out/2024/02/29",
        "out/2024/03/01",
        "other",
    ]
    assert expand(["out/{20261101..20261102}"]) == ["out/20261101", "out/20261102"]


@pytest.mark.parametrize(
    "uri",
    [
        "out/{2026-11-02..2026-11-01}",
        "out/{2026-11-01..2026/11/02}",
        "out/{2026-02-30..2026-03-01}",
    ],
)
def test_a_bad_date_range_is_an_error(uri):
    with pytest.raises(ManifestError, match="--data out/"):
        expand([uri])


@pytest.fixture(scope="module")
def daily(tmp_path_factory):
    """Three daily datasets of the same features: 40, 50 and 60 rows."""
    base = tmp_path_factory.mktemp("daily")
    for day, rows in (("2026-11-01", 40), ("2026-11-02", 50), ("2026-11-03", 60)):
        write_dataset(base / day, make_rows(rows, seed=rows))
    return base


def test_datasets_of_a_date_range_are_read_as_one(daily):
    m = load_datasets([str(daily / "{2026-11-01..2026-11-03}")])
    parts = [load_manifest(str(daily / d)) for d in ("2026-11-01", "2026-11-02", "2026-11-03")]
    assert m.roots == tuple(p.root for p in parts)
    for split in ("train", "eval"):
        assert m.split_records(split) == sum(p.split_records(split) for p in parts)
        assert m.split_files(split) == [f for p in parts for f in p.split_files(split)]
    assert m.features == parts[0].features


def test_a_missing_day_or_a_different_feature_is_an_error_naming_it(daily, tmp_path):
    with pytest.raises(
        ManifestError, match=r"--data: 1 of 4 datasets cannot be read, e\.g\. .*2026-11-04"
    ):
        load_datasets([str(daily / "{2026-11-01..2026-11-04}")])
    other = tmp_path / "other"
    shutil.copytree(daily / "2026-11-01", other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["features"]["flipper_mm"]["type"] = "int"
    (other / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError) as e:
        load_datasets([str(daily / "2026-11-01"), str(other)])
    assert (
        f"--data: {other} does not match {daily / '2026-11-01'}: feature 'flipper_mm' has "
        "type 'int', not 'float'" in str(e.value)
    )


def test_data_takes_several_uris():
    cfg = parse_args(["--data", "a", "b/{2026-11-01..2026-11-02}", "--model-dir", "m"], environ={})
    assert cfg.data == "a" and cfg.datasets == ("a", "b/{2026-11-01..2026-11-02}")


@pytest.mark.slow
def test_training_on_a_date_range_counts_the_steps_of_all_days(daily, tmp_path):
    model_dir = tmp_path / "model"
    proc = run_python(
        "-m", "trainer.task", "--data", str(daily / "{2026-11-01..2026-11-03}"),
        "--model-dir", str(model_dir), "--epochs", "1", "--batch-size", "30",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["steps_per_epoch"] == 4  # ceil((32 + 40 + 48) train records / 30)
    assert len(metrics["datasets"]) == 3
    assert sum(map(sum, metrics["eval_classes"]["confusion_matrix"]["matrix"])) == 8 + 10 + 12


@pytest.mark.parametrize(
    "second, says",
    [
        (lambda day: str(day), "2026-11-01 given twice"),
        (lambda day: f"{day}/", "2026-11-01 given twice"),
        (lambda day: f"{day}/../2026-11-01", "2026-11-01 given twice"),
        (lambda day: f"{day.parent}/{{2026-11-01..2026-11-02}}", "2026-11-01 given twice"),
    ],
)
def test_one_dataset_given_twice_is_refused(daily, second, says):
    with pytest.raises(ManifestError, match=f"--data: .*{says}: its records would be read"):
        load_datasets([str(daily / "2026-11-01"), second(daily / "2026-11-01")])


def test_a_link_to_a_dataset_given_with_it_is_refused(daily, tmp_path):
    (tmp_path / "link").symlink_to(daily / "2026-11-02")
    with pytest.raises(ManifestError, match=f"link is {daily}/2026-11-02, given twice"):
        load_datasets([str(daily / "2026-11-02"), str(tmp_path / "link")])


def test_two_datasets_whose_shards_are_the_same_files_are_refused(daily, tmp_path):
    import os

    twin = tmp_path / "twin"
    shutil.copytree(daily / "2026-11-03", twin, copy_function=os.link)  # other names, one file
    with pytest.raises(ManifestError, match=f"--data: {twin}/eval/.* is {daily}/2026-11-03/"
                       r"eval/.*: one shard listed twice \(split 'eval'\)"):  # fmt: skip
        load_datasets([str(daily / "2026-11-03"), str(twin)])
