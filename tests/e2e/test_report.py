"""The ETL's run report and statistics for a fixture run: the numbers are the manifest's and the
shards', and the page renders in headless Chromium, short, with each feature's splits side by
side."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipelines.etl import run
from pipelines.report.page import render
from tests.services.chromium import distinct_colours
from transforms.contract.manifest import Manifest
from transforms.contract.statistics import Statistics
from transforms.progress import FINISHING
from transforms.ui.style import COLOURS

ROWS = 400
# The rendered report of the fixture run, 1,200 px wide, ends above this many px. Measured here
# (Debian's Chromium 156): 2,770 px; the layout before, each split's statistics listed after the
# other's, 3,330 px for the same run. The bound leaves ~10 % for other fonts and fails if the
# features go back to one split after another.
MAX_REPORT_HEIGHT = 3_100
WINDOW = (1200, 3600)  # taller than the page, so that its end shows


class _Page(HTMLParser):
    """The `data-value` of every element with an id, the ids of SVG groups and paths."""

    def __init__(self):
        super().__init__()
        self.values: dict[str, str] = {}
        self.ids: set[str] = set()
        self.nodes: list[str] = []
        self.edges: list[tuple[str, str]] = []
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
            if "data-value" in a:
                self.values[a["id"]] = a["data-value"]
        if tag == "g" and "node" in (a.get("class") or "").split():
            self.nodes.append(a.get("data-node"))
        if tag == "path" and "edge" in (a.get("class") or "").split():
            self.edges.append((a.get("data-from"), a.get("data-to")))
        if (
            tag in ("script", "link", "img")
            or "src" in a
            or (a.get("href") or "").startswith("http")
        ):
            self.external.append(tag)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(11)
    lines = ["id,size,colour,label"]
    for i in range(ROWS):
        size = "" if i % 10 == 0 else f"{rng.normal(50, 10):.3f}"
        colour = ["red", "green", "blue"][i % 3] if i % 7 else ""
        lines.append(f"{i},{size},{colour},{'yes' if i % 4 else 'no'}")
    lines += ["oops,1,red,yes", "401,2,red"]  # rejected: not an int, a missing field
    (folder / "rows.csv").write_text("\n".join(lines) + "\n")
    (folder / "c.yaml").write_text(
        "name: report\n"
        "sources: [{name: rows, format: csv, path: rows.csv}]\n"
        "features:\n"
        "  id: {type: int}\n"
        "  size: {type: float, required: false}\n"
        "  colour: {type: string, required: false}\n"
        "  label: {type: string, values: ['yes', 'no']}\n"
        "label: label\n"
        "splits: {train: 0.75, eval: 0.25}\n"
        "output: {path: out, compression: none}\n"
    )
    assert run(["--config", str(folder / "c.yaml")]) == 0
    return folder / "out"


def _written(dataset: Path, split: str) -> list[dict]:
    """The split's records, read back with TensorFlow."""
    import tensorflow as tf

    files = sorted(str(p) for p in (dataset / split).glob("*.tfrecord"))
    out = []
    for record in tf.data.TFRecordDataset(files):
        features = tf.train.Example.FromString(record.numpy()).features.feature
        out.append({
            "size": list(features["size"].float_list.value),
            "colour": [v.decode() for v in features["colour"].bytes_list.value],
            "label": [v.decode() for v in features["label"].bytes_list.value],
        })  # fmt: skip
    return out


def test_statistics_describe_the_written_records(dataset):
    statistics = json.loads((dataset / "statistics.json").read_text())
    manifest = json.loads((dataset / "manifest.json").read_text())
    entry = manifest["statistics"]
    assert entry["path"] == "statistics.json"
    assert entry["bytes"] == (dataset / "statistics.json").stat().st_size
    for split in ("train", "eval"):
        records = _written(dataset, split)
        stats = statistics["splits"][split]
        assert stats["records"] == manifest["splits"][split]["records"] == len(records)
        sizes = [r["size"][0] for r in records if r["size"]]
        size = stats["features"]["size"]
        assert size["missing"] == len(records) - len(sizes)
        exact = np.float32(sizes).astype(np.float64)  # the values written, as float32
        assert size["mean"] == pytest.approx(exact.mean(), rel=1e-12)
        assert size["std"] == pytest.approx(exact.std(), rel=1e-9)
        assert (size["min"], size["max"]) == (
            float(min(np.float32(sizes))),
            float(max(np.float32(sizes))),
        )
        assert sum(bar["count"] for bar in size["histogram"]) == len(sizes)
        colours = [r["colour"][0] for r in records if r["colour"]]
        top = {t["value"]: t["count"] for t in stats["features"]["colour"]["top"]}
        assert top == {c: colours.count(c) for c in set(colours)}
        labels = {t["value"]: t["count"] for t in stats["features"]["label"]["top"]}
        assert labels == {v: sum(r["label"] == [v] for r in records) for v in ("yes", "no")}


