"""`shardflow predict`'s command line: which mode, which source reads --input, and the one-line
refusals (exit 2) before any model is loaded; where it writes (never over or into what it reads)
and when (both files on success, neither on failure). The answers themselves are checked end to
end in tests/e2e/test_demo.py (new CSV and JSON Lines records, a split) and
tests/e2e/test_image_training.py (new pictures).

`tiny_model` trains the small model that tests/reliability/test_hostile_predict.py and
test_predict_kill.py serve (one training run per session), with `CONFIG` describing its records.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from deploy import predict
from pipelines.config.loader import load_config
from tests.trainer.datasets import make_rows, run_python, write_dataset

PENGUINS = Path(__file__).resolve().parents[2] / "examples" / "penguins" / "penguins.yaml"

# The records of tests/trainer/datasets.py as a CSV source; `tiny_model` is trained on them.
CONFIG = """name: new
sources: [{name: s, format: csv, path: new.csv}]
key: id
features:
  id: {type: int}
  bill_length_mm: {type: float, required: false, default: 0.0}
  flipper_mm: {type: float}
  body_mass_g: {type: float, required: false}
  year: {type: int}
  island: {type: string}
  sex: {type: string, required: false}
  species: {type: string, values: [Adelie, Chinstrap, Gentoo]}
label: species
"""
HEADER = "id,bill_length_mm,flipper_mm,body_mass_g,year,island,sex\n"
BAD_ROW = "{i},x,200,4000,2008,Dream,male\n"  # bill_length_mm: not a number


def new_records(first: int, count: int, bad: int = 0) -> str:
    """A CSV of `count` valid records numbered from `first`, then `bad` rejected ones."""
    rows = [
        f"{i},{40 + i % 9},{180 + i % 40},{3000 + 10 * i},{2007 + i % 3},"
        f"{('Biscoe', 'Dream', 'Torgersen')[i % 3]},{('male', 'female')[i % 2]}\n"
        for i in range(first, first + count)
    ]
    rows += [BAD_ROW.format(i=i) for i in range(first + count, first + count + bad)]
    return HEADER + "".join(rows)


_TRAINED: dict[str, Path] = {}


def tiny_model(tmp_path_factory) -> Path:
    """A model trained for one epoch on 60 records (seconds), once per test session: it reads
    the features of `CONFIG` but the label. Its dataset is beside it (`model.parent / "data"`).
    Shared: a test that could change it works on a copy."""
    from trainer.task import main as train

    if "model" not in _TRAINED:
        folder = tmp_path_factory.mktemp("tiny-model")
        data = write_dataset(folder / "data", make_rows(60))
        argv = ["--data", str(data.root), "--model-dir", str(folder / "model"), "--epochs", "1"]
        flags = ["--batch-size", "32", "--exclude-features", "photo,embedding,tags"]
        assert train([*argv, *flags]) == 0
        _TRAINED["model"] = folder / "model"
    return _TRAINED["model"]


def temp_files(folder: Path) -> list[str]:
    """The temporary files of predict's outputs left in `folder` (regular files: a folder, a
    pipe or a link of such a name is not predict's)."""
    found = folder.glob(".predict-*.part")
    return sorted(p.name for p in found if p.is_file() and not p.is_symlink())


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


# --- where predict writes: never over or into what it reads ----------------------------------


