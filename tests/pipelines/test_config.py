"""Config validation: good configs load typed; every mistake names its field, in one line."""

import os

import pytest

from pipelines.config import ConfigError, load_config, parse_config

BASE = {
    "name": "penguins",
    "sources": [{"name": "m", "format": "csv", "path": "data/*.csv"}],
    "features": {"year": {"type": "int"}, "bill": {"type": "float", "required": False, "default": 0}},
    "output": {"path": "out/p"},
}


def _with(**changes):
    import copy

    cfg = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        target = cfg
        *path, last = dotted.split("__")
        for p in path:
            target = target[int(p)] if isinstance(target, list) else target[p]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value
    return cfg


_DELETE = object()


def test_defaults_and_resolution_against_the_config_folder():
    spec = parse_config(_with(), base_dir="/cfg")
    assert spec.sources[0].path == "/cfg/data/*.csv"
    assert spec.sources[0].options["delimiter"] == ","
    assert spec.sources[0].options["null_values"] == [""]
    assert spec.output.path == "/cfg/out/p"
    assert spec.output.compression == "gzip"
    assert spec.output.compression_level == 6
    assert spec.output.shard_size_mb == 128
    assert spec.splits == (("train", 0.9), ("eval", 0.1))
    assert spec.combine == "union"
    bill = {f.name: f for f in spec.features}["bill"]
    assert (bill.required, bill.default, bill.to_manifest()) == (
        False, [0.0], {"type": "float", "shape": [], "required": False, "default": 0.0})


def test_output_override_and_remote_paths():
    spec = parse_config(_with(), base_dir="/cfg", output="gs://b/x/")
    assert spec.output.path == "gs://b/x"


def test_feature_source_splits_at_the_first_dot():
    cfg = _with(features__photo={"type": "string", "source": "m.file.name with space"})
    f = {f.name: f for f in parse_config(cfg, base_dir="/").features}["photo"]
    assert (f.source, f.field) == ("m", "file.name with space")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"features__year__type": "integer"},
         "features.year.type: unknown type 'integer' (int, float, string, bytes, image)"),
        ({"name": "Bad Name"}, "name: 'Bad Name' must match [a-z0-9_-]+"),
        ({"sources": []}, "sources: must be a list of one or more sources"),
        ({"sources__0__format": "xls"}, "sources[0].format: unknown format 'xls'"),
        ({"sources__0__path": _DELETE}, "sources[0].path: is required for file formats"),
        ({"sources__0__options": {"delimiter": ";;"}}, "sources[0].options.delimiter: ';;' must be one character"),
        ({"sources__0__options": {"header": False}}, "sources[0].options.columns: is required when header is false"),
        ({"sources__0__options": {"encoding": "klingon"}}, "sources[0].options.encoding: unknown encoding 'klingon'"),
        ({"sources__0__bogus": 1}, "sources[0].bogus: unknown key"),
        ({"features__year__shape": [0]}, "features.year.shape: [0]: the length must be"),
        ({"features__year__min": "low"}, "features.year.min: 'low' is not a number"),
        ({"features__year__values": ["x"]}, "features.year.values: not an integer"),
        ({"features__bill__default": "abc"}, "features.bill.default: not a number"),
        ({"features__year__default": 1}, "features.year.default: a required feature takes no default"),
        ({"features__year__source": "nope.year"}, "features.year.source: no source named 'nope'"),
        ({"label": "species"}, "label: 'species' is not one of the features"),
        ({"splits": {"train": 0.8, "eval": 0.1}}, "splits: fractions sum to 0.9, not 1"),
        ({"splits": {"train": 1.5}}, "splits.train: 1.5 must be a fraction in (0, 1]"),
        ({"combine": "join"}, "combine: 'join' needs a `key` to join on"),
        ({"combine": "merge"}, "combine: unknown value 'merge' (union, join)"),
        ({"output__compression": "lz4"}, "output.compression: unknown value 'lz4' (gzip, zlib, none)"),
        ({"output__shard_size_mb": 0}, "output.shard_size_mb: 0 must be a positive number"),
        ({"output__compression_level": 0}, "output.compression_level: 0 must be an integer from 1 to 9"),
        ({"output__path": _DELETE}, "output.path: is required (or give --output)"),
    ],
)
def test_errors_name_the_field(changes, message):
    with pytest.raises(ConfigError) as e:
        parse_config(_with(**changes), base_dir="/cfg")
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_load_config_reports_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="^--config: cannot read"):
        load_config(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(str(bad))


def test_config_sha256_is_of_the_file_bytes(tmp_path):
    import hashlib

    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    spec = load_config(str(path))
    assert spec.config_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert spec.output.path == os.path.join(str(tmp_path), "out/p")
