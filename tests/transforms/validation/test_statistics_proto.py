"""statistics.json as TFDV's DatasetFeatureStatisticsList: every count carried over exactly,
the same bytes every time, and no Beam or TensorFlow needed to make it."""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import pathlib
import random
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image
from tensorflow_metadata.proto.v0 import statistics_pb2

from transforms.contract.layout import STATISTICS_PROTO
from transforms.contract.manifest import Manifest, ManifestFeature
from transforms.contract.statistics import Statistics
from transforms.stats import MAX_DISTINCT, DatasetStats, chunk_stats
from transforms.validation.statistics_proto import serialize, to_proto, write

ROOT = pathlib.Path(__file__).resolve().parents[3]
ROWS = MAX_DISTINCT * 3 // 2  # `id` has more distinct values in train than are counted exactly
SPLITS = ["train", "eval"]
FEATURES = {
    "age": ManifestFeature("int", (), True, min=0, max=120),
    "count": ManifestFeature("int", (), False, values=(1, 2, 3)),
    "score": ManifestFeature("float", (), False),
    "weights": ManifestFeature("float", (3,), True),
    "tags": ManifestFeature("string", (None,), False),
    "species": ManifestFeature("string", (), True, values=("Adelie", "Chinstrap", "Gentoo")),
    "id": ManifestFeature("string", (), True),
    "comment": ManifestFeature("string", (), False),
    "blob": ManifestFeature("bytes", (), False),
    "photo": ManifestFeature("image", (), True, image_size=(4, 4, 3)),
}
TYPE = statistics_pb2.FeatureNameStatistics
PROTO_TYPES = {
    "int": TYPE.INT,
    "float": TYPE.FLOAT,
    "string": TYPE.STRING,
    "bytes": TYPE.BYTES,
    "image": TYPE.BYTES,
}
TAGS = ["a", "b", "c", "ключ"] + [f"t{i}" for i in range(26)]  # more than the 20 top values


def _png(width: int, height: int, shade: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (shade, 255 - shade, 7)).save(out, format="PNG")
    return out.getvalue()


def _column(values: list, kind: pa.DataType) -> pa.ListArray:
    """One feature's list column: None is a record without a value (an empty list)."""
    return pa.array(
        [[] if v is None else (v if isinstance(v, list) else [v]) for v in values], pa.list_(kind)
    )


def _dataset() -> tuple[dict[str, list], np.ndarray]:
    """Raw values of every feature (None where a record has none) and each record's split."""
    rng = random.Random(11)
    photos = [_png(w, h, s) for w, h, s in ((4, 4, 10), (8, 3, 200), (16, 9, 90))]
    comments = ["long comment " * 20 + str(i) for i in range(3)]  # beyond what is kept whole
    raw = {
        "age": [rng.randrange(0, 91) for _ in range(ROWS)],
        "count": [rng.choice([1, 2, 3, None]) for _ in range(ROWS)],
        "score": [None if rng.random() < 0.1 else rng.uniform(-5e4, 5e4) for _ in range(ROWS - 2)]
        + [float("inf"), float("-inf")],
        "weights": [[rng.uniform(0, 1) for _ in range(3)] for _ in range(ROWS)],
        "tags": [
            None if rng.random() < 0.3 else [rng.choice(TAGS) for _ in range(rng.randrange(1, 4))]
            for _ in range(ROWS)
        ],
        "species": [rng.choice(["Adelie", "Adelie", "Gentoo", "Chinstrap"]) for _ in range(ROWS)],
        "id": [f"id-{i:06d}" for i in range(ROWS)],
        "comment": [rng.choice(comments + [None]) for _ in range(ROWS)],
        "blob": [None if rng.random() < 0.5 else bytes(rng.randrange(1, 50)) for _ in range(ROWS)],
        "photo": [rng.choice(photos) for _ in range(ROWS)],
    }
    split = np.array([0 if rng.random() < 0.8 else 1 for _ in range(ROWS)], np.int16)
    return raw, split


