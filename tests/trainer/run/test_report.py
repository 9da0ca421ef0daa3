"""The run report: history.csv across resumed runs, report.html's contents, and how it renders."""

from __future__ import annotations

import csv
import json
import re
import shutil
from html.parser import HTMLParser

import pytest

from tests.services.chromium import distinct_colours
from trainer.run.report import RATE, read_history, render
from trainer.task import main

METRICS = {
    "dataset": "/data/penguins",
    "label": "species",
    "task": "classification",
    "strategy": "MirroredStrategy",
    "replicas": 2,
    "epochs": 3,
    "initial_epoch": 1,
    "steps_per_epoch": 8,
    "steps": 24,
    "initial_step": 8,
    "batch_size": 32,
    "examples_per_sec": 1523.25,
    "train": {"loss": 0.3125, "accuracy": 0.875},
    "eval": {"loss": 0.40625, "accuracy": 0.8125},
    "skipped_records": 0,
    "corrupt_files": [],
}
HISTORY = [
    {"epoch": 0, "loss": 1.0986, "accuracy": 0.34375, "val_loss": 1.05, "val_accuracy": 0.5,
     RATE: 812.5},
    {"epoch": 1, "loss": 0.5, "accuracy": 0.71875, "val_loss": 0.625, "val_accuracy": 0.6875,
     RATE: 1750.0},
    {"epoch": 2, "loss": 0.3125, "accuracy": 0.875, "val_loss": 0.40625, "val_accuracy": 0.8125,
     RATE: 1523.25},
]  # fmt: skip


class _Cells(HTMLParser):
    """Collects the numbers of a report: {(epoch or None, data-key): data-value}."""

    def __init__(self, page: str):
        super().__init__()
        self.values: dict[tuple[int | None, str], float] = {}
        self.texts: dict[tuple[int | None, str], str] = {}
        self._epoch: int | None = None
        self._open: tuple[int | None, str] | None = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr":
            self._epoch = int(attrs["data-epoch"]) if "data-epoch" in attrs else None
        if tag == "td" and "data-key" in attrs:
            self._open = (self._epoch, attrs["data-key"])
            if "data-value" in attrs:
                self.values[self._open] = float(attrs["data-value"])

    def handle_data(self, data):
        if self._open:
            self.texts[self._open] = self.texts.get(self._open, "") + data

    def handle_endtag(self, tag):
        if tag == "td":
            self._open = None


def _shows_the_summary_of(cells: _Cells, metrics: dict) -> None:
    """The summary's cells hold the final metrics and the run's numbers of `metrics`, and the
    epochs this run trained (2 to 3 in both runs here)."""
    for split in ("train", "eval"):
        for name, value in metrics[split].items():
            assert cells.values[(None, f"{split}.{name}")] == value
    for key in ("replicas", "epochs", "steps_per_epoch", "steps", "batch_size", RATE):
        assert cells.values[(None, key)] == metrics[key]
    assert cells.texts[(None, "this_run")] == "2 to 3"


def test_render_shows_every_number_of_the_summary_final_metrics_and_epochs():
    page = render(METRICS, HISTORY, None)
    cells = _Cells(page)

    for epoch, row in enumerate(HISTORY, start=1):
        for key, value in row.items():
            if key != "epoch":
                assert cells.values[(epoch, key)] == value, (epoch, key)
    # shown with 4 significant digits
    assert [cells.texts[(e, "loss")] for e in (1, 2, 3)] == ["1.099", "0.5", "0.3125"]
    assert [cells.texts[(e, RATE)] for e in (1, 2, 3)] == ["812.5", "1750", "1523"]
    _shows_the_summary_of(cells, METRICS)
    for key in ("dataset", "label", "task", "strategy"):
        assert cells.texts[(None, key)] == METRICS[key]


def test_render_draws_one_chart_per_metric_with_train_and_validation_curves():
    page = render(METRICS, HISTORY, None)

    charts = re.findall(r'<figure class="chart" data-metric="([^"]+)">(.*?)</figure>', page, re.S)

    assert [name for name, _ in charts] == ["loss", "accuracy", "examples/s"]
    assert page.count("<svg") == 3
    for name, svg in charts:
        series = re.findall(r'<polyline class="series" data-series="(\w+)" points="([^"]*)"', svg)
        expected = ["train"] if name == "examples/s" else ["train", "validation"]
        assert [label for label, _ in series] == expected
        assert all(len(points.split()) == 3 for _, points in series)  # one point per epoch
        assert ">epoch</text>" in svg and f">{name}</text>" in svg  # axis labels
        assert re.findall(r'text-anchor="middle">(\d)</text>', svg) == ["1", "2", "3"]  # x ticks


