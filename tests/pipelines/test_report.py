"""The run report (pipelines/report/page.py): numbers under their ids, charts, escaping, offline."""

from __future__ import annotations

import dataclasses
import json
import re
from html.parser import HTMLParser

import pytest

from pipelines.report.features import TOP_ROWS
from pipelines.report.page import render
from pipelines.report.shift import shifts
from pipelines.report.svg import HIST_H, HIST_W, SHARE_BAR_W, graph_layers
from pipelines.report.writer import write_report
from transforms.contract.layout import STATISTICS_FORMAT_VERSION
from transforms.contract.manifest import FileEntry, Manifest, ValidationEntry
from transforms.contract.statistics import FeatureStatistics, Statistics
from transforms.ui.style import CSS

SCRIPT = "<script>alert(1)</script>"


def _file(path: str, records: int, size: int) -> dict:
    return {"path": path, "records": records, "bytes": size, "sha256": "ab" * 32}


MANIFEST = Manifest.from_dict({
    "format_version": 1,
    "name": "penguins",
    "created": "2026-11-26T10:00:00Z",
    "date": "2026-11-25",
    "config_sha256": "0" * 64,
    "compression": "gzip",
    "compression_level": 6,
    "features": {
        "bill_length_mm": {"type": "float", "shape": [], "required": False},
        "flipper_mm": {"type": "float", "shape": [], "required": True},
        "body_mass_g": {"type": "float", "shape": [], "required": False},
        "year": {"type": "int", "shape": [], "required": True},
        "island": {"type": "string", "shape": [], "required": True},
        "sex": {"type": "string", "shape": [], "required": False},
        "comment": {"type": "string", "shape": [], "required": False},
        "photo": {"type": "image", "shape": [], "required": False},
        "thumbnail": {"type": "image", "shape": [], "required": False},
        "raw": {"type": "bytes", "shape": [], "required": False},
        "species": {"type": "string", "shape": [], "required": True},
    },
    "label": "species",
    "key": "id",
    "combine": "join",
    "sources": {
        "measurements": {"format": "csv", "records": 1012, "ignored_fields": {"extra": 7}},
        "photos": {"format": "images", "records": 990, "ignored_fields": {}},
    },
    "splits": {
        "train": {
            "records": 790,
            "files": [
                _file("train/train-00000-of-00003.tfrecord.gz", 260, 41_000),
                _file("train/train-00001-of-00003.tfrecord.gz", 270, 45_500),
                _file("train/train-00002-of-00003.tfrecord.gz", 260, 39_250),
            ],
        },
        "eval": {
            "records": 200,
            "files": [_file("eval/eval-00000-of-00001.tfrecord.gz", 200, 30_125)],
        },
    },
    "rejected": {
        "records": 9,
        "reasons": {"bill_length_mm: not a number": 6, f"species: {SCRIPT}": 3},
        "files": [_file("rejected/rejected-00000-of-00001.jsonl", 9, 2_000)],
    },
    "duplicates": 2,
    "joined": 1001,
    "transform": None,
})  # fmt: skip
# read 2002 = written 990 + rejected 9 + duplicates 2 + joined 1001


def _number(records: int, missing: int, lo, hi, mean, std, counts: list[int], kind="float"):
    width = (hi - lo) / len(counts)
    return {
        "type": kind, "records": records, "missing": missing,
        "missing_rate": missing / records, "values": records - missing,
        "min": lo, "max": hi, "mean": mean, "std": std,
        "histogram": [
            {"low": lo + i * width, "high": lo + (i + 1) * width, "count": c}
            for i, c in enumerate(counts)
        ],
    }  # fmt: skip


def _string(records: int, missing: int, top: list[tuple[str, int]], distinct=None, exact=True):
    return {
        "type": "string", "records": records, "missing": missing,
        "missing_rate": missing / records, "values": records - missing,
        "distinct": len(top) if distinct is None else distinct, "distinct_exact": exact,
        "top": [{"value": v, "count": c} for v, c in top],
        "length": {"min": min(len(v) for v, _ in top), "max": max(len(v) for v, _ in top),
                   "mean": 6.5},
    }  # fmt: skip


def _sized(kind: str, records: int, missing: int, lo: int, hi: int, mean: float) -> dict:
    return {
        "type": kind, "records": records, "missing": missing,
        "missing_rate": missing / records, "values": records - missing,
        "size": {"min": lo, "max": hi, "mean": mean},
    }  # fmt: skip