@pytest.fixture
def layout(tmp_path, monkeypatch) -> Path:
    """In the current folder: new.csv (3 records), c.yaml, a model folder m/ (its export a
    stand-in: refusals come before it is read), in/ with two CSVs, an empty folder out/, a file
    notes.txt, and links to new.csv and into m/export."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "new.csv").write_text(new_records(0, 3))
    (tmp_path / "c.yaml").write_text(CONFIG)
    (tmp_path / "m" / "export").mkdir(parents=True)
    (tmp_path / "m" / "export" / "saved_model.pb").write_bytes(b"a stand-in")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text(new_records(0, 2))
    (tmp_path / "in" / "b.csv").write_text(new_records(2, 2))
    (tmp_path / "out").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    os.symlink("new.csv", tmp_path / "link.csv")
    os.link(tmp_path / "new.csv", tmp_path / "hard.csv")
    os.symlink("m/export/saved_model.pb", tmp_path / "model.pb")
    return tmp_path


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


READS = "predict never writes over or into what it reads; choose another"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--output", "new.csv"], f"--output 'new.csv' is --input 'new.csv': {READS} --output"),
        (["--output", "link.csv"], f"--output 'link.csv' is --input 'new.csv': {READS} --output"),
        (["--output", "hard.csv"], f"--output 'hard.csv' is --input 'new.csv': {READS} --output"),
        (["--rejected", "c.yaml"], f"--rejected 'c.yaml' is --config 'c.yaml': {READS} --rejected"),
        (["--output", "m"], f"--output 'm' is --model-dir 'm': {READS} --output"),
        (["--output", "m/export/saved_model.pb"],
         f"--output 'm/export/saved_model.pb' is inside --model-dir 'm': {READS} --output"),
        (["--output", "model.pb"],
         f"--output 'model.pb' is inside --model-dir 'm': {READS} --output"),
        (["--output", "a.jsonl", "--rejected", "a.jsonl"], "--output 'a.jsonl' is --rejected "
         "'a.jsonl': the answers and the rejected records need two files apart"),
        (["--output", ".", "--input", "in/a.csv"],
         f"--output '.' holds --input 'in/a.csv': {READS} --output"),
        (["--input", "in/*", "--output", "in/answers.jsonl"], "--output 'in/answers.jsonl' is "
         "among the files --input 'in/*' reads: the next run would read it as new records; "
         "choose another --output"),
        (["--input", "in", "--source", "s", "--rejected", "in/r.jsonl"], "--rejected "
         "'in/r.jsonl' is among the files --input 'in' reads: the next run would read it as new "
         "records; choose another --rejected"),
        (["--output", "out"], "--output 'out': is a folder; name the file to write"),
        (["--output", "missing/a.jsonl"], "--output 'missing/a.jsonl': its folder "
         "'{tmp}/missing' does not exist; create it or choose another --output"),
        (["--rejected", "notes.txt/r.jsonl"], "--rejected 'notes.txt/r.jsonl': its folder "
         "'{tmp}/notes.txt' is not a folder; create it or choose another --rejected"),
        (["--output", ""], "--output: an empty path; name the file to write"),
    ],
)  # fmt: skip
def test_an_output_over_or_into_what_the_run_reads_is_refused_before_any_work(
    capsys, layout, argv, expected
):
    """Each output against every input (the files --input matches, those its folder or glob
    would match next time, --config, --model-dir and all in it), real paths (links too), and
    against the other output; a folder or a missing folder: one line, exit 2, nothing touched
    and no model loaded (the export here is a stand-in that would not load)."""
    before = _tree(layout)
    base = ["--model-dir", "m", "--config", "c.yaml"]
    if "--input" not in argv:
        base += ["--input", "new.csv"]
    code, err = _run(capsys, *base, *argv)
    assert (code, err) == (2, f"shardflow predict: {expected.format(tmp=layout)}\n")
    assert _tree(layout) == before and temp_files(layout) == []


def test_an_output_beside_the_input_is_written(capsys, layout, monkeypatch):
    """What the rule leaves alone: --output in the input's folder but outside its glob."""
    _fake_model(monkeypatch)
    argv = ["--model-dir", "m", "--config", "c.yaml", "--input", "in/*.csv"]
    code, err = _run(capsys, *argv, "--output", "in/answers.jsonl")
    assert (code, err) == (0, "shardflow predict: 4 predicted, 0 rejected\n")
    assert len((layout / "in" / "answers.jsonl").read_text().splitlines()) == 4


# --- when predict writes: both files on success, neither on failure --------------------------


class _FakeModel:
    """Stands for trainer.predict.ServedModel: answers every record; `fail` makes the call
    raise what the export raises for records it cannot parse."""

    fail = False

    def __init__(self, model_dir: str):
        self.model_dir = model_dir

    def mismatch(self, features) -> None:
        return None

    def __call__(self, serialized):
        if self.fail:
            import tensorflow as tf

            raise tf.errors.InvalidArgumentError(None, None, "Name: <unknown>, bad record")
        return [{"class": "Adelie", "probabilities": {"Adelie": 1.0}} for _ in serialized]


def _fake_model(monkeypatch, fail: bool = False) -> None:
    import trainer.predict

    monkeypatch.setattr(_FakeModel, "fail", fail)
    monkeypatch.setattr(trainer.predict, "ServedModel", _FakeModel)


def _old_outputs(folder: Path) -> dict[str, bytes]:
    (folder / "answers.jsonl").write_text("old answers\n")
    (folder / "rejected.jsonl").write_text("old rejected\n")
    return _tree(folder)


OUTPUTS = ["--output", "answers.jsonl", "--rejected", "rejected.jsonl"]


def test_both_files_are_published_on_success_in_order(capsys, layout, monkeypatch):
    _fake_model(monkeypatch)
    _old_outputs(layout)
    (layout / "new.csv").write_text(new_records(0, 3, bad=1))
    seen = []
    argv = ["--model-dir", "m", "--config", "c.yaml", "--input", "new.csv", *OUTPUTS]
    assert predict.main(argv, pause_at=seen.append) == 0
    assert seen == list(predict.PAUSE_POINTS)
    assert capsys.readouterr().err == (
        "shardflow predict: 3 predicted, 1 rejected (in rejected.jsonl)\n"
    )
    assert [line[:20] for line in (layout / "answers.jsonl").read_text().splitlines()] == [
        '{"key": "0", "locati',
        '{"key": "1", "locati',
        '{"key": "2", "locati',
    ]
    assert '"location": "new.csv:5"' in (layout / "rejected.jsonl").read_text()
    assert temp_files(layout) == []


def _interrupt_at(point: str):
    def pause(at: str) -> None:
        if at == point:
            raise KeyboardInterrupt

    return pause


