"""The run report (pipelines/report/page.py): numbers under their ids, charts, escaping, offline."""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser

import pytest

from pipelines.report.page import render
from pipelines.report.svg import graph_layers
from transforms.contract.manifest import Manifest
from transforms.contract.report import CSS

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


def _split_stats(records: int, species: list[tuple[str, int]]) -> dict:
    return {
        "records": records,
        "features": {
            "bill_length_mm": _number(
                records, records // 80, 32.1, 59.6, 43.9, 5.4, [12, 40, 95, 3, 0, 1]
            ),
            "flipper_mm": _number(records, 0, 172.0, 231.0, 200.9, 14.1, [5, 50, 30, 80]),
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
            "island": _string(records, 0, [("Biscoe", 400), ("Dream", 300), ("Torgersen", 92)]),
            "sex": _string(records, records // 32, [("male", 390), ("female", 377)]),
            "comment": _string(
                records, records * 7 // 8, [(SCRIPT, 50), ("calm", 42)], 61, exact=False
            ),
            "photo": _sized("image", records, 3, 100, 5000, 1234.5),
            "thumbnail": _sized("image", records, 0, 80, 900, 410.0),
            "raw": _sized("bytes", records, records, 0, 0, 0.0),
            "species": _string(records, 0, species),
        },
    }


STATISTICS = {
    "format_version": 1,
    "splits": {
        "train": _split_stats(792, [("Adelie", 350), ("Gentoo", 282), ("Chinstrap", 160)]),
        "eval": _split_stats(200, [("Gentoo", 90), ("Adelie", 70), ("Chinstrap", 40)]),
    },
}
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
        if tag not in ("rect", "path", "meta", "br") or "id" in a:
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
    from trainer.report import render as render_training

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
    assert doc.text["sampled-train-comment"] == "of a sample of the values"  # not exact
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
    statistics = {"format_version": 1, "splits": {"train": {"records": 0, "features": {}}}}
    timings = {"elapsed_s": 0.0, "runner": "FnApiRunner", "stages": []}
    page = render(manifest, statistics, {"nodes": [], "edges": []}, timings)
    doc = _Elements(page)
    assert "No record was rejected." in page
    assert doc.value("shards-train-max") == "0"
    assert not any(a.get("id") == "summary-throughput" for _, a, _ in doc.tags)
    assert "The graph has no steps." in page


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
    stats = {"format_version": 1, "splits": {"train": _split_stats(792, [("", 500), ("x", 292)])}}
    doc = _Elements(render(MANIFEST, stats, GRAPH, TIMINGS))
    labels = doc.text["label-train"]
    assert '""' in labels
