"""Config validation: good configs load typed; every mistake names its field, in one line."""

import os

import pytest

from pipelines.config.loader import ConfigError, load_config, parse_config
from transforms.contract.manifest import ManifestFeature

BASE = {
    "name": "penguins",
    "sources": [{"name": "m", "format": "csv", "path": "data/*.csv"}],
    "features": {
        "year": {"type": "int"},
        "bill": {"type": "float", "required": False, "default": 0},
    },
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
    from transforms.sources.csv import CsvOptions

    spec = parse_config(_with(), base_dir="/cfg")
    assert spec.sources[0].path == "/cfg/data/*.csv"
    assert spec.sources[0].options_as(CsvOptions).delimiter == ","
    assert spec.sources[0].options_as(CsvOptions).null_values == [""]
    assert spec.output.path == "/cfg/out/p"
    assert spec.output.compression == "gzip"
    assert spec.output.compression_level == 6
    assert spec.output.shard_size_mb == 128
    assert (spec.output.max_rejected, spec.output.max_rejected_fraction) == (None, None)
    assert spec.splits == (("train", 0.9), ("eval", 0.1))
    assert spec.combine == "union"
    bill = {f.name: f for f in spec.features}["bill"]
    assert (bill.required, bill.default, ManifestFeature.of(bill).to_dict()) == (
        False,
        [0.0],
        {"type": "float", "shape": [], "required": False, "default": 0.0},
    )


def test_rejection_limits():
    spec = parse_config(
        _with(output__max_rejected=0, output__max_rejected_fraction=0.05), base_dir="/cfg"
    )
    assert (spec.output.max_rejected, spec.output.max_rejected_fraction) == (0, 0.05)
    spec = parse_config(_with(output__max_rejected_fraction=1), base_dir="/cfg")
    assert spec.output.max_rejected_fraction == 1.0


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
        (
            {"features__year__type": "integer"},
            "features.year.type: unknown type 'integer' (int, float, string, bytes, image)",
        ),
        ({"name": "Bad Name"}, "name: 'Bad Name' must match [a-z0-9_-]+"),
        ({"sources": []}, "sources: must be a list of one or more sources"),
        ({"sources__0__format": "xls"}, "sources[0].format: unknown format 'xls'"),
        ({"sources__0__path": _DELETE}, "sources[0].path: is required for file formats"),
        (
            {"sources__0__options": {"delimiter": ";;"}},
            "sources[0].options.delimiter: ';;' must be one character",
        ),
        (
            {"sources__0__options": {"header": False}},
            "sources[0].options.columns: is required when header is false",
        ),
        (
            {"sources__0__options": {"encoding": "klingon"}},
            "sources[0].options.encoding: unknown encoding 'klingon'",
        ),
        ({"sources__0__bogus": 1}, "sources[0].bogus: unknown key"),
        ({"features__year__shape": [0]}, "features.year.shape: [0]: the length must be"),
        ({"features__year__min": "low"}, "features.year.min: 'low' is not a number"),
        ({"features__year__values": ["x"]}, "features.year.values: not an integer"),
        ({"features__bill__default": "abc"}, "features.bill.default: not a number"),
        (
            {"features__year__default": 1},
            "features.year.default: a required feature takes no default",
        ),
        ({"features__year__source": "nope.year"}, "features.year.source: no source named 'nope'"),
        ({"label": "species"}, "label: 'species' is not one of the features"),
        ({"splits": {"train": 0.8, "eval": 0.1}}, "splits: fractions sum to 0.9, not 1"),
        ({"splits": {"train": 1.5}}, "splits.train: 1.5 must be a fraction in (0, 1]"),
        ({"combine": "join"}, "combine: 'join' needs a `key` to join on"),
        ({"combine": "merge"}, "combine: unknown value 'merge' (union, join)"),
        (
            {"output__compression": "lz4"},
            "output.compression: unknown value 'lz4' (gzip, zlib, none)",
        ),
        ({"output__shard_size_mb": 0}, "output.shard_size_mb: 0 must be a positive number"),
        (
            {"output__compression_level": 0},
            "output.compression_level: 0 must be an integer from 1 to 9",
        ),
        ({"output__max_rejected": -1}, "output.max_rejected: -1 must be an integer >= 0"),
        ({"output__max_rejected": 0.5}, "output.max_rejected: 0.5 must be an integer >= 0"),
        (
            {"output__max_rejected_fraction": 1.5},
            "output.max_rejected_fraction: 1.5 must be a number from 0 to 1",
        ),
        (
            {"output__max_rejected_fraction": "5%"},
            "output.max_rejected_fraction: '5%' must be a number from 0 to 1",
        ),
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


# --- transform: -------------------------------------------------------------------------------

TRANSFORM_FEATURES = {
    "year": {"type": "int"},
    "bill": {"type": "float", "required": False},
    "mass": {"type": "float", "required": False, "default": 0},
    "island": {"type": "string"},
    "tags": {"type": "string", "shape": [None]},
    "photo": {"type": "image"},
    "photos": {"type": "image", "shape": [2]},
    "species": {"type": "string", "values": ["a", "b"]},
}


def _transform(transform, **changes):
    cfg = _with(features=TRANSFORM_FEATURES, label="species", transform=transform)
    for key, value in changes.items():
        cfg[key] = value
    return cfg


def test_transform_ops_are_parsed_with_defaults_in_order():
    from transforms.contract.config import TransformOp, TransformSpec

    spec = parse_config(
        _transform(
            {
                "features": {
                    "year": "z_score",
                    "bill": [{"fill_missing": "2.5"}, "log1p", {"bucketize": {"num_buckets": 3}}],
                    "island": {"vocabulary": {"top_k": 10}},
                    "tags": {"hash": {"buckets": 16}},
                    "photo": {"decode_resize": [32, 24]},
                    "mass": {"scale_to_0_1": None},
                },
            }
        ),
        base_dir="/cfg",
    )
    assert spec.transform == TransformSpec(
        features={
            "year": (TransformOp("z_score"),),
            "bill": (
                TransformOp("fill_missing", {"value": 2.5}),
                TransformOp("log1p"),
                TransformOp("bucketize", {"num_buckets": 3}),
            ),
            "island": (
                TransformOp(
                    "vocabulary", {"top_k": 10, "num_oov_buckets": 1, "frequency_threshold": None}
                ),
            ),
            "tags": (TransformOp("hash", {"buckets": 16}),),
            "photo": (TransformOp("decode_resize", {"size": (32, 24)}),),
            "mass": (TransformOp("scale_to_0_1"),),
        },
        module=None,
        materialize="raw",
    )


def test_transform_module_is_resolved_and_checked_without_running_it(tmp_path):
    (tmp_path / "prep.py").write_text(
        "import tensorflow_that_is_not_installed\n\n"
        "def preprocessing_fn(inputs):\n    return inputs\n"
    )
    spec = parse_config(
        _transform({"module": "prep.py", "materialize": "transformed"}), base_dir=str(tmp_path)
    )
    assert spec.transform.module == str(tmp_path / "prep.py")
    assert (spec.transform.features, spec.transform.materialize) == ({}, "transformed")
    (tmp_path / "alias.py").write_text("from somewhere import make as preprocessing_fn\n")
    assert parse_config(_transform({"module": "alias.py"}), base_dir=str(tmp_path)).transform


@pytest.mark.parametrize(
    "transform, message",
    [
        (
            {"features": {"nope": "z_score"}},
            "transform.features.nope: 'nope' is not one of the features",
        ),
        (
            {"features": {"year": "zscore"}},
            "transform.features.year: unknown op 'zscore' (fill_missing, log1p, z_score,",
        ),
        (
            {"features": {"island": "z_score"}},
            "transform.features.island.z_score: applies to int, float features, not string",
        ),
        (
            {"features": {"year": "decode_resize"}},
            "transform.features.year.decode_resize: applies to image features, not int",
        ),
        (
            {"features": {"photo": "vocabulary"}},
            "transform.features.photo.vocabulary: "
            "applies to int, string, bytes features, not image",
        ),
        (
            {"features": {"species": "vocabulary"}},
            "transform.features.species: the label passes through untransformed",
        ),
        (
            {"features": {"year": {"bucketize": {}}}},
            "transform.features.year.bucketize.num_buckets: is required",
        ),
        (
            {"features": {"year": {"bucketize": {"num_buckets": 1}}}},
            "transform.features.year.bucketize.num_buckets: 1 must be an integer >= 2",
        ),
        (
            {"features": {"year": {"bucketize": {"num_buckets": True}}}},
            "transform.features.year.bucketize.num_buckets: True must be an integer >= 2",
        ),
        (
            {"features": {"year": {"bucketize": {"buckets": 3}}}},
            "transform.features.year.bucketize.buckets: unknown key (allowed: num_buckets)",
        ),
        (
            {"features": {"island": {"vocabulary": {"num_oov_buckets": 0}}}},
            "transform.features.island.vocabulary.num_oov_buckets: 0 must be an integer >= 1",
        ),
        (
            {"features": {"island": {"vocabulary": {"top_k": "ten"}}}},
            "transform.features.island.vocabulary.top_k: 'ten' must be an integer >= 1",
        ),
        (
            {"features": {"island": {"hash": {"buckets": 0}}}},
            "transform.features.island.hash.buckets: 0 must be an integer >= 1",
        ),
        ({"features": {"island": "hash"}}, "transform.features.island.hash.buckets: is required"),
        (
            {"features": {"year": {"z_score": {"x": 1}}}},
            "transform.features.year.z_score: takes no parameters, got {'x': 1}",
        ),
        (
            {"features": {"photo": {"decode_resize": [0, 3]}}},
            "transform.features.photo.decode_resize: [0, 3] must be [height, width] in pixels",
        ),
        (
            {"features": {"photo": {"decode_resize": 32}}},
            "transform.features.photo.decode_resize: 32 must be [height, width]",
        ),
        (
            {"features": {"photos": {"decode_resize": [2, 2]}}},
            "transform.features.photos.decode_resize: applies to scalar image features",
        ),
        (
            {"features": {"year": {"fill_missing": 0}}},
            "transform.features.year.fill_missing: 'year' is never missing (required)",
        ),
        (
            {"features": {"mass": [{"fill_missing": 0}, "z_score"]}},
            "transform.features.mass.fill_missing: 'mass' is never missing (it has a default)",
        ),
        (
            {"features": {"tags": {"fill_missing": "x"}}},
            "transform.features.tags.fill_missing: a variable-length feature has no missing value",
        ),
        (
            {"features": {"bill": "fill_missing"}},
            "transform.features.bill.fill_missing: needs one float value",
        ),
        (
            {"features": {"bill": {"fill_missing": "abc"}}},
            "transform.features.bill.fill_missing: not a number",
        ),
        (
            {"features": {"bill": ["z_score", "log1p"]}},
            "transform.features.bill: 'log1p' cannot follow 'z_score'",
        ),
        (
            {"features": {"bill": ["z_score", "scale_to_0_1"]}},
            "transform.features.bill: 'scale_to_0_1' cannot follow 'z_score'",
        ),
        (
            {"features": {"year": ["log1p", "vocabulary"]}},
            "transform.features.year: 'log1p' can only precede z_score, scale_to_0_1, bucketize",
        ),
        ({"features": {"year": []}}, "transform.features.year: needs at least one op"),
        (
            {"features": {"year": {"z_score": None, "log1p": None}}},
            "transform.features.year: {'z_score': None, 'log1p': None} must be an op name",
        ),
        ({"features": {}}, "transform.features: must map one or more features to their ops"),
        (
            {"features": {"year": "z_score"}, "module": "m.py"},
            "transform: give either `features` (ops per feature) or `module`",
        ),
        ({"materialize": "raw"}, "transform: give either `features`"),
        (
            {"features": {"year": "z_score"}, "materialize": "both"},
            "transform.materialize: unknown value 'both' (raw, transformed)",
        ),
        (
            {"features": {"year": "z_score"}, "cache": "x"},
            "transform.cache: unknown key (allowed: features, materialize, module)",
        ),
        ({"module": "missing.py"}, "transform.module: cannot read '/cfg/missing.py'"),
        (
            {"module": "gs://b/m.py"},
            "transform.module: 'gs://b/m.py': the module must be a local file",
        ),
        ("z_score", "transform: must be a mapping"),
    ],
)
def test_transform_errors_name_the_field(transform, message):
    with pytest.raises(ConfigError) as e:
        parse_config(_transform(transform), base_dir="/cfg")
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def test_transform_needs_a_train_split():
    cfg = _transform({"features": {"year": "z_score"}}, splits={"fit": 0.5, "eval": 0.5})
    with pytest.raises(
        ConfigError, match="^transform: tf.Transform analyzes the split named 'train'"
    ):
        parse_config(cfg, base_dir="/cfg")


@pytest.mark.parametrize(
    "source, message",
    [
        ("def preprocessing_fn(:\n", "is not valid Python (line 1)"),
        ("def other(inputs):\n    return inputs\n", "defines no preprocessing_fn"),
        (
            "class X:\n    def preprocessing_fn(self, inputs):\n        pass\n",
            "defines no preprocessing_fn",
        ),
    ],
)
def test_transform_module_errors(tmp_path, source, message):
    (tmp_path / "m.py").write_text(source)
    with pytest.raises(ConfigError) as e:
        parse_config(_transform({"module": "m.py"}), base_dir=str(tmp_path))
    assert str(e.value) == f"transform.module: {str(tmp_path / 'm.py')!r} {message}"


def test_an_image_feature_declares_the_size_the_trainer_learns_at():
    cfg = _with(features__photo={"type": "image", "image_size": [32, 24]})
    photo = {f.name: f for f in parse_config(cfg, base_dir="/cfg").features}["photo"]
    assert photo.image_size == (32, 24, 3)  # RGB unless told
    assert ManifestFeature.of(photo).to_dict() == {
        "type": "image", "shape": [], "required": True, "image_size": [32, 24, 3],
    }  # fmt: skip
    gray = _with(features__photo={"type": "image", "image_size": [8, 8, 1]})
    assert {f.name: f for f in parse_config(gray, base_dir="/cfg").features}[
        "photo"
    ].image_size == (
        8,
        8,
        1,
    )
    # a feature without one writes the manifest it always did
    assert "image_size" not in ManifestFeature.of(parse_config(BASE, "/cfg").features[0]).to_dict()


@pytest.mark.parametrize(
    "feature, message",
    [
        ({"type": "string", "image_size": [8, 8]}, "is for a scalar image feature"),
        ({"type": "image", "image_size": [8]}, "[8] must be [height, width] or [height, width, "),
        ({"type": "image", "image_size": [8, 0]}, "[8, 0] must be [height, width] or"),
        ({"type": "image", "image_size": [8, 8, 2]}, "channels 2 must be 1 (gray), 3 (RGB) or 4"),
    ],
)
def test_a_bad_image_size_names_the_field(feature, message):
    with pytest.raises(ConfigError) as e:
        parse_config(_with(features__photo=feature), base_dir="/cfg")
    assert str(e.value).startswith(f"features.photo.image_size: {message}")


# --- config text means what it says ---------------------------------------------------------------

WORDS_CONFIG = """\
name: words
sources:
  - {name: s, format: csv, path: a.csv, options: {null_values: [no, NA], columns: [on, "off"],
     header: no}}
features:
  answer: {type: string, values: [yes, no, y, n, on, off, true, false, 1.0, 010, 2024-01-02]}
  said: {type: string, required: false, default: no}
  tags: {type: string, shape: [null], required: false, default: [yes, off]}
  yes: {type: int, required: false, default: 10, values: [10, -3, 0, '007']}
  ok: {type: string, required: yes}
label: answer
key: yes
output: {path: out, allow: [empty_split]}
"""


def test_plain_yaml_words_are_the_text_written_where_the_config_means_text(tmp_path):
    """YAML 1.1 reads yes/no/on/off/y/n/true/false as booleans and 1.0, 010, dates as numbers:
    a string feature's values and default, names (keys, label, key) and text options stay the
    text written; a boolean key (required, header) keeps YAML's meaning."""
    from transforms.sources.csv import CsvOptions

    (tmp_path / "c.yaml").write_text(WORDS_CONFIG)
    spec = load_config(str(tmp_path / "c.yaml"))
    features = {f.name: f for f in spec.features}
    assert features["answer"].values == (
        "yes", "no", "y", "n", "on", "off", "true", "false", "1.0", "010", "2024-01-02",
    )  # fmt: skip
    assert features["said"].default == [b"no"]
    assert features["tags"].default == [b"yes", b"off"]
    assert (features["yes"].default, features["yes"].values) == ([10], (10, -3, 0, 7))
    assert features["ok"].required is True
    assert (spec.label, spec.key) == ("answer", "yes")
    options = spec.sources[0].options_as(CsvOptions)
    assert (options.null_values, options.columns, options.header) == (
        ["no", "NA"],
        ["on", "off"],
        False,
    )


def test_quoted_and_null_scalars_keep_their_meaning(tmp_path):
    text = WORDS_CONFIG.replace("default: no}", "default: ~}").replace(
        "[yes, off]", "['yes', null]"
    )
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"features.tags.default: not a string"):
        load_config(str(tmp_path / "c.yaml"))
    (tmp_path / "c.yaml").write_text(text.replace("'yes', null", "'yes'"))
    said = {f.name: f for f in load_config(str(tmp_path / "c.yaml")).features}["said"]
    assert said.default is None  # `~` is no default


