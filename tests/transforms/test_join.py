"""Joining sources on the key: full outer join, first record of a key wins within a source."""

from transforms.contract.config import DatasetSpec, FeatureSpec, OutputSpec, SourceSpec
from transforms.join import bucket_rows, join_bucket
from transforms.prepare import KeyMaker
from transforms.records import RawChunk, one_line_records


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


def _chunk(source, path, items, text=False):
    names = dict.fromkeys(k for fields, _ in items for k in fields)
    return RawChunk(
        source,
        path,
        {n: [fields.get(n) for fields, _ in items] for n in names},
        [i + 2 for i in range(len(items))],
        text=text,
        **one_line_records([raw for _, raw in items]),
    )


def test_key_is_canonical_across_csv_text_and_json_numbers():
    maker = KeyMaker(_dataset())
    assert maker("007") == maker(7) == "7"


def test_rows_without_key_are_rejected_when_bucketing():
    chunk = _chunk("a", "a.csv", [({"id": None}, "raw0"), ({"id": "1"}, "raw1")], text=True)
    out = list(bucket_rows(chunk, 0, KeyMaker(_dataset()), buckets=1))
    assert out[0] == {
        "source": "a",
        "location": "a.csv:2",
        "reason": "id: missing key",
        "record": "raw0",
    }
    bucket, (source_index, keys, sub) = out[1]
    assert (bucket, source_index, keys, sub.raw(0), len(sub)) == (0, 0, ["1"], "raw1", 1)


def test_join_merges_sources_counts_duplicates_and_keeps_the_first():
    a = _chunk(
        "a",
        "a.csv",
        [
            ({"id": "1", "v": "first"}, "a1"),
            ({"id": "1", "v": "second"}, "a1b"),
            ({"id": "2", "v": None}, "a2"),
        ],
        text=True,
    )
    b = _chunk("b", "b.jsonl", [({"id": 1, "w": "x"}, "b1"), ({"id": 3, "w": "y"}, "b3")])
    maker = KeyMaker(_dataset())
    groups = [
        g for chunk, i in ((a, 0), (b, 1)) for _, g in bucket_rows(chunk, i, maker, buckets=1)
    ]
    batch, duplicates, joined = join_bucket(reversed(groups), ["a", "b"])
    assert (duplicates, joined, batch.size, batch.keys) == (1, 1, 3, ["1", "2", "3"])
    assert batch.tables["a"].columns == {"id": ["1", "2", None], "v": ["first", None, None]}
    assert batch.tables["a"].text is True
    assert batch.tables["b"].columns == {"id": [1, None, 3], "w": ["x", None, "y"]}
    assert [batch.order(i) for i in range(3)] == [
        (0, "a.csv", 2),
        (0, "a.csv", 4),
        (1, "b.jsonl", 3),
    ]
    assert [batch.describe(i) for i in range(3)] == [
        ("a,b", "a.csv:2; b.jsonl:2", '{"a": "a1", "b": "b1"}'),
        ("a", "a.csv:4", "a2"),
        ("b", "b.jsonl:3", "b3"),
    ]
