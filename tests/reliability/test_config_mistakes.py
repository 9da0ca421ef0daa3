"""Config mistakes: each is refused before any work with exit status 2 and one line,
`shardflow etl: error: FIELD: message`, naming the field; never a traceback.

Every test writes a small valid config and its CSV file under tmp_path, changes one thing and runs
`shardflow etl --validate-only` in process (config loading is the same with and without it).
Policies (also listed in tests/reliability/README.md):
- A value of the wrong YAML type anywhere (a list or a mapping where a name or a number is
  expected, `true` where a number is expected) is refused naming its field.
- Numbers are finite and bounded: `output.shard_size_mb` from 0.001 to 16384 MB, a fixed length
  at most 1,000,000 values, `decode_resize` sides at most 4096 pixels, op parameters bounded.
- OUTPUT must be able to hold a dataset: a parent to stage it in and a name of its own; never
  `/`, `.`, a path ending in `..`, the current or the home folder (or a folder holding them), or
  a path under a file.
- The YAML itself: nested at most 32 levels, no structure that contains itself, no key given
  twice in one mapping, keys are text, text is valid Unicode.
- A feature named like an input the trainer derives (`NAME__present` beside `NAME`) is refused.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import pytest
import yaml

from pipelines.config.loader import ConfigError, parse_config
from pipelines.etl import run
from transforms.contract.config import PRESENT_SUFFIX

ROOT = Path(__file__).resolve().parents[2]
CSV = "id,x,name,tags\n1,2.5,a,p|q\n2,,b,\n3,1,a,q\n"
BASE = {
    "name": "mistakes",
    "sources": [{"name": "rows", "format": "csv", "path": "rows.csv"}],
    "key": "id",
    "features": {
        "id": {"type": "int", "min": 0},
        "x": {"type": "float", "required": False},
        "name": {"type": "string", "values": ["a", "b"]},
        "tags": {"type": "string", "shape": [None], "required": False},
    },
    "label": "name",
    "splits": {"train": 0.5, "eval": 0.5},
    "output": {"path": "out"},
}


def _config(tmp_path: Path, text: str | None = None, **changes) -> str:
    """Writes the CSV file and the config (BASE with `changes` at `a__b__0` paths, or `text`)."""
    (tmp_path / "rows.csv").write_text(CSV)
    if text is None:
        cfg = copy.deepcopy(BASE)
        for dotted, value in changes.items():
            *parents, last = dotted.split("__")
            target = cfg
            for p in parents:
                target = target[int(p)] if isinstance(target, list) else target[p]
            target[int(last) if isinstance(target, list) else last] = value
        text = yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True)
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _refused(capsys, config: str, *argv: str) -> str:
    """Runs the check; asserts exit 2 and exactly one error line; returns that line."""
    code = run(["--config", config, "--validate-only", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("shardflow etl: error: "), err
    return lines[0].removeprefix("shardflow etl: error: ")


def _accepted(capsys, config: str, *argv: str) -> None:
    code = run(["--config", config, "--validate-only", *argv])
    assert code == 0, capsys.readouterr().err


def test_the_base_config_is_valid(tmp_path, capsys):
    _accepted(capsys, _config(tmp_path))


# --- values of the wrong type where a name or a choice is expected ---------------------------


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"label": ["x"]}, "label: ['x'] is not one of the features"),
        ({"label": {"x": 1}}, "label: {'x': 1} is not one of the features"),
        ({"key": ["id"]}, "key: ['id'] must be a non-empty string"),
        ({"combine": ["union"]}, "combine: unknown value ['union'] (union, join)"),
        ({"name": {"a": 1}}, "name: {'a': 1} must match [a-z0-9_-]+"),
        ({"sources__0__name": ["rows"]}, "sources[0].name: ['rows'] must be a non-empty name"),
        ({"sources__0__format": ["csv"]}, "sources[0].format: unknown format ['csv'] (csv,"),
        ({"sources__0__path": ["rows.csv"]}, "sources[0].path: ['rows.csv'] must be a path"),
        ({"sources__0__options": ["x"]}, "sources[0].options: must be a mapping"),
        (
            {"sources__0__options": {"delimiter": [","]}},
            "sources[0].options.delimiter: [','] must be one character",
        ),
        (
            {"sources__0__options": {"delimiter": ";;"}},
            "sources[0].options.delimiter: ';;' must be one character",
        ),
        (
            {"sources__0__options": {"encoding": {"a": 1}}},
            "sources[0].options.encoding: unknown encoding",
        ),
        ({"features__id__type": ["int"]}, "features.id.type: unknown type ['int'] (int, float,"),
        ({"features__id__required": "yes"}, "features.id.required: must be true or false"),
        ({"features__id__source": ["rows.id"]}, "features.id.source: ['rows.id'] must be SOURCE"),
        ({"features__name__values": {"a": 1}}, "features.name.values: must be a non-empty list"),
        ({"features__name__values": [["a"]]}, "features.name.values: not a string"),
        ({"features__x__default": {"a": 1}}, "features.x.default: a required feature"),
        ({"splits": [0.5, 0.5]}, "splits: must map split names to fractions"),
        ({"splits__train": [0.5]}, "splits.train: [0.5] must be a fraction in (0, 1]"),
        ({"output": ["out"]}, "output: must be a mapping"),
        ({"output__compression": {}}, "output.compression: unknown value {} (gzip, zlib, none)"),
        ({"output__compression": ["gzip"]}, "output.compression: unknown value ['gzip']"),
        (
            {"transform": {"features": {"x": [["z_score"]]}}},
            "transform.features.x: ['z_score'] must be an op name",
        ),
        (
            {"transform": {"features": {"x": {"bucketize": [3]}}}},
            "transform.features.x.bucketize: must be a mapping",
        ),
        (
            {"transform": {"features": {"x": "z_score"}, "materialize": ["raw"]}},
            "transform.materialize: unknown value ['raw'] (raw, transformed)",
        ),
        ({"transform": {"module": ["m.py"]}}, "transform.module: must be the path of a Python"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_its_field(tmp_path, capsys, changes, field):
    if "features__x__default" in changes:
        changes["features__x__required"] = True  # the default is checked after `required`
    line = _refused(capsys, _config(tmp_path, **changes))
    assert line.startswith(field), line


# --- numbers: type, finiteness and bounds ------------------------------------------------------

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("value", [1e-300, 0, -1, 0.0009, 16385, 1e300, NAN, INF, True, "128"])
def test_shard_size_mb_outside_its_bounds_is_refused(tmp_path, capsys, value):
    line = _refused(capsys, _config(tmp_path, output__shard_size_mb=value))
    assert line.startswith("output.shard_size_mb: "), line
    assert line.endswith("must be a positive number of MB from 0.001 to 16384"), line


@pytest.mark.parametrize("value", [0.001, 1, 2.5, 16384])
def test_shard_size_mb_within_its_bounds_is_accepted(tmp_path, capsys, value):
    _accepted(capsys, _config(tmp_path, output__shard_size_mb=value))


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"output__compression_level": True}, "output.compression_level: True must be an integer"),
        ({"output__compression_level": 5.0}, "output.compression_level: 5.0 must be an integer"),
        ({"output__compression_level": NAN}, "output.compression_level: nan must be an integer"),
        ({"output__max_rejected": True}, "output.max_rejected: True must be an integer >= 0"),
        ({"output__max_rejected": -1}, "output.max_rejected: -1 must be an integer >= 0"),
        ({"output__max_rejected": INF}, "output.max_rejected: inf must be an integer >= 0"),
        ({"output__max_rejected_fraction": NAN}, "output.max_rejected_fraction: nan must be a"),
        ({"output__max_rejected_fraction": True}, "output.max_rejected_fraction: True must be"),
        ({"features__x__min": NAN}, "features.x.min: nan is not a number"),
        ({"features__x__min": True}, "features.x.min: True is not a number"),
        ({"features__x__max": INF}, "features.x.max: inf is not a finite number"),
        ({"features__x__max": -INF}, "features.x.max: -inf is not a finite number"),
        ({"features__x__max": "1"}, "features.x.max: '1' is not a number"),
        ({"features__x__min": 1e39}, "features.x.min: outside float32 range"),
        ({"features__x__max": 1e-50}, "features.x.max: too small for float32 (would be 0)"),
        ({"features__id__min": 2**63}, "features.id.min: 9223372036854775808 is outside the int64"),
        ({"features__x__default": NAN}, "features.x.default: not a number"),
        ({"features__x__default": 10**400}, "features.x.default: "),
        ({"features__id__shape": [-1]}, "features.id.shape: [-1]: the length must be a positive"),
        ({"features__id__shape": [True]}, "features.id.shape: [True]: the length must be"),
        ({"features__id__shape": [2.0]}, "features.id.shape: [2.0]: the length must be"),
        ({"features__id__shape": [10**7]}, "features.id.shape: [10000000]: the length must be"),
        ({"features__id__shape": [1, 2]}, "features.id.shape: [1, 2] must be [] (scalar)"),
        ({"splits__train": NAN}, "splits.train: nan must be a fraction in (0, 1]"),
        ({"splits__train": True}, "splits.train: True must be a fraction in (0, 1]"),
        ({"splits__train": INF}, "splits.train: inf must be a fraction in (0, 1]"),
        (
            {"transform": {"features": {"x": {"bucketize": {"num_buckets": True}}}}},
            "transform.features.x.bucketize.num_buckets: True must be an integer >= 2",
        ),
        (
            {"transform": {"features": {"x": {"bucketize": {"num_buckets": 10**6}}}}},
            "transform.features.x.bucketize.num_buckets: 1000000 must be an integer >= 2 (at most",
        ),
        (
            {"transform": {"features": {"x": {"bucketize": {"num_buckets": None}}}}},
            "transform.features.x.bucketize.num_buckets: is required",
        ),
        (
            {"transform": {"features": {"tags": {"hash": {"buckets": 1e9}}}}},
            "transform.features.tags.hash.buckets: 1000000000.0 must be an integer >= 1",
        ),
        (
            {"transform": {"features": {"x": [{"fill_missing": NAN}, "z_score"]}}},
            "transform.features.x.fill_missing: not a number",
        ),
    ],
)
def test_a_bad_number_is_refused_naming_its_field(tmp_path, capsys, changes, field):
    line = _refused(capsys, _config(tmp_path, **changes))
    assert line.startswith(field), line


@pytest.mark.parametrize("size", [[0, 4], [5000, 5000], [True, 2], [32.0, 32], [32]])
def test_decode_resize_takes_two_sides_from_1_to_4096_pixels(tmp_path, capsys, size):
    changes = {
        "features__photo": {"type": "image", "required": False},
        "transform": {"features": {"photo": {"decode_resize": size}}},
    }
    line = _refused(capsys, _config(tmp_path, **changes))
    assert line.startswith("transform.features.photo.decode_resize: "), line
    assert line.endswith("must be [height, width] in pixels (1 to 4096)"), line


def test_the_largest_allowed_sizes_are_accepted(tmp_path, capsys):
    changes = {
        "features__photo": {"type": "image", "required": False},
        "features__vec": {"type": "float", "shape": [1_000_000], "required": False},
        "transform": {"features": {"photo": {"decode_resize": [4096, 4096]}}},
    }
    _accepted(capsys, _config(tmp_path, **changes))


# --- OUTPUT that cannot be a dataset folder ---------------------------------------------------


@pytest.mark.parametrize(
    "output, why",
    [
        ("/", "the root folder has no parent to stage the dataset in"),
        ("", "an empty path"),
        (".", "it ends in '.'"),
        ("out/..", "it ends in '..'"),
        ("out/../", "it ends in '..'"),
        ("gs://bucket", "a bucket root"),
        ("gs://bucket/", "a bucket root"),
        ("out\nput", "it holds a control character, U+000A"),
        ("out\t", "it holds a control character, U+0009"),
    ],
)
def test_an_output_without_a_parent_and_a_name_is_refused(tmp_path, capsys, output, why):
    line = _refused(capsys, _config(tmp_path), "--output", output)
    assert line.startswith(f"output.path: {output!r} cannot be a dataset folder ("), line
    assert why in line, line


def test_output_in_the_config_is_checked_like_the_flag(tmp_path, capsys):
    line = _refused(capsys, _config(tmp_path, output__path="data/.."))
    assert (
        line == "output.path: 'data/..' cannot be a dataset folder (it ends in '..': name a "
        "folder of the dataset's own)"
    )


def test_the_current_folder_and_the_folders_holding_it_are_refused(tmp_path, capsys, monkeypatch):
    work = tmp_path / "work" / "here"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    config = _config(tmp_path)
    for output in (str(work), str(work.parent)):
        line = _refused(capsys, config, "--output", output)
        assert (
            line == f"output.path: {output!r} cannot be a dataset folder (it is or holds the "
            "current folder)"
        )
    _accepted(capsys, config, "--output", str(work / "out"))


def test_the_home_folder_is_refused(tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    line = _refused(capsys, _config(tmp_path), "--output", str(home))
    assert line.endswith("cannot be a dataset folder (it is or holds the home folder)"), line


def test_an_output_under_a_file_is_refused(tmp_path, capsys):
    config = _config(tmp_path)
    output = str(tmp_path / "rows.csv" / "out" / "deeper")
    line = _refused(capsys, config, "--output", output)
    assert (
        line == f"output.path: {output!r} cannot be a dataset folder "
        f"({str(tmp_path / 'rows.csv')!r} is not a folder)"
    )


def test_an_output_name_too_long_for_its_staging_folder_is_refused(tmp_path, capsys):
    config = _config(tmp_path)
    line = _refused(capsys, config, "--output", str(tmp_path / ("n" * 231)))
    assert "its name is longer than 230 bytes" in line, line
    _accepted(capsys, config, "--output", str(tmp_path / ("n" * 230)))


def test_an_output_holding_a_nul_character_is_refused(tmp_path, capsys):
    line = _refused(capsys, _config(tmp_path), "--output", str(tmp_path / "a\0b"))
    assert line.startswith("output.path: ") and line.endswith("holds a NUL character"), line


# --- the YAML itself ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "[" * 20_000 + "]" * 20_000,
        "a: " + "{a: " * 20_000 + "1" + "}" * 20_000,
        "".join("  " * i + "a:\n" for i in range(2_000)),  # indentation: 2,000 is 4 MB
        "- " * 20_000 + "1\n",
    ],
    ids=["flow-lists", "flow-mappings", "block-mappings", "block-lists"],
)
def test_yaml_nested_thousands_of_levels_is_refused_in_one_line(tmp_path, capsys, text):
    config = _config(tmp_path, text=text)
    line = _refused(capsys, config)
    assert line == f"--config: {config!r} is nested too deeply (at most 32 levels)"


def test_yaml_nested_deeper_than_32_levels_is_refused_naming_where(tmp_path, capsys):
    text = yaml.safe_dump(BASE) + "transform: " + "[" * 40 + "]" * 40 + "\n"
    line = _refused(capsys, _config(tmp_path, text=text))
    assert line == "transform" + "[0]" * 31 + ": nested too deeply (at most 32 levels)"


def test_a_structure_that_contains_itself_is_refused(tmp_path, capsys):
    text = yaml.safe_dump(BASE).replace("name: mistakes", "name: &n [a, *n]")
    line = _refused(capsys, _config(tmp_path, text=text))
    assert line == "name[1]: contains itself (a YAML alias of its own anchor)"


def test_an_alias_bomb_is_refused_quickly(tmp_path, capsys):
    # "billion laughs": each level lists the one before 9 times; walked or printed in full, the
    # label would be 9**10 strings
    levels = ["  - &a0 [" + ", ".join(["lol"] * 9) + "]"]
    levels += [f"  - &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    text = yaml.safe_dump(BASE, sort_keys=False).replace(
        "label: name\n", "label:\n" + "\n".join(levels) + "\n"
    )
    started = time.monotonic()
    line = _refused(capsys, _config(tmp_path, text=text))
    assert time.monotonic() - started < 5
    assert line.startswith("label: [['lol', 'lol', "), line
    assert line.endswith(" is not one of the features") and len(line) < 250, line


def test_a_key_given_twice_in_one_mapping_is_refused(tmp_path, capsys):
    text = yaml.safe_dump(BASE, sort_keys=False).replace(
        "  x:\n", "  id:\n    type: float\n  x:\n", 1
    )
    config = _config(tmp_path, text=text)
    line = _refused(capsys, config)
    assert line.startswith(f"--config: {config!r} (line "), line
    assert line.endswith("): the key 'id' appears twice in one mapping"), line


def test_a_key_that_yaml_reads_as_null_is_refused(tmp_path, capsys):
    text = yaml.safe_dump(BASE, sort_keys=False).replace("  x:\n", "  null:\n", 1)
    line = _refused(capsys, _config(tmp_path, text=text))
    assert line.startswith("features.None: the key "), line
    assert " is null, not text" in line and line.endswith("quote it"), line


@pytest.mark.parametrize("key", ["2019", "no", "on", "2020-01-01", "1.0"])
def test_a_key_that_yaml_1_1_reads_as_no_text_is_its_text(tmp_path, key):
    """A plain key is the text written (pipelines.config.scalars), not YAML 1.1's boolean,
    number or date."""
    from pipelines.config.loader import load_config

    text = yaml.safe_dump(BASE, sort_keys=False).replace("  x:\n", f"  {key}:\n", 1)
    spec = load_config(_config(tmp_path, text=text))
    assert key in {f.name for f in spec.features}


def test_control_characters_in_names_and_values_stay_on_one_line(tmp_path, capsys):
    text = yaml.safe_dump(BASE, sort_keys=False)
    line = _refused(capsys, _config(tmp_path, text=text.replace("  x:\n", '  "x\\ny":\n', 1)))
    assert line == r"features.x\ny: 'x\ny' holds a control character (newline, tab, ...)"
    line = _refused(capsys, _config(tmp_path, text=text.replace("label: name", 'label: "a\\rb"')))
    assert line == r"label: 'a\rb' is not one of the features"
    line = _refused(capsys, _config(tmp_path, text=text.replace("key: id", 'key: "\\u2028"')))
    assert line == r"key: '\u2028' holds a control character (newline, tab, ...)"


def test_text_that_is_not_valid_unicode_is_refused(tmp_path, capsys):
    text = yaml.safe_dump(BASE, sort_keys=False).replace("label: name", 'label: "a\\ud800"')
    line = _refused(capsys, _config(tmp_path, text=text))
    assert line.startswith(r"label: 'a\ud800' is not valid text"), line


def test_huge_text_values_are_cut_short_in_the_message(tmp_path, capsys):
    line = _refused(capsys, _config(tmp_path, label="y" * 100_000))
    assert line.startswith("label: 'yyyy") and line.endswith("' is not one of the features")
    assert len(line) < 200, line


@pytest.mark.parametrize(
    "text, line",
    [
        ("sources: 5\n", "name: is required"),
        ("name: t\nsources: 5\n", "sources: must be a list of one or more sources"),
        ("name: t\nsources: [5]\n", "sources[0]: must be a mapping"),
        ("- 1\n", "config: must be a mapping"),
        ("name: t\nx: !!int abc\n", None),
        ("name: t\nx: " + "9" * 5000 + "\n", None),
    ],
)
def test_a_config_of_the_wrong_shape_is_refused(tmp_path, capsys, text, line):
    config = _config(tmp_path, text=text)
    got = _refused(capsys, config)
    assert got == line if line else got.startswith(f"--config: {config!r} is not valid YAML: ")


# --- names the trainer derives ------------------------------------------------------------------


def test_a_feature_named_like_a_presence_input_is_refused(tmp_path, capsys):
    features = dict(BASE["features"], x__present={"type": "float", "required": False})
    line = _refused(capsys, _config(tmp_path, features=features))
    assert line == (
        "features.x__present: clashes with the presence input the trainer derives for feature "
        "'x' (NAME__present); rename one of them"
    )
    # without a feature `x`, the name is a name like any other
    del features["x"]
    _accepted(capsys, _config(tmp_path, features=features))


def test_the_presence_suffix_is_the_trainers():
    """The trainer derives presence inputs with the suffix that config loading refuses."""
    import trainer.recipe.words

    assert trainer.recipe.words.PRESENT_SUFFIX is PRESENT_SUFFIX
    assert "PRESENT_SUFFIX =" not in (ROOT / "trainer" / "recipe" / "words.py").read_text()


def test_refusals_do_not_depend_on_the_working_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = os.path.relpath(_config(tmp_path, label=["x"]))
    assert _refused(capsys, config) == "label: ['x'] is not one of the features"


@pytest.mark.parametrize(
    "changes, line",
    [
        ({"name": "abc\n"}, r"name: 'abc\n' must match [a-z0-9_-]+"),
        (
            {"splits": {"train": 0.5, "transform": 0.5}},
            "splits: split name 'transform' must match [a-z0-9_-]+ (at most 100 characters; not "
            "rejected, transform, _spill)",
        ),
        ({"splits": {"train": 0.5, "s" * 101: 0.5}}, "splits: split name 'sssss"),
        (
            {"features__x": {"type": "float", "required": False, "min": 10**400}},
            "features.x.min: 1000000",
        ),
        ({"sources__0__path": "rows\0.csv"}, r"sources[0].path: 'rows\x00.csv' holds a NUL"),
    ],
)
def test_names_and_paths_that_would_fail_later_are_refused(tmp_path, capsys, changes, line):
    got = _refused(capsys, _config(tmp_path, **changes))
    assert got.startswith(line), got


@pytest.mark.parametrize(
    "source, message",
    [
        ("x = " + "-" * 100_000 + "1\n", "is nested too deeply to parse"),
        ("x = " + "(" * 300 + ")" * 300 + "\n", "is not valid Python (line 1)"),
    ],
)
def test_a_transform_module_too_deep_to_parse_is_refused(tmp_path, capsys, source, message):
    (tmp_path / "prep.py").write_text(source)
    line = _refused(capsys, _config(tmp_path, transform={"module": "prep.py"}))
    assert line == f"transform.module: {str(tmp_path / 'prep.py')!r} {message}"


@pytest.mark.parametrize(
    "fmt, options, message",
    [
        ("binary", {"record_bytes": 4, "struct": "ü", "fields": ["a"]},
         "sources[0].options.struct: invalid struct format 'ü'"),
        ("binary", {"record_bytes": 2**40}, "sources[0].options.record_bytes: must be at most"),
        ("csv", {"encoding": "rot13"},
         "sources[0].options.encoding: 'rot13' is not a text encoding"),
        ("jsonl", {"encoding": "base64"},
         "sources[0].options.encoding: 'base64' is not a text encoding"),
    ],
)  # fmt: skip
def test_source_options_that_would_fail_the_job_are_refused(tmp_path, fmt, options, message):
    (tmp_path / "in.dat").write_bytes(b"\0" * 8)
    raw = {
        "name": "t",
        "sources": [{"name": "s", "format": fmt, "path": "in.dat", "options": options}],
        "features": {"a": {"type": "int", "required": False}},
        "output": {"path": "out"},
    }
    with pytest.raises(ConfigError) as e:
        parse_config(raw, base_dir=str(tmp_path))
    assert str(e.value).startswith(message), str(e.value)


def test_more_features_than_a_config_may_declare_are_refused_at_config_time(tmp_path, capsys):
    """10,000 features trained at 4.3 GB without finishing an epoch: a config declares at most
    1,000 (the model reads every number through one layer, which trains 1,000 in a minute)."""
    many = {f"f{i}": {"type": "float", "required": False} for i in range(10_000)}
    line = _refused(capsys, _config(tmp_path, features={**BASE["features"], **many}))
    assert line == (
        "features: 10,004 features, more than the 1,000 a config may declare (each is a column "
        "of the statistics and a model input of its own); declare values that belong together "
        "as one list feature (shape: [n]), or leave out what is not needed"
    )
    allowed = {f"f{i}": {"type": "float", "required": False} for i in range(996)}
    _accepted(capsys, _config(tmp_path, features={**BASE["features"], **allowed}))


def test_a_mount_point_or_a_read_only_output_is_refused_before_any_work(tmp_path, capsys):
    """Found only after the whole job before: a mount point cannot be renamed over, a read-only
    file system cannot be written. Both are refused by the checks (exit 2)."""
    from tests.reliability.mounts import tmpfs

    with tmpfs(tmp_path / "ro", "ro,size=1m") as mount:
        config = _config(tmp_path)
        line = _refused(capsys, config, "--output", str(mount))
        assert line == (
            f"output.path: {str(mount)!r} is a mount point: a dataset is staged beside OUTPUT "
            "and renamed over it, which a mount point refuses; give a folder inside it"
        )
        line = _refused(capsys, config, "--output", str(mount / "out" / "d"))
        assert line == (
            f"output.path: {str(mount / 'out' / 'd')!r} cannot be written: {str(mount)!r} is "
            "not writable (its permissions, or a read-only file system); nothing was read"
        )