def _arrow(name: str, values: list) -> pa.ListArray:
    kind = FEATURES[name].type
    if kind == "int":
        return _column(values, pa.int64())
    if kind == "float":
        return _column(values, pa.float32())
    if kind == "string":
        encode = lambda v: [x.encode() for x in v] if isinstance(v, list) else v.encode()  # noqa: E731
        return _column([None if v is None else encode(v) for v in values], pa.binary())
    return _column(values, pa.binary())


def _statistics(raw: dict[str, list], split: np.ndarray, chunks: int, seed: int) -> dict:
    """statistics.json of the records, computed by `transforms.stats` in `chunks` chunks merged
    in a shuffled order, written and read back as the ETL writes it."""
    names = sorted(FEATURES)  # another order than FEATURES': the statistics sort them
    columns = [_arrow(n, raw[n]) for n in names]
    types = [FEATURES[n].type for n in names]
    bounds = np.linspace(0, ROWS, chunks + 1).astype(int)
    parts = [
        chunk_stats(names, types, [c[a:b] for c in columns], split[a:b])
        for a, b in zip(bounds, bounds[1:])
    ]
    random.Random(seed).shuffle(parts)
    merged = DatasetStats()
    for part in parts:
        merged.merge(part)
    text = json.dumps(merged.to_json(SPLITS), indent=1, sort_keys=True, ensure_ascii=False)
    return json.loads(text)


@pytest.fixture(scope="module")
def data():
    raw, split = _dataset()
    statistics = _statistics(raw, split, chunks=1, seed=0)
    manifest = Manifest(name="people", features=FEATURES, splits={})
    return raw, split, statistics, manifest


def _parsed(proto, tmp_path) -> statistics_pb2.DatasetFeatureStatisticsList:
    path = tmp_path / STATISTICS_PROTO
    data = write(path, proto)
    assert path.read_bytes() == data == serialize(proto)
    return statistics_pb2.DatasetFeatureStatisticsList.FromString(path.read_bytes())


def _split(proto, name: str) -> dict:
    """Feature name → FeatureNameStatistics of one split."""
    (dataset,) = [d for d in proto.datasets if d.name == name]
    return {f.path.step[0]: f for f in dataset.features}


def _f32(x: float) -> float:
    return float(np.float32(x))


def _check_feature(got, name: str, stats: dict, shape: tuple | None) -> None:
    """Every field of one feature's proto against its statistics.json entry."""
    assert list(got.path.step) == [name] and got.WhichOneof("field_id") == "path"
    kind = stats["type"]
    which = {"int": "num_stats", "float": "num_stats", "string": "string_stats"}.get(
        kind, "bytes_stats"
    )
    assert got.WhichOneof("stats") == which
    assert got.type == PROTO_TYPES[kind]
    body = getattr(got, which)
    common = body.common_stats
    present = stats["records"] - stats["missing"]
    assert (common.num_non_missing, common.num_missing) == (present, stats["missing"])
    assert common.tot_num_values == stats["values"]
    assert common.avg_num_values == _f32(stats["values"] / present)
    per_record = 1 if stats["values"] == present else shape[0] if shape and shape[0] else 0
    assert (common.min_num_values, common.max_num_values) == (per_record, per_record)
    assert not common.HasField("num_values_histogram")
    if kind in ("int", "float"):
        assert (body.mean, body.std_dev) == (stats["mean"], stats["std"])
        assert (body.min, body.max) == (stats["min"], stats["max"])
        assert (body.num_zeros, body.median) == (0, 0)
        assert len(body.histograms) == 1
        histogram = body.histograms[0]
        assert histogram.type == statistics_pb2.Histogram.STANDARD and histogram.num_nan == 0
        assert [(b.low_value, b.high_value, b.sample_count) for b in histogram.buckets] == [
            (bar["low"], bar["high"], bar["count"]) for bar in stats["histogram"]
        ]
    elif kind == "string":
        assert body.unique == stats["distinct"]
        top = [(t["value"], t["count"]) for t in stats["top"]]
        assert [(t.value, t.frequency) for t in body.top_values] == top
        # every value's count where statistics.json lists them all, else the top values
        ranked = [(t["value"], t["count"]) for t in stats.get("counts", stats["top"])]
        assert [
            (b.low_rank, b.high_rank, b.label, b.sample_count) for b in body.rank_histogram.buckets
        ] == [(i, i, v, c) for i, (v, c) in enumerate(ranked)]
        assert body.avg_length == _f32(stats["length"]["mean"])
    else:
        size = stats["size"]
        assert (body.min_num_bytes, body.max_num_bytes) == (size["min"], size["max"])
        assert body.avg_num_bytes == _f32(size["mean"])
        assert body.unique == 0
    custom = [(c.name, c.str) for c in got.custom_stats]
    assert custom == ([("domain_info", "image_domain {}")] if kind == "image" else [])