def _split_stats(
    records: int,
    species: list[tuple[str, int]],
    island: list[tuple[str, int]],
    sex: tuple[int, list[tuple[str, int]]],
    comment: tuple[int, list[tuple[str, int]]],
    flipper: tuple[float, float, float, list[int]] = (172.0, 231.0, 200.9, [5, 50, 30, 80]),
    bill_mean: float = 43.9,
) -> dict:
    lo, hi, mean, counts = flipper
    return {
        "records": records,
        "features": {
            "bill_length_mm": _number(
                records, records // 80, 32.1, 59.6, bill_mean, 5.4, [12, 40, 95, 3, 0, 1]
            ),
            "flipper_mm": _number(records, 0, lo, hi, mean, 14.1, counts),
            "body_mass_g": {
                "type": "float",
                "records": records,
                "missing": records,
                "missing_rate": 1.0,
                "values": 0,
                "min": None,
                "max": None,
                "mean": None,
                "std": None,
                "histogram": [],
            },  # fmt: skip
            "year": _number(records, 0, 2007, 2009, 2008.1, 0.8, [300, 250, 240], kind="int"),
            "island": _string(records, 0, island),
            "sex": _string(records, sex[0], sex[1]),
            "comment": _string(records, comment[0], comment[1], 61, exact=False),
            "photo": _sized("image", records, 3, 100, 5000, 1234.5),
            "thumbnail": _sized("image", records, 0, 80, 900, 410.0),
            "raw": _sized("bytes", records, records, 0, 0, 0.0),
            "species": _string(records, 0, species),
        },
    }


def _statistics(splits: dict) -> Statistics:
    """The typed statistics of splits written out as in statistics.json."""
    return Statistics.from_json({"format_version": STATISTICS_FORMAT_VERSION, "splits": splits})


# Two splits alike: no rule of pipelines.report.shift fires.
TRAIN = _split_stats(
    792,
    species=[("Adelie", 350), ("Gentoo", 282), ("Chinstrap", 160)],
    island=[("Biscoe", 400), ("Dream", 300), ("Torgersen", 92)],
    sex=(24, [("male", 390), ("female", 378)]),
    comment=(693, [(SCRIPT, 50), ("calm", 42)]),
)
STATISTICS = _statistics(
    {
        "train": TRAIN,
        "eval": _split_stats(
            200,
            species=[("Gentoo", 90), ("Adelie", 70), ("Chinstrap", 40)],
            island=[("Dream", 76), ("Biscoe", 101), ("Torgersen", 23)],
            sex=(6, [("male", 98), ("female", 96)]),
            comment=(175, [(SCRIPT, 13), ("calm", 10)]),
            flipper=(180.0, 231.0, 206.2, [10, 20, 30, 40]),
        ),
    }
)
# Eval unlike train: bill_length_mm's mean 6.0 (1.1 std) higher, no Torgersen on the island,
# sex missing in 30 % of the records (3 % in train).
SHIFTED = _statistics(
    {
        "train": TRAIN,
        "eval": _split_stats(
            200,
            species=[("Gentoo", 90), ("Adelie", 70), ("Chinstrap", 40)],
            island=[("Biscoe", 110), ("Dream", 90)],
            sex=(60, [("male", 71), ("female", 69)]),
            comment=(175, [(SCRIPT, 13), ("calm", 10)]),
            bill_mean=49.9,
        ),
    }
)
GRAPH = {
    "nodes": [
        {"id": "n0", "label": "Read[measurements]"},
        {"id": "n1", "label": "Read[photos]"},
        {"id": "n2", "label": "JoinByKey"},
        {"id": "n3", "label": "SplitByKey"},
        {"id": "n4", "label": "WriteShards[train]"},
        {"id": "n5", "label": "WriteShards[eval]"},
        {"id": "n6", "label": "WriteRejected"},
        {"id": "n7", "label": "PublishManifest"},
    ],
    "edges": [
        ["n0", "n2"], ["n1", "n2"], ["n2", "n3"], ["n3", "n4"], ["n3", "n5"],
        ["n0", "n6"], ["n2", "n6"], ["n4", "n7"], ["n5", "n7"], ["n6", "n7"],
    ],
}  # fmt: skip
TIMINGS = {
    "elapsed_s": 20.0,
    "runner": "FnApiRunner",
    "stages": [
        {"name": "read, validate and encode", "records": 2002, "seconds": 13.0},
        {"name": "write shards", "records": 990, "seconds": 0},
    ],
    "steps": [
        {"name": "checks: config, inputs and OUTPUT", "seconds": 0.25},
        {"name": "start-up, to the first record read", "seconds": 2.5},
        {"name": "publish", "seconds": 130.0},
    ],
}
EXAMPLES = {
    "bill_length_mm: not a number": [
        {"location": f"penguins.csv:{i}", "record": f"{i},Adelie,abc"} for i in range(2, 9)
    ],
    f"species: {SCRIPT}": [{"location": "penguins.csv:40", "record": {"measurements": SCRIPT}}],
}