def test_render_of_a_run_without_eval_leaves_out_validation_curves_and_columns(tmp_path):
    path = tmp_path / "history.csv"
    path.write_text("epoch,examples_per_sec,loss,val_loss\n0,nan,1.5,NA\n1,12.0,1.25,NA\n")

    page = render({**METRICS, "eval": {}}, read_history(str(path)), None)

    cells = _Cells(page)
    assert re.findall(r'data-series="(\w+)"', page) == ["train", "train"]  # loss, examples/s
    assert "val_loss" not in page
    assert cells.values[(2, "loss")] == 1.25
    assert cells.texts[(1, RATE)] == "–"  # an epoch whose only step was the traced one
    rate_chart = page[page.index('data-metric="examples/s"') :]
    assert re.search(r'data-series="train" points="([^"]*)"', rate_chart)[1].count(",") == 1


def test_render_page_is_self_contained():
    page = render(METRICS, HISTORY, {"name": "penguins", "splits": {"train": 240}})

    assert page.startswith("<!DOCTYPE html>")
    assert "http:" not in page and "https:" not in page and "//" not in page
    assert re.search(r"<link|<script|<img|<iframe|src=|href=|@import|url\(", page) is None


def test_render_escapes_all_text():
    metrics = {**METRICS, "dataset": 'gs://b/<x>&"y"', "train": {"<b>loss": 1.0}, "eval": {}}
    history = [{"epoch": 0, "<b>loss": 1.0, RATE: 10.0}]

    page = render(metrics, history, {"name": "<script>alert(1)</script>"})

    assert "<b>" not in page and "<script>" not in page and "<x>" not in page
    assert "&lt;b&gt;loss" in page
    assert "gs://b/&lt;x&gt;&amp;&quot;y&quot;" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_render_without_history_says_so_and_draws_no_chart():
    page = render(METRICS, [], None)

    assert "No per-epoch history was recorded" in page
    assert "<svg" not in page


def test_the_summary_names_the_epochs_truly_trained_not_the_cap_of_early_stopping():
    metrics = {**METRICS, "epochs": 200, "initial_epoch": 0, "epochs_trained": 20,
               "early_stopping": True, "stopped_early": True}  # fmt: skip

    cells = _Cells(render(metrics, HISTORY, None))

    assert cells.texts[(None, "this_run")] == "1 to 20"  # was "1 to 200"
    assert cells.values[(None, "epochs_trained")] == 20
    assert cells.values[(None, "epochs")] == 200
    assert "<th>Epochs at most</th>" in render(metrics, HISTORY, None)


def test_a_run_that_trained_nothing_new_says_so():
    metrics = {**METRICS, "epochs": 3, "initial_epoch": 3, "epochs_trained": 3}
    cells = _Cells(render(metrics, HISTORY, None))
    assert cells.texts[(None, "this_run")] == "none: all were done by earlier runs"


def test_read_history_keeps_the_last_row_of_an_epoch_and_reads_na_as_none(tmp_path):
    path = tmp_path / "history.csv"
    path.write_text(
        "epoch,examples_per_sec,loss,val_loss\n0,10.0,1.5,NA\n1,nan,1.0,0.9\n1,12.0,0.75,0.5\n"
    )

    rows = read_history(str(path))

    assert rows[0] == {"epoch": 0, RATE: 10.0, "loss": 1.5, "val_loss": None}
    assert rows[1] == {"epoch": 1, RATE: 12.0, "loss": 0.75, "val_loss": 0.5}
    assert len(rows) == 2
    assert read_history(str(tmp_path / "none.csv")) == []


@pytest.fixture(scope="module")
def resumed(trained, tmp_path_factory):
    """The 1-epoch run of `trained`, copied and resumed in-process to 3 epochs: its model dir."""
    model_dir, proc = trained
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed_dir = tmp_path_factory.mktemp("resumed") / "model"
    shutil.copytree(model_dir, resumed_dir)
    first_run = list(csv.DictReader((resumed_dir / "history.csv").open()))
    data = json.loads((model_dir / "metrics.json").read_text())["dataset"]
    argv = ["--data", data, "--model-dir", str(resumed_dir), "--epochs", "3",
            "--batch-size", "32", "--deterministic", "--tensorboard-profile", "2,3"]  # fmt: skip
    assert main(argv) == 0
    return resumed_dir, first_run


