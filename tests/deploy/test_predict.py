"""`shardflow predict`'s command line: which mode, which source reads --input, and the one-line
refusals (exit 2) before any model is loaded. The answers themselves are checked end to end in
tests/e2e/test_demo.py (new CSV and JSON Lines records, a split) and
tests/e2e/test_image_training.py (new pictures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy import predict
from pipelines.config.loader import load_config

PENGUINS = Path(__file__).resolve().parents[2] / "examples" / "penguins" / "penguins.yaml"


def _run(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = predict.main(list(argv))
    except SystemExit as e:  # argparse
        code = e.code
    return code, capsys.readouterr().err


def test_input_needs_a_config_and_data_takes_none(capsys, tmp_path):
    code, err = _run(capsys, "--model-dir", str(tmp_path), "--input", "x.csv")
    assert code == 2 and "--input needs --config" in err
    code, err = _run(capsys, "--model-dir", str(tmp_path), "--data", "d", "--config", "c.yaml")
    assert code == 2 and "--config goes with --input, not --data" in err
    code, err = _run(capsys, "--model-dir", str(tmp_path), "--data", "d", "--input", "x.csv")
    assert code == 2 and "not allowed with argument" in err
    code, err = _run(capsys, "--model-dir", str(tmp_path))
    assert code == 2 and "one of the arguments --input --data is required" in err


@pytest.mark.parametrize(
    "extra, expected",
    [
        ([], "shardflow predict: no export/ in {model!r} (train a model there first)"),
        (["--source", "bands"], "shardflow predict: --source: the config's source 'bands' "
         "cannot read --input (it reads a database, not files)"),
        (["--source", "nope"], "shardflow predict: --source: the config's source 'nope' cannot "
         "read --input (it has ['measurements', 'observations', 'nests', 'bands'])"),
    ],
)  # fmt: skip
def test_refusals_are_one_line_and_exit_2(capsys, tmp_path, extra, expected):
    new = tmp_path / "new.csv"
    new.write_text("id,island,year\n1,Dream,2008\n")
    model = str(tmp_path / "model")
    code, err = _run(
        capsys, "--model-dir", model, "--config", str(PENGUINS), "--input", str(new), *extra
    )
    assert (code, err) == (2, expected.format(model=model) + "\n")


def test_input_that_matches_nothing_and_a_bad_config_exit_2(capsys, tmp_path):
    model = str(tmp_path)
    code, err = _run(
        capsys, "--model-dir", model, "--config", str(PENGUINS), "--input", str(tmp_path / "*.csv")
    )
    assert (code, err) == (2, f"shardflow predict: --input: no files match '{tmp_path}/*.csv'\n")
    (tmp_path / "bad.yaml").write_text("name: x\nsources: 3\n")
    code, err = _run(capsys, "--model-dir", model, "--config", str(tmp_path / "bad.yaml"),
                     "--input", str(PENGUINS))  # fmt: skip
    assert code == 2 and err.startswith("shardflow predict: sources: ") and err.count("\n") == 1


@pytest.mark.parametrize(
    "path, source",
    [
        ("new.csv", "measurements"),
        ("new.csv.gz", "measurements"),
        ("day/new.JSONL", "observations"),
        ("new.parquet", "nests"),
        ("new.dat", "measurements"),  # no format fits: the first file source
    ],
)
def test_the_source_that_reads_input_follows_its_extension(path, source):
    dataset, chosen = predict._for_prediction(load_config(str(PENGUINS)), None, path)
    assert chosen.name == source and chosen.path == path
    assert "species" not in [f.name for f in dataset.features]  # the label is not asked for
    assert dataset.sources[[s.name for s in dataset.sources].index(source)] == chosen


def test_input_of_a_format_no_source_reads_is_refused_naming_the_sources():
    """An Avro file for a config of CSV, JSON Lines and Parquet sources: refused before any read
    (it was a Parquet reader's error about magic bytes), saying what --source does."""
    with pytest.raises(predict._Refused) as e:
        predict._for_prediction(load_config(str(PENGUINS)), None, "new.avro")
    assert str(e.value) == (
        "--input: new.avro is avro by its name, and no source of the config reads avro (its "
        "sources: 'measurements' (csv), 'observations' (jsonl), 'nests' (parquet)): new records "
        "come in the format of the source they stand for; convert them, or give --source NAME "
        "to read them as that source does"
    )
    _, chosen = predict._for_prediction(load_config(str(PENGUINS)), "nests", "new.avro")
    assert chosen.format == "parquet"  # --source: read as that source reads


def test_init_and_predict_read_every_file_name_as_the_same_format():
    """One set of file name endings (the source formats' descriptors): a file that `init`
    proposes as format F is read by the config's F source in `predict --input`, compressed or
    not."""
    import dataclasses

    from pipelines.init import detect
    from transforms.sources import registry

    config = load_config(str(PENGUINS))
    template = config.sources[0]
    sources = [dataclasses.replace(template, name=fmt, format=fmt) for fmt in registry.FILE_FORMATS]
    checked = 0
    for ext in registry.extensions():
        for compression in ("", *registry.compression_endings()):
            name = f"new{ext.upper() if compression == '.gz' else ext}{compression}"
            try:
                proposed = detect.file_format(name)
            except Exception:  # noqa: BLE001 - init refuses it (a compressed parquet, an image)
                continue
            assert predict._source_of(name, sources).format == proposed, name
            checked += 1
    assert checked > 40