def test_a_tab_in_the_config_says_yaml_forbids_it(tmp_path):
    (tmp_path / "c.yaml").write_text("name: t\nfeatures:\n  a: {type: int}\n\tb: {type: int}\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(tmp_path / "c.yaml"))
    assert str(e.value) == (
        f"--config: '{tmp_path}/c.yaml' line 4, column 1: a tab; YAML forbids tabs for "
        "indentation: indent with spaces"
    )


@pytest.mark.timeout(30)
def test_only_a_regular_file_within_the_size_limit_is_read_as_the_config(tmp_path, monkeypatch):
    from pipelines.config import loader

    os.symlink("/dev/zero", tmp_path / "zero.yaml")
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "big.yaml").write_bytes(b"#" * 101)
    monkeypatch.setattr(loader, "MAX_CONFIG_BYTES", 100)
    for name, why in [
        ("zero.yaml", "is a character device, not a regular file"),
        ("fifo.yaml", "is a named pipe (FIFO), not a regular file"),
        ("", "is a folder, not a regular file"),
        ("big.yaml", "is larger than 0 MiB: not a dataset config (one is a few KiB)"),
    ]:
        path = str(tmp_path / name)
        with pytest.raises(ConfigError) as e:
            load_config(path)
        assert str(e.value) == f"--config: {path!r} {why}"
    (tmp_path / "big.yaml").write_bytes(b"#" * 100)  # at the limit: read (an empty document)
    with pytest.raises(ConfigError, match="^config: must be a mapping$"):
        load_config(str(tmp_path / "big.yaml"))