class _Elements(HTMLParser):
    """Every start tag with its attributes, the id of the enclosing svg, and each element's
    text by id (for elements without children of the same tag)."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict, str | None]] = []
        self.text: dict[str, str] = {}
        self._open: list[tuple[str, str | None]] = []
        self._svg: str | None = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self._svg = a.get("id")
        self.tags.append((tag, a, self._svg))
        if tag not in ("meta", "br"):  # void elements, never closed
            self._open.append((tag, a.get("id")))
            if a.get("id"):
                self.text.setdefault(a["id"], "")

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs), self._svg))

    def handle_endtag(self, tag):
        if tag == "svg":
            self._svg = None
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for _, element_id in self._open:
            if element_id:
                self.text[element_id] += data

    def by_id(self, element_id: str) -> dict:
        found = [a for _, a, _ in self.tags if a.get("id") == element_id]
        assert len(found) == 1, f"{len(found)} elements with id {element_id!r}"
        return found[0]

    def value(self, element_id: str) -> str:
        return self.by_id(element_id)["data-value"]

    def bars(self, svg_id: str) -> list[dict]:
        return [a for t, a, svg in self.tags if t == "rect" and svg == svg_id]


@pytest.fixture(scope="module")
def page() -> str:
    return render(MANIFEST, STATISTICS, GRAPH, TIMINGS, EXAMPLES)


@pytest.fixture(scope="module")
def doc(page) -> _Elements:
    return _Elements(page)


def test_title_names_the_dataset_and_date(page):
    assert "<title>shardflow run report: penguins — 2026-11-25</title>" in page
    assert "<h1>penguins — 2026-11-25</h1>" in page


def test_the_page_wears_the_style_the_training_report_wears(page):
    from trainer.run.report import render as render_training

    training = render_training({"dataset": "out/penguins", "epochs": 1}, [], None)
    for html in (page, training):
        assert html.count(f"<style>{CSS}</style>") == 1
        assert html.count("<style>") == 1 and "style=" not in html.split("<body>")[0]
    assert '<p class="muted">shardflow training report</p>' in training


def test_summary_counts_come_from_the_manifest_and_timings(doc):
    expected = {
        "summary-read": "2002",
        "summary-written": "990",
        "summary-rejected": "9",
        "summary-duplicates": "2",
        "summary-joined": "1001",
        "summary-elapsed": "20.0",
        "summary-throughput": "100.1",
        "summary-runner": "FnApiRunner",
        "summary-created": "2026-11-26T10:00:00Z",
    }
    assert {k: doc.value(k) for k in expected} == expected
    assert doc.text["summary-read"] == "2,002"
    assert doc.text["summary-throughput"] == "100 records/s"
    assert doc.text["summary-elapsed"] == "20.0 s"


def test_sources_and_splits_show_their_records(doc):
    assert doc.value("source-measurements-records") == "1012"
    assert doc.text["source-measurements-records"] == "1,012"
    assert doc.value("source-measurements-ignored-extra") == "7"
    assert doc.value("source-photos-records") == "990"
    assert doc.value("split-train-records") == "790"
    assert doc.value("split-eval-records") == "200"
    # statistics count the train split before its 2 duplicates were dropped
    assert doc.value("split-train-validated") == "792"
    assert doc.value("split-eval-validated") == "200"


def test_rejected_reasons_with_counts_and_at_most_five_examples(page, doc):
    rows = [(a["data-reason"]) for t, a, _ in doc.tags if t == "tr" and "data-reason" in a]
    assert rows == ["bill_length_mm: not a number", f"species: {SCRIPT}"]
    counts = [a["data-value"] for t, a, _ in doc.tags if t == "td" and "data-value" in a
              and a.get("class") == "n" and "id" not in a]  # fmt: skip
    assert counts == ["6", "3"]
    shown = re.findall(r"penguins\.csv:(\d+)", page)
    assert shown == ["2", "3", "4", "5", "6", "40"]


def test_shards_per_split_count_bytes_and_sizes(doc):
    values = {s: doc.value(f"shards-train-{s}") for s in ("count", "bytes", "min", "median", "max")}
    assert values == {
        "count": "3", "bytes": "125750", "min": "39250", "median": "41000", "max": "45500",
    }  # fmt: skip
    assert doc.text["shards-train-bytes"] == "125.8 KB"
    assert doc.value("shards-eval-count") == "1"
    bars = doc.bars("shards-train-chart")
    assert [b["data-count"] for b in bars] == ["41000", "45500", "39250"]
    heights = [float(b["height"]) for b in bars]
    assert heights[1] > heights[0] > heights[2] > 0


def test_number_statistics_and_one_histogram_bar_per_bin(doc):
    stats = {s: doc.value(f"stat-train-bill_length_mm-{s}")
             for s in ("missing", "min", "max", "mean", "std")}  # fmt: skip
    assert stats == {"missing": "9", "min": "32.1", "max": "59.6", "mean": "43.9", "std": "5.4"}
    assert doc.text["stat-train-bill_length_mm-missing_rate"] == "1.14 %"
    assert doc.text["stat-train-year-min"] == "2007"
    counts = [12, 40, 95, 3, 0, 1]
    bars = doc.bars("hist-train-bill_length_mm")
    assert [int(b["data-count"]) for b in bars] == counts
    heights = [float(b["height"]) for b in bars]
    assert sorted(range(6), key=lambda i: heights[i]) == sorted(range(6), key=lambda i: counts[i])
    assert heights[4] == 0 and heights[2] == max(heights)
    assert len(doc.bars("hist-eval-flipper_mm")) == 4


def test_a_number_without_values_shows_dashes_and_no_histogram(doc):
    assert doc.text["stat-train-body_mass_g-mean"] == "–"
    assert doc.text["stat-train-body_mass_g-missing_rate"] == "100.00 %"
    assert not any(a.get("id") == "hist-train-body_mass_g" for _, a, _ in doc.tags)


def test_top_values_appear_in_order_with_bars(doc):
    bars = doc.bars("top-train-island")
    assert [(b["data-value"], b["data-count"]) for b in bars] == [
        ("Biscoe", "400"), ("Dream", "300"), ("Torgersen", "92"),
    ]  # fmt: skip
    widths = [float(b["width"]) for b in bars]
    assert widths[0] > widths[1] > widths[2] > 0
    assert doc.value("stat-train-island-distinct") == "3"
    assert doc.text["stat-train-comment-distinct"] == "≈ 61"
    assert doc.text["sampled-train-comment"] == "sampled"  # shares of a sample of the values
    assert "sampled-train-island" not in doc.text
    assert doc.text["stat-eval-sex-length_max"] == "6"


def test_byte_features_show_sizes(doc):
    assert doc.value("stat-train-photo-size_min") == "100"
    assert doc.text["stat-train-photo-size_max"] == "5.0 KB"
    assert doc.value("stat-eval-raw-missing") == "200"


def test_label_balance_per_split(doc):
    assert doc.by_id("label-train")
    train = doc.bars("label-train-chart")
    assert [b["data-value"] for b in train] == ["Adelie", "Gentoo", "Chinstrap"]
    # one order for every split (train's, most frequent first), so splits compare at a glance
    assert [b["data-value"] for b in doc.bars("label-eval-chart")] == [
        "Adelie",
        "Gentoo",
        "Chinstrap",
    ]
    assert "(44.2 %)" in doc.text["label-train"]  # 350 of 792


def test_no_label_no_label_balance(page):
    unlabeled = render(dataclasses.replace(MANIFEST, label=None), STATISTICS, GRAPH, TIMINGS)
    assert 'id="label-balance"' in page
    assert 'id="label-balance"' not in unlabeled


def test_timings_per_stage_with_a_dash_for_zero_seconds(doc):
    assert doc.value("stage-0-records") == "2002"
    assert doc.text["stage-0-rate"] == "154"
    assert doc.text["stage-1-seconds"] == "0.0 s"
    assert doc.text["stage-1-rate"] == "–"


def test_fixed_costs_list_the_start_up_and_finishing_steps_in_order(doc):
    rows = [a["data-step"] for t, a, _ in doc.tags if t == "tr" and "data-step" in a]
    assert rows == [step["name"] for step in TIMINGS["steps"]]
    assert [doc.value(f"step-{i}-seconds") for i in range(3)] == ["0.25", "2.5", "130.0"]
    assert [doc.text[f"step-{i}-seconds"] for i in range(3)] == ["0.2 s", "2.5 s", "2 min 10 s"]


def test_graph_has_one_box_per_node_and_one_arrow_per_edge(doc):
    nodes = [a["data-node"] for t, a, svg in doc.tags if t == "g" and svg == "pipeline-graph"]
    assert nodes == [f"n{i}" for i in range(8)]
    edges = [(a["data-from"], a["data-to"]) for t, a, svg in doc.tags
             if t == "path" and svg == "pipeline-graph" and a.get("class") == "edge"]  # fmt: skip
    assert edges == [tuple(e) for e in GRAPH["edges"]]
    boxes = [a for t, a, svg in doc.tags if t == "rect" and svg == "pipeline-graph"]
    assert len(boxes) == 8
    assert all(a["marker-end"] == "url(#arrow)" for t, a, _ in doc.tags if a.get("data-from"))


def test_graph_layers_are_longest_paths_from_a_source():
    layers = graph_layers([n["id"] for n in GRAPH["nodes"]], [tuple(e) for e in GRAPH["edges"]])
    assert layers == {"n0": 0, "n1": 0, "n2": 1, "n3": 2, "n4": 3, "n5": 3, "n6": 2, "n7": 4}
    with pytest.raises(ValueError, match="cycle"):
        graph_layers(["a", "b"], [("a", "b"), ("b", "a")])


def test_page_is_self_contained(page):
    assert "http" not in page
    assert "<link" not in page
    assert "<script" not in page
    assert "src=" not in page
    assert "url(" not in page.replace("url(#arrow)", "")
    assert "@import" not in page


def test_text_from_the_data_is_escaped(page):
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert page.count(escaped) >= 4  # a reason, its example, a top value (table and chart)
    assert "<script" not in page


def test_none_statistics_graph_and_timings_leave_their_sections_out():
    page = render(MANIFEST, None, None, None)
    doc = _Elements(page)
    sections = [a["id"] for t, a, _ in doc.tags if t == "section"]
    assert sections == ["summary", "sources", "splits", "rejected", "shards"]
    assert doc.value("split-train-records") == "790"
    assert not any(a.get("id") in ("summary-runner", "split-train-validated")
                   for _, a, _ in doc.tags)  # fmt: skip
    full = _Elements(render(MANIFEST, STATISTICS, GRAPH, TIMINGS))
    assert [a["id"] for t, a, _ in full.tags if t == "section"] == [
        "summary", "sources", "splits", "rejected", "shards", "features", "label-balance",
        "timings", "graph",
    ]  # fmt: skip


def test_a_minimal_run_renders():
    manifest = Manifest.from_dict({
        "format_version": 1,
        "name": "tiny",
        "created": "2026-11-26T10:00:00Z",
        "sources": {"rows": {"format": "jsonl", "records": 0, "ignored_fields": {}}},
        "splits": {"train": {"records": 0, "files": [_file("train/train-00000-of-00001", 0, 0)]}},
        "rejected": {"records": 0, "reasons": {}, "files": []},
        "duplicates": 0,
        "features": {"x": {"type": "float", "shape": []}},  # a manifest has at least one
        "label": None,
    })  # fmt: skip
    statistics = _statistics({"train": {"records": 0, "features": {}}})
    timings = {"elapsed_s": 0.0, "runner": "FnApiRunner", "stages": []}
    page = render(manifest, statistics, {"nodes": [], "edges": []}, timings)
    doc = _Elements(page)
    assert "No record was rejected." in page
    assert doc.value("shards-train-max") == "0"
    assert not any(a.get("id") == "summary-throughput" for _, a, _ in doc.tags)
    assert "The graph has no steps." in page


def _published(out, statistics: str) -> None:
    """OUTPUT's manifest.json (MANIFEST, without rejected files) and its statistics.json."""
    (out / "statistics.json").write_text(statistics)
    entry = FileEntry("statistics.json", None, len(statistics.encode()), "ab" * 32)
    rejected = dataclasses.replace(MANIFEST.rejected, files=())
    manifest = dataclasses.replace(MANIFEST, rejected=rejected).with_statistics(entry)
    (out / "manifest.json").write_text(manifest.to_json())


