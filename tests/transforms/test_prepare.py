"""PrepareRecords alone on the in-process runner: what is rejected (why and where), which split
each encoded record goes to, what its example holds, and the statistics of what was kept."""

from __future__ import annotations

import collections
import json

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from xxhash import xxh3_128_intdigest

from pipelines.config.loader import parse_config
from tests.readback import values
from tests.transforms.keyed import key_rows
from transforms.contract.facts import VOCABULARY_CAP
from transforms.facts.merge import rank_bucket
from transforms.facts.parts import RankedFacts
from transforms.facts.spill import read_facts
from transforms.keys import KeyMaker
from transforms.prepare import Encoder, Preparer, batch_of_chunk
from transforms.prepare_records import MergeStats, PrepareRecords
from transforms.records import RawChunk, one_line_records
from transforms.stats import DatasetStats

SPLITS = ("train", "eval")


def _dataset():
    return parse_config(
        {
            "name": "p",
            "sources": [
                {"name": "a", "format": "csv", "path": "a.csv"},
                {"name": "b", "format": "jsonl", "path": "b.jsonl"},
            ],
            "key": "id",
            "features": {
                "id": {"type": "int"},
                "name": {"type": "string"},
                "score": {"type": "float", "required": False, "default": 0.0, "min": 0},
                "tags": {"type": "bytes", "shape": [None], "required": False},
            },
            "splits": {"train": 0.5, "eval": 0.5},
            "output": {"path": "out"},
        },
        base_dir="/cfg",
    )


def _hashes(key: str) -> tuple[int, int]:
    """(split hash, order hash): the high and low 64 bits of the key's 128-bit XXH3."""
    h = xxh3_128_intdigest(key.encode("utf-8"))
    return h >> 64, h & ((1 << 64) - 1)


def _split(key: str) -> int:
    """The split of a key for fractions 0.5 / 0.5: eval from half of the split hash's range."""
    return int(_hashes(key)[0] >= 1 << 63)


def _chunk(source, path, rows, first_line, text):
    """A chunk of `rows` ({field: value}, raw text), one line each from `first_line` on."""
    names = dict.fromkeys(k for fields, _ in rows for k in fields)
    return RawChunk(
        source,
        path,
        {n: [fields.get(n) for fields, _ in rows] for n in names},
        list(range(first_line, first_line + len(rows))),
        text=text,
        **one_line_records([raw for _, raw in rows]),
    )


def _csv_row(id_, name, score, tags):
    cells = [id_, name, score, tags]
    raw = ",".join("" if c is None else c for c in cells) + "\n"
    return dict(zip(("id", "name", "score", "tags"), cells)), raw


def _jsonl_row(**fields):
    return fields, json.dumps(fields) + "\n"


# a.csv: 30 valid records on lines 2-31 (score i/4, tags "x|y" on every third), then 4 rejects
CSV_ROWS = [
    _csv_row(str(i), f"n{i}", str(i / 4) if i % 5 else None, "x|y" if i % 3 == 0 else None)
    for i in range(1, 31)
] + [
    _csv_row("31", "bad", "x", None),  # line 32
    _csv_row(None, "nokey", "1", None),  # line 33
    _csv_row("3.5", "half", "1", None),  # line 34
    _csv_row("35", "neg", "-1", None),  # line 35
]
# b.jsonl: 20 valid records on lines 1-20 (JSON numbers, tag lists), then 2 rejects
JSONL_ROWS = [
    _jsonl_row(id=i, name=f"m{i}", score=i - 100, tags=["p", "q"][: i % 3]) for i in range(101, 121)
] + [
    _jsonl_row(id=121, score=1),  # line 21
    _jsonl_row(id=122, name="t", tags="notalist"),  # line 22
]


def _expected_records() -> list[tuple]:
    """(split, key, order hash, provenance, features) of every valid record."""
    out = []
    for i in range(1, 31):
        features = {
            "id": ("int64_list", (i,)),
            "name": ("bytes_list", (f"n{i}".encode(),)),
            "score": ("float_list", (i / 4 if i % 5 else 0.0,)),
            "tags": ("bytes_list", (b"x", b"y") if i % 3 == 0 else ()),
        }
        out.append((str(i), (0, "a.csv", i + 1), features))
    for i in range(101, 121):
        features = {
            "id": ("int64_list", (i,)),
            "name": ("bytes_list", (f"m{i}".encode(),)),
            "score": ("float_list", (float(i - 100),)),
            "tags": ("bytes_list", (b"p", b"q")[: i % 3]),
        }
        out.append((str(i), (1, "b.jsonl", i - 100), features))
    return [
        (SPLITS[_split(key)], key, _hashes(key)[1], order, sorted(features.items()))
        for key, order, features in out
    ]


EXPECTED_REJECTED = [
    ("a", "a.csv:32", "score: not a number", "31,bad,x,\n"),
    ("a", "a.csv:33", "id: missing key", ",nokey,1,\n"),
    ("a", "a.csv:34", "id: not an integer", "3.5,half,1,\n"),
    ("a", "a.csv:35", "score: below min 0", "35,neg,-1,\n"),
    ("b", "b.jsonl:21", "name: missing required value", '{"id": 121, "score": 1}\n'),
    ("b", "b.jsonl:22", "tags: expected a list", '{"id": 122, "name": "t", "tags": "notalist"}\n'),
]


def _decoded(chunk) -> list[tuple]:
    import tensorflow as tf

    out = []
    keys = key_rows(chunk.keys)
    for i, payload in enumerate(chunk.payload.to_pylist()):
        feature = tf.train.Example.FromString(payload).features.feature
        out.append(
            (
                SPLITS[int(chunk.split[i])],
                keys[i][0],
                int(chunk.order_hash[i]),
                keys[i][1],
                sorted((name, values(f)) for name, f in feature.items()),
            )
        )
    return out


