"""`shardflow etl --limit N`: the first N records of each source, a real dataset marked partial.

`first` stops a reader once its file or range holds its first N records; `FirstRecords` makes
the exact cut over every file and range of a source; the ETL of a source of every format with
`--limit 2` writes a dataset whose manifest says it is partial and whose ledger balances.
"""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
import yaml
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.config.loader import parse_config
from pipelines.etl import run
from tests.pipelines.test_every_source_workers import FIELDS, write_inputs
from transforms.contract.manifest import Manifest, ManifestError
from transforms.records import RawChunk, rejection
from transforms.sink.output import holds_dataset
from transforms.sources.read import FirstRecords, ReadSource, first

# a.csv: records at lines 2-7, the one at line 3 rejected (one field); b.csv: lines 2-5
A_CSV = "id,name\n1,ann\n2\n3,cid\n4,dee\n5,eve\n6,fay\n"
B_CSV = "id,name\n7,gus\n8,hal\n9,ivy\n10,jo\n"


def _source(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.csv").write_text(A_CSV)
    (tmp_path / "d" / "b.csv").write_text(B_CSV)
    raw = {
        "name": "t",
        "sources": [{"name": "s", "format": "csv", "path": "d/*.csv"}],
        "features": {"id": {"type": "int"}, "name": {"type": "string"}},
        "splits": {"train": 1.0},
        "output": {"path": "out"},
    }
    return parse_config(raw, base_dir=str(tmp_path)).sources[0]


@pytest.mark.parametrize("split_bytes", [1 << 20, 12], ids=["whole files", "ranges"])
@pytest.mark.parametrize(
    "limit, records, rejected",
    [
        (4, [("a.csv", 2, "1"), ("a.csv", 4, "3"), ("a.csv", 5, "4")], ["a.csv:3"]),
        (
            8,
            [("a.csv", n, str(n - 1)) for n in (2, 4, 5, 6, 7)]
            + [("b.csv", 2, "7"), ("b.csv", 3, "8")],
            ["a.csv:3"],
        ),
        (100, [("a.csv", n, str(n - 1)) for n in (2, 4, 5, 6, 7)]
              + [("b.csv", n, str(n + 5)) for n in (2, 3, 4, 5)], ["a.csv:3"]),
    ],
    ids=["4", "8", "all"],
)  # fmt: skip
def test_the_first_records_of_a_source_in_file_and_line_order(
    tmp_path, split_bytes, limit, records, rejected
):
    source = _source(tmp_path)
    with TestPipeline(runner="FnApiRunner") as p:
        chunks, bad, counts = p | ReadSource(source, split_bytes, limit=limit)
        rows = chunks | beam.FlatMap(
            lambda c: [(c.path.rsplit("/", 1)[1], n, i) for n, i in zip(c.lines, c.values("id"))]
        )
        assert_that(rows, equal_to(records), label="CheckRecords")
        where = bad | beam.Map(lambda r: r.location.rsplit("/", 1)[1])
        assert_that(where, equal_to(rejected), label="CheckRejected")
        assert_that(
            counts, equal_to([("read/s", len(records) + len(rejected))]), label="CheckCounts"
        )


def _chunk(*lines: int) -> RawChunk:
    return RawChunk("s", "f", {"x": [str(n) for n in lines]}, list(lines))


def _bad(line: int) -> dict:
    return rejection("s", f"f:{line}", "bad", "x")


@pytest.mark.parametrize(
    "items, limit, taken",
    [
        # the rejected records of a chunk's stretch after it: the chunk at 5-6 says stop
        ([_chunk(1, 2, 4), _bad(3), _chunk(5, 6), _chunk(7, 8)], 3, 2),
        # rejected records met before the good ones of their stretch, which come with their
        # chunk: 3 and 4 are not the first two records; the chunk at 7-8 says stop
        ([_bad(3), _bad(4), _bad(5), _chunk(1, 2, 6), _chunk(7, 8), _chunk(9)], 2, 4),
        # never a stop at a rejected record
        ([_bad(1), _bad(2), _bad(3)], 1, 3),
    ],
    ids=["rejected after", "rejected before", "only rejected"],
)
def test_first_asks_a_reader_for_no_chunk_after_the_first_records(items, limit, taken):
    asked = []

    def reader():
        for item in items:
            asked.append(item)
            yield item

    assert list(first(reader(), limit)) == items[:taken]
    assert len(asked) == min(taken + 1, len(items))  # the item that said stop, never more
    assert list(first(iter(items), None)) == items


def test_the_manifest_limit_is_a_positive_integer():
    raw = json.loads(
        Manifest.from_dict(
            {"format_version": 1, "name": "t", "features": {"a": {"type": "int"}}, "splits": {}}
        ).to_json()
    )
    assert "limit" not in raw  # a complete dataset says nothing
    assert Manifest.from_dict({**raw, "limit": 5}).limit == 5
    assert json.loads(Manifest.from_dict({**raw, "limit": 5}).to_json())["limit"] == 5
    for bad in (0, -1, "5", 2.0, True):
        with pytest.raises(ManifestError, match="limit: .* must be a positive integer"):
            Manifest.from_dict({**raw, "limit": bad})


def test_a_partial_dataset_is_not_complete_for_skip_complete_and_backfills(tmp_path):
    raw = {"format_version": 1, "name": "t", "features": {"a": {"type": "int"}}, "sources": {},
           "splits": {}}  # fmt: skip
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    assert holds_dataset(str(tmp_path))
    (tmp_path / "manifest.json").write_text(json.dumps({**raw, "limit": 5}))
    assert not holds_dataset(str(tmp_path))


def test_of_records_sharing_the_last_key_just_enough_are_kept():
    # a BigQuery row's number is a hash of its content: identical rows share it
    a = RawChunk("s", "bq", {"x": ["e", "s", "s"]}, [5, 7, 7])
    b = RawChunk("s", "bq", {"x": ["s", "n"]}, [7, 9])
    with TestPipeline(runner="FnApiRunner") as p:
        chunks = p | "Chunks" >> beam.Create([a, b])
        rejected = p | "Rejected" >> beam.Create([rejection("s", "bq:7", "bad", "s")])
        kept, bad, counts = (chunks, rejected) | FirstRecords("s", 3)
        rows = kept | beam.FlatMap(lambda c: list(zip(c.lines, c.values("x"))))
        assert_that(rows, equal_to([(5, "e"), (7, "s"), (7, "s")]), label="Rows")
        assert_that(bad, equal_to([]), label="Rejected")
        assert_that(counts, equal_to([("read/s", 3)]), label="Counts")


# b.jsonl: good records at lines 1, 2 and 6, bad ones at 3-5: met before the good ones are
# handed over (their chunk comes later)
B_JSONL = '{"id": 1}\n{"id": 2}\nx\ny\nz\n{"id": 6}\n'


@pytest.mark.parametrize("split_bytes", [1 << 20, 12], ids=["whole files", "ranges"])
@pytest.mark.parametrize(
    "limit, lines, rejected", [(2, [1, 2], []), (4, [1, 2], [3, 4]), (6, [1, 2, 6], [3, 4, 5])]
)
def test_rejected_records_met_first_do_not_hide_the_first_good_ones(
    tmp_path, split_bytes, limit, lines, rejected
):
    (tmp_path / "b.jsonl").write_text(B_JSONL)
    raw = {
        "name": "t",
        "sources": [{"name": "s", "format": "jsonl", "path": "b.jsonl"}],
        "features": {"id": {"type": "int"}},
        "splits": {"train": 1.0},
        "output": {"path": "out"},
    }
    source = parse_config(raw, base_dir=str(tmp_path)).sources[0]
    with TestPipeline(runner="FnApiRunner") as p:
        chunks, bad, counts = p | ReadSource(source, split_bytes, limit=limit)
        assert_that(chunks | beam.FlatMap(lambda c: c.lines), equal_to(lines), label="Lines")
        where = bad | beam.Map(lambda r: int(r.location.rsplit(":", 1)[1]))
        assert_that(where, equal_to(rejected), label="Rejected")
        assert_that(counts, equal_to([("read/s", limit)]), label="Counts")


@pytest.mark.slow
def test_etl_with_a_limit_writes_a_partial_dataset_of_every_format(tmp_path, capsys):
    cfg = write_inputs(tmp_path)
    assert run(["--config", str(cfg), "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "partial: the first 2 records of each source at most (--limit)" in out
    raw = json.loads((tmp_path / "out" / "manifest.json").read_text())
    manifest = Manifest.from_dict(raw)
    assert manifest.limit == 2
    # every source holds at least 2 records: 2 read from each, and every one accounted for
    assert {n: s.records for n, s in manifest.sources.items()} == {n: 2 for n in FIELDS}
    written = sum(s.records for s in manifest.splits.values())
    assert written + manifest.rejected.records + manifest.duplicates == 2 * len(FIELDS)
    # a.csv's second record and a.jsonl.gz's second line are broken: they are among the first 2
    assert manifest.rejected.records == 2


def test_limit_and_validate_only_are_one_or_the_other(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "x"}))
    with pytest.raises(SystemExit) as e:
        run(["--config", str(cfg), "--limit", "2", "--validate-only"])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    for bad, why in (("0", "'0' must be at least 1"), ("x", "'x' is not a whole number")):
        with pytest.raises(SystemExit):
            run(["--config", str(cfg), "--limit", bad])
        assert f"argument --limit: {why}" in capsys.readouterr().err