def test_the_report_of_a_published_dataset_shows_its_statistics(tmp_path):
    _published(tmp_path, STATISTICS.dumps())
    write_report(str(tmp_path), GRAPH, TIMINGS)
    doc = _Elements((tmp_path / "report.html").read_text())
    assert doc.value("split-train-validated") == "792"
    assert doc.value("stat-eval-flipper_mm-mean") == "206.2"
    assert [b["data-count"] for b in doc.bars("hist-eval-flipper_mm")] == ["10", "20", "30", "40"]


def test_statistics_that_break_their_contract_leave_the_report_out_with_a_warning(tmp_path, caplog):
    broken = json.loads(STATISTICS.dumps())
    broken["splits"]["eval"]["features"]["year"]["mean"] = "2008"
    _published(tmp_path, json.dumps(broken))
    write_report(str(tmp_path), GRAPH, TIMINGS)  # the run goes on
    assert not (tmp_path / "report.html").exists()
    assert (
        "the run report was not written: StatisticsError: "
        f"{tmp_path}/statistics.json: splits.eval.features.year.mean: '2008' is not a number"
    ) in caplog.text


def test_a_banner_tells_what_a_reader_should_not_miss(doc, page):
    assert page.index('id="warnings"') < page.index('id="summary"')
    text = doc.text["warnings"]
    assert "9 records were rejected (0.4 % of those read)" in text
    assert "Source measurements: field extra is read by no feature (7 records hold a value)" in text
    quiet = dataclasses.replace(
        MANIFEST,
        rejected=dataclasses.replace(MANIFEST.rejected, records=0, reasons={}),
        sources={n: dataclasses.replace(e, ignored_fields={}) for n, e in MANIFEST.sources.items()},
    )
    assert 'id="warnings"' not in render(quiet, STATISTICS, GRAPH, TIMINGS)


