"""Joining sources on the key: full outer join, first record of a key wins within a source."""

from transforms.join import bucket_rows, join_bucket
from transforms.prepare import KeyMaker
from transforms.records import RawChunk, RawRow
from transforms.spec import DatasetSpec, FeatureSpec, OutputSpec, SourceSpec


def _dataset(key_feature=True):
    features = [FeatureSpec("id", "int", (), True)] if key_feature else []
    features.append(FeatureSpec("v", "string", (), False))
    return DatasetSpec(
        name="d",
        sources=(SourceSpec("a", "csv", "a.csv", {}), SourceSpec("b", "jsonl", "b.jsonl", {})),
        features=tuple(features),
        splits=(("train", 1.0),),
        output=OutputSpec("/tmp/x"),
        key="id",
        combine="join",
    )


def _rows(*items):
    return [RawRow(i, i + 2, fields, raw) for i, (fields, raw) in enumerate(items)]


def test_key_is_canonical_across_csv_text_and_json_numbers():
    maker = KeyMaker(_dataset())
    assert maker("007") == maker(7) == "7"


def test_rows_without_key_are_rejected_when_bucketing():
    chunk = RawChunk("a", "a.csv", _rows(({"id": None}, "raw0"), ({"id": "1"}, "raw1")))
    out = list(bucket_rows(chunk, 0, KeyMaker(_dataset()), buckets=1))
    assert out[0] == {"source": "a", "location": "a.csv:2", "reason": "id: missing key", "record": "raw0"}
    assert out[1][0] == 0
    assert [k for k, _ in out[1][1][3]] == ["1"]


def test_join_merges_sources_counts_duplicates_and_keeps_the_first():
    a = _rows(({"id": "1", "v": "first"}, "a1"), ({"id": "1", "v": "second"}, "a1b"), ({"id": "2"}, "a2"))
    b = _rows(({"id": 1, "w": "x"}, "b1"), ({"id": 3, "w": "y"}, "b3"))
    maker = KeyMaker(_dataset())
    groups = [
        g for chunk, i in ((RawChunk("a", "a.csv", a), 0), (RawChunk("b", "b.jsonl", b), 1))
        for _, g in bucket_rows(chunk, i, maker, buckets=1)
    ]
    records, duplicates, joined = join_bucket(reversed(groups))
    assert duplicates == 1
    assert joined == 1
    assert [(r.key, r.parts, r.source, r.location, r.order) for r in records] == [
        ("1", {"a": {"id": "1", "v": "first"}, "b": {"id": 1, "w": "x"}}, "a,b",
         "a.csv:2; b.jsonl:2", (0, "a.csv", 0)),
        ("2", {"a": {"id": "2"}}, "a", "a.csv:4", (0, "a.csv", 2)),
        ("3", {"b": {"id": 3, "w": "y"}}, "b", "b.jsonl:3", (1, "b.jsonl", 1)),
    ]
    assert records[0].raw == '{"a": "a1", "b": "b1"}'
