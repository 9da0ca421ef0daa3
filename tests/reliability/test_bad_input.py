"""Bad input, one test per case: each runs the real ETL in process on small files written here
and checks the exact outcome, a rejection (reason, location, raw record, counted in the manifest)
or a whole-job error (exit code 2 for config/input problems, 1 for a failed job; nothing published).

Most cases share one run (`tabular`): one config whose sources are a CSV file of bad rows, files
with other CSV quirks (BOM + CRLF, empty, header only, schema drift, null markers) and a JSONL
files; Parquet and images have a run each, and so does every whole-job error.

Policies (also listed in tests/reliability/README.md):
- A row/line that cannot be parsed (wrong field count, bad quoting, not JSON, not an object) and
  a value that breaks the schema (wrong type, out of range, not in `values`, NaN, undecodable
  text or image) reject that record only: reason, location `file:line` (record number for binary
  formats), raw record; counted by reason in the manifest. NaN is never a float value, inf
  only where the feature allows it (`allow: [infinity]`).
- `""` is missing in CSV by default (`null_values: [""]`, quoted or not); with other null markers
  it is an empty string. In JSONL `""` is an empty string and `null` is missing.
- A UTF-8 byte order mark at the start of a CSV or JSONL file is dropped; CRLF ends lines.
- Empty and header-only files hold no records (no error).
- Schema drift (a required column missing from a whole CSV file): every record of that file is
  rejected with `<feature>: missing required value` at its own line; the other files go on (a
  quality threshold on rejected records is what stops a job whose data collapsed). A missing
  optional column gives its feature's default (or an empty list).
- Extra unknown columns/keys are ignored (not written) and counted: the manifest's
  `sources.<name>.ignored_fields` gives, per field, the records holding a value in it.
- Duplicate keys: the first record is written, the others counted in `duplicates`.
- A source path with no readable input file (glob matching nothing, broken symlink, a folder
  where a file is expected) fails before the job starts: exit 2 naming `sources[i].path`.
- A Parquet file whose footer is unreadable fails the job (exit 1 naming the file, nothing
  published); a row group whose pages are corrupt has its rows rejected, the others are read.
- A truncated gzip input fails the job naming the file (exit 1, nothing published).
"""

from __future__ import annotations

import gzip
import io
import json
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipelines.etl import run
from tests import readback

pytestmark = pytest.mark.slow

FEATURES = {
    "id": {"type": "int", "min": 0, "max": 1000},
    "name": {"type": "string"},
    "kind": {"type": "string", "values": ["a", "b"], "required": False},
    "x": {"type": "float", "required": False},
}

# The CSV file of bad rows: line numbers matter (a rejected record names its first line).
ROWS_CSV = (
    b"id,name,kind,x,extra\n"  # 1: `extra` is not a feature: ignored
    b'1,"Smith, Ann",a,1.5,zz\n'  # 2: quoted comma
    b'2,"multi\nline",b,2.5,zz\n'  # 3-4: quoted newline
    b"3,too,many,1,2,3\n"  # 5
    b"4,too few\n"  # 6
    b"abc,bad id,a,1,\n"  # 7
    b"2000,big,a,1,\n"  # 8
    b"-1,neg,a,1,\n"  # 9
    b"5,notin,c,1,\n"  # 10
    b"6,nan,a,nan,\n"  # 11
    b"7,inf,a,inf,\n"  # 12
    b"8,,a,1,\n"  # 13: "" is the default null marker
    b'9,"",a,1,\n'  # 14: so is a quoted ""
    b"10,bad \xff utf8,a,1,\n"  # 15
    b"11,first,a,1,\n"  # 16
    b"11,duplicate,a,1,\n"  # 17: same key: a duplicate
    b"12,no kind,,,\n"  # 18: optional features missing
)
NULLS_CSV = b"id,name\n20,\n21,NULL\n"  # null_values: [NULL]: "" is an empty string
BOM_CSV = "\ufeffid,name,kind,x\r\n30,bom,a,0.5\r\n31,crlf,b,1\r\n".encode()
DRIFT_CSV = b"id,kind\n40,a\n41,b\n"  # the required `name` column is missing
BOM_JSONL = b'\xef\xbb\xbf{"id": 60, "name": "bom"}\r\n{"id": 61, "name": "crlf"}\r\n'
JSONL = (
    b'{"id": 50, "name": "j", "kind": "a", "x": 1, "unknown": [1]}\n'  # 1
    b"not json\n"  # 2
    b"[1, 2]\n"  # 3
    b'{"id": 51, "name": ""}\n'  # 4
    b'{"id": 52, "name": null}\n'  # 5
    b'{"id": 53, "name": "n", "x": NaN}\n'  # 6
    b'{"id": 54, "name": "bad \xff utf8"}\n'  # 7
    b'{"id": 55, "name": "i", "x": Infinity}\n'  # 8
)