def test_the_banner_opens_with_a_partial_dataset_and_the_anomalies_of_validation():
    anomaly = {
        "feature": "island", "split": "eval", "kind": "drift", "measure": "l_infinity",
        "value": 0.25, "threshold": 0.1, "blocking": False, "examples": [],
        "at_value": "Dream", "approximate": False,
        "description": "High Linfty distance between current and previous (<script>)",
    }  # fmt: skip
    validation = ValidationEntry(
        schema=FileEntry("schema.pbtxt", None, 10, "ab" * 32),
        statistics=FileEntry("statistics.pb", None, 20, "cd" * 32),
        schema_from="baseline",
        baseline="out/previous",
        anomalies=(anomaly,),
    )
    manifest = dataclasses.replace(MANIFEST, limit=100, validation=validation)
    page = render(manifest, STATISTICS, GRAPH, TIMINGS)
    doc = _Elements(page)
    assert doc.text["warnings"].startswith(
        "CheckA partial dataset: the first 100 records of each source at most (etl --limit)."
        "Anomaly of island in eval: island (eval): drift: l_infinity 0.25 (threshold 0.1): "
        "High Linfty distance between current and previous (<script>)"
    )
    assert '<span class="anomaly" id="anomaly-0" data-kind="drift">' in page
    assert 'Anomaly of <a href="#feature-island">island</a>' in page
    assert "(<script>)" not in page  # the description is the data's: escaped


