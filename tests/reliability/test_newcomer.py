"""A new user's first loop: write a config, check it with `--validate-only`, run, edit, check
again. Each case runs the real command in process on files written here.

- `--validate-only` with OUTPUT holding a dataset checks the config (exit 0) and says what a run
  would need, instead of refusing: the edit-then-check loop goes on after the first run.
- When (nearly) all of the sample is rejected, `--validate-only` exits 2 naming the likely cause
  (the delimiter the file's first rows are split by, a UTF-16 byte order mark), and a full run
  that fails for it ends its line with the same cause.
"""

from __future__ import annotations

import codecs
from pathlib import Path

import yaml

from pipelines.etl import run

CSV = "id,name,x\n1,a,2.5\n2,b,3.5\n3,c,1\n"


def _config(d: Path, data: bytes, **options) -> Path:
    (d / "rows.csv").write_bytes(data)
    source = {"name": "rows", "format": "csv", "path": "rows.csv"}
    if options:
        source["options"] = options
    config = {
        "name": "first",
        "sources": [source],
        "features": {"id": {"type": "int"}, "name": {"type": "string"}, "x": {"type": "float"}},
        "splits": {"train": 1.0},
        "output": {"path": "out"},
    }
    path = d / "first.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_validate_only_checks_a_config_whose_output_holds_a_dataset(tmp_path, capsys):
    config = _config(tmp_path, CSV.encode())
    assert run(["--config", str(config)]) == 0
    capsys.readouterr()
    assert run(["--config", str(config), "--validate-only"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines()[:2] == [
        "shardflow etl: first: config valid; 1 input file(s)",
        f"shardflow etl: note: {tmp_path / 'out'} already holds a dataset: a run needs "
        "--overwrite to replace it (or --skip-complete to keep it)",
    ]
    assert run(["--config", str(config), "--validate-only", "--overwrite"]) == 0
    assert "note:" not in capsys.readouterr().out


def test_a_wrong_delimiter_fails_validate_only_naming_the_one_the_file_has(tmp_path, capsys):
    config = _config(tmp_path, CSV.encode(), delimiter=";")
    assert run(["--config", str(config), "--validate-only"]) == 2
    out, err = capsys.readouterr()
    assert "3 records sampled from the start: 0 valid, 3 rejected" in out
    assert err == (
        "shardflow etl: error: sources[0] 'rows': 3 of 3 sampled records rejected: the config "
        f"does not describe its files; the first rows of {tmp_path / 'rows.csv'} are split by "
        "',', not by options.delimiter ';': set delimiter: ','\n"
    )
    assert run(["--config", str(config)]) == 1  # the full run ends with the same cause
    err = capsys.readouterr().err
    assert err.rstrip().endswith(
        f"(sources[0] 'rows': the first rows of {tmp_path / 'rows.csv'} are split by ',', not "
        "by options.delimiter ';': set delimiter: ',')"
    )
    assert not (tmp_path / "out").exists()


def test_a_utf16_file_read_as_utf8_fails_validate_only_naming_the_encoding(tmp_path, capsys):
    config = _config(tmp_path, codecs.BOM_UTF16_LE + CSV.encode("utf-16-le"))
    assert run(["--config", str(config), "--validate-only"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        f"{tmp_path / 'rows.csv'} starts with a UTF-16 byte order mark, but options.encoding is "
        "'utf-8': set encoding: utf-16\n"
    )
    config = _config(tmp_path, codecs.BOM_UTF16_LE + CSV.encode("utf-16-le"), encoding="utf-16")
    assert run(["--config", str(config), "--validate-only"]) == 0
    assert "3 valid, 0 rejected" in capsys.readouterr().out


def test_a_sample_with_few_rejections_passes(tmp_path, capsys):
    config = _config(tmp_path, (CSV + "4,d,oops\n").encode())
    assert run(["--config", str(config), "--validate-only"]) == 0
    out = capsys.readouterr().out
    assert "4 records sampled from the start: 3 valid, 1 rejected" in out