def _config(d: Path, sources: list[dict], features: dict, name: str = "bad", key="id") -> Path:
    config = {
        "name": name,
        "sources": sources,
        "key": key,
        "features": features,
        "splits": {"train": 0.5, "eval": 0.5},
        # sources of empty files or of (mostly) bad records are the point of these tests
        "output": {
            "path": "out",
            "allow": ["empty_source", "empty_split"],
            "max_rejected_fraction": 1,
        },
    }
    path = d / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _failed_run(d: Path, source: dict, capsys) -> tuple[int, str]:
    """(exit code, stderr) of a run of one source that must not publish anything."""
    capsys.readouterr()
    features = {"id": {"type": "int"}, "name": {"type": "string"}}
    code = run(["--config", str(_config(d, [source], features))])
    err = capsys.readouterr().err
    assert not (d / "out" / "manifest.json").exists()
    assert not (d / "out").exists() or not any(p.suffix == ".gz" for p in (d / "out").rglob("*"))
    return code, err


@pytest.fixture(scope="module")
def tabular(tmp_path_factory):
    d = tmp_path_factory.mktemp("tabular")
    (d / "rows.csv").write_bytes(ROWS_CSV)
    (d / "nulls.csv").write_bytes(NULLS_CSV)
    (d / "bom.csv").write_bytes(BOM_CSV)
    (d / "empty.csv").write_bytes(b"")
    (d / "header.csv").write_bytes(b"id,name,kind,x\n")
    (d / "drift.csv").write_bytes(DRIFT_CSV)
    (d / "events.jsonl").write_bytes(JSONL)
    (d / "bom.jsonl").write_bytes(BOM_JSONL)
    sources = [
        {"name": "rows", "format": "csv", "path": "rows.csv"},
        {
            "name": "nulls",
            "format": "csv",
            "path": "nulls.csv",
            "options": {"null_values": ["NULL"]},
        },
        {"name": "bom", "format": "csv", "path": "bom.csv"},
        {"name": "empty", "format": "csv", "path": "empty.csv"},
        {"name": "header", "format": "csv", "path": "header.csv"},
        {"name": "drift", "format": "csv", "path": "drift.csv"},
        {"name": "events", "format": "jsonl", "path": "events.jsonl"},
        {"name": "bomjsonl", "format": "jsonl", "path": "bom.jsonl"},
    ]
    cfg = _config(d, sources, FEATURES)
    assert run(["--config", str(cfg)]) == 0
    out = d / "out"
    manifest = readback.manifest(out)
    written = {}
    for feature in readback.features(out, manifest):
        values = {k: readback.values(feature[k])[1] for k in feature}
        written[values.pop("id")[0]] = values
    rejected = {(r["source"], r["location"].rsplit("/", 1)[-1]): r for r in readback.rejected(out)}
    return manifest, written, rejected


def _ledger_balances(manifest: dict, written: int) -> None:
    read = sum(s["records"] for s in manifest["sources"].values())
    joined = manifest.get("joined", 0)
    assert read == written + manifest["rejected"]["records"] + manifest["duplicates"] + joined


def _rejected_in(rejected: dict, source: str) -> dict[int, str]:
    """{line: reason} of the rejected records of one source."""
    return {
        int(loc.rsplit(":", 1)[1]): r["reason"]
        for (src, loc), r in rejected.items()
        if src == source
    }


