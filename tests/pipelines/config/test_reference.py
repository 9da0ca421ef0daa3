"""The config reference (`pipelines.config.reference`) says what the parser does: the keys of
every mapping and every source format's options, their defaults and which take null; the
generated page and JSON Schema are up to date; every config the parser accepts is valid against
the schema, and a config with an unknown key or a wrong value is not."""

from __future__ import annotations

import ast
import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from pipelines.config import doc, reference
from pipelines.config.fields import ConfigError
from pipelines.config.loader import DEFAULT_SPLITS, parse_config
from pipelines.config.reference import NAME, OPS, PARTS, REQUIRED, TYPES
from pipelines.config.transform import MAX_IMAGE_SIDE
from transforms.contract.config import (
    ANOMALY_KINDS,
    FEATURE_TYPES,
    SOURCE_FORMATS,
    TRANSFORM_OPS,
    OptionError,
)
from transforms.sources import registry

ROOT = Path(__file__).resolve().parents[3]
REGENERATE = f"run `{doc.COMMAND}` (from the repository root) to regenerate it"
SCHEMA = doc.schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
TOP = yaml.safe_load(reference.TOP.example)
# The least options each format takes (a format missing here takes none).
MINIMAL = {
    "binary": {"record_bytes": 4},
    "sql": {"url": "sqlite:///data.db", "table": "t"},
    "bigquery": {"table": "my-proj:analytics.events"},
}
OPTION_KEYS = [
    (p.format, k) for p in PARTS if p.kind == "options" for k in p.keys if "." not in k.name
]


def _errors(config) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(config)
    ]


def _allowed_in(message: str) -> set[str]:
    """The keys an `unknown key (allowed: a, b)` message lists."""
    found = re.search(r"unknown key \(allowed: ([^)]*)\)", message)
    assert found, message
    return {k for k in found[1].split(", ") if k}


def _options(fmt: str, **changes) -> dict:
    """The format's least options with `changes`; a change to None leaves the option out."""
    out = {**MINIMAL.get(fmt, {}), **changes}
    return {k: v for k, v in out.items() if v is not None}


# --- the reference itself ---------------------------------------------------------------------


def test_every_key_has_a_type_a_description_and_an_example():
    for part in PARTS:
        assert part.intro and part.example, part.title
        for key in part.keys:
            where = f"{part.title}: {key.name}"
            assert key.type in TYPES, where
            assert key.description.strip().endswith("."), where
            assert key.example is not None, where
            if key.allowed:
                assert key.type in ("string", "list of strings", "string or list of strings"), where
        names = [k.name for k in part.keys]
        assert len(names) == len(set(names)), part.title


def test_every_example_and_default_is_valid_against_its_own_schema():
    for part in PARTS:
        for key in part.keys:
            own = jsonschema.Draft202012Validator({"$defs": SCHEMA["$defs"], **doc.key_schema(key)})
            assert not list(own.iter_errors(key.example)), f"{part.title}: {key.name} example"
            if key.default not in (None, REQUIRED):
                assert not list(own.iter_errors(key.default)), f"{part.title}: {key.name} default"
            assert own.is_valid(None) == key.accepts_null, f"{part.title}: {key.name} null"


