"""Which fields of a source's records are read, the count of the others, and the presence
count of the key and `source:` fields."""

from __future__ import annotations

import pyarrow as pa

from pipelines.config.loader import parse_config
from transforms.quality import CountFields, present_counter, seen_counter, used_fields
from transforms.records import RawChunk, ignored_counter


def _dataset(tmp_path):
    return parse_config(
        {
            "name": "t",
            "sources": [
                {"name": "a", "format": "csv", "path": "a.csv"},
                {"name": "b", "format": "jsonl", "path": "b.jsonl"},
            ],
            "key": "id",
            "combine": "join",
            "features": {
                "id": {"type": "int"},
                "name": {"type": "string"},
                "score": {"type": "float", "source": "b.points"},
            },
            "splits": {"train": 1.0},
            "output": {"path": "out"},
        },
        base_dir=str(tmp_path),
    )


def test_used_fields_are_the_features_fields_and_the_key(tmp_path):
    dataset = _dataset(tmp_path)
    assert used_fields(dataset, "a") == {"id", "name"}
    assert used_fields(dataset, "b") == {"id", "name", "points"}


def test_ignored_fields_count_records_holding_a_value(tmp_path):
    fn = CountFields(_dataset(tmp_path))
    chunk = RawChunk(
        "a",
        "a.csv",
        {
            "id": pa.array(["1", "2", "3"]),
            "name": ["x", None, "z"],
            "points": pa.array(["1", None, None]),  # read from b only: ignored in a
            "extra": ["e", None, "e"],
            "empty": [None, None, None],
        },
        [2, 3, 4],
    )
    assert dict(fn.process(chunk)) == {
        present_counter("a", "id"): 3,  # the key: checked for presence in every source
        seen_counter("a", "name"): 1,  # a feature read from any source: its field was seen
        seen_counter("a", "id"): 1,
        ignored_counter("a", "points"): 1,
        ignored_counter("a", "extra"): 2,
    }
    chunk_b = RawChunk("b", "b.jsonl", {"id": [1], "points": [2.0], "note": ["n"]}, [1])
    assert dict(fn.process(chunk_b)) == {
        present_counter("b", "id"): 1,
        seen_counter("b", "id"): 1,
        present_counter("b", "points"): 1,  # `source: b.points`
        ignored_counter("b", "note"): 1,
    }