# --- the whole tabular run ------------------------------------------------------------------------


def test_tabular_ledger_balances_and_reasons_are_counted(tabular):
    manifest, written, rejected = tabular
    assert {k: v["records"] for k, v in manifest["sources"].items()} == {
        "rows": 16,
        "nulls": 2,
        "bom": 2,
        "empty": 0,
        "header": 0,
        "drift": 2,
        "events": 8,
        "bomjsonl": 2,
    }
    assert sorted(written) == [1, 2, 11, 12, 20, 30, 31, 50, 51, 60, 61]  # 7, 55: inf
    assert manifest["duplicates"] == 1
    assert manifest["rejected"]["records"] == len(rejected) == 20
    assert manifest["rejected"]["reasons"] == dict(Counter(r["reason"] for r in rejected.values()))
    _ledger_balances(manifest, len(written))
    for r in rejected.values():
        assert set(r) >= {"source", "location", "reason", "record"}


# --- CSV ------------------------------------------------------------------------------------------


def test_csv_quoted_commas_and_newlines_are_values(tabular):
    _, written, _ = tabular
    assert written[1] == {"name": (b"Smith, Ann",), "kind": (b"a",), "x": (1.5,)}
    assert written[2] == {"name": (b"multi\nline",), "kind": (b"b",), "x": (2.5,)}


def test_csv_too_many_or_too_few_columns_are_rejected_with_their_line(tabular):
    _, _, rejected = tabular
    assert _rejected_in(rejected, "rows")[5] == "csv: expected 5 fields, got 6"
    assert _rejected_in(rejected, "rows")[6] == "csv: expected 5 fields, got 2"
    assert rejected["rows", "rows.csv:5"]["record"] == "3,too,many,1,2,3\n"
    assert rejected["rows", "rows.csv:6"]["record"] == "4,too few\n"


def test_csv_wrong_type_is_rejected(tabular):
    _, _, rejected = tabular
    assert _rejected_in(rejected, "rows")[7] == "id: not an integer"
    assert rejected["rows", "rows.csv:7"]["record"] == "abc,bad id,a,1,\n"


def test_csv_out_of_range_and_not_in_values_are_rejected(tabular):
    _, _, rejected = tabular
    lines = _rejected_in(rejected, "rows")
    assert (lines[8], lines[9], lines[10]) == (
        "id: above max 1000",
        "id: below min 0",
        "kind: not one of the allowed values [a, b]",
    )
    # the value is beside the reason, which stays the same for every value (it is counted)
    assert rejected["rows", "rows.csv:10"]["value"] == "'c'"
    assert "value" not in rejected["rows", "rows.csv:9"]


def test_nan_and_inf_are_rejected_unless_the_feature_allows_infinity(tabular):
    """NaN is never a value of a float feature; inf (CSV text, JSON Infinity) is rejected, since
    an inf label or input trains a NaN model, unless the feature says `allow: [infinity]`
    (tests/reliability/test_hostile_config.py runs that)."""
    _, written, rejected = tabular
    assert _rejected_in(rejected, "rows")[11] == "x: not a number"
    assert _rejected_in(rejected, "events")[6] == "x: not a number"
    assert _rejected_in(rejected, "rows")[12] == "x: not a finite number (inf)"
    assert _rejected_in(rejected, "events")[8] == "x: not a finite number (inf)"
    assert 7 not in written and 55 not in written


def test_empty_string_vs_null(tabular):
    """ "" (quoted or not) is a null by default (`null_values: [""]`); with other null markers it
    is an empty string. In JSONL, "" is an empty string and null is missing."""
    _, written, rejected = tabular
    lines = _rejected_in(rejected, "rows")
    assert lines[13] == lines[14] == "name: missing required value"
    assert written[20]["name"] == (b"",)
    assert _rejected_in(rejected, "nulls") == {3: "name: missing required value"}
    assert written[51]["name"] == (b"",)
    assert _rejected_in(rejected, "events")[5] == "name: missing required value"
    assert written[12] == {"name": (b"no kind",), "kind": (), "x": ()}