def test_every_count_of_the_statistics_is_carried_over_exactly(data, tmp_path):
    raw, split, statistics, manifest = data
    got = _parsed(to_proto(Statistics.from_json(statistics), manifest), tmp_path)
    # statistics.json is written with sorted keys: its splits are in name order
    assert [d.name for d in got.datasets] == list(statistics["splits"]) == ["eval", "train"]
    for dataset in got.datasets:
        body = statistics["splits"][dataset.name]
        index = SPLITS.index(dataset.name)
        assert dataset.num_examples == body["records"] == int(np.count_nonzero(split == index))
        assert [list(f.path.step) for f in dataset.features] == [[n] for n in sorted(FEATURES)]
        for feature in dataset.features:
            name = feature.path.step[0]
            _check_feature(feature, name, body["features"][name], FEATURES[name].shape)


def test_the_proto_holds_the_values_of_the_records(data, tmp_path):
    """The numbers against the raw records, not only against statistics.json."""
    raw, split, statistics, manifest = data
    train = _split(_parsed(to_proto(Statistics.from_json(statistics), manifest), tmp_path), "train")
    rows = np.flatnonzero(split == 0)
    species = collections.Counter(raw["species"][i] for i in rows)
    assert [(t.value, t.frequency) for t in train["species"].string_stats.top_values] == sorted(
        species.items(), key=lambda kv: (-kv[1], kv[0])
    )
    assert train["species"].string_stats.unique == 3
    ages = np.array([raw["age"][i] for i in rows])
    age = train["age"].num_stats
    assert (age.min, age.max) == (ages.min(), ages.max())
    assert age.mean == pytest.approx(ages.mean(), rel=1e-15)
    assert sum(b.sample_count for b in age.histograms[0].buckets) == len(rows)
    scores = [raw["score"][i] for i in rows if raw["score"][i] is not None]
    score = train["score"].num_stats
    assert score.common_stats.num_missing == len(rows) - len(scores)
    finite = [s for s in scores if np.isfinite(s)]
    assert sum(b.sample_count for b in score.histograms[0].buckets) == len(finite)
    assert score.common_stats.tot_num_values == len(scores)  # infinities are values
    assert len(score.histograms[0].buckets) <= 20
    tags = train["tags"].string_stats
    counted = collections.Counter(t for i in rows for t in raw["tags"][i] or [])
    ranked = sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))
    assert len(ranked) == 30 and [(t.value, t.frequency) for t in tags.top_values] == ranked[:20]
    assert [(b.label, b.sample_count) for b in tags.rank_histogram.buckets] == ranked  # all
    assert tags.common_stats.tot_num_values == sum(counted.values())
    assert (tags.common_stats.min_num_values, tags.common_stats.max_num_values) == (0, 0)
    weights = train["weights"].num_stats.common_stats
    assert (weights.min_num_values, weights.max_num_values, weights.avg_num_values) == (3, 3, 3.0)
    sizes = [len(raw["photo"][i]) for i in rows]
    photo = train["photo"].bytes_stats
    assert (photo.min_num_bytes, photo.max_num_bytes) == (min(sizes), max(sizes))
    ids = train["id"].string_stats
    assert statistics["splits"]["train"]["features"]["id"]["distinct_exact"] is False
    assert abs(ids.unique - len(rows)) < 0.03 * len(rows) and len(ids.top_values) == 20
    assert all(t.frequency == 1 for t in ids.top_values)  # a sample's exact counts


