"""The ETL graph on the in-memory runner: composite transforms and a whole run, in process."""

import json
import os

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.config.loader import parse_config
from pipelines.etl import build_etl
from transforms.prepare_records import PrepareRecords
from transforms.sink.storage import staging_path
from transforms.sources.read import ReadSource

CSV = 'id,name,score\n1,ann,1.5\n2,"bo, b",x\n3,"multi\nline",2\n4\n1,ann again,9\n'
JSONL = '{"id": 3, "note": "hello"}\n{"id": 9, "note": "orphan"}\n{broken\n'


def _raw_config(tmp_path, **extra) -> dict:
    """One CSV source (5 records read, 2 rejected) keyed by id; writes the CSV file."""
    (tmp_path / "a.csv").write_text(CSV)
    cfg = {
        "name": "t",
        "sources": [{"name": "a", "format": "csv", "path": "a.csv"}],
        "key": "id",
        "features": {
            "id": {"type": "int"},
            "name": {"type": "string"},
            "score": {"type": "float", "required": False, "default": 0.0},
        },
        "splits": {"train": 0.5, "eval": 0.5},
        "output": {"path": "out", "shard_size_mb": 1},
    }
    cfg.update(extra)
    return cfg


def _config(tmp_path, **extra):
    (tmp_path / "b.jsonl").write_text(JSONL)  # for tests that add it as a second source
    return parse_config(_raw_config(tmp_path, **extra), base_dir=str(tmp_path))


def test_read_source_yields_records_rejected_and_counts(tmp_path):
    dataset = _config(tmp_path)
    with TestPipeline(runner="FnApiRunner") as p:
        chunks, rejected, counts = p | ReadSource(dataset.sources[0])
        fields = chunks | beam.FlatMap(lambda c: list(zip(c.lines, c.columns["name"])))
        assert_that(
            fields,
            equal_to([(2, "ann"), (3, "bo, b"), (4, "multi\nline"), (7, "ann again")]),
            label="CheckRecords",
        )
        assert_that(
            rejected | beam.Map(lambda r: (r.location.rsplit("/", 1)[1], r.reason)),
            equal_to([("a.csv:6", "csv: expected 3 fields, got 1")]),
            label="CheckRejected",
        )
        assert_that(counts, equal_to([("read/a", 5)]), label="CheckCounts")


def test_prepare_records_encodes_valid_records_and_rejects_invalid_ones(tmp_path):
    dataset = _config(tmp_path)
    with TestPipeline(runner="FnApiRunner") as p:
        chunks, _, _ = p | ReadSource(dataset.sources[0])
        encoded, rejected, _, _ = chunks | PrepareRecords(dataset, str(tmp_path / "staging"))
        keys = encoded | beam.FlatMap(
            lambda c: list(
                zip(c.keys.column("key").to_pylist(), [len(p) > 0 for p in c.payload.to_pylist()])
            )
        )
        assert_that(
            keys,
            equal_to([("1", True), ("3", True), ("1", True)]),
            label="CheckEncoded",
        )
        assert_that(
            rejected | beam.Map(lambda r: (r.reason, r.record)),
            equal_to([("score: not a number", '2,"bo, b",x\n')]),
            label="CheckRejected",
        )


def test_join_run_publishes_a_balanced_manifest(tmp_path):
    dataset = _config(
        tmp_path,
        sources=[
            {"name": "a", "format": "csv", "path": "a.csv"},
            {"name": "b", "format": "jsonl", "path": "b.jsonl"},
        ],
        combine="join",
        features={
            "id": {"type": "int"},
            "name": {"type": "string"},
            "note": {"type": "string", "required": False},
        },
    )
    staging = staging_path(dataset.output.path, "test")
    with beam.Pipeline(runner="FnApiRunner") as p:
        build_etl(p, dataset, staging)
    out = dataset.output.path
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["sources"] == {
        "a": {"format": "csv", "records": 5, "ignored_fields": {"score": 4}},
        "b": {"format": "jsonl", "records": 3, "ignored_fields": {}},
    }
    # ids 1, 2 and 3 are written (3 joined with its note); id 9 has no name: rejected.
    assert sum(s["records"] for s in manifest["splits"].values()) == 3
    assert manifest["duplicates"] == 1
    assert manifest["joined"] == 1
    assert manifest["rejected"]["reasons"] == {
        "csv: expected 3 fields, got 1": 1,
        "json: invalid JSON": 1,
        "name: missing required value": 1,
    }
    assert manifest["rejected"]["records"] == 3
    assert not os.path.exists(staging)
    assert sorted(os.listdir(out)) == [
        "eval",
        "facts.json",
        "manifest.json",
        "rejected",
        "schema.pbtxt",
        "statistics.json",
        "statistics.pb",
        "train",
    ]