def test_invalid_utf8_in_a_string_feature_is_rejected(tabular):
    _, _, rejected = tabular
    reason = "name: not valid text in the source's encoding"
    assert _rejected_in(rejected, "rows")[15] == reason
    assert _rejected_in(rejected, "events")[7] == reason
    assert rejected["rows", "rows.csv:15"]["record"] == "10,bad \\xff utf8,a,1,\n"


def test_csv_bom_and_crlf_are_not_part_of_names_or_values(tabular):
    _, written, rejected = tabular
    assert written[30] == {"name": (b"bom",), "kind": (b"a",), "x": (0.5,)}
    assert written[31] == {"name": (b"crlf",), "kind": (b"b",), "x": (1.0,)}
    assert _rejected_in(rejected, "bom") == {}


def test_jsonl_bom_and_crlf_are_not_part_of_records(tabular):
    _, written, rejected = tabular
    assert (written[60]["name"], written[61]["name"]) == ((b"bom",), (b"crlf",))
    assert _rejected_in(rejected, "bomjsonl") == {}


def test_csv_empty_and_header_only_files_have_no_records(tabular):
    manifest, _, rejected = tabular
    assert manifest["sources"]["empty"]["records"] == manifest["sources"]["header"]["records"] == 0
    assert _rejected_in(rejected, "empty") == _rejected_in(rejected, "header") == {}


def test_csv_missing_required_column_rejects_every_record_of_the_file(tabular):
    _, _, rejected = tabular
    assert _rejected_in(rejected, "drift") == {
        2: "name: missing required value",
        3: "name: missing required value",
    }
    assert rejected["drift", "drift.csv:2"]["record"] == "40,a\n"


def test_extra_unknown_columns_are_ignored_and_counted(tabular):
    manifest, written, _ = tabular
    assert all(set(values) == {"name", "kind", "x"} for values in written.values())
    assert written[50] == {"name": (b"j",), "kind": (b"a",), "x": (1.0,)}
    ignored = {k: v["ignored_fields"] for k, v in manifest["sources"].items()}
    # rows.csv: `extra` holds a value on the two records that parse (lines 2, 3); empty cells
    # are missing values; the rows with a wrong field count never become records
    assert ignored == {
        "rows": {"extra": 2},
        "nulls": {},
        "bom": {},
        "empty": {},
        "header": {},
        "drift": {},
        "events": {"unknown": 1},
        "bomjsonl": {},
    }


def test_duplicate_keys_keep_the_first_record(tabular):
    manifest, written, rejected = tabular
    assert written[11]["name"] == (b"first",)
    assert manifest["duplicates"] == 1
    assert 17 not in _rejected_in(rejected, "rows")


# --- JSONL ----------------------------------------------------------------------------------------


def test_jsonl_line_not_json_or_not_an_object_is_rejected(tabular):
    _, _, rejected = tabular
    lines = _rejected_in(rejected, "events")
    assert (lines[2], lines[3]) == ("json: invalid JSON", "json: not an object")
    assert rejected["events", "events.jsonl:2"]["record"] == "not json"
    assert rejected["events", "events.jsonl:3"]["record"] == "[1, 2]"


# --- Parquet --------------------------------------------------------------------------------------


def test_parquet_corrupt_row_group_rejects_its_rows_and_the_others_are_read(tmp_path):
    """A page that fails its checksum: the rows of its row group are rejected, one by one."""
    buf = io.BytesIO()
    table = pa.table({"id": list(range(6)), "name": [f"n{i}" for i in range(6)]})
    pq.write_table(table, buf, row_group_size=3, compression="none", write_page_checksum=True)
    data = bytearray(buf.getvalue())
    column = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(1).column(1)
    start = column.dictionary_page_offset or column.data_page_offset
    data[start + column.total_compressed_size - 2] ^= 0xFF  # inside the last page's values
    (tmp_path / "rows.parquet").write_bytes(bytes(data))
    source = {"name": "rows", "format": "parquet", "path": "rows.parquet"}
    features = {"id": {"type": "int"}, "name": {"type": "string"}}
    assert run(["--config", str(_config(tmp_path, [source], features))]) == 0
    out = tmp_path / "out"
    manifest = readback.manifest(out)
    expected = [((i,), (f"n{i}".encode(),)) for i in range(3)]
    assert readback.rows(out, manifest, ["id", "name"]) == expected
    rejected = readback.rejected(out)
    assert [(r["location"].rsplit("/", 1)[-1], r["reason"], r["record"]) for r in rejected] == [
        (f"rows.parquet:{row}", "parquet: unreadable row group", '{"row_group": 1}')
        for row in (4, 5, 6)
    ]
    assert manifest["rejected"]["reasons"] == {"parquet: unreadable row group": 3}
    _ledger_balances(manifest, 3)