@pytest.mark.parametrize(
    "case, records, expected",
    [
        pytest.param("rejected", new_records(0, 0, bad=2), "shardflow predict: every record "
         "was rejected: none could be served (most often: 'bill_length_mm: not a number' (2); "
         "new records are read and checked as the config's source reads them); nothing written "
         "to --output or --rejected", id="every-record-rejected"),
        pytest.param("unservable", new_records(0, 3, bad=1), "shardflow predict: the model "
         "cannot serve these records: InvalidArgumentError: Name: <unknown>, bad record",
         id="records-the-model-cannot-serve"),
        pytest.param("writing", new_records(0, 3, bad=1), None, id="interrupted-while-writing"),
        pytest.param("written", new_records(0, 3, bad=1), None,
                     id="interrupted-before-publication"),
    ],
)  # fmt: skip
def test_a_failed_or_interrupted_run_publishes_neither_file(
    capsys, layout, monkeypatch, case, records, expected
):
    """Nothing published but on exit 0: the old files byte-identical, no temporary file (an
    interrupt at the pause point `writing` or `written`: Ctrl-C)."""
    _fake_model(monkeypatch, fail=case == "unservable")
    (layout / "new.csv").write_text(records)
    before = _old_outputs(layout)
    argv = ["--model-dir", "m", "--config", "c.yaml", "--input", "new.csv", *OUTPUTS]
    if expected is None:
        with pytest.raises(KeyboardInterrupt):
            predict.main(argv, pause_at=_interrupt_at(case))
    else:
        assert predict.main(argv) == 1
        assert capsys.readouterr().err.splitlines()[-1] == expected
    assert _tree(layout) == before and temp_files(layout) == []


def test_a_killed_runs_temporary_file_is_removed_by_the_next_run_a_live_ones_is_not(
    capsys, layout, monkeypatch
):
    """A run killed with SIGKILL leaves its hidden temporary file: the next run into that
    folder removes it, as no process holds its lock; one a live run holds stays."""
    _fake_model(monkeypatch)
    (layout / ".predict-killed.part").write_text('{"key": "half')
    live = layout / ".predict-live.part"
    live.write_text("")
    with open(live) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        argv = ["--model-dir", "m", "--config", "c.yaml", "--input", "new.csv", *OUTPUTS]
        assert predict.main(argv) == 0
    assert temp_files(layout) == [".predict-live.part"]
    assert len((layout / "answers.jsonl").read_text().splitlines()) == 3


# --- --take and --split ------------------------------------------------------------------------


@pytest.mark.parametrize("take", ["0", "-1", str(10**12)])
def test_take_out_of_range_is_refused_in_one_line_before_reading(capsys, tmp_path, take):
    code, err = _run(capsys, "--model-dir", str(tmp_path), "--data", str(tmp_path / "nothing"),
                     "--take", take)  # fmt: skip
    assert (code, err) == (
        2,
        f"shardflow predict: --take: {take} is not from 1 to 1,000,000 (the examples to serve, "
        "held in memory)\n",
    )


def test_an_unknown_split_names_the_splits_there_are(capsys, tmp_path):
    data = write_dataset(tmp_path / "d", make_rows(20)).root
    code, err = _run(capsys, "--model-dir", str(tmp_path / "m"), "--data", str(data),
                     "--split", "tset")  # fmt: skip
    assert (code, err) == (
        2,
        f"shardflow predict: {data}: no split 'tset' in the manifest (splits: eval, train)\n",
    )


def test_split_and_take_go_with_data_only(capsys, tmp_path):
    for flag, value in (("--take", "3"), ("--split", "eval")):
        code, err = _run(capsys, "--model-dir", str(tmp_path), "--config", str(PENGUINS),
                         "--input", "new.csv", flag, value)  # fmt: skip
        assert code == 2 and err.endswith(f"error: {flag} goes with --data, not --input\n")


def test_predicting_new_records_loads_no_beam(tmp_path_factory, tmp_path):
    """`predict --input` checks the config (a sql source among its sources), matches and reads
    the files and prepares the records as the ETL would, with no Beam loaded (about 2 s of
    imports): only TensorFlow, which serves the model."""
    model = tiny_model(tmp_path_factory)
    (tmp_path / "new.csv").write_text(new_records(0, 3, bad=1))
    sql = '  - {name: db, format: sql, options: {url: "sqlite:///x.db", table: t}}\n'
    sources = "sources:\n  - {name: s, format: csv, path: new.csv}\n" + sql
    (tmp_path / "c.yaml").write_text(CONFIG.replace(CONFIG.splitlines()[1] + "\n", sources))
    argv = ["--model-dir", str(model), "--config", str(tmp_path / "c.yaml"), "--source", "s"]
    argv += ["--input", str(tmp_path / "new.csv"), "--output", str(tmp_path / "a.jsonl")]
    done = run_python(
        "-c",
        "import sys; from deploy.predict import main; "
        f"code = main({argv!r}); print('apache_beam' in sys.modules); sys.exit(code)",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
    assert done.stderr.splitlines()[-1] == "shardflow predict: 3 predicted, 1 rejected"
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) == 3