def test_train_comes_first_everywhere(page):
    for section in ("split-{}-records", "shards-{}-count", "label-{}-chart", "hist-{}-year"):
        train, eval_ = (page.index(f'id="{section.format(s)}"') for s in ("train", "eval"))
        assert train < eval_, section


def test_every_split_s_shards_are_drawn_on_one_scale(doc):
    (eval_bar,) = doc.bars("shards-eval-chart")
    largest = max(float(b["height"]) for b in doc.bars("shards-train-chart"))
    assert float(eval_bar["height"]) == pytest.approx(largest * 30_125 / 45_500, abs=0.01)


def test_an_int_histogram_ends_at_the_largest_value(page):
    chart = page[page.index('id="hist-train-year"') :]
    chart = chart[: chart.index("</svg>")]
    assert ">2007</text>" in chart and ">2009</text>" in chart


def test_the_empty_string_is_shown_as_such():
    train = _split_stats(792, [("", 500), ("x", 292)], [("a", 792)], (0, [("m", 792)]),
                         (0, [("c", 792)]))  # fmt: skip
    doc = _Elements(render(MANIFEST, _statistics({"train": train}), GRAPH, TIMINGS))
    labels = doc.text["label-train"]
    assert '""' in labels


# --- one card per feature, its splits side by side -------------------------------------------

FEATURE_ORDER = ["bill_length_mm", "flipper_mm", "body_mass_g", "year", "island", "sex",
                 "comment", "photo", "thumbnail", "raw", "species"]  # fmt: skip


def _card(page: str, feature: str) -> _Elements:
    """The elements of one feature's card."""
    start = page.index(f'<div class="feature" id="feature-{feature}"')
    ends = [page.find('<div class="feature"', start + 1), page.find("</section>", start)]
    ends = [i for i in ends if i > 0]
    return _Elements(page[start : min(ends)])


def _splits_of(card: _Elements, tag: str) -> list[str]:
    return [a["data-split"] for t, a, _ in card.tags if t == tag and "data-split" in a]


def test_each_feature_is_one_card_with_its_splits_side_by_side(page, doc):
    cards = [a["data-feature"] for t, a, _ in doc.tags if t == "div" and "data-feature" in a]
    assert cards == FEATURE_ORDER  # the manifest's order
    for feature in FEATURE_ORDER:
        card = _card(page, feature)
        assert _splits_of(card, "tr") == ["train", "eval"], feature  # one table, a row each
        charts = _splits_of(card, "figure")
        sized = feature in ("photo", "thumbnail", "raw")
        assert charts == ([] if sized else ["train", "eval"]), feature  # side by side
        # the charts wrap as one row (under the table when it is wide), never one by one
        grouped = [a for t, a, _ in card.tags if t == "div" and a.get("class") == "split-charts"]
        assert len(grouped) == (0 if sized else 1), feature
    assert ".split-charts{display:flex;flex-wrap:nowrap" in page
    assert page.count('<div class="feature"') == len(FEATURE_ORDER)
    assert page.count("<h3>") == 0  # no split after split


def test_a_number_s_table_holds_each_split_s_statistics(doc):
    stats = ("records", "missing", "missing_rate", "mean", "std", "min", "max")
    assert {s: doc.value(f"stat-eval-flipper_mm-{s}") for s in stats} == {
        "records": "200", "missing": "0", "missing_rate": "0.0", "mean": "206.2", "std": "14.1",
        "min": "180.0", "max": "231.0",
    }  # fmt: skip
    assert {s: doc.value(f"stat-train-bill_length_mm-{s}") for s in stats} == {
        "records": "792", "missing": "9", "missing_rate": "0.011363636363636364", "mean": "43.9",
        "std": "5.4", "min": "32.1", "max": "59.6",
    }  # fmt: skip
    assert doc.text["stat-train-bill_length_mm-records"] == "792"
    assert doc.text["stat-eval-bill_length_mm-missing_rate"] == "1.00 %"  # 2 of 200
    assert doc.text["stat-eval-flipper_mm-min"] == "180"


def _svg_texts(page: str, svg_id: str) -> list[str]:
    """The `<text>` labels of the svg `svg_id` (not the bars' tooltips)."""
    svg = page[page.index(f'id="{svg_id}"') :]
    svg = svg[: svg.index("</svg>")]
    return [
        re.sub(r"<title>.*?</title>", "", t) for t in re.findall(r"<text[^>]*>(.*?)</text>", svg)
    ]