@pytest.mark.slow
def test_resumed_run_appends_its_epochs_and_the_report_matches_metrics_json(resumed):
    model_dir, first_run = resumed
    metrics = json.loads((model_dir / "metrics.json").read_text())
    rows = list(csv.DictReader((model_dir / "history.csv").open()))

    # --tensorboard-profile: the profiler's trace of batches 2 and 3, for TensorBoard
    assert list((model_dir / "logs" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert [r["epoch"] for r in first_run] == ["0"]
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    assert rows[0] == first_run[0]  # the first run's row is kept as it was
    assert sorted(rows[0]) == ["accuracy", "epoch", RATE, "loss", "val_accuracy", "val_loss"]
    assert all(float(r[RATE]) > 0 for r in rows)
    assert RATE not in metrics["train"]  # the rate goes to history.csv only
    last = {k: float(v) for k, v in rows[-1].items() if k not in ("epoch", RATE)}
    assert metrics["train"] == pytest.approx({k: v for k, v in last.items() if "val_" not in k})

    cells = _Cells((model_dir / "report.html").read_text())

    _shows_the_summary_of(cells, metrics)
    for epoch, row in enumerate(rows, start=1):
        for key, text in row.items():
            if key != "epoch":
                assert cells.values[(epoch, key)] == float(text)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(resumed, chromium, tmp_path):
    model_dir, _ = resumed

    png = chromium.screenshot(model_dir / "report.html", tmp_path / "report.png")

    assert distinct_colours(png) > 16  # text, three chart colours and antialiasing


def test_render_lists_the_model_inputs_the_features_left_out_and_the_accelerator_settings():
    metrics = {
        **METRICS,
        "model_inputs": ["flipper_mm", "island"],
        "not_model_inputs": {"id": "the dataset's key", "photo": "an image <feature>"},
        "jit_compile": True,
        "mixed_precision": "bfloat16",
        "steps_per_execution": 32,
    }
    page = render(metrics, HISTORY, None)
    assert '<td data-key="model_inputs">flipper_mm, island</td>' in page
    assert "<th>Not an input: id</th><td>the dataset&#x27;s key</td>" in page
    assert "an image &lt;feature&gt;" in page
    assert '<td data-key="mixed_precision">bfloat16</td>' in page
    assert 'data-key="steps_per_execution" data-value="32"' in page
    assert "Model inputs" not in render(METRICS, HISTORY, None)  # older metrics.json


def test_skipped_corrupt_records_show_in_the_etl_report_s_banner():
    metrics = {**METRICS, "skipped_records": 3, "corrupt_files": ["/d/train-00001.tfrecord"]}

    page = render(metrics, HISTORY, None)

    banner = re.search(r'<div class="banner" id="warnings">(.*?)</div>', page)[1]
    assert banner == (
        "<strong>Check</strong><ul><li>3 corrupt records were skipped, in 1 file: "
        "/d/train-00001.tfrecord.</li></ul>"
    )
    assert page.index('id="warnings"') < page.index("<h2>Run</h2>")
    assert 'id="warnings"' not in render(METRICS, HISTORY, None)  # none skipped


def test_splits_read_train_first_as_in_the_etl_report():
    metrics = {**METRICS, "test": {"loss": 0.5, "accuracy": 0.75}}
    summary = {"name": "penguins", "splits": {"eval": 200, "test": 50, "train": 790}}

    page = render(metrics, HISTORY, summary)

    head = re.search(r'<table class="final"><thead>(.*?)</thead>', page)[1]
    assert re.findall(r"<th[^>]*>(\w+)</th>", head) == ["metric", "train", "eval", "test"]
    cells = _Cells(page)
    assert cells.values[(None, "test.loss")] == 0.5
    assert cells.values[(None, "test.accuracy")] == 0.75
    assert "<td>train 790, eval 200, test 50</td>" in page
    assert (
        "test" not in re.search(r'<table class="final">.*?</table>', render(METRICS, [], None))[0]
    )