def test_the_report_holds_the_manifests_numbers_and_the_graph(dataset):
    manifest = json.loads((dataset / "manifest.json").read_text())
    statistics = json.loads((dataset / "statistics.json").read_text())
    page = _Page()
    page.feed((dataset / "report.html").read_text())
    v = page.values
    assert int(v["summary-read"]) == manifest["sources"]["rows"]["records"] == ROWS + 2
    assert int(v["summary-rejected"]) == manifest["rejected"]["records"] == 2
    assert int(v["summary-duplicates"]) == manifest["duplicates"] == 0
    assert int(v["source-rows-records"]) == ROWS + 2
    for split, facts in manifest["splits"].items():
        assert int(v[f"split-{split}-records"]) == facts["records"]
        assert int(v[f"shards-{split}-count"]) == len(facts["files"])
        assert int(v[f"shards-{split}-bytes"]) == sum(f["bytes"] for f in facts["files"])
        mean = statistics["splits"][split]["features"]["size"]["mean"]
        assert float(v[f"stat-{split}-size-mean"]) == pytest.approx(mean)
        assert f"hist-{split}-size" in page.ids and f"top-{split}-colour" in page.ids
        assert f"label-{split}" in page.ids  # the label's balance
    assert {f"feature-{f}" for f in ("id", "size", "colour", "label")} <= page.ids  # a card each
    assert float(v["summary-elapsed"]) > 0
    assert int(v["stage-0-records"]) == ROWS + 2  # read, validated and encoded
    html = (dataset / "report.html").read_text()
    assert re.findall(r'<tr data-step="([^"]*)"', html) == [
        "checks: config, inputs and OUTPUT",
        "start-up, to the first record read",
        *FINISHING,
        "report: read the dataset back",
    ]
    assert all(float(v[f"step-{i}-seconds"]) >= 0 for i in range(len(FINISHING) + 3))
    assert page.external == []
    steps = {"Read[rows]", "MergeSources", "PrepareRecords", "WriteShards", "Publish"}
    assert all(step in html for step in steps)
    assert len(page.nodes) >= len(steps) and len(page.edges) >= len(steps) - 1


def _content_height(png: Path) -> int:
    """The row below the lowest pixel that is not white: the page's rendered height."""
    with Image.open(png) as image:
        grey = image.convert("L").point(lambda v: 255 if v >= 250 else 0)
        box = Image.eval(grey, lambda v: 255 - v).getbbox()  # of the non-white pixels
    return box[3] if box else 0


def _runs(row: list, colour: tuple, at_least: int) -> list[tuple[int, int]]:
    """The (first, last) x of each run of at least `at_least` pixels of `colour` in `row`."""
    runs, start = [], None
    for x, pixel in enumerate([*row, None]):
        if pixel == colour and start is None:
            start = x
        elif pixel != colour and start is not None:
            if x - start >= at_least:
                runs.append((start, x - 1))
            start = None
    return runs


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


@pytest.mark.slow
def test_the_report_renders_in_headless_chromium_and_stays_short(dataset, chromium, tmp_path):
    png = chromium.screenshot(dataset / "report.html", tmp_path / "report.png", *WINDOW)
    assert distinct_colours(png) > 16
    height = _content_height(png)
    assert 1_000 < height < MAX_REPORT_HEIGHT, height


def _side_by_side_page() -> tuple[Manifest, Statistics]:
    """A dataset of two splits and two features: a number whose histogram is flat in both
    splits (every bar the same height), and a string of two values, half and half."""
    manifest = Manifest.from_dict({
        "format_version": 1, "name": "side-by-side", "created": "2026-11-26T10:00:00Z",
        "sources": {"rows": {"format": "csv", "records": 400, "ignored_fields": {}}},
        "splits": {split: {"records": n, "files": []} for split, n in (("train", 300),
                                                                        ("eval", 100))},
        "rejected": {"records": 0, "reasons": {}, "files": []},
        "duplicates": 0,
        "features": {"x": {"type": "float", "shape": []}, "s": {"type": "string", "shape": []}},
        "label": None,
    })  # fmt: skip

    def split(n: int) -> dict:
        bins = [{"low": 10.0 * i, "high": 10.0 * (i + 1), "count": n // 4} for i in range(4)]
        x = {
            "type": "float",
            "records": n,
            "missing": 0,
            "missing_rate": 0.0,
            "values": n,
            "min": 0.0,
            "max": 40.0,
            "mean": 20.0,
            "std": 11.5,
            "histogram": bins,
        }
        s = {
            "type": "string",
            "records": n,
            "missing": 0,
            "missing_rate": 0.0,
            "values": n,
            "distinct": 2,
            "distinct_exact": True,
            "length": {"min": 1, "max": 1, "mean": 1.0},
            "top": [{"value": "a", "count": n // 2}, {"value": "b", "count": n // 2}],
        }
        return {"records": n, "features": {"x": x, "s": s}}

    splits = {"train": split(300), "eval": split(100)}
    return manifest, Statistics.from_json({"format_version": 1, "splits": splits})


@pytest.mark.slow
def test_a_feature_s_splits_are_drawn_side_by_side(chromium, tmp_path):
    manifest, statistics = _side_by_side_page()
    page = tmp_path / "report.html"
    page.write_text(render(manifest, statistics))
    png = chromium.screenshot(page, tmp_path / "report.png", 1200, 1200)
    train, eval_ = _rgb(COLOURS[0]), _rgb(COLOURS[1])
    with Image.open(png) as image:
        rgb = image.convert("RGB")
        pixels, (width, height) = rgb.load(), rgb.size
        bands = []  # rows where train's bars and eval's, to their right, are both drawn
        for y in range(height):
            row = [pixels[x, y] for x in range(width)]
            bars = {c: _runs(row, c, at_least=30) for c in (train, eval_)}  # not the swatches
            if bars[train] and bars[eval_] and bars[eval_][0][0] > bars[train][-1][1]:
                bands.append(y)
    # the two histograms (44 px, every bar full height) and the two rows of shares (12 px each),
    # less a row at an edge that falls between two pixels
    assert len(bands) >= 44 + 2 * 12 - 3, bands
    assert distinct_colours(png) > 16