@pytest.mark.parametrize(
    ("allow", "ftype", "message"),
    [
        (["infinity"], "int", "features.x.allow: applies to float features, not int"),
        (["nan"], "float", "features.x.allow: unknown value 'nan' (infinity)"),
        ([1], "float", "features.x.allow: [1] must be a list of infinity"),
    ],
)
def test_a_feature_allow_names_its_field(allow, ftype, message):
    cfg = _with(features__x={"type": ftype, "allow": allow})
    with pytest.raises(ConfigError) as e:
        parse_config(cfg, base_dir="/cfg")
    assert str(e.value) == message


def test_a_float_feature_may_allow_infinity_and_its_default_follows_it():
    cfg = _with(features__x={"type": "float", "required": False, "default": float("-inf")})
    with pytest.raises(ConfigError, match=r"^features.x.default: not a finite number \(-inf\)$"):
        parse_config(cfg, base_dir="/cfg")
    cfg["features"]["x"]["allow"] = "infinity"
    x = {f.name: f for f in parse_config(cfg, base_dir="/cfg").features}["x"]
    assert (x.allow, x.default) == (("infinity",), [float("-inf")])


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("default: 010", "features.n.default: YAML reads 010 as 8; write 8, or quote it"),
        ("values: [1, 0x10]", "features.n.values[1]: YAML reads 0x10 as 16; write 16"),
        ("default: 1_000", "features.n.default: YAML reads 1_000 as 1000; write 1000"),
    ],
)
def test_an_int_yaml_reads_otherwise_than_the_data_is_refused(tmp_path, given, message):
    text = f"name: t\nsources: []\nfeatures:\n  n: {{type: int, required: false, {given}}}\n"
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(str(tmp_path / "c.yaml"))
    assert str(e.value).startswith(message)


def test_a_string_features_fill_missing_value_is_the_text_written(tmp_path):
    text = (
        WORDS_CONFIG
        + "transform:\n  features:\n    said: [{fill_missing: off}, {hash: {buckets: 8}}]\n"
    )
    text = text.replace(", default: no}", "}")
    (tmp_path / "c.yaml").write_text(text)
    spec = load_config(str(tmp_path / "c.yaml"))
    assert spec.transform is not None
    (fill, _) = spec.transform.features["said"]
    assert fill.params == {"value": b"off"}
