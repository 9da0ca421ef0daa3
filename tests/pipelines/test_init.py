"""`shardflow init`: the config it infers from sample files of every tabular format, exactly; that
the config loads and the ETL reads every record of the files with it; and its refusals."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import fastavro
import jsonschema
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipelines import etl
from pipelines.config.loader import load_config
from pipelines.examples import sample_report
from pipelines.init import main
from transforms.encode import encode_columns
from transforms.sink.framing import frame_records

ROOT = Path(__file__).resolve().parents[2]
N = 120  # records of each file: more than the 100 sampled values `values:` is sure from
SPECIES = ["Adelie", "Chinstrap", "Gentoo"]
INT, FLOAT, BYTES = pa.list_(pa.int64()), pa.list_(pa.float32()), pa.list_(pa.binary())


def _write_files(folder: Path) -> dict[str, Path]:
    """One file of each format, N records each; returns them by the name of their test."""
    files = {}
    rows = [f"{i},{SPECIES[i % 3]},{30 + i / 4},{3000 + i},{i:05d}" for i in range(1, N + 1)]
    files["csv"] = folder / "penguins.csv"
    files["csv"].write_text("id,species,bill_length_mm,body_mass_g,code\n" + "\n".join(rows) + "\n")

    rows = [f"{i},{i * 1.5},{['ok', 'bad'][i % 2]}" for i in range(1, N + 1)]
    files["no_header"] = folder / "readings.csv"
    files["no_header"].write_text("\n".join(rows) + "\n")

    rows = [f"player {i}\t{i % 50}\t{'ABC'[i % 3]}" for i in range(1, N + 1)]
    files["tsv"] = folder / "scores.tsv"
    files["tsv"].write_text("name\tscore\tgrade\n" + "\n".join(rows) + "\n")

    rows = [
        f"{i},{'NA' if i % 10 == 0 else f'{i}.5'},"
        f'"line {i}, with ""quotes""\nand a second line",'
        f"{'' if i % 8 == 0 else ['red', 'blue'][i % 2]}"
        for i in range(1, N + 1)
    ]
    files["csv_nulls"] = folder / "notes.csv"
    files["csv_nulls"].write_text("note_id,weight,comment,colour\n" + "\n".join(rows) + "\n")

    birds = [
        {
            "bird_id": i,
            "species": SPECIES[i % 3],
            "mass": None if i % 10 == 0 else (3000 + i if i % 2 else 3000.5 + i),
            "tags": ["a", "b"][: i % 3],
            "banded": i % 4 == 0,
            "rgb": [i, i + 1, i + 2],
            "nest": {"x": i},
        }
        for i in range(1, N + 1)
    ]
    files["jsonl"] = folder / "birds.jsonl"
    files["jsonl"].write_text("".join(json.dumps(b) + "\n" for b in birds))

    r = range(1, N + 1)
    trips = pa.table(
        {
            "trip_id": pa.array(r, pa.int64()),
            "fare": [None if i % 6 == 0 else i * 1.25 for i in r],
            "pickup": [{"lat": 50 + i / 100, "lon": 4.0} for i in r],
            "payment": ["cash" if i % 2 else "card" for i in r],
            "stops": pa.array([list(range(i % 4)) for i in r], pa.list_(pa.int64())),
            "raw": [bytes([0xFF, i]) for i in r],
        }
    )
    files["parquet"] = folder / "trips.parquet"
    pq.write_table(trips, files["parquet"], row_group_size=50)

    schema = {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "event_id", "type": "long"},
            {"name": "country", "type": ["null", "string"]},
            {"name": "score", "type": "double"},
            {"name": "geo", "type": {"type": "record", "name": "Geo",
                                     "fields": [{"name": "city", "type": "string"}]}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    }  # fmt: skip
    start = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    events = [
        {
            "event_id": i,
            "country": None if i % 10 == 0 else ["NO", "IT", "FR"][i % 3],
            "score": i / 8,
            "geo": {"city": ["Oslo", "Rome"][i % 2]},
            "at": start + datetime.timedelta(minutes=i),
        }
        for i in r
    ]
    files["avro"] = folder / "events.avro"
    with open(files["avro"], "wb") as f:
        fastavro.writer(f, schema, events, sync_interval=1000)

    columns = {
        "ids": (INT, [list(range(i % 3)) for i in r]),
        "img": (BYTES, [[bytes([0x89, 0xFF, i])] for i in r]),
        "label": (BYTES, [[b"cat" if i % 2 else b"dog"] for i in r]),
        "opt": (INT, [[i] if i % 5 else [] for i in r]),
        "x": (FLOAT, [[i / 2] for i in r]),
    }
    names = sorted(columns)
    examples = encode_columns(names, [pa.array(columns[n][1], columns[n][0]) for n in names])
    files["tfrecord"] = folder / "examples.tfrecord"
    files["tfrecord"].write_bytes(frame_records(examples.to_pylist()))
    return files


# name → (csv options, features, key, label) of the config inferred from that file alone.
EXPECTED = {
    "csv": (
        {"delimiter": ",", "header": True, "null_values": [""]},
        {
            "id": {"type": "int"},
            "species": {"type": "string", "values": SPECIES},
            "bill_length_mm": {"type": "float"},
            "body_mass_g": {"type": "int"},
            "code": {"type": "string"},  # leading zeros: text
        },
        "id",
        "species",  # named like what a model predicts
    ),
    "no_header": (
        {
            "delimiter": ",",
            "header": False,
            "columns": ["column_1", "column_2", "column_3"],
            "null_values": [""],
        },
        {
            "column_1": {"type": "int"},
            "column_2": {"type": "float"},
            "column_3": {"type": "string", "values": ["bad", "ok"]},
        },
        None,
        None,
    ),
    "tsv": (
        {"delimiter": "\t", "header": True, "null_values": [""]},
        {
            "name": {"type": "string"},
            "score": {"type": "int"},
            "grade": {"type": "string", "values": ["A", "B", "C"]},
        },
        None,
        None,
    ),
    "csv_nulls": (
        {"delimiter": ",", "header": True, "null_values": ["", "NA"]},
        {
            "note_id": {"type": "int"},
            "weight": {"type": "float", "required": False},
            "comment": {"type": "string"},
            "colour": {"type": "string", "required": False, "values": ["blue", "red"]},
        },
        "note_id",
        None,
    ),
    "jsonl": (
        None,
        {
            "bird_id": {"type": "int"},
            "species": {"type": "string", "values": SPECIES},
            "mass": {"type": "float", "required": False},
            "tags": {"type": "string", "shape": [None], "values": ["a", "b"]},
            "banded": {"type": "string", "values": ["false", "true"]},
            "rgb": {"type": "int", "shape": [3]},
        },
        "bird_id",
        "species",
    ),
    "parquet": (
        None,
        {
            "trip_id": {"type": "int"},
            "fare": {"type": "float", "required": False},
            "pickup.lat": {"type": "float"},
            "pickup.lon": {"type": "float"},
            "payment": {"type": "string", "values": ["card", "cash"]},
            "stops": {"type": "int", "shape": [None]},
            "raw": {"type": "bytes"},
        },
        "trip_id",
        None,
    ),
    "avro": (
        None,
        {
            "event_id": {"type": "int"},
            "country": {"type": "string", "required": False, "values": ["FR", "IT", "NO"]},
            "score": {"type": "float"},
            "geo.city": {"type": "string", "values": ["Oslo", "Rome"]},
            "at": {"type": "string"},
        },
        "event_id",
        None,
    ),
    "tfrecord": (
        None,
        {
            "ids": {"type": "int", "shape": [None]},
            "img": {"type": "bytes"},
            "label": {"type": "string", "values": ["cat", "dog"]},
            "opt": {"type": "int", "required": False},
            "x": {"type": "float"},
        },
        None,
        "label",
    ),
}
FORMATS = {"csv": "csv", "no_header": "csv", "tsv": "csv", "csv_nulls": "csv", "jsonl": "jsonl",
           "parquet": "parquet", "avro": "avro", "tfrecord": "tfrecord"}  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return _write_files(tmp_path_factory.mktemp("init-data"))


SCHEMA = jsonschema.Draft202012Validator(
    json.loads((Path(__file__).parents[2] / "docs" / "config.schema.json").read_text())
)


def _init(*argv: str) -> int:
    return main(list(argv))


def _written(path: Path) -> tuple[dict, str]:
    text = path.read_text()
    return yaml.safe_load(text), text


@pytest.fixture(scope="module")
def inferred(files, tmp_path_factory) -> dict[str, tuple[Path, dict, str]]:
    """name → (config path, loaded config, its text), inferred from each file alone."""
    folder = tmp_path_factory.mktemp("init-configs")
    out = {}
    for name, path in files.items():
        config = folder / f"{name}.yaml"
        assert _init("--source", str(path), "--output", str(config)) == 0
        out[name] = (config, *_written(config))
    return out


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_format_gives_its_exact_features_options_key_and_label(name, files, inferred):
    config_path, config, text = inferred[name]
    options, features, key, label = EXPECTED[name]
    [source] = config["sources"]
    # an absolute --source stays absolute; relative ones are relative to the config
    expected_source = {"name": files[name].stem, "format": FORMATS[name], "path": str(files[name])}
    if options is not None:
        expected_source["options"] = options
    assert source == expected_source
    assert config["features"] == features
    assert list(config["features"]) == list(features)  # in the files' order
    assert config.get("key") == key
    assert config.get("label") == label
    assert config["name"] == name
    assert config["splits"] == {"train": 0.8, "eval": 0.1, "test": 0.1}
    assert config["output"] == {"path": f"out/{name}"}
    assert "# compression: gzip" in text and "# shard_size_mb: 128" in text


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_config_loads_and_accepts_every_record_of_its_file(name, inferred):
    config_path, config, _ = inferred[name]
    # what an editor checks the config with (docs/config.schema.json) accepts it too
    assert list(SCHEMA.iter_errors(config)) == []
    dataset = load_config(str(config_path))
    source = dataset.sources[0]
    assert sample_report(dataset) == [
        f"  {source.name} ({source.format}): {N} records sampled from the start: {N} valid, "
        "0 rejected"
    ]


def test_comments_tell_bounds_missing_values_and_guesses(inferred):
    _, _, text = inferred["csv"]
    assert "    # min: 30.25" in text and "    # max: 60.0" in text
    assert "observed in 120 sampled records" in text
    assert "integers with leading zeros ('00001') kept as text" in text
    assert "\nlabel: species                    # named like what a model predicts" in text
    assert "#   penguins (csv): all 120 records of its 1 file" in text
    _, _, text = inferred["csv_nulls"]
    assert "required: false               # missing in 12 of 120 sampled records" in text
    assert "null_values: ['', NA]       # NA marks a missing value in weight" in text
    assert "values: [blue, red]           # 2 distinct in 105 sampled values;" in text
    _, _, text = inferred["jsonl"]
    assert "  # nest:" in text and "holds objects (nested fields)" in text
    assert "every sampled list holds 3 values" in text


def test_the_etl_reads_every_record_of_every_format_with_the_inferred_config(files, tmp_path):
    config = tmp_path / "all.yaml"
    sources = [a for path in files.values() for a in ("--source", str(path))]
    assert _init(*sources, "--output", str(config)) == 0
    raw, text = _written(config)
    # union: a feature of some sources only may be missing; ids repeat across sources
    assert raw["features"]["species"] == {"type": "string", "required": False, "values": SPECIES}
    assert raw["features"]["id"] == {"type": "int", "required": False}
    assert "key" not in raw and "label" not in raw  # both in some sources only: commented
    assert "\n# label: label " in text and "\n# key: id " in text
    out = tmp_path / "dataset"
    assert etl.run(["--config", str(config), "--output", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert {name: s["records"] for name, s in manifest["sources"].items()} == {
        path.stem: N for path in files.values()
    }
    assert sum(s["records"] for s in manifest["splits"].values()) == N * len(files)
    assert (manifest["rejected"]["records"], manifest["rejected"]["reasons"]) == (0, {})
    assert manifest["duplicates"] == 0
    ignored = {name: s["ignored_fields"] for name, s in manifest["sources"].items()}
    assert ignored == {path.stem: {"nest": N} if path.stem == "birds" else {} for path in
                       files.values()}  # fmt: skip


def test_sources_are_unioned_and_a_key_repeating_across_them_is_not_suggested(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.csv").write_text("id,x\n" + "".join(f"{i},{i * 2}\n" for i in range(5)))
    (tmp_path / "b.jsonl").write_text(
        "".join(json.dumps({"id": i, "y": "u"}) + "\n" for i in range(3))
    )
    assert _init("--source", "a.csv", "--source", "b.jsonl", "--output", "c.yaml") == 0
    config, text = _written(tmp_path / "c.yaml")
    assert [(s["name"], s["format"], s["path"]) for s in config["sources"]] == [
        ("a", "csv", "a.csv"),
        ("b", "jsonl", "b.jsonl"),
    ]
    assert config["features"] == {
        "id": {"type": "int"},
        "x": {"type": "int", "required": False},
        "y": {"type": "string", "required": False},  # `# values: [u]`: 3 sampled values only
    }
    assert "    # values: [u]" in text
    assert "  x:                              # only in source(s) a" in text
    assert "\n# label: y                        # named like a label, but missing in 5 of 8" in text
    assert "missing in 3 of 8 sampled records" in text
    assert "\n# key: id " in text and "values repeat across sources" in text
    # 8 records in all: a split may get none, which is allowed rather than failing the run
    assert config["output"]["allow"] == ["empty_split"]
    assert load_config(str(tmp_path / "c.yaml")).sources[1].format == "jsonl"


def test_a_label_a_few_records_lack_is_written_as_the_label_and_required(tmp_path):
    rows = "".join(f"{i},{i % 7},{'' if i % 20 == 3 else 'yes' if i % 3 else 'no'}\n"
                   for i in range(40))  # fmt: skip
    (tmp_path / "users.csv").write_text("age,visits,label\n" + rows)
    assert _init("--source", str(tmp_path / "users.csv"), "--output", str(tmp_path / "c.yaml")) == 0
    config, text = _written(tmp_path / "c.yaml")
    assert config["label"] == "label"
    assert config["features"]["label"] == {"type": "string"}  # required: no `required: false`
    assert "the label: required (missing in 2 of 40 sampled records, which the ETL rejects)" in text


def test_a_unique_id_is_the_key_and_a_target_the_label(tmp_path):
    rows = "".join(f"{i},{i // 2},{20 + i % 7},{'yes' if i % 3 else 'no'}\n" for i in range(40))
    (tmp_path / "users.csv").write_text("user_id,id,age,target\n" + rows)
    assert _init("--source", str(tmp_path / "users.csv"), "--output",
                 str(tmp_path / "u.yaml")) == 0  # fmt: skip
    config, text = _written(tmp_path / "u.yaml")
    assert (config["key"], config["label"]) == ("user_id", "target")
    assert "a different value in each of the 40 sampled records" in text
    # fewer than 100 sampled values: `values:` is a suggestion, commented out
    assert config["features"]["target"] == {"type": "string"}
    assert "    # values: ['no', 'yes']       # only 40 sampled values: uncomment" in text
    (tmp_path / "users.csv").write_text("id,score\n" + "".join(f"{i % 5},{i}\n" for i in range(9)))
    assert _init("--source", str(tmp_path / "users.csv"), "--output",
                 str(tmp_path / "v.yaml"), "--force") == 0  # fmt: skip
    config, text = _written(tmp_path / "v.yaml")
    assert "key" not in config
    assert "\n# key: id " in text and "4 of 9 sampled records repeat an earlier value" in text


def test_a_reference_like_key_unique_in_a_part_of_the_input_is_only_suggested(tmp_path):
    # user_id is unique in the first 30 records sampled, but the file holds more: a key named
    # like a reference to another table may repeat further on, and a key drops duplicates
    rows = "".join(f"{i},{i % 3}\n" for i in range(5000))
    (tmp_path / "events.csv").write_text("user_id,kind\n" + rows)
    assert _init("--source", str(tmp_path / "events.csv"), "--sample", "30", "--output",
                 str(tmp_path / "e.yaml")) == 0  # fmt: skip
    config, text = _written(tmp_path / "e.yaml")
    assert "key" not in config
    assert "\n# key: user_id " in text and "the rest of the input was not read" in text


def test_files_a_shell_expanded_become_one_glob_source(tmp_path, monkeypatch):
    (tmp_path / "d").mkdir()
    for name in ("a", "b"):
        (tmp_path / "d" / f"{name}.csv").write_text("k,v\n1,2\n3,4\n")
    monkeypatch.chdir(tmp_path)
    assert _init("--source", "d/a.csv", "d/b.csv", "--output", "g.yaml") == 0
    config, text = _written(tmp_path / "g.yaml")
    assert config["sources"] == [{"name": "d", "format": "csv", "path": "d/*.csv",
        "options": {"delimiter": ",", "header": True, "null_values": [""]}}]  # fmt: skip
    assert "#   d (csv): all 4 records of its 2 files" in text
    (tmp_path / "conf").mkdir()  # paths are written relative to the config's folder
    assert _init("--source", "d/a.csv", "--source", "d/b.csv", "--output", "conf/h.yaml") == 0
    assert [s["path"] for s in _written(tmp_path / "conf" / "h.yaml")[0]["sources"]] == [
        "../d/a.csv",
        "../d/b.csv",
    ]
    dataset = load_config(str(tmp_path / "conf" / "h.yaml"))
    assert [s.path for s in dataset.sources] == [
        str(tmp_path / "d" / n) for n in ("a.csv", "b.csv")
    ]


def test_without_output_the_config_goes_to_stdout_with_paths_from_here(files, capsys, monkeypatch):
    monkeypatch.chdir(files["jsonl"].parent)
    assert _init("--source", "birds.jsonl", "--sample", "10", "--name", "birds_v2") == 0
    captured = capsys.readouterr()
    config = yaml.safe_load(captured.out)
    assert config["name"] == "birds_v2"
    assert config["sources"] == [{"name": "birds", "format": "jsonl", "path": "birds.jsonl"}]
    # 10 of 120 records: in pieces spread over the file, not its first 10
    assert (
        "#   birds (jsonl): 10 of about 120 records, in 10 pieces spread over its 1 file"
        in captured.out
    )
    assert "# Paths are relative to the folder init ran in." in captured.out
    assert captured.err.splitlines()[:2] == [
        "shardflow init: wrote stdout: 1 source(s), 6 feature(s) from 10 record(s) read; check "
        "it, then run shardflow etl --config CONFIG.yaml --validate-only",
        "shardflow init: birds: sampled 10 of about 120 records, in 10 pieces spread over "
        "birds.jsonl; not every record read, so no `values:` list is closed",
    ]


def test_an_existing_config_is_replaced_only_with_force(files, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("mine\n")
    assert _init("--source", str(files["csv"]), "--output", str(config)) == 2
    assert capsys.readouterr().err == (
        f"shardflow init: error: --output: '{config}' exists; give --force to replace it\n"
    )
    assert config.read_text() == "mine\n"
    assert _init("--source", str(files["csv"]), "--output", str(config), "--force") == 0
    assert yaml.safe_load(config.read_text())["name"] == "c"
    assert [p.name for p in tmp_path.iterdir()] == ["c.yaml"]  # no temporary file left
    umask = os.umask(0)
    os.umask(umask)
    assert config.stat().st_mode & 0o777 == 0o666 & ~umask  # as any file the user writes


def test_bad_sources_are_refused_naming_the_file(tmp_path, capsys):
    def error(*argv: str) -> str:
        assert _init(*argv) == 2
        return capsys.readouterr().err

    glob = str(tmp_path / "none" / "*.csv")
    assert error("--source", glob) == f"shardflow init: error: --source: no files match '{glob}'\n"
    (tmp_path / "data.jsnol").write_text('{"a": 1}\n')
    message = error("--source", str(tmp_path / "data.jsnol"))
    assert f"--source: {tmp_path}/data.jsnol: unknown file type '.jsnol' (" in message
    assert message.endswith("; did you mean '.jsonl'?\n")
    (tmp_path / "empty.csv").write_text("a,b\n")
    assert error("--source", str(tmp_path / "empty.csv")) == (
        f"shardflow init: error: --source: '{tmp_path}/empty.csv': empty.csv holds no records\n"
    )
    (tmp_path / "array.json").write_text('[{"a": 1}]\n')
    assert "a JSON array, not JSON Lines" in error("--source", str(tmp_path / "array.json"))
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    assert f"{tmp_path}/broken.parquet: not a readable Parquet file" in error(
        "--source", str(tmp_path / "broken.parquet")
    )
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "a.csv").write_text("a\n1\n")
    (tmp_path / "mixed" / "b.avro").write_bytes(b"")
    assert "matches files of several formats (avro: b.avro; csv: a.csv)" in error(
        "--source", str(tmp_path / "mixed")
    )


@pytest.mark.parametrize("name", ["tfrecord", "csv", "jsonl"])
def test_sampling_a_file_imports_neither_tensorflow_nor_beam(files, tmp_path, name):
    """init reads, matches and prepares with the ETL's own code, none of which needs Beam or
    TensorFlow for a local file (a second or more of imports each)."""
    probe = (
        "import sys\nfrom pipelines.init import main\n"
        f"assert main(['--source', {str(files[name])!r}, '--output', "
        f"{str(tmp_path / 't.yaml')!r}]) == 0\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n"
        "assert 'apache_beam' not in sys.modules, 'apache_beam imported'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    if name == "tfrecord":
        assert yaml.safe_load((tmp_path / "t.yaml").read_text())["label"] == "label"


@pytest.mark.parametrize(
    "head, delimiter, header",
    [
        ("a,b\n1,2\n3,4\n", ",", True),
        ("1,2\n3,4\n", ",", False),
        ("name;town\nann;Oslo\nbob;Rome\n", ";", True),  # text only: names on top
        ("ann;Oslo\nbob;Oslo\n", ";", False),  # a value repeated below: data
        ('id|note\n1|"a|b"\n2|"c\n|d"\n', "|", True),  # delimiters in quotes do not count
        ("a\tb\tc\n1\t2\t3\n", "\t", True),
        ("x,,x\n1,2,3\n", ",", True),  # empty and repeated names: renamed, still a header
        ("just words\nmore words\n", None, None),
    ],
)
def test_the_delimiter_and_header_are_sniffed_from_the_first_rows(head, delimiter, header):
    from pipelines.init import detect

    assert detect.sniff_delimiter(head, whole=True) == delimiter
    if delimiter is not None:
        assert detect.has_header(detect.sample_rows(head, delimiter, whole=True)) is header


def test_null_markers_names_encodings_and_file_formats_are_detected():
    from pipelines.config.fields import ConfigError
    from pipelines.init import detect

    columns = [["1", "NA", None, "?"], ["NA", "None", "x"], ["n/a", "n/a"]]
    assert detect.null_markers(columns) == ["NA", "?"]  # only beside numbers
    assert detect.column_names(["x", "", "x"], 3) == (["x", "column_2", "x_2"], True)
    assert detect.column_names(None, 2) == (["column_1", "column_2"], True)
    assert detect.decode_head("é;1\n".encode("utf-8"), True) == ("é;1\n", "utf-8")
    assert detect.decode_head("é;1\n".encode("cp1252"), True) == ("é;1\n", "cp1252")
    assert detect.decode_head(b"\x81\xe9", True) == ("\x81é", "iso8859-1")
    formats = {
        "a.CSV": "csv", "a.tsv.gz": "csv", "a.ndjson": "jsonl", "a.json.bz2": "jsonl",
        "a.pq": "parquet", "a.avro": "avro", "d/a.tfrecords.gz": "tfrecord",
        "train-00000-of-00004.zz": "tfrecord", "train-00001-of-00004": "tfrecord",
    }  # fmt: skip
    assert {path: detect.file_format(path) for path in formats} == formats
    with pytest.raises(ConfigError, match=r"a\.parquet\.gz: a compressed parquet file"):
        detect.file_format("a.parquet.gz")
    with pytest.raises(ConfigError, match="README: its name has no extension"):
        detect.file_format("README")


def test_a_source_of_many_files_samples_evenly_spaced_ones(tmp_path, monkeypatch):
    from pipelines.init.sample import spread

    files = [f"f{i:02d}" for i in range(10)]
    assert spread(files, 4) == ["f00", "f03", "f06", "f09"]
    assert spread(files, 20) == files
    for i in range(60):
        (tmp_path / f"part-{i:02d}.jsonl").write_text('{"v": 1}\n')
    monkeypatch.chdir(tmp_path)
    assert _init("--source", "part-*.jsonl", "--output", "c.yaml") == 0
    assert (
        "#   part (jsonl): 50 of about 60 records: all of 50 (evenly spaced) of its 60 files"
        in _written(tmp_path / "c.yaml")[1]
    )


def test_a_typo_in_a_column_keeps_every_record_readable_and_is_pointed_out(tmp_path):
    rows = [f"{i / 2},{SPECIES[i % 3]}" for i in range(150)]
    rows[7], rows[9] = "abc,Adelie", "4.5,Adelei"
    (tmp_path / "typos.csv").write_text("bill,species\n" + "\n".join(rows) + "\n")
    assert _init("--source", str(tmp_path / "typos.csv"), "--output", str(tmp_path / "t.yaml")) == 0
    config, text = _written(tmp_path / "t.yaml")
    assert config["features"] == {"bill": {"type": "string"}, "species": {"type": "string"}}
    assert (
        "  bill:                           # 149 of 150 sampled values are numbers; with type "
        "float the others ('abc', ...) would be rejected"
    ) in text
    assert (
        "    # values: [Adelei, Adelie, Chinstrap, Gentoo]  # 'Adelei' is seen once in 150 "
        "sampled values (a typo, or one of many rare values?): uncomment when these are all"
    ) in text