def test_without_a_manifest_only_what_the_statistics_show_is_filled_in(data):
    _, _, statistics, manifest = data
    bare = _split(to_proto(Statistics.from_json(statistics)), "train")
    full = _split(to_proto(Statistics.from_json(statistics), manifest.features), "train")
    weights = bare["weights"].num_stats.common_stats
    assert (weights.min_num_values, weights.max_num_values) == (0, 0)  # [3] needs the manifest
    assert full["weights"].num_stats.common_stats.max_num_values == 3
    for name in sorted(set(FEATURES) - {"weights"}):
        assert bare[name] == full[name], name


def test_conversions_are_byte_identical_however_the_statistics_were_merged(data):
    raw, split, statistics, manifest = data
    first = serialize(to_proto(Statistics.from_json(statistics), manifest))
    assert serialize(to_proto(Statistics.from_json(statistics), manifest)) == first
    for chunks, seed in ((7, 1), (13, 2)):
        merged = Statistics.from_json(_statistics(raw, split, chunks, seed))
        assert serialize(to_proto(merged, manifest)) == first
    shuffled = {
        **statistics,
        "splits": {
            s: {**b, "features": dict(reversed(list(b["features"].items())))}
            for s, b in statistics["splits"].items()
        },
    }
    assert serialize(to_proto(Statistics.from_json(shuffled), manifest)) == first


def test_splits_keep_the_order_of_the_statistics_and_empty_ones_stay(data):
    _, _, statistics, manifest = data
    swapped = {
        **statistics,
        "splits": {
            "eval": statistics["splits"]["eval"],
            "test": {"records": 0, "features": {}},
            "train": statistics["splits"]["train"],
        },
    }
    got = to_proto(Statistics.from_json(swapped), manifest)
    assert [(d.name, len(d.features)) for d in got.datasets] == [
        ("eval", len(FEATURES)),
        ("test", 0),
        ("train", len(FEATURES)),
    ]
    assert got.datasets[1].num_examples == 0


def test_features_without_values_have_counts_only():
    stats = {
        "format_version": 1,
        "splits": {
            "train": {
                "records": 2,
                "features": {
                    "x": _empty("float"),
                    "s": {**_empty("string"), "distinct": 0, "distinct_exact": True, "top": [],
                          "length": {"min": None, "max": None, "mean": None}},
                    "b": {**_empty("bytes"), "size": {"min": None, "max": None, "mean": None}},
                },
            }
        },
    }  # fmt: skip
    got = _split(to_proto(Statistics.from_json(stats)), "train")
    x = got["x"].num_stats
    assert (x.common_stats.num_missing, x.common_stats.avg_num_values) == (2, 0.0)
    assert not x.histograms and (x.mean, x.min, x.max) == (0, 0, 0)
    assert not got["s"].string_stats.top_values and got["s"].string_stats.avg_length == 0
    assert got["b"].bytes_stats.max_num_bytes == 0


def _empty(kind: str) -> dict:
    out = {"type": kind, "records": 2, "missing": 2, "missing_rate": 1.0, "values": 0}
    if kind == "float":
        out.update(min=None, max=None, mean=None, std=None, histogram=[])
    return out


def test_unknown_format_versions_and_types_are_refused(data):
    _, _, statistics, _ = data
    with pytest.raises(ValueError, match="format_version 2 is not 1"):
        to_proto(dataclasses.replace(Statistics.from_json(statistics), format_version=2))
    bad = {"format_version": 1, "splits": {"train": {"records": 1, "features": {
        "x": {**_empty("float"), "type": "decimal"}}}}}  # fmt: skip
    with pytest.raises(ValueError, match="feature 'x': unknown type 'decimal'"):
        to_proto(Statistics.from_json(bad))


def test_validation_imports_neither_beam_nor_tensorflow():
    code = (
        "import sys, transforms.validation.statistics_proto, transforms.validation.schema; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('apache_beam', 'tensorflow')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"
