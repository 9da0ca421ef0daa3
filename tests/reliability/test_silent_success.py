"""No silent success: a run that would publish a dataset plainly not the one meant fails instead.

Each case runs the real ETL in process on files written here: a source that contributed nothing
(no record read, or every record rejected), a split without records, the key or a `source:` field
missing from every record of a source. Each fails with exit 1, one line naming the cause and the
fix, nothing published, unless `output.allow` names it. Also the terminal summary (ignored fields,
top rejection reasons), Ctrl-C (exit 130, one line) and a failed job's one line (the traceback
in the log file it names, or on the terminal with --verbose).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipelines.etl import run
from tests import readback

REPO = Path(__file__).resolve().parents[2]

CSV = b"id,name,extra\n1,a,x\n2,b,\n3,c,y\n4,d,z\n"


def _config(d: Path, sources: list[dict], **top) -> Path:
    config = {
        "name": "t",
        "sources": sources,
        "features": {"id": {"type": "int"}, "name": {"type": "string"}},
        "splits": {"train": 1.0},
        "output": {"path": "out"},
    }
    config.update(top)
    path = d / "config.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    return path


def _refused(d: Path, config: Path, capsys) -> str:
    """The one stderr line of a run that must fail (exit 1) and publish nothing."""
    capsys.readouterr()
    assert run(["--config", str(config)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert not (d / "out").exists()
    assert [p.name for p in d.iterdir() if p.name.startswith(".out.")] == []
    return err[0]


def _allowed(config: Path, allow: list[str], capsys) -> dict:
    raw = yaml.safe_load(config.read_text())
    raw["output"]["allow"] = allow
    config.write_text(yaml.safe_dump(raw, allow_unicode=True))
    capsys.readouterr()
    assert run(["--config", str(config)]) == 0, capsys.readouterr().err
    return readback.manifest(config.parent / "out")


@pytest.mark.parametrize(
    "feature",
    [
        {"nmae": {"type": "string", "required": False}},
        {"lable": {"type": "string", "required": False, "default": "none"}},
    ],
)
def test_a_misspelled_optional_feature_that_no_source_has_fails_naming_it(
    tmp_path, capsys, feature
):
    (tmp_path / "a.csv").write_bytes(CSV)
    (tmp_path / "b.jsonl").write_text('{"id": 9, "name": "z", "note": null}\n')
    config = _config(tmp_path, [
        {"name": "a", "format": "csv", "path": "a.csv"},
        {"name": "b", "format": "jsonl", "path": "b.jsonl"},
    ])  # fmt: skip
    raw = yaml.safe_load(config.read_text())
    raw["features"].update(feature, note={"type": "string", "required": False})
    config.write_text(yaml.safe_dump(raw))
    (name,) = feature
    line = _refused(tmp_path, config, capsys)
    assert line == (
        f"shardflow etl: job failed: feature {name!r}: no source has a field {name!r} in any of "
        "its 5 records (they hold 'extra'); fix the feature's name (or `field:`), or set "
        "output.allow: [missing_field]; no dataset published"
    )
    # `note` is in b's records, null there: all missing is data, not a misspelled name
    manifest = _allowed(config, ["missing_field"], capsys)
    assert sum(s["records"] for s in manifest["splits"].values()) == 5


def test_a_source_whose_records_are_all_rejected_fails_naming_it(tmp_path, capsys):
    (tmp_path / "good.csv").write_bytes(CSV)
    (tmp_path / "bad.csv").write_bytes(b"id,name\nx,a\ny,b\n")
    config = _config(tmp_path, [
        {"name": "good", "format": "csv", "path": "good.csv"},
        {"name": "bad", "format": "csv", "path": "bad.csv"},
    ], key="id")  # fmt: skip
    line = _refused(tmp_path, config, capsys)
    assert line == (
        "shardflow etl: job failed: sources[1] 'bad': all 2 records were rejected (most often: "
        "'id: not an integer', 2x); fix the input, or set output.allow: [empty_source]; "
        "no dataset published"
    )
    manifest = _allowed(config, ["empty_source"], capsys)
    assert manifest["sources"]["bad"]["records"] == manifest["rejected"]["records"] == 2


def test_a_source_that_reads_no_record_fails_naming_it(tmp_path, capsys):
    (tmp_path / "good.csv").write_bytes(CSV)
    (tmp_path / "empty.csv").write_bytes(b"id,name\n")
    config = _config(tmp_path, [
        {"name": "good", "format": "csv", "path": "good.csv"},
        {"name": "empty", "format": "csv", "path": "empty.csv"},
    ])  # fmt: skip
    line = _refused(tmp_path, config, capsys)
    assert line == (
        f"shardflow etl: job failed: sources[1] 'empty' contributed 0 records (path "
        f"'{tmp_path}/empty.csv' holds none); check the path and options, or set "
        "output.allow: [empty_source]; no dataset published"
    )
    manifest = _allowed(config, ["empty_source"], capsys)
    assert manifest["sources"]["empty"]["records"] == 0
    assert manifest["splits"]["train"]["records"] == 4


def test_a_split_without_records_fails_naming_it(tmp_path, capsys):
    (tmp_path / "one.csv").write_bytes(b"id,name\n1,a\n")
    config = _config(
        tmp_path,
        [{"name": "one", "format": "csv", "path": "one.csv"}],
        splits={"train": 0.5, "eval": 0.5},
    )
    line = _refused(tmp_path, config, capsys)
    # the one record's hash puts it in one split; the other is the empty one
    manifest = _allowed(config, ["empty_split"], capsys)
    empty = [name for name, s in manifest["splits"].items() if s["records"] == 0]
    assert len(empty) == 1
    assert line == (
        f"shardflow etl: job failed: split {empty[0]!r} has 0 records (of 1 written); give it "
        "a larger fraction in `splits`, add data, or set output.allow: [empty_split]; "
        "no dataset published"
    )


def test_a_join_key_spelled_differently_in_one_source_fails_naming_it(tmp_path, capsys):
    (tmp_path / "people.csv").write_bytes(b"id,name\n1,a\n2,b\n")
    (tmp_path / "scores.jsonl").write_bytes(b'{"ID": 1, "score": 0.5}\n{"ID": 2, "score": 1}\n')
    config = _config(
        tmp_path,
        [
            {"name": "people", "format": "csv", "path": "people.csv"},
            {"name": "scores", "format": "jsonl", "path": "scores.jsonl"},
        ],
        key="id",
        combine="join",
        features={
            "id": {"type": "int"},
            "name": {"type": "string"},
            "score": {"type": "float", "required": False, "source": "scores.score"},
        },
    )
    line = _refused(tmp_path, config, capsys)
    assert line == (
        "shardflow etl: job failed: sources[1] 'scores': the key 'id' is missing from all 2 of "
        "its records (its records hold 'ID'); fix the field name, or set "
        "output.allow: [missing_field]; no dataset published"
    )


def test_a_source_field_missing_from_every_record_fails_naming_it(tmp_path, capsys):
    (tmp_path / "a.csv").write_bytes(CSV)
    (tmp_path / "b.jsonl").write_bytes(b'{"id": 9, "name": "n", "colour": "red"}\n')
    config = _config(
        tmp_path,
        [
            {"name": "a", "format": "csv", "path": "a.csv"},
            {"name": "b", "format": "jsonl", "path": "b.jsonl"},
        ],
        features={
            "id": {"type": "int"},
            "name": {"type": "string"},
            "color": {"type": "string", "required": False, "source": "b.color"},
        },
    )
    line = _refused(tmp_path, config, capsys)
    assert line == (
        "shardflow etl: job failed: sources[1] 'b': field 'color' is missing from all 1 of its "
        "records (its records hold 'colour'); fix the field name, or set "
        "output.allow: [missing_field]; no dataset published"
    )
    manifest = _allowed(config, ["missing_field"], capsys)
    assert manifest["splits"]["train"]["records"] == 5


def test_an_unknown_allowance_is_a_config_error(tmp_path, capsys):
    (tmp_path / "a.csv").write_bytes(CSV)
    config = _config(tmp_path, [{"name": "a", "format": "csv", "path": "a.csv"}])
    raw = yaml.safe_load(config.read_text())
    for allow, message in [
        (["empty_sources"], "unknown value 'empty_sources' (empty_source, empty_split, "
                            "missing_field)"),
        ({"a": 1}, "{'a': 1} must be a list of empty_source, empty_split, missing_field"),
    ]:  # fmt: skip
        raw["output"]["allow"] = allow
        config.write_text(yaml.safe_dump(raw))
        capsys.readouterr()
        assert run(["--config", str(config)]) == 2
        assert capsys.readouterr().err == f"shardflow etl: error: output.allow: {message}\n"


def test_the_summary_prints_ignored_fields_and_the_top_rejection_reasons(tmp_path, capsys):
    (tmp_path / "a.csv").write_bytes(
        b"id,name,v,extra,note\n"
        + b"".join(b"%d,n,0,e,\n" % i for i in range(1, 5))
        + b"5,n,zz,e,\n6,n,zz,e,\n7,n,zz,e,x\n11,n,1.5,e,\n"  # v: not an integer, 4x
        + b"8,n,1,e,\n9,n,1,e,\n"  # v: above max, 2x
        + b",n,0,e,\n10,,0,e,\n12,n,,e,\n13,n,0\n"  # four reasons once each
    )
    config = _config(
        tmp_path,
        [{"name": "a", "format": "csv", "path": "a.csv"}],
        features={"id": {"type": "int"}, "name": {"type": "string"},
                  "v": {"type": "int", "max": 0}},
        output={"path": "out", "max_rejected_fraction": 1},  # 10 of 14 rejected: the point
    )  # fmt: skip
    capsys.readouterr()
    assert run(["--config", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index(next(line for line in out if line.startswith("  rejected")))
    assert out[start : start + 7] == [
        "  rejected          10 records",
        "            4  v: not an integer",
        "            2  v: above max 0",
        "            1  csv: expected 5 fields, got 3",
        "            1  id: missing required value",
        "            1  name: missing required value",
        "            1  (1 more reasons: see the manifest)",
    ]
    assert "  ignored fields of a (records holding a value): extra (13), note (1)" in out


def _cli(args: list[str], cwd: Path, pause: Path | None = None, **env) -> subprocess.Popen:
    """`shardflow etl ARGS`; with `pause`, it stops just before publishing, creates that file and
    waits until it is removed (tests/services/pause.py)."""
    shardflow = ["tests.services.pause", str(pause)] if pause else ["pipelines.cli"]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", *shardflow, "etl", *args],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=path, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_ctrl_c_exits_130_with_one_line_and_publishes_nothing(tmp_path):
    (tmp_path / "a.csv").write_bytes(CSV)
    config = _config(tmp_path, [{"name": "a", "format": "csv", "path": "a.csv"}])
    flag = tmp_path / "paused"
    proc = _cli(["--config", str(config)], tmp_path, pause=flag)
    deadline = time.monotonic() + 120
    while not flag.exists():  # the run is staged and waits just before publishing
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err == "shardflow etl: interrupted; nothing published\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "config.yaml", "paused"]


@pytest.mark.slow
def test_a_failed_job_prints_one_line_and_keeps_the_traceback_in_the_file_it_names(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really parquet PAR1")
    config = _config(tmp_path, [{"name": "p", "format": "parquet", "path": "bad.parquet"}])
    proc = _cli(["--config", str(config)], tmp_path, TMPDIR=str(tmp_path))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    lines = err.splitlines()
    assert len(lines) == 1, err
    head, _, details = lines[0].partition(" (details: ")
    assert head.startswith(f"shardflow etl: job failed: {tmp_path}/bad.parquet: not a readable")
    log = Path(details.removesuffix("; --verbose prints them)"))
    assert log.parent == tmp_path and log.name.startswith("shardflow-etl-")
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "bad.parquet" in text
    assert not (tmp_path / "out").exists()


def test_verbose_prints_the_traceback_of_a_failed_job(tmp_path, capsys):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really parquet PAR1")
    config = _config(tmp_path, [{"name": "p", "format": "parquet", "path": "bad.parquet"}])
    capsys.readouterr()
    assert run(["--config", str(config), "--verbose"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    last = err.splitlines()[-1]
    assert last.startswith(f"shardflow etl: job failed: {tmp_path}/bad.parquet: not a readable")
    assert "details" not in last


def test_a_field_inside_an_avro_recursive_record_is_not_published_as_all_missing(tmp_path, capsys):
    """A recursive record is not flattened (it has no finite set of fields): a feature reading
    a field inside it (`next.id`) finds no such field, and the run fails naming what the
    records hold, instead of publishing the feature as all missing."""
    import fastavro

    schema = {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "id", "type": "int"},
            {"name": "next", "type": ["null", "Node"], "default": None},
        ],
    }
    with open(tmp_path / "a.avro", "wb") as f:
        records = [{"id": 1, "next": {"id": 2, "next": None}}, {"id": 3, "next": None}]
        fastavro.writer(f, fastavro.parse_schema(schema), records)
    config = _config(tmp_path, [{"name": "s", "format": "avro", "path": "a.avro"}])
    raw = yaml.safe_load(config.read_text())
    raw["features"] = {"id": {"type": "int"}, "next.id": {"type": "int", "required": False}}
    config.write_text(yaml.safe_dump(raw))
    assert _refused(tmp_path, config, capsys) == (
        "shardflow etl: job failed: feature 'next.id': no source has a field 'next.id' in any "
        "of its 2 records (they hold 'next'); fix the feature's name (or `field:`), or set "
        "output.allow: [missing_field]; no dataset published"
    )


def test_a_refusal_from_a_worker_process_reads_as_the_same_one_line(tmp_path, capsys):
    """Under multi_processing the refusal comes back from a worker as text prefixed with its
    class (`transforms.quality.QualityError: ...`): the line is the same as in one process."""
    (tmp_path / "a.csv").write_bytes(b"id,name\n1,a\n2,b\nx,c\n")
    config = _config(
        tmp_path,
        [{"name": "s", "format": "csv", "path": "a.csv"}],
        output={"path": "out", "max_rejected": 0},
    )
    capsys.readouterr()
    argv = ["--config", str(config), "--direct_num_workers", "2"]
    assert run([*argv, "--direct_running_mode", "multi_processing"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        "shardflow etl: job failed: 1 of 3 records rejected, more than output.max_rejected (0); "
        "most often: 'id: not an integer' (1); no dataset published"
    )
    assert not (tmp_path / "out").exists()


# 95% of the rows outside `values`: 'SA' and 'M' are not regions
REGIONS_CSV = b"id,region\n" + b"".join(
    b"%d,%s\n" % (i, b"C" if i % 20 == 0 else b"SA" if i % 20 < 12 else b"M") for i in range(200)
)
REGIONS = {"id": {"type": "int"}, "region": {"type": "string", "values": ["C", "N", "S"]}}


def test_a_run_rejecting_most_of_its_records_fails_without_a_limit_set(tmp_path, capsys):
    (tmp_path / "a.csv").write_bytes(REGIONS_CSV)
    config = _config(tmp_path, [{"name": "a", "format": "csv", "path": "a.csv"}], features=REGIONS)
    assert _refused(tmp_path, config, capsys) == (
        "shardflow etl: job failed: 190 of 200 records rejected (95.00%), more than the default "
        "output.max_rejected_fraction (0.5); most often: 'region: not one of the allowed values "
        "[C, N, S]' (190); fix the input or the features, or set output.max_rejected_fraction: 1 "
        "to accept any share; no dataset published"
    )
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_limit_set_replaces_the_default_one(tmp_path, capsys):
    (tmp_path / "a.csv").write_bytes(REGIONS_CSV)
    source = [{"name": "a", "format": "csv", "path": "a.csv"}]
    # the same run with a count limit: it alone applies
    config = _config(tmp_path, source, features=REGIONS, output={"path": "out", "max_rejected": 5})
    assert _refused(tmp_path, config, capsys).startswith(
        "shardflow etl: job failed: 190 of 200 records rejected, more than output.max_rejected "
        "(5); most often: 'region: not one of the allowed values [C, N, S]' (190); "
    )
    config = _config(
        tmp_path, source, features=REGIONS, output={"path": "out", "max_rejected": 1000}
    )
    capsys.readouterr()
    assert run(["--config", str(config)]) == 0, capsys.readouterr().err


def test_a_value_outside_values_is_named_by_its_rejected_record_and_the_summary(tmp_path, capsys):
    (tmp_path / "a.csv").write_bytes(REGIONS_CSV)
    config = _config(
        tmp_path,
        [{"name": "a", "format": "csv", "path": "a.csv"}],
        features=REGIONS,
        output={"path": "out", "max_rejected_fraction": 1},  # accepts any share rejected
    )
    capsys.readouterr()
    assert run(["--config", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index(next(line for line in out if line.startswith("  rejected")))
    assert out[start : start + 3] == [
        "  rejected         190 records",
        "          190  region: not one of the allowed values [C, N, S]",
        "               values: 'SA' (110), 'M' (80)",
    ]
    manifest = readback.manifest(tmp_path / "out")
    # counted as one reason, whatever the values
    reason = "region: not one of the allowed values [C, N, S]"
    assert manifest["rejected"]["reasons"] == {reason: 190}
    rejected = {r["location"].rsplit("/", 1)[1]: r for r in readback.rejected(tmp_path / "out")}
    assert rejected["a.csv:3"] == {
        "source": "a",
        "location": str(tmp_path / "a.csv") + ":3",
        "reason": reason,
        "record": "1,SA\n",
        "value": "'SA'",
    }
    assert rejected["a.csv:14"]["value"] == "'M'"