def test_the_reference_and_its_renderer_import_neither_beam_nor_tensorflow_nor_yaml():
    code = (
        "import sys, pipelines.config.doc; "
        "print(sorted(m for m in ('apache_beam', 'tensorflow', 'yaml') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert (out.returncode, out.stdout.strip()) == (0, "[]"), out.stderr


# --- source formats: the reference against each format's options checker ------------------------


def test_every_format_of_the_contract_has_its_options_in_the_reference():
    assert [p.format for p in PARTS if p.kind == "options"] == list(SOURCE_FORMATS)


@pytest.mark.parametrize("fmt", SOURCE_FORMATS)
def test_the_options_and_defaults_are_the_checkers(fmt):
    """The options a format's checker returns (complete with its defaults) are the reference's,
    with the reference's defaults; an unknown option's error lists none the reference lacks."""
    part = reference.options_part(fmt)
    minimal = MINIMAL.get(fmt, {})
    returned = registry.check_options(fmt, minimal).to_dict()
    assert set(returned) == part.key_names()
    documented = {k.name: k.default for k in part.keys if k.name in part.key_names()}
    assert {k: v for k, v in returned.items() if k not in minimal} == {
        k: v for k, v in documented.items() if k not in minimal
    }
    with pytest.raises(OptionError) as e:
        registry.check_options(fmt, {**minimal, "not_an_option": 1})
    assert e.value.field == "not_an_option"
    assert _allowed_in(e.value.message) <= part.key_names()


@pytest.mark.parametrize(("fmt", "key"), OPTION_KEYS, ids=[f"{f}.{k.name}" for f, k in OPTION_KEYS])
def test_every_option_example_is_accepted(fmt, key):
    registry.check_options(fmt, _options(fmt, **key.context, **{key.name: key.example}))
    if key.required:
        with pytest.raises(OptionError) as e:
            registry.check_options(fmt, _options(fmt, **{key.name: None}))
        assert (e.value.field, e.value.message) == (key.name, "is required")


def test_null_is_the_default_exactly_for_the_options_the_reference_says():
    """`option: null` gives what leaving it out gives where the reference says null is the
    default, and an error naming the option elsewhere."""
    untested = []
    for fmt, key in OPTION_KEYS:
        for base in (_options(fmt, **key.context), _options(fmt)):
            base.pop(key.name, None)
            try:
                expected = registry.check_options(fmt, base)
            except OptionError:
                continue
            if key.accepts_null:
                assert registry.check_options(fmt, {**base, key.name: None}) == expected, key
            else:
                with pytest.raises(OptionError) as e:
                    registry.check_options(fmt, {**base, key.name: None})
                assert e.value.field == key.name, (fmt, key.name)
            break
        else:
            untested.append(f"{fmt}.{key.name}")
    # these are what the least options give: without them no base is valid
    assert untested == ["binary.record_bytes", "sql.url", "sql.table", "bigquery.table"]


def test_the_byte_ranges_of_binary_records_are_the_checkers():
    from transforms.sources.binary import BinaryOptions

    part = reference.options_part("binary")
    keys = {k.name.rpartition(".")[2]: k for k in part.keys if k.name.startswith("fields.<name>.")}
    fields = {"a": {k: v.example for k, v in keys.items() if v.required}}
    returned = registry.check_options("binary", {"record_bytes": 8, "fields": fields})
    assert isinstance(returned, BinaryOptions) and isinstance(returned.fields, dict)
    assert returned.fields["a"] == {
        **fields["a"],
        **{k: v.default for k, v in keys.items() if not v.required},
    }
    with pytest.raises(OptionError) as e:
        registry.check_options(
            "binary", {"record_bytes": 8, "fields": {"a": {**fields["a"], "bits": 3}}}
        )
    assert (e.value.field, _allowed_in(e.value.message)) == ("fields.a.bits", set(keys))
    for name, key in keys.items():
        if key.required:
            with pytest.raises(OptionError) as e:
                rest = {k: v for k, v in fields["a"].items() if k != name}
                registry.check_options("binary", {"record_bytes": 8, "fields": {"a": rest}})
            assert e.value.field == f"fields.a.{name}"


def test_the_allowed_values_of_options_are_the_checkers():
    from transforms.sources import bigquery, binary, images, tfrecord

    allowed = {
        (p.format, k.name): k.allowed
        for p in PARTS
        if p.kind == "options"
        for k in p.keys
        if k.allowed
    }
    assert allowed == {
        ("tfrecord", "compression"): tfrecord.COMPRESSION_CHOICES,
        ("binary", "fields.<name>.type"): binary.RANGE_TYPES,
        ("binary", "fields.<name>.endian"): tuple(binary.ENDIANS),
        ("images", "label_from"): images.LABEL_FROM,
        ("images", "encode"): images.ENCODINGS,
        ("bigquery", "method"): bigquery.METHODS,
        ("bigquery", "query_priority"): bigquery.PRIORITIES,
    }
    assert reference.options_part("images").key("extensions").default == list(images.EXTENSIONS)


# --- the config's own mappings: the reference against pipelines.config -------------------------


def _config(**changes) -> dict:
    cfg = copy.deepcopy(TOP)
    cfg.update(changes)
    return cfg


def _refused(cfg, tmp_path) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        parse_config(cfg, base_dir=str(tmp_path))
    return e.value


UNKNOWN_KEY_PLACES = {
    "": lambda c: c.update(not_a_key=1),
    "sources[]": lambda c: c["sources"][0].update(not_a_key=1),
    "features.<name>": lambda c: c["features"]["id"].update(not_a_key=1),
    "output": lambda c: c["output"].update(not_a_key=1),
    "transform": lambda c: c.update(
        transform={"features": {"island": "vocabulary"}, "not_a_key": 1}
    ),
    "validation": lambda c: c.update(validation={"not_a_key": 1}),
}


@pytest.mark.parametrize(
    "place, limits",
    [
        ("validation.drift", {"drift": {"not_a_key": 1}}),
        ("validation.skew", {"skew": {"not_a_key": 1}}),
        ("validation.features.<name>", {"features": {"island": {"not_a_key": 1}}}),
        ("validation.features.<name>.drift", {"features": {"island": {"drift": {"not_a_key": 1}}}}),
    ],
)
def test_the_parser_accepts_exactly_the_validation_limits_of_the_reference(place, limits, tmp_path):
    error = _refused(_config(validation=limits), tmp_path)
    assert error.field.endswith("not_a_key")
    prefix = place.removeprefix("validation.") + "."
    documented = {
        k.name.removeprefix(prefix)
        for k in reference.VALIDATION.keys
        if k.name.startswith(prefix) and "." not in k.name.removeprefix(prefix)
    }
    assert _allowed_in(str(error)) == documented
    assert _errors(_config(validation=limits)), "the schema accepts the unknown key too"


def test_the_validation_limits_and_defaults_are_the_parsers(tmp_path):
    spec = parse_config(_config(validation={}), base_dir=str(tmp_path)).validation
    assert list(spec.block) == reference.VALIDATION.key("block").default
    assert reference.VALIDATION.key("block").allowed == ANOMALY_KINDS
    assert (spec.schema, spec.baseline, spec.limits, spec.features) == (None, None, (), ())
    every = {
        "max_missing_rate": 0.5,
        "drift": {"l_infinity": 0.1, "jensen_shannon": 0.2},
        "skew": {"l_infinity": 0.3, "jensen_shannon": 0.4},
    }
    spec = parse_config(
        _config(validation={**every, "features": {"island": every}}), base_dir=str(tmp_path)
    ).validation
    limits = (("drift_js", 0.2), ("drift_linf", 0.1), ("max_missing_rate", 0.5),
              ("skew_js", 0.4), ("skew_linf", 0.3))  # fmt: skip
    assert spec.limits == limits and spec.features == (("island", limits),)


@pytest.mark.parametrize("path", UNKNOWN_KEY_PLACES)
def test_the_parser_accepts_exactly_the_keys_of_the_reference(path, tmp_path):
    cfg = _config()
    UNKNOWN_KEY_PLACES[path](cfg)
    error = _refused(cfg, tmp_path)
    assert error.field.endswith("not_a_key")
    assert _allowed_in(str(error)) == reference.key_names(path)
    assert _errors(cfg), "the schema accepts the unknown key too"


def test_the_parameters_of_the_ops_are_the_parsers(tmp_path):
    ops = {k.name for k in OPS.keys if "." not in k.name}
    assert ops == set(TRANSFORM_OPS)
    params = reference.op_params(REQUIRED)
    assert set(params) == {"bucketize", "vocabulary", "hash"}
    assert OPS.key("decode_resize").maximum == MAX_IMAGE_SIDE
    for op, feature in (
        ("bucketize", "bill_length_mm"),
        ("vocabulary", "island"),
        ("hash", "island"),
    ):
        cfg = _config(transform={"features": {feature: {op: {"not_a_key": 1}}}})
        error = _refused(cfg, tmp_path)
        assert _allowed_in(str(error)) == set(params[op]), op
    spec = parse_config(
        _config(transform={"features": {"island": {"vocabulary": {}}}}), base_dir=str(tmp_path)
    )
    defaults = {name: d for name, (d, _, _) in params["vocabulary"].items()}
    assert spec.transform.features["island"][0].params == defaults
    assert spec.transform.materialize == reference.TRANSFORM.key("materialize").default


def test_the_defaults_of_the_config_are_the_parsers(tmp_path):
    cfg = {
        "name": "least",
        "sources": [{"name": "rows", "format": "csv", "path": "rows.csv"}],
        "features": {"x": {"type": "int"}},
        "output": {"path": "out/least"},
    }
    spec = parse_config(cfg, base_dir=str(tmp_path))
    top, feature, output = reference.TOP, reference.FEATURE, reference.OUTPUT
    assert (spec.combine, spec.key, spec.label, spec.transform) == (
        top.key("combine").default, top.key("key").default, top.key("label").default,
        top.key("transform").default,
    )  # fmt: skip
    assert dict(spec.splits) == top.key("splits").default == DEFAULT_SPLITS
    x = spec.features[0]
    parsed = {
        "shape": list(x.shape), "required": x.required, "default": x.default, "values": x.values,
        "min": x.min, "max": x.max, "source": x.source, "image_size": x.image_size,
    }  # fmt: skip
    assert parsed == {k: feature.key(k).default for k in parsed}
    assert feature.key("type").allowed == FEATURE_TYPES
    out = spec.output
    parsed = {
        "compression": out.compression, "compression_level": out.compression_level,
        "shard_size_mb": out.shard_size_mb, "max_rejected": out.max_rejected,
        "max_rejected_fraction": out.max_rejected_fraction, "allow": list(out.allow),
    }  # fmt: skip
    assert parsed == {k: output.key(k).default for k in parsed}


def _with_transform(cfg: dict) -> dict:
    cfg["transform"] = {"features": {"island": "vocabulary"}}
    return cfg["transform"]


# Where each part's mapping is in a config made from the top-level example.
MAPPINGS = {
    "": lambda c: c,
    "sources[]": lambda c: c["sources"][0],
    "features.<name>": lambda c: c["features"]["bill_length_mm"],
    "splits": lambda c: c["splits"],
    "output": lambda c: c["output"],
    "transform": _with_transform,
    "validation": lambda c: c.setdefault("validation", {}),
}


def _outcome(cfg, tmp_path):
    """What the parser makes of `cfg` (output given as --output): the spec, or the error."""
    try:
        return parse_config(copy.deepcopy(cfg), base_dir=str(tmp_path), output=str(tmp_path / "o"))
    except ConfigError as e:
        return str(e)


@pytest.mark.parametrize("path", MAPPINGS)
def test_null_is_the_default_exactly_for_the_config_keys_the_reference_says(path, tmp_path):
    """`key: null` is read as if the key were left out where the reference says null is the
    default (the schema agrees), and is an error naming the key elsewhere."""
    for key in reference.part(path).keys:
        if "." in key.name:
            continue
        name = "train" if key.name == NAME else key.name
        absent, null = _config(), _config()
        MAPPINGS[path](absent).pop(name, None)
        MAPPINGS[path](null)[name] = None
        if key.accepts_null:
            assert _outcome(null, tmp_path) == _outcome(absent, tmp_path), key.name
            assert bool(_errors(null)) == bool(_errors(absent)), key.name
        else:
            error = _outcome(null, tmp_path)
            assert isinstance(error, str) and f"{name}: " in error, (key.name, error)
            assert _errors(null), key.name


# --- examples: the reference's own, the repository's and the tests' configs -----------------------


def _part_config(part) -> dict:
    """A part's example as a whole config: its top-level keys over the top-level example."""
    return _config(**yaml.safe_load(part.example))


@pytest.mark.parametrize("part", PARTS, ids=[p.title for p in PARTS])
def test_the_example_of_every_part_is_a_valid_config(part, tmp_path):
    cfg = _part_config(part)
    parse_config(copy.deepcopy(cfg), base_dir=str(tmp_path))
    assert not _errors(cfg)
    if part.kind == "options":
        assert {s["format"] for s in cfg["sources"]} == {part.format}


def _literal_configs() -> list[tuple[str, dict]]:
    """The configs written as literals in the tests (a dict with name, sources and features)."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not isinstance(node, ast.Dict):
                continue
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"name", "sources", "features"} <= keys:
                try:
                    found.append(
                        (f"{path.relative_to(ROOT)}:{node.lineno}", ast.literal_eval(node))
                    )
                except ValueError:  # built from variables
                    continue
    return found


EXAMPLE_FILES = sorted((ROOT / "examples").rglob("*.yaml"))


def _repository_configs(tmp_path) -> list[tuple[str, dict, str]]:
    """(where, config, its folder) for the example configs and the tests' literal configs that
    the parser accepts."""
    configs = [
        (str(p.relative_to(ROOT)), yaml.safe_load(p.read_text("utf-8")), str(p.parent))
        for p in EXAMPLE_FILES
    ]
    configs += [(where, cfg, str(tmp_path)) for where, cfg in _literal_configs()]
    accepted = []
    for where, cfg, folder in configs:
        try:
            parse_config(copy.deepcopy(cfg), base_dir=folder)
        except ConfigError:
            continue  # a test's deliberate mistake, or a file it writes beside the config
        accepted.append((where, cfg, folder))
    return accepted


def test_every_config_of_the_repository_is_valid_against_the_schema(tmp_path):
    configs = _repository_configs(tmp_path)
    wheres = {where for where, _, _ in configs}
    assert {str(p.relative_to(ROOT)) for p in EXAMPLE_FILES} <= wheres
    assert "tests/pipelines/test_config.py:10" in wheres and len(configs) >= 10
    invalid = {where: errors for where, cfg, _ in configs if (errors := _errors(cfg))}
    assert not invalid


MISTAKES = {
    "an unknown top-level key": lambda c: c.update(labels="species"),
    "an unknown source key": lambda c: c["sources"][0].update(formats="csv"),
    "an unknown option": lambda c: c["sources"][0].update(options={"delimitr": ";"}),
    "an option of another format": lambda c: c["sources"][0].update(
        options={"columns": ["a"]}, format="jsonl"
    ),
    "an unknown feature key": lambda c: c["features"]["id"].update(requried=False),
    "an unknown output key": lambda c: c["output"].update(compresion="gzip"),
    "a format not in the contract": lambda c: c["sources"][0].update(format="xlsx"),
    "a feature type not in the contract": lambda c: c["features"]["id"].update(type="integer"),
    "a compression not in the contract": lambda c: c["output"].update(compression="zstd"),
    "a combine not in the contract": lambda c: c.update(combine="merge"),
    "a tfrecord compression not in the contract": lambda c: c["sources"][0].update(
        format="tfrecord", options={"compression": "lz4"}
    ),
    "a split named like a dataset folder": lambda c: c.update(
        splits={"train": 0.5, "rejected": 0.5}
    ),
    "a shard size beyond its bound": lambda c: c["output"].update(shard_size_mb=20000),
    "an unknown transform op": lambda c: c.update(transform={"features": {"island": "one_hot"}}),
    "an op parameter of another op": lambda c: c.update(
        transform={"features": {"island": {"vocabulary": {"buckets": 4}}}}
    ),
    "a query source with a path": lambda c: c["sources"][0].update(
        format="sql", options={"url": "sqlite:///a.db", "table": "t"}
    ),
    "a file source without a path": lambda c: c["sources"][0].pop("path"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_is_refused_by_the_parser_and_by_the_schema(mistake, tmp_path):
    cfg = _config()
    MISTAKES[mistake](cfg)
    _refused(copy.deepcopy(cfg), tmp_path)
    assert _errors(cfg), f"the schema accepts {mistake}"


# --- the generated files -------------------------------------------------------------------------


@pytest.mark.parametrize("path", [doc.MARKDOWN, doc.SCHEMA])
def test_the_generated_file_is_up_to_date(path):
    target = ROOT / path
    assert target.is_file(), f"{path} is missing: {REGENERATE}"
    assert target.read_text("utf-8") == doc.outputs()[path], f"{path} is out of date: {REGENERATE}"


def test_the_schema_is_a_draft_2020_12_schema_with_every_key_of_the_reference():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    text = json.dumps(SCHEMA)
    for part in PARTS:
        for key in part.keys:
            assert json.dumps(key.description) in text, f"{part.title}: {key.name}"


def test_the_page_has_a_row_for_every_key_and_says_how_to_regenerate_it():
    page = doc.markdown()
    assert doc.COMMAND in page.splitlines()[2]
    for part in PARTS:
        assert f"## {part.title}\n" in page
        for key in part.keys:
            assert f"| `{key.name}` | {key.type} |" in page, key.name
    assert "| `<name>` | number |" in page and NAME == "<name>"