def _chunks():
    """a.csv in two chunks (a chunk boundary inside the rejects), b.jsonl in one."""
    return [
        _chunk("a", "a.csv", CSV_ROWS[:32], 2, text=True),
        _chunk("a", "a.csv", CSV_ROWS[32:], 34, text=True),
        _chunk("b", "b.jsonl", JSONL_ROWS, 1, text=False),
    ]


def test_prepare_records_rejects_invalid_records_where_they_are(tmp_path):
    with TestPipeline(runner="FnApiRunner") as p:
        _, rejected, _, _ = p | beam.Create(_chunks()) | PrepareRecords(_dataset(), str(tmp_path))
        assert_that(
            rejected | beam.Map(lambda r: (r.source, r.location, r.reason, r.record)),
            equal_to(EXPECTED_REJECTED),
        )


def test_prepare_records_encodes_each_valid_record_into_its_split(tmp_path):
    pytest.importorskip("tensorflow")
    with TestPipeline(runner="FnApiRunner") as p:
        encoded, _, _, _ = p | beam.Create(_chunks()) | PrepareRecords(_dataset(), str(tmp_path))
        assert_that(encoded | "Decode" >> beam.FlatMap(_decoded), equal_to(_expected_records()))
        per_split = (
            encoded
            | "Splits" >> beam.FlatMap(lambda c: [SPLITS[s] for s in c.split.tolist()])
            | "Count" >> beam.combiners.Count.PerElement()
        )
        assert_that(per_split, equal_to([("train", 21), ("eval", 29)]), label="CheckSplits")


def _summary(stats) -> list[tuple]:
    """Per split: (split, records, score's min and max, records without tags)."""
    out = []
    for name, split in stats.to_json(SPLITS)["splits"].items():
        score, tags = split["features"]["score"], split["features"]["tags"]
        out.append((name, split["records"], score["min"], score["max"], tags["missing"]))
    return out


def test_prepare_records_statistics_describe_the_records_kept(tmp_path):
    expected = []
    for split in SPLITS:
        rows = [dict(f) for s, _, _, _, f in _expected_records() if s == split]
        scores = [f["score"][1][0] for f in rows]
        no_tags = sum(1 for f in rows if not f["tags"][1])
        expected.append((split, len(rows), min(scores), max(scores), no_tags))
    with TestPipeline(runner="FnApiRunner") as p:
        _, _, stats, _ = p | beam.Create(_chunks()) | PrepareRecords(_dataset(), str(tmp_path))
        merged = stats | beam.CombineGlobally(MergeStats())
        assert_that(merged | beam.FlatMap(_summary), equal_to(expected))


@pytest.mark.parametrize("threads", [2, 0])  # helper threads, or in the step's thread
@pytest.mark.parametrize("stats_rows", [1, 7, 1 << 16])
def test_the_encoder_gives_what_encoding_in_turn_gives(monkeypatch, stats_rows, threads):
    monkeypatch.setattr(Encoder, "STATS_ROWS", stats_rows)
    dataset = _dataset()
    preparer, maker = Preparer(dataset), KeyMaker(dataset)
    valids = [
        preparer.validate(batch_of_chunk(chunk, i % 2, maker)[0])[0]
        for i, chunk in enumerate(_chunks() * 3)
    ]
    expected, stats = [], DatasetStats()
    for valid in valids:
        encoded = preparer.encode(valid)
        if len(encoded):
            expected.append(encoded)
            stats.merge(preparer.statistics(valid.columns, encoded.split))
    encoder = Encoder(preparer, threads)
    for _ in range(2):  # two bundles
        encoder.start()
        got = [e for valid in valids for e in encoder.push(valid)] + list(encoder.flush())
        assert [_facts(e) for e in got] == [_facts(e) for e in expected]
        assert encoder.stats.to_json(SPLITS) == stats.to_json(SPLITS)
    encoder.close()


def _facts(encoded) -> tuple:
    return (
        encoded.split.tolist(),
        encoded.order_hash.tolist(),
        key_rows(encoded.keys),
        encoded.payload.to_pylist(),
    )


def test_the_encoder_spills_its_facts_at_its_budget_and_they_merge_to_the_same(tmp_path):
    dataset = _dataset()
    preparer, maker = Preparer(dataset), KeyMaker(dataset)
    valids = [
        preparer.validate(batch_of_chunk(chunk, i % 2, maker)[0])[0]
        for i, chunk in enumerate(_chunks() * 3)
    ]
    ranked = {}
    for budget in (1, 1 << 30):  # a spill a counted group, or one at the bundle's end
        staging = tmp_path / str(budget)
        encoder = Encoder(preparer, 0, str(staging), facts_bytes=budget)
        encoder.STATS_ROWS = 7
        encoder.start()
        for valid in valids:
            list(encoder.push(valid))
        list(encoder.flush())
        pieces = encoder.spilled_facts()
        encoder.close()
        files = {piece.path for _, piece in pieces}
        assert len(files) == len(list(staging.glob("_spill/facts/*.facts")))
        assert (len(files) > 3) == (budget == 1)
        buckets = collections.defaultdict(list)
        for bucket, piece in pieces:
            buckets[bucket].append(read_facts(piece))
        merged = RankedFacts()
        for parts in buckets.values():
            merged.merge(rank_bucket(parts), VOCABULARY_CAP)
        ranked[budget] = {
            key: (r.words.to_pylist(), r.counts.tolist())
            for key in merged.vocabularies
            if (r := merged.vocabulary(key, VOCABULARY_CAP)) is not None
        }
    assert ranked[1] == ranked[1 << 30] and ranked[1]