def test_a_number_s_histograms_share_one_scale(page, doc):
    # train: 4 bins over [172, 231], 165 values; eval: 4 bins over [180, 231], 100 values
    span = 231.0 - 172.0
    train = [(172.0 + i * 14.75, 14.75, c / 165) for i, c in enumerate([5, 50, 30, 80])]
    eval_ = [(180.0 + i * 12.75, 12.75, c / 100) for i, c in enumerate([10, 20, 30, 40])]
    top = max(share / width for _, width, share in train + eval_)  # train's last bar
    for split, bins in (("train", train), ("eval", eval_)):
        bars = doc.bars(f"hist-{split}-flipper_mm")
        assert [float(b["x"]) for b in bars] == pytest.approx(
            [HIST_W * (low - 172.0) / span for low, _, _ in bins], abs=0.01
        )
        assert [float(b["height"]) for b in bars] == pytest.approx(
            [HIST_H * share / width / top for _, width, share in bins], abs=0.01
        )
    assert float(doc.bars("hist-train-flipper_mm")[-1]["height"]) == HIST_H
    assert float(doc.bars("hist-eval-flipper_mm")[0]["x"]) == pytest.approx(27.12, abs=0.01)
    for split in ("train", "eval"):  # both axes from 172 to 231
        assert _svg_texts(page, f"hist-{split}-flipper_mm") == ["172", "231"]


def test_a_string_s_values_keep_train_s_order_in_every_split(page, doc):
    train = doc.bars("top-train-island")
    eval_ = doc.bars("top-eval-island")  # eval counts Dream first: shown in train's order
    assert [b["data-value"] for b in eval_] == [b["data-value"] for b in train] == [
        "Biscoe", "Dream", "Torgersen",
    ]  # fmt: skip
    assert [(b["data-count"], b["data-share"]) for b in eval_] == [
        ("101", "0.505"), ("76", "0.38"), ("23", "0.115"),
    ]  # fmt: skip
    widest = 400 / 792  # the largest share of either split: one scale for both
    assert float(train[0]["width"]) == SHARE_BAR_W
    assert float(eval_[0]["width"]) == pytest.approx(SHARE_BAR_W * 0.505 / widest, abs=0.01)
    assert _svg_texts(page, "top-train-island") == [
        "Biscoe", "50.5 %", "Dream", "37.9 %", "Torgersen", "11.6 %",
    ]  # fmt: skip
    assert _svg_texts(page, "top-eval-island") == ["50.5 %", "38.0 %", "11.5 %"]  # no labels


def test_values_only_another_split_counts_come_after_train_s():
    train = _split_stats(792, [("Adelie", 792)], [("Biscoe", 500), ("Dream", 292)],
                         (0, [("male", 792)]), (0, [("calm", 792)]))  # fmt: skip
    island = [("Dream", 100), ("Biscoe", 60), ("Torgersen", 40)]
    eval_ = _split_stats(200, [("Adelie", 200)], island, (0, [("male", 200)]), (0, [("calm", 200)]))
    # train counts all its values (2 distinct): Torgersen is known absent there
    doc = _Elements(render(MANIFEST, _statistics({"eval": eval_, "train": train})))
    for split, counts in (("train", ["500", "292", "0"]), ("eval", ["60", "100", "40"])):
        bars = doc.bars(f"top-{split}-island")
        assert [b["data-value"] for b in bars] == ["Biscoe", "Dream", "Torgersen"]
        assert [b["data-count"] for b in bars] == counts
    # a sample of the values: one it did not count is unknown, neither 0 nor a share
    train["features"]["island"].update(distinct=40, distinct_exact=False)
    page = render(MANIFEST, _statistics({"train": train, "eval": eval_}))
    unknown = _Elements(page).bars("top-train-island")[2]
    assert "data-count" not in unknown and "data-share" not in unknown
    assert _svg_texts(page, "top-train-island")[-2:] == ["Torgersen", "–"]


def test_a_string_lists_its_most_frequent_values_only():
    many = [(f"v{i:02d}", 100 - i) for i in range(15)]
    train = _split_stats(1395, many, many, (0, many), (0, many))
    page = render(MANIFEST, _statistics({"train": train}))
    bars = _Elements(page).bars("top-train-island")
    assert [b["data-value"] for b in bars] == [f"v{i:02d}" for i in range(TOP_ROWS)]
    assert '<figcaption>train <span class="muted">top 10 of 15</span></figcaption>' in page


def test_splits_alike_raise_no_flag(page):
    assert 'class="flagged"' not in page
    assert 'id="shifts-' not in page
    assert "Split eval differs" not in page