# --- images ---------------------------------------------------------------------------------------


def _png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 6), (10, 200, 30)).save(out, "PNG")
    return out.getvalue()


def test_truncated_or_undecodable_images_are_rejected(tmp_path):
    png = _png()
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    (tmp_path / "photos" / "dog").mkdir()
    (tmp_path / "photos" / "cat" / "ok.png").write_bytes(png)
    (tmp_path / "photos" / "cat" / "truncated.png").write_bytes(png[: len(png) // 2])
    (tmp_path / "photos" / "dog" / "garbage.png").write_bytes(b"not an image at all")
    with open(tmp_path / "photos" / "dog" / "huge.png", "wb") as f:
        f.truncate((64 << 20) + 1)  # sparse: over the 64 MiB an image file may have
    source = {
        "name": "photos",
        "format": "images",
        "path": "photos",
        "options": {"label_from": "parent_dir"},
    }
    features = {"image": {"type": "image"}, "label": {"type": "string"}}
    assert run(["--config", str(_config(tmp_path, [source], features, key=None))]) == 0
    out = tmp_path / "out"
    manifest = readback.manifest(out)
    written = [
        (f["label"].bytes_list.value[0], f["image"].bytes_list.value[0])
        for f in readback.features(out, manifest)
    ]
    assert written == [(b"cat", png)]
    rejected = {
        r["location"].rsplit("/", 2)[-2:][0] + "/" + r["location"].rsplit("/", 1)[-1]: r
        for r in readback.rejected(out)
    }
    assert {k: r["reason"] for k, r in rejected.items()} == {
        "cat/truncated.png:1": "image: not a decodable image",
        "dog/garbage.png:1": "image: not a decodable image",
        "dog/huge.png:1": "image: file larger than 64 MiB, not read",
    }
    assert '"image": "<0 bytes>"' in rejected["dog/huge.png:1"]["record"]
    assert all(r["source"] == "photos" for r in rejected.values())
    assert manifest["rejected"]["reasons"] == {
        "image: not a decodable image": 2,
        "image: file larger than 64 MiB, not read": 1,
    }
    assert manifest["sources"]["photos"]["records"] == 4
    _ledger_balances(manifest, 1)


# --- whole-job errors: nothing published ----------------------------------------------------------


def test_glob_matching_nothing_exits_2_naming_the_source(tmp_path, capsys):
    code, err = _failed_run(tmp_path, {"name": "s", "format": "csv", "path": "data/*.csv"}, capsys)
    assert code == 2
    assert "sources[0].path: no files match" in err and "data/*.csv" in err


def test_broken_symlink_exits_2_naming_the_source(tmp_path, capsys):
    os.symlink(tmp_path / "nowhere.csv", tmp_path / "in.csv")
    code, err = _failed_run(tmp_path, {"name": "s", "format": "csv", "path": "in.csv"}, capsys)
    assert code == 2
    assert "sources[0].path: no files match" in err and "in.csv" in err


def test_folder_where_a_file_is_expected_exits_2_naming_the_source(tmp_path, capsys):
    (tmp_path / "in.csv").mkdir()
    for path in ("in.csv", "*.csv"):
        code, err = _failed_run(tmp_path, {"name": "s", "format": "csv", "path": path}, capsys)
        assert code == 2
        assert "sources[0].path: no files match" in err


def test_corrupt_parquet_fails_the_job_naming_the_file(tmp_path, capsys):
    pq.write_table(pa.table({"id": [1, 2], "name": ["a", "b"]}), tmp_path / "good.parquet")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1" + b"\0garbage" * 8 + b"PAR1")
    source = {"name": "s", "format": "parquet", "path": "*.parquet"}
    code, err = _failed_run(tmp_path, source, capsys)
    assert code == 1
    assert "job failed" in err and "bad.parquet: not a readable Parquet file" in err


def test_truncated_gzip_fails_the_job_naming_the_file(tmp_path, capsys):
    data = gzip.compress(b"id,name\n" + b"".join(b"%d,n%d\n" % (i, i) for i in range(2000)))
    (tmp_path / "in.csv.gz").write_bytes(data[: len(data) // 2])
    code, err = _failed_run(tmp_path, {"name": "s", "format": "csv", "path": "in.csv.gz"}, capsys)
    assert code == 1
    assert "in.csv.gz" in err


@pytest.mark.parametrize(("fmt", "path"), [("csv", "*.csv"), ("images", "photos")])
def test_a_fifo_or_a_link_to_a_device_among_the_files_is_refused_before_any_read(
    tmp_path, capsys, fmt, path
):
    """A named pipe would hold the job forever and /dev/zero has no end: only regular files are
    read, and the run is refused at once naming the file (exit 2, nothing published)."""
    folder = tmp_path / "photos" / "cat" if fmt == "images" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "a.csv").write_bytes(b"id,name\n1,a\n")
    os.mkfifo(folder / "b.csv")
    source = {"name": "s", "format": fmt, "path": path}
    code, err = _failed_run(tmp_path, source, capsys)
    assert code == 2
    assert err == (
        f"shardflow etl: error: sources[0].path: {folder / 'b.csv'}: is a named pipe (FIFO), "
        "not a regular file: only regular files are read (a pipe or a device has no end); "
        "move it out of the source's path\n"
    )
    (folder / "b.csv").unlink()
    os.symlink("/dev/zero", folder / "b.csv")
    code, err = _failed_run(tmp_path, source, capsys)
    assert code == 2 and f"{folder / 'b.csv'}: is a character device, not a regular file" in err
    assert not (tmp_path / "out").exists()


def test_records_with_thousands_of_distinct_extra_keys_keep_the_manifest_and_report_small(
    tmp_path, capsys
):
    """Each record holds a key of its own: the manifest lists the 100 ignored fields held by
    most records and counts the rest; the chunks of the JSON Lines reader are cut at 1,000
    distinct keys, so memory does not grow with the keys squared."""
    from transforms.contract.config import SourceSpec
    from transforms.sources.jsonl import JsonlOptions, parse_jsonl

    lines = [json.dumps({"id": i, "name": f"n{i}", f"extra_{i:04d}": "x"}) for i in range(2500)]
    lines += [json.dumps({"id": 9000 + i, "name": "m", "common": i}) for i in range(3)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    source = {"name": "s", "format": "jsonl", "path": "in.jsonl"}
    config = _config(tmp_path, [source], {"id": {"type": "int"}, "name": {"type": "string"}})
    assert run(["--config", str(config)]) == 0
    out = capsys.readouterr().out
    manifest = readback.manifest(tmp_path / "out")
    entry = manifest["sources"]["s"]
    assert entry["records"] == 2503
    assert len(entry["ignored_fields"]) == 100
    assert entry["ignored_fields"]["common"] == 3  # held by most records: listed first
    assert entry["ignored_fields_unlisted"] == 2401
    assert sum(entry["ignored_fields"].values()) == 3 + 99
    assert (tmp_path / "out" / "manifest.json").stat().st_size < 20_000
    assert (tmp_path / "out" / "report.html").stat().st_size < 200_000
    assert "and 2493 more" in out  # the terminal names 8: 2,501 fields in all
    spec = SourceSpec(name="s", format="jsonl", path="in.jsonl", options=JsonlOptions())
    chunks = list(parse_jsonl(io.BytesIO("\n".join(lines).encode()), "in.jsonl", spec))
    assert max(len(c.columns) for c in chunks) <= 1001
    assert sum(len(c.lines) for c in chunks) == 2503
