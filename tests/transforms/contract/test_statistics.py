"""statistics.json as typed objects: what the ETL builds reads back equal and writes back the
same bytes; a broken file is refused naming the field."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from transforms.contract.statistics import (
    FeatureStatistics,
    Sizes,
    Statistics,
    StatisticsError,
    ValueCount,
)
from transforms.stats import chunk_stats


def _built() -> Statistics:
    rng = np.random.default_rng(3)
    n = 500
    split = (np.arange(n) % 3 == 0).astype(np.int16)  # train 0, eval 1
    ints = pa.array([[int(v)] for v in rng.integers(0, 5, n)], pa.list_(pa.int64()))
    floats = pa.array(
        [[] if i % 7 == 0 else [float(v)] for i, v in enumerate(rng.normal(size=n))],
        pa.list_(pa.float32()),
    )
    words = pa.array([[f"w{i % 13}".encode()] for i in range(n)], pa.list_(pa.binary()))
    blobs = pa.array([[b"x" * (i % 9)] for i in range(n)], pa.list_(pa.binary()))
    stats = chunk_stats(
        ["a", "b", "c", "d"], ["int", "float", "string", "bytes"], [ints, floats, words, blobs],
        split,
    )  # fmt: skip
    return stats.result(["train", "eval", "test"])


def test_built_statistics_read_back_equal_and_write_back_the_same_bytes():
    built = _built()
    text = built.dumps()
    back = Statistics.loads(text)
    assert back == built and back.dumps() == text
    assert json.loads(text) == built.to_json()
    train = back.splits["train"]
    assert train.records == 333 and back.splits["test"].records == 0
    a, b, c, d = (train.features[n] for n in "abcd")
    assert a.is_number and a.distinct == 5 and sum(a.count_of().values()) == 333
    assert b.min is not None and b.counts is None and b.missing == 48
    assert c.is_text and c.distinct_exact and c.top[0] == ValueCount("w0", 26)
    lengths = [len(f"w{i % 13}") for i in range(500) if i % 3 != 0]  # train: split 0
    assert c.length == Sizes(2, 3, sum(lengths) / len(lengths))
    assert d.size.max == 8 and d.histogram is None
    assert back.feature("eval", "c").records == 167 and back.feature("test", "c") is None


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.update(format_version=2), "statistics.json: format_version: 2, not 1"),
        (lambda s: s["splits"]["train"].update(records=-1),
         "statistics.json: splits.train.records: -1 is not a non-negative integer"),
        (lambda s: s["splits"]["train"]["features"]["a"].update(min="low"),
         "statistics.json: splits.train.features.a.min: 'low' is not a number"),
        (lambda s: s["splits"]["train"]["features"]["c"]["top"][0].update(count=None),
         "statistics.json: splits.train.features.c.top[0].count: None is not a non-negative "
         "integer"),
        (lambda s: s["splits"]["eval"]["features"]["c"].pop("distinct_exact"),
         "statistics.json: splits.eval.features.c.distinct_exact: None is not a boolean"),
    ],
)  # fmt: skip
def test_a_broken_file_is_refused_naming_the_field(edit, message):
    raw = _built().to_json()
    edit(raw)
    with pytest.raises(StatisticsError) as e:
        Statistics.from_json(raw)
    assert str(e.value) == message


def test_text_that_is_not_json_is_refused_naming_the_file():
    with pytest.raises(StatisticsError, match=r"^data/statistics.json: not JSON"):
        Statistics.loads(b"{", "data/statistics.json")


def test_a_feature_keeps_only_the_fields_of_its_type():
    f = FeatureStatistics("bytes", 2, 1, 0.5, 1, size=Sizes(3, 3, 3.0))
    assert f.to_json() == {
        "type": "bytes", "records": 2, "missing": 1, "missing_rate": 0.5, "values": 1,
        "size": {"min": 3, "max": 3, "mean": 3.0},
    }  # fmt: skip