def test_a_split_unlike_train_is_flagged_in_its_cards_and_the_banner():
    page = render(MANIFEST, SHIFTED, GRAPH, TIMINGS)
    doc = _Elements(page)
    flagged = {
        feature: [a["data-split"] for t, a, _ in _card(page, feature).tags
                  if t == "tr" and a.get("class") == "flagged"]
        for feature in FEATURE_ORDER
    }  # fmt: skip
    assert {f: splits for f, splits in flagged.items() if splits} == {
        "bill_length_mm": ["eval"], "island": ["eval"], "sex": ["eval"],  # never train
    }  # fmt: skip
    rules = {
        f: [(a["data-split"], a["data-rule"]) for t, a, _ in _card(page, f).tags if t == "li"]
        for f in ("bill_length_mm", "island", "sex")
    }
    assert rules == {
        "bill_length_mm": [("eval", "mean")],
        "island": [("eval", "absent")],
        "sex": [("eval", "missing")],
    }
    assert (
        doc.text["shifts-bill_length_mm"] == "eval: mean 49.9, 1.1 std from train's 43.9 (std 5.4)"
    )
    assert doc.text["shifts-island"] == 'eval: "Torgersen" is absent, 11.6 % of train\'s values'
    assert doc.text["shifts-sex"] == "eval: 30.0 % of its records have no value, 3.0 % in train"
    assert doc.by_id("shifts-island")["class"] == "banner"  # the warning style
    banner = doc.text["warnings"]
    assert (
        "Split eval differs a lot from train in 3 features: bill_length_mm, island, sex." in banner
    )
    links = [a["href"] for t, a, _ in doc.tags if t == "a" and a.get("href", "").startswith(
        "#feature-")]  # fmt: skip
    assert links == ["#feature-bill_length_mm", "#feature-island", "#feature-sex"]


SHIFT_CASES = [
    # (what, train's statistics, eval's, the rules that fire)
    ("mean 0.51 std away", {"mean": 10.0, "std": 2.0}, {"mean": 11.02}, ["mean"]),
    ("mean 0.49 std away", {"mean": 10.0, "std": 2.0}, {"mean": 9.02}, []),
    ("constant train, other mean", {"mean": 3.0, "std": 0.0}, {"mean": 3.5}, ["mean"]),
    ("constant train, same mean", {"mean": 3.0, "std": 0.0}, {"mean": 3.0}, []),
    ("missing rate 11 points higher", {"missing_rate": 0.02}, {"missing_rate": 0.13}, ["missing"]),
    ("missing rate 9 points lower", {"missing_rate": 0.5}, {"missing_rate": 0.41}, []),
]


@pytest.mark.parametrize(("what", "train", "other", "rules"), SHIFT_CASES,
                         ids=[c[0] for c in SHIFT_CASES])  # fmt: skip
def test_shift_rules_for_numbers(what, train, other, rules):
    base = {"type": "float", "missing_rate": 0.0, "mean": 0.0, "std": 1.0}
    found = shifts("x", _feature({**base, **train}), "eval", _feature({**base, **other}))
    assert [f.rule for f in found] == rules


def _feature(partial: dict) -> FeatureStatistics:
    """A feature's statistics from the fields a rule reads: the counts it leaves out made up of
    100 records (or its `values`) and its missing rate."""
    records = partial.get("values", 100)
    missing = round(records * partial["missing_rate"])
    counts = {"records": records, "missing": missing, "values": records - missing}
    return FeatureStatistics.from_json({**counts, **partial}, "x")


def _values(values: int, top: dict[str, int], distinct=None, exact=True) -> dict:
    return {
        "type": "string", "missing_rate": 0.0, "values": values, "distinct_exact": exact,
        "distinct": len(top) if distinct is None else distinct,
        "top": [{"value": v, "count": c} for v, c in top.items()],
    }  # fmt: skip


STRING_CASES = [
    # a value absent from eval (100 values): flagged when train's share predicts 5 or more there
    ("absent, 5 expected", _values(1000, {"a": 950, "b": 50}), _values(100, {"a": 100}),
     [("absent", '"b" is absent, 5.0 % of train\'s values')]),
    ("absent, 4 expected", _values(1000, {"a": 960, "b": 40}), _values(100, {"a": 100}), []),
    # eval's counts are a sample: "b" may be among the values it did not count
    ("absent from a sample", _values(1000, {"a": 950, "b": 50}),
     _values(100, {"a": 100}, distinct=30, exact=False), []),
    ("absent from more values than listed", _values(1000, {"a": 950, "b": 50}),
     _values(100, {"a": 100}, distinct=25), []),
    ("new in eval", _values(1000, {"a": 1000}), _values(100, {"a": 90, "c": 10}),
     [("absent", '"c" is 10.0 % of its values, absent from train')]),
    ("share 21 points apart", _values(100, {"a": 50, "b": 50}), _values(100, {"a": 71, "b": 29}),
     [("share", '"a" is 71.0 % of its values, 50.0 % in train'),
      ("share", '"b" is 29.0 % of its values, 50.0 % in train')]),
    ("share 19 points apart", _values(100, {"a": 50, "b": 50}), _values(100, {"a": 69, "b": 31}),
     []),
]  # fmt: skip


@pytest.mark.parametrize(("what", "train", "other", "expected"), STRING_CASES,
                         ids=[c[0] for c in STRING_CASES])  # fmt: skip
def test_shift_rules_for_strings(what, train, other, expected):
    found = shifts("x", _feature(train), "eval", _feature(other))
    assert [(f.rule, f.text) for f in found] == expected
    assert all((f.split, f.feature, f.train) == ("eval", "x", "train") for f in found)