def test_union_of_a_folder_and_a_glob_writes_sized_shards(tmp_path):
    import gzip
    import struct

    data = tmp_path / "parts"
    data.mkdir()
    for part in range(3):
        rows = "".join(f"{part * 100 + i},{'x' * 40}\n" for i in range(100))
        (data / f"p{part}.csv").write_text("id,text\n" + rows)
    (data / ".hidden.csv").write_text("id,text\nnot,read\n")
    (tmp_path / "extra-1.jsonl").write_text('{"id": 1000, "text": "j"}\n')
    dataset = parse_config(
        {
            "name": "sharded",
            "sources": [
                {"name": "folder", "format": "csv", "path": "parts"},
                {"name": "glob", "format": "jsonl", "path": "extra-*.jsonl"},
            ],
            "features": {"id": {"type": "int"}, "text": {"type": "string"}},
            "splits": {"train": 0.75, "eval": 0.25},
            "output": {"path": "out", "shard_size_mb": 4 / 1024, "compression": "gzip"},
        },
        base_dir=str(tmp_path),
    )
    with beam.Pipeline(runner="FnApiRunner") as p:
        build_etl(p, dataset, staging_path(dataset.output.path, "t"))
    out = dataset.output.path
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["sources"]["folder"]["records"] == 300
    assert manifest["sources"]["glob"]["records"] == 1
    ids = []
    for name, split in manifest["splits"].items():
        files = split["files"]
        n = len(files)
        assert n > 1  # ~55 bytes per example, 4 KiB shards
        assert [f["path"] for f in files] == [
            f"{name}/{name}-{i:05d}-of-{n:05d}.tfrecord.gz" for i in range(n)
        ]
        for f in files:
            raw = gzip.decompress(open(os.path.join(out, f["path"]), "rb").read())
            count, pos = 0, 0
            while pos < len(raw):
                (length,) = struct.unpack("<Q", raw[pos : pos + 8])
                pos += 16 + length
                count += 1
            assert count == f["records"]
        assert sum(f["records"] for f in files) == split["records"]
        ids.append(split["records"])
    assert sum(ids) == 301


def test_undecodable_input_bytes_are_rejected_not_fatal(tmp_path):
    (tmp_path / "bad.csv").write_bytes(b"id,name\n1,ok\n2,caf\xff\n")
    (tmp_path / "bad.jsonl").write_bytes(b'{"id": 3, "name": "x"}\n{"id": \xff}\n')
    dataset = parse_config(
        {
            "name": "bytes",
            "sources": [
                {"name": "c", "format": "csv", "path": "bad.csv"},
                {"name": "j", "format": "jsonl", "path": "bad.jsonl"},
            ],
            "features": {"id": {"type": "int"}, "name": {"type": "string"}},
            "splits": {"train": 1.0},
            "output": {"path": "out"},
        },
        base_dir=str(tmp_path),
    )
    with beam.Pipeline(runner="FnApiRunner") as p:
        build_etl(p, dataset, staging_path(dataset.output.path, "t"))
    manifest = json.load(open(os.path.join(dataset.output.path, "manifest.json")))
    assert sum(s["records"] for s in manifest["splits"].values()) == 2
    rejected = [
        json.loads(line)
        for line in open(
            os.path.join(dataset.output.path, manifest["rejected"]["files"][0]["path"])
        )
    ]
    assert sorted((r["source"], r["record"]) for r in rejected) == [
        ("c", "2,caf\\xff\n"),
        ("j", '{"id": \\xff}'),
    ]


def _config_file(tmp_path, **output) -> str:
    """The `_config` dataset, without splits, as a YAML file; `output` adds output keys."""
    import yaml

    # 3 records in the default splits: the eval split may be empty, which is not the point here
    cfg = _raw_config(tmp_path, output={"path": "out", "allow": ["empty_split"], **output})
    del cfg["splits"]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _tree(folder) -> dict[str, bytes]:
    return {
        os.path.relpath(os.path.join(d, f), folder): open(os.path.join(d, f), "rb").read()
        for d, _, files in os.walk(folder)
        for f in files
    }


