"""Joining sources on the key: full outer join, first record of a key wins within a source."""

import json

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from xxhash import xxh3_128_intdigest

from pipelines.config.loader import parse_config
from tests.readback import values
from tests.transforms.keyed import key_rows
from transforms.contract.config import DatasetSpec, FeatureSpec, OutputSpec, SourceSpec
from transforms.join import JoinByKey, bucket_rows, join_bucket
from transforms.keys import KeyMaker
from transforms.prepare_records import MergeStats
from transforms.records import RawChunk, one_line_records
from transforms.sources.csv import CsvOptions
from transforms.sources.jsonl import JsonlOptions


def _dataset(key_feature=True):
    features = [FeatureSpec("id", "int", (), True)] if key_feature else []
    features.append(FeatureSpec("v", "string", (), False))
    return DatasetSpec(
        name="d",
        sources=(
            SourceSpec("a", "csv", "a.csv", CsvOptions()),
            SourceSpec("b", "jsonl", "b.jsonl", JsonlOptions()),
        ),
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
    assert out[0].to_json() == {
        "source": "a",
        "location": "a.csv:2",
        "reason": "id: missing key",
        "record": "raw0",
    }
    bucket, (source_index, keys, sub) = out[1]
    assert (bucket, source_index, keys.to_pylist(), sub.raw(0), len(sub)) == (
        0,
        0,
        ["1"],
        "raw1",
        1,
    )


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
    assert (duplicates, joined, batch.size) == (1, 1, 3)
    assert batch.tables["a"].columns == {"id": ["1", "2", None], "v": ["first", None, None]}
    assert batch.tables["a"].text is True
    assert batch.tables["b"].columns == {"id": [1, None, 3], "w": ["x", None, "y"]}
    assert key_rows(batch.keys) == [
        ("1", (0, "a.csv", 2)),
        ("2", (0, "a.csv", 4)),
        ("3", (1, "b.jsonl", 3)),
    ]
    assert [batch.describe(i) for i in range(3)] == [
        ("a,b", "a.csv:2; b.jsonl:2", '{"a": "a1", "b": "b1"}'),
        ("a", "a.csv:4", "a2"),
        ("b", "b.jsonl:3", "b3"),
    ]


# --- JoinByKey on the in-process runner -----------------------------------------------------------


def _join_dataset():
    return parse_config(
        {
            "name": "j",
            "sources": [
                {"name": "a", "format": "csv", "path": "a.csv"},
                {"name": "b", "format": "jsonl", "path": "b.jsonl"},
            ],
            "combine": "join",
            "key": "id",
            "features": {
                "id": {"type": "int"},
                "name": {"type": "string"},
                "note": {"type": "string", "required": False},
                "score": {"type": "float", "required": False},
            },
            "splits": {"train": 0.5, "eval": 0.5},
            "output": {"path": "out"},
        },
        base_dir="/cfg",
    )


def _lines(source, path, first_line, items, text=False):
    """A chunk of `items` ({field: value}, raw text), one line each from `first_line` on."""
    chunk = _chunk(source, path, items, text=text)
    chunk.lines = list(range(first_line, first_line + len(items)))
    return chunk


def _json_item(**fields):
    return fields, json.dumps(fields) + "\n"


def _csv_item(id_, name):
    return {"id": id_, "name": name}, f"{id_ or ''},{name}\n"


# a.csv lines 2-7: key 2 twice (line 5 is a later duplicate), a record without a key, key 4 in
# a only, key 5 in both sources but with a score that is not a number in b.
A_ITEMS = [
    _csv_item("1", "ann"),
    _csv_item("2", "bo"),
    _csv_item(None, "nokey"),
    _csv_item("2", "bo again"),
    _csv_item("4", "di"),
    _csv_item("5", "eve"),
]
# b.jsonl lines 1-4: key 3 in b only (it has no name); line 5, in a second chunk, a later
# duplicate of key 1.
B_ITEMS = [
    _json_item(id=1, note="hello", score=1.5),
    _json_item(id=2, note="two"),
    _json_item(id=3, note="orphan"),
    _json_item(id=5, score="high"),
]
B_LATER = [_json_item(id=1, note="later", score=9.0)]


def _join_split(key: str) -> str:
    """The split of a key for fractions 0.5 / 0.5: eval from half of the split hash's range."""
    return "eval" if xxh3_128_intdigest(key.encode("utf-8")) >> 64 >= 1 << 63 else "train"


def _joined_examples(chunk) -> list[tuple]:
    """(split, key, provenance, features as (name, (kind, values)) sorted) of each record."""
    import tensorflow as tf

    out = []
    keys = key_rows(chunk.keys)
    for i, payload in enumerate(chunk.payload.to_pylist()):
        feature = tf.train.Example.FromString(payload).features.feature
        out.append(
            (
                ("train", "eval")[int(chunk.split[i])],
                *keys[i],
                sorted((name, values(f)) for name, f in feature.items()),
            )
        )
    return out


def test_join_by_key_joins_rejects_and_counts_exactly(tmp_path):
    pytest.importorskip("tensorflow")
    chunks = [
        _lines("a", "a.csv", 2, A_ITEMS, text=True),
        _lines("b", "b.jsonl", 1, B_ITEMS),
        _lines("b", "b.jsonl", 5, B_LATER),
    ]
    expected = [
        # key 1: a's name with b's note and score; b's later record of key 1 is dropped
        (
            "1",
            (0, "a.csv", 2),
            {"name": (b"ann",), "note": (b"hello",), "score": (1.5,)},
        ),
        # key 2: the first of a's two records (line 3), with b's note
        ("2", (0, "a.csv", 3), {"name": (b"bo",), "note": (b"two",), "score": ()}),
        # key 4: a only
        ("4", (0, "a.csv", 6), {"name": (b"di",), "note": (), "score": ()}),
    ]
    kinds = {"name": "bytes_list", "note": "bytes_list", "score": "float_list"}
    expected = [
        (
            _join_split(key),
            key,
            order,
            sorted(
                [("id", ("int64_list", (int(key),)))]
                + [(name, (kinds[name], vals)) for name, vals in features.items()]
            ),
        )
        for key, order, features in expected
    ]
    rejected_both = json.dumps({"a": "5,eve\n", "b": '{"id": 5, "score": "high"}\n'})
    with TestPipeline(runner="FnApiRunner") as p:
        encoded, rejected, counts, stats, _ = (
            p | beam.Create(chunks) | JoinByKey(_join_dataset(), str(tmp_path))
        )
        assert_that(
            encoded | "Decode" >> beam.FlatMap(_joined_examples),
            equal_to(expected),
            label="CheckJoined",
        )
        assert_that(
            rejected | beam.Map(lambda r: (r.source, r.location, r.reason, r.record)),
            equal_to(
                [
                    ("a", "a.csv:4", "id: missing key", ",nokey\n"),
                    ("b", "b.jsonl:3", "name: missing required value", B_ITEMS[2][1]),
                    ("a,b", "a.csv:7; b.jsonl:4", "score: not a number", rejected_both),
                ]
            ),
            label="CheckRejected",
        )
        # duplicates: a's second key 2 and b's second key 1; joined: keys 1, 2 and 5 (before
        # validation rejects 5) each fold one source's record into the other's
        assert_that(
            counts | "SumCounts" >> beam.CombinePerKey(sum),
            equal_to([("duplicates", 2), ("joined", 3)]),
            label="CheckCounts",
        )
        records = (
            stats
            | "MergeStats" >> beam.CombineGlobally(MergeStats())
            | beam.Map(lambda s: sum(s.records.values()))
        )
        assert_that(records, equal_to([3]), label="CheckStatistics")


def test_bucketed_sub_chunks_hold_their_records_only_with_arrow_columns_kept():
    raw = 'id,v\n1,a\n2,"b\nb"\n3,c\n'.encode()
    starts, ends = [5, 9, 17], [9, 17, 21]
    chunk = RawChunk(
        "a",
        "a.csv",
        {"id": pa.array(["1", "2", "3"]), "v": ["a", "b\nb", "c"]},
        [2, 3, 5],
        raw,
        starts,
        ends,
        text=True,
    )
    (sub,) = chunk.take_each([[2, 1]])
    assert isinstance(sub.columns["id"], pa.Array) and sub.columns["id"].to_pylist() == ["3", "2"]
    assert sub.columns["v"] == ["c", "b\nb"] and sub.lines == [5, 3]
    assert sub.raw_text == b'3,c\n2,"b\nb"\n' and [sub.raw(0), sub.raw(1)] == [
        "3,c\n",
        '2,"b\nb"\n',
    ]
    text = RawChunk("a", "a.csv", {"v": ["x", "y"]}, [1, 2], **one_line_records(["x\n", "yy\n"]))
    assert [c.raw(0) for c in text.take_each([[1], [0]])] == ["yy\n", "x\n"]
    assert len(chunk.take([])) == 0