def test_rerun_into_an_existing_dataset_is_refused_without_overwrite(tmp_path, capsys):
    from pipelines.etl import run

    cfg = _config_file(tmp_path)
    assert run(["--config", cfg]) == 0
    out = tmp_path / "out"
    before = _tree(out)
    capsys.readouterr()
    assert run(["--config", cfg]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"shardflow etl: error: output.path: {str(out)!r} already holds a dataset "
        "(manifest.json); give --overwrite to replace it"
    ]
    assert _tree(out) == before
    assert sorted(os.listdir(tmp_path)) == ["a.csv", "c.yaml", "out"]
    (out / "train" / "stale.tfrecord.gz").write_bytes(b"old")
    assert run(["--config", cfg, "--overwrite"]) == 0
    after = _tree(out)
    assert "train/stale.tfrecord.gz" not in after
    assert sorted(after) == sorted(before)
    assert sorted(os.listdir(tmp_path)) == ["a.csv", "c.yaml", "out"]


def test_too_many_rejected_records_fail_the_run_and_publish_nothing(tmp_path, capsys):
    from pipelines.etl import run

    # 2 of the 5 records read are rejected (40%).
    assert run(["--config", _config_file(tmp_path, max_rejected_fraction=0.3)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        "shardflow etl: job failed: 2 of 5 records rejected (40.00%), more than "
        "output.max_rejected_fraction (0.3); most often: 'csv: expected 3 fields, got 1' (1), "
        "'score: not a number' (1); no dataset published"
    )
    assert sorted(os.listdir(tmp_path)) == ["a.csv", "c.yaml"]  # no dataset, no staging

    assert run(["--config", _config_file(tmp_path, max_rejected=1)]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "shardflow etl: job failed: 2 of 5 records rejected, more than output.max_rejected (1); "
        "most often: 'csv: expected 3 fields, got 1' (1), 'score: not a number' (1); "
        "no dataset published"
    )
    assert sorted(os.listdir(tmp_path)) == ["a.csv", "c.yaml"]


def test_rejections_within_the_limits_publish(tmp_path):
    from pipelines.etl import run

    cfg = _config_file(tmp_path, max_rejected=2, max_rejected_fraction=0.4)
    assert run(["--config", cfg]) == 0
    manifest = json.load(open(tmp_path / "out" / "manifest.json"))
    assert manifest["rejected"]["records"] == 2


def test_a_failed_quality_check_leaves_the_previous_dataset_untouched(tmp_path, capsys):
    from pipelines.etl import run

    assert run(["--config", _config_file(tmp_path)]) == 0
    before = _tree(tmp_path / "out")
    cfg = _config_file(tmp_path, max_rejected=0)
    assert run(["--config", cfg, "--overwrite"]) == 1
    assert "more than output.max_rejected (0)" in capsys.readouterr().err
    assert _tree(tmp_path / "out") == before
    assert sorted(os.listdir(tmp_path)) == ["a.csv", "c.yaml", "out"]


def test_a_failed_segment_write_fails_the_run_and_publishes_nothing(tmp_path, monkeypatch, capsys):
    """Shards of many pieces (16 bytes each), the second segment of each failing to be written:
    the run fails, naming the error, and leaves neither a dataset nor its staging folder."""
    from pipelines.etl import run
    from transforms.sink import spill, write

    def small_pieces(counts, spills, piece_bytes):
        return spill.piece_tasks(counts, spills, 16)

    class FailingWriter(write.RecordFileWriter):
        def _emit(self, block):
            if self.path.endswith(".00001"):
                raise OSError(f"{self.path}: disk full")
            super()._emit(block)

    monkeypatch.setattr(write, "piece_tasks", small_pieces)
    monkeypatch.setattr(write, "RecordFileWriter", FailingWriter)
    assert run(["--config", _config_file(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "shardflow etl: job failed:" in err and ".tfrecord.gz.00001: disk full" in err, err
    assert sorted(os.listdir(tmp_path)) == ["a.csv", "c.yaml"]  # no dataset, no staging


@pytest.mark.parametrize(
    "limit, partial",
    [(100, False), (5, True), (3, True)],
    ids=["above", "exactly", "below"],
)
def test_a_limit_above_every_source_leaves_a_complete_dataset(limit, partial, tmp_path, capsys):
    """a.csv holds 5 records: --limit 100 reads it whole, which is not partial; --limit 5 reads
    as many as the limit (whether more were left is not known): partial, as below the limit."""
    import json

    from pipelines.etl import run
    from transforms.sink.output import holds_dataset

    assert run(["--config", _config_file(tmp_path), "--limit", str(limit)]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest.get("limit") == (limit if partial else None)
    assert manifest["sources"]["a"]["records"] == min(limit, 5)
    assert ("partial: the first" in capsys.readouterr().out) is partial
    assert holds_dataset(str(tmp_path / "out")) is not partial  # --skip-complete skips it
