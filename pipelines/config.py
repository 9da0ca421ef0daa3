"""Loads and validates a dataset config (YAML) into a `transforms.spec.DatasetSpec`.

Everything a user can get wrong in the config is caught here, once, with an error that names the
field: `features.year.type: unknown type 'integer' (int, float, string, bytes, image)`.
Relative paths in the config are resolved against the config file's folder, so a config and its
data can move together.
"""

from __future__ import annotations

import ast
import dataclasses
import datetime
import hashlib
import itertools
import math
import os
import posixpath
import re
import reprlib
from typing import Any

import yaml

from transforms import formats, schema
from transforms.files import is_remote
from transforms.spec import (
    ALLOWANCES,
    AFTER_LOG1P,
    COMPRESSIONS,
    FEATURE_TYPES,
    MATERIALIZE,
    SOURCE_FORMATS,
    TRAIN_SPLIT,
    TRANSFORM_OPS,
    DatasetSpec,
    FeatureSpec,
    OptionError,
    OutputSpec,
    PRESENT_SUFFIX,
    SourceSpec,
    TransformOp,
    TransformSpec,
)

NAME_RE = re.compile(r"[a-z0-9_-]+")  # with fullmatch: `$` would let a trailing newline in
DEFAULT_SPLITS = {"train": 0.9, "eval": 0.1}
FILE_FORMATS = ("csv", "jsonl", "parquet", "avro", "tfrecord", "text", "binary", "images")
IMPLEMENTED_FORMATS = formats.IMPLEMENTED

# Bounds of values that pass every type check but cannot be meant: beyond them a run would take
# forever, exhaust memory or fail half-way on a limit of the file system (see the README).
SHARD_SIZE_MB = (0.001, 16384)  # 1 KiB (tests use tiny shards to get many) to 16 GiB
MAX_FIXED_LENGTH = 1_000_000  # values of a fixed-length ([n]) feature; longer lists are [null]
MAX_IMAGE_SIDE = 4096  # pixels, each side of `decode_resize`
MAX_NAME_BYTES = 200  # feature and source names: files (vocabularies) are named after them
MAX_SPLIT_NAME = 100  # split names are folder and file names
MAX_DEPTH = 32  # levels of mappings and lists; a real config nests 6 deep at most
# OUTPUT is staged as its sibling `.NAME.incomplete-RUNID` (transforms.publish.staging_path):
# NAME and those 25 bytes must fit in a file name (255 bytes on Linux and macOS file systems).
MAX_OUTPUT_NAME_BYTES = 255 - len("..incomplete-") - 12
# Folders of OUTPUT (and of its staging folder) that are not splits.
RESERVED_SPLITS = ("rejected", "transform", "_runs")

_TOP_KEYS = {
    "name",
    "sources",
    "key",
    "combine",
    "features",
    "label",
    "splits",
    "transform",
    "output",
}
_SOURCE_KEYS = {"name", "format", "path", "options"}
_FEATURE_KEYS = {"type", "shape", "required", "default", "values", "min", "max", "source"}
_OUTPUT_KEYS = {
    "path", "compression", "compression_level", "shard_size_mb", "max_rejected",
    "max_rejected_fraction", "allow",
}
_TRANSFORM_KEYS = {"features", "module", "materialize"}
# Parameters of the declarative transform ops: name -> (default, or _REQUIRED, minimum,
# maximum). The maxima bound the ids the trainer one-hot encodes or embeds per feature.
_REQUIRED = object()
_OP_PARAMS: dict[str, dict[str, tuple[Any, int, int]]] = {
    "bucketize": {"num_buckets": (_REQUIRED, 2, 100_000)},
    "vocabulary": {
        "top_k": (None, 1, 100_000_000),
        # unknown values need an id: a model cannot embed -1
        "num_oov_buckets": (1, 1, 1_000_000),
        "frequency_threshold": (None, 1, 2**63 - 1),
    },
    "hash": {"buckets": (_REQUIRED, 1, 100_000_000)},
}
_MISSING = object()


class ConfigError(ValueError):
    """A config that cannot be used; the message starts with the offending field.

    Field and message are made one printable line (control characters escaped, long text cut):
    names and values come from the user's file and may hold newlines or be megabytes long.
    """

    def __init__(self, field: str, message: str):
        field, message = _one_line(field, 200), _one_line(message, 1000)
        super().__init__(f"{field}: {message}")
        self.field = field


def _one_line(text: str, limit: int) -> str:
    if not text.isprintable():
        text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Values in messages: a config value may be megabytes of text or, through YAML aliases, a
# structure that refers to itself or expands exponentially when printed in full.
class _Repr(reprlib.Repr):
    def repr_dict(self, x: dict, level: int) -> str:
        """In the file's order (reprlib sorts the keys)."""
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        items = [
            f"{self.repr1(k, level - 1)}: {self.repr1(x[k], level - 1)}"
            for k in itertools.islice(x, self.maxdict)
        ]
        return "{" + ", ".join(items + ["..."] * (len(x) > self.maxdict)) + "}"


_REPR = _Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlevel = 2


def _show(value: Any, limit: int = 200) -> str:
    """A value for an error message: its repr, cut short (a path of up to `limit` in full)."""
    if isinstance(value, str) and len(value) <= limit:
        return repr(value)
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


DATE_TOKENS = ("{date}", "{YYYY}", "{MM}", "{DD}")


def has_date_template(path: str | None) -> bool:
    """True when a path holds one of DATE_TOKENS."""
    return path is not None and any(token in path for token in DATE_TOKENS)


def fill_date(path: str, day: datetime.date) -> str:
    """`{date}` → 2026-11-25, `{YYYY}` → 2026, `{MM}` → 11, `{DD}` → 25; other text as it is."""
    values = (day.isoformat(), f"{day.year:04d}", f"{day.month:02d}", f"{day.day:02d}")
    for token, value in zip(DATE_TOKENS, values):
        path = path.replace(token, value)
    return path


def _fill_dates(raw: Any, output: str | None, day: datetime.date | None) -> str | None:
    """Puts `day` into the date templates of the source paths and the output path of a parsed
    config (in place) and of `output`; returns `output`. Without a day, a template is an error."""
    places = []
    if isinstance(raw, dict):
        sources = raw.get("sources")
        for i, src in enumerate(sources if isinstance(sources, list) else []):
            if isinstance(src, dict) and isinstance(src.get("path"), str):
                places.append((f"sources[{i}].path", src, "path"))
        if isinstance(raw.get("output"), dict) and isinstance(raw["output"].get("path"), str):
            places.append(("output.path", raw["output"], "path"))
    if output is not None:
        places.append(("--output", None, output))
    for where, holder, key in places:
        text = holder[key] if holder is not None else key
        if not has_date_template(text):
            continue
        if day is None:
            raise ConfigError(
                where, f"{text!r} holds a date template: give --date YYYY-MM-DD or --from/--to"
            )
        if holder is not None:
            holder[key] = fill_date(text, day)
    return fill_date(output, day) if output is not None and day is not None else output


def read_text(path: str) -> bytes:
    """The bytes of a local or gs:// file; ConfigError naming --config when it cannot be read."""
    try:
        if is_remote(path):
            from apache_beam.io.filesystems import FileSystems

            with FileSystems.open(path) as f:
                return f.read()
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError("--config", f"cannot read {path!r}: {e.strerror or e}") from None
    except Exception as e:  # a gs:// read that failed in the client library
        raise ConfigError("--config", f"cannot read {path!r}: {type(e).__name__}: {e}") from None


def load_config(
    path: str, output: str | None = None, date: datetime.date | None = None
) -> DatasetSpec:
    """Reads, validates and resolves the config at `path` (local or gs://); `output` overrides
    `output.path`; `date` fills the date templates of the source and output paths."""
    text = read_text(path)
    try:
        raw = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader, see _Loader
    except RecursionError:  # PyYAML composes nested nodes recursively
        raise ConfigError(
            "--config", f"{path!r} is nested too deeply (at most {MAX_DEPTH} levels)"
        ) from None
    except ValueError as e:  # a scalar PyYAML resolved but cannot build: `!!int x`, 5000 digits
        reason = str(e).split(";")[0]  # Python's advice on its own limits is not the user's
        raise ConfigError("--config", f"{path!r} is not valid YAML: {reason}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        if isinstance(e, _DuplicateKey):
            raise ConfigError("--config", f"{path!r}{where}: {e.problem}") from None
        if isinstance(e, yaml.constructor.ConstructorError) and e.problem:
            # e.g. a !!python/object tag: safe_load builds no Python objects from a config
            raise ConfigError(
                "--config", f"{path!r}{where}: {e.problem} (only plain YAML is allowed)"
            ) from None
        raise ConfigError("--config", f"{path!r} is not valid YAML{where}") from None
    base_dir = path.rsplit("/", 1)[0] if is_remote(path) else os.path.dirname(os.path.abspath(path))
    output = _fill_dates(raw, output, date)
    spec = parse_config(raw, base_dir=base_dir, output=output)
    return dataclasses.replace(
        spec,
        config_sha256=hashlib.sha256(text).hexdigest(),
        date=date.isoformat() if date is not None else None,
    )


class _DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping of the config gives the same key twice."""


class _Loader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping: PyYAML keeps the last
    one, so a feature declared twice would silently lose its first declaration."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue  # `<<` merges may override keys; other keys fail as unhashable
            key = self.construct_object(key_node)
            if key in seen:
                raise _DuplicateKey(
                    None, None, f"the key {_show(key)} appears twice in one mapping",
                    key_node.start_mark,
                )  # fmt: skip
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_config(raw: Any, base_dir: str, output: str | None = None) -> DatasetSpec:
    """Validates an already-parsed config mapping; paths are resolved against `base_dir`."""
    _mapping(raw, "config")
    _check_tree(raw, "", 0, set(), set())
    _no_unknown(raw, _TOP_KEYS, "")
    name = _get(raw, "name", "")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigError("name", f"{_show(name)} must match [a-z0-9_-]+")

    sources = _parse_sources(_get(raw, "sources", "", None), base_dir)
    features = _parse_features(_get(raw, "features", "", None), sources)
    names = {f.name for f in features}

    key = _get(raw, "key", "", None)
    if key is not None:
        key = _name(key, "key")
    combine = _choice(_get(raw, "combine", "", "union"), "combine", ("union", "join"))
    if combine == "join":
        if key is None:
            raise ConfigError("combine", "'join' needs a `key` to join on")
        if len(sources) < 2:
            raise ConfigError("combine", "'join' needs at least two sources")

    label = _get(raw, "label", "", None)
    if label is not None and not _member(label, names):
        raise ConfigError("label", f"{_show(label)} is not one of the features")

    splits = _parse_splits(_get(raw, "splits", "", DEFAULT_SPLITS))
    out = _parse_output(_get(raw, "output", "", {}), base_dir, output)
    transform = _get(raw, "transform", "", None)
    if transform is not None:
        transform = _parse_transform(transform, features, label, splits, base_dir)
    return DatasetSpec(
        name=name,
        sources=sources,
        features=features,
        splits=splits,
        output=out,
        key=key,
        combine=combine,
        label=label,
        transform=transform,
    )


def _parse_sources(raw: Any, base_dir: str) -> tuple[SourceSpec, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError("sources", "must be a list of one or more sources")
    seen: set[str] = set()
    out = []
    for i, src in enumerate(raw):
        where = f"sources[{i}]"
        _mapping(src, where)
        _no_unknown(src, _SOURCE_KEYS, where + ".")
        name = _get(src, "name", where + ".")
        if not isinstance(name, str) or not name or "." in name:
            raise ConfigError(
                f"{where}.name", f"{_show(name)} must be a non-empty name without dots"
            )
        _name(name, f"{where}.name")
        if name in seen:
            raise ConfigError(f"{where}.name", f"duplicate source name {_show(name)}")
        seen.add(name)
        fmt = _choice(
            _get(src, "format", where + "."), f"{where}.format", SOURCE_FORMATS, "unknown format"
        )
        if fmt not in IMPLEMENTED_FORMATS:
            raise ConfigError(
                f"{where}.format",
                f"format {fmt!r} is not supported by this version "
                f"(supported: {', '.join(IMPLEMENTED_FORMATS)})",
            )
        options = _get(src, "options", where + ".", {})
        _mapping(options, f"{where}.options")
        options = _parse_options(fmt, options, f"{where}.options")
        options = formats.resolve_paths(fmt, options, base_dir)
        path = _get(src, "path", where + ".", None)
        if fmt in FILE_FORMATS:
            if path is None or path == "":
                raise ConfigError(f"{where}.path", "is required for file formats")
            path = _resolve(_path_text(path, f"{where}.path"), base_dir)
        elif path is not None:
            raise ConfigError(f"{where}.path", f"not used by {fmt} sources (see its options)")
        out.append(SourceSpec(name=name, format=fmt, path=path, options=options))
    return tuple(out)


def _parse_options(fmt: str, options: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        return formats.check_options(fmt, options)
    except OptionError as e:
        raise ConfigError(f"{where}.{e.field}", e.message) from None


def _parse_features(raw: Any, sources: tuple[SourceSpec, ...]) -> tuple[FeatureSpec, ...]:
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("features", "must map one or more feature names to their schema")
    source_names = {s.name for s in sources}
    out = []
    for name, fraw in raw.items():
        where = f"features.{name}"
        if not isinstance(name, str) or not name:
            raise ConfigError("features", f"feature name {_show(name)} must be a non-empty string")
        _name(name, where)
        _mapping(fraw, where)
        _no_unknown(fraw, _FEATURE_KEYS, where + ".")
        ftype = _choice(
            _get(fraw, "type", where + "."), f"{where}.type", FEATURE_TYPES, "unknown type"
        )
        shape = _parse_shape(_get(fraw, "shape", where + ".", []), f"{where}.shape")
        required = _get(fraw, "required", where + ".", True)
        if not isinstance(required, bool):
            raise ConfigError(f"{where}.required", "must be true or false")
        src, field = None, None
        ref = _get(fraw, "source", where + ".", None)
        if ref is not None:
            if not isinstance(ref, str) or "." not in ref:
                raise ConfigError(f"{where}.source", f"{_show(ref)} must be SOURCE.FIELD")
            src, field = ref.split(".", 1)
            if src not in source_names:
                raise ConfigError(f"{where}.source", f"no source named {_show(src)}")
            if not field:
                raise ConfigError(f"{where}.source", f"{_show(ref)} names no field")
        lo = _bound(fraw.get("min"), f"{where}.min", ftype)
        hi = _bound(fraw.get("max"), f"{where}.max", ftype)
        if lo is not None and hi is not None and lo > hi:
            raise ConfigError(f"{where}.min", f"{lo} is greater than max {hi}")
        values = _get(fraw, "values", where + ".", None)
        if values is not None:
            if ftype not in ("int", "string") or not isinstance(values, list) or not values:
                raise ConfigError(
                    f"{where}.values", "must be a non-empty list, for int and string features"
                )
            probe = FeatureSpec(name, ftype, (), True)
            coerced = [_coerce(schema.coerce_scalar, probe, v, f"{where}.values") for v in values]
            if len(set(coerced)) != len(coerced):
                raise ConfigError(f"{where}.values", "has duplicates")
            values = tuple(v.decode() if isinstance(v, bytes) else v for v in coerced)
        feature = FeatureSpec(
            name=name,
            type=ftype,
            shape=shape,
            required=required,
            values=values,
            min=lo,
            max=hi,
            source=src,
            field=field,
        )
        default = _get(fraw, "default", where + ".", None)
        if default is not None:
            if required:
                raise ConfigError(f"{where}.default", "a required feature takes no default")
            default = _coerce(schema.coerce_feature, feature, default, f"{where}.default")
            feature = dataclasses.replace(feature, default=default)
        out.append(feature)
    _check_generated_names(out)
    return tuple(out)


def _check_generated_names(features: list[FeatureSpec]) -> None:
    """Refuses a feature named like an input the trainer derives from another feature: a
    numeric feature NAME that may be missing also feeds the model NAME__present (its 0/1
    presence), so NAME__present beside NAME would clash in the trainer."""
    names = {f.name for f in features}
    for f in features:
        stem = f.name.removesuffix(PRESENT_SUFFIX)
        if stem != f.name and stem in names:
            raise ConfigError(
                f"features.{f.name}",
                f"clashes with the presence input the trainer derives for feature {stem!r} "
                f"(NAME{PRESENT_SUFFIX}); rename one of them",
            )


def _parse_shape(raw: Any, where: str) -> tuple[int | None, ...]:
    if not isinstance(raw, list) or len(raw) > 1:
        raise ConfigError(
            where, f"{_show(raw)} must be [] (scalar), [n] (fixed) or [null] (variable)"
        )
    if raw and raw[0] is not None and not _is_number(
        raw[0], integer=True, low=1, high=MAX_FIXED_LENGTH
    ):
        raise ConfigError(
            where,
            f"{_show(raw)}: the length must be a positive integer (at most "
            f"{MAX_FIXED_LENGTH:,}) or null",
        )
    return tuple(raw)


def _bound(value: Any, where: str, ftype: str) -> float | None:
    """`min` or `max` of a feature: a finite number within the range of the feature's values
    (float32, int64), for numeric features only."""
    if value is None:
        return None
    if ftype not in ("int", "float"):
        raise ConfigError(where, f"applies to int and float features, not {ftype}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigError(where, f"{_show(value)} is not a number")
    _number(value, where, "is not a finite number")
    if ftype == "float":  # the float32 bounds of the values themselves (transforms.schema)
        _coerce(schema.coerce_scalar, FeatureSpec("bound", ftype, (), True), value, where)
    elif not -(2**63) <= value < 2**63:
        raise ConfigError(where, f"{_show(value)} is outside the int64 range")
    return value


def _coerce(convert: Any, feature: FeatureSpec, value: Any, where: str) -> Any:
    """`convert(feature, value)`, a coercion of `transforms.schema`, its refusal a ConfigError."""
    try:
        return convert(feature, value)
    except schema.RecordError as e:
        raise ConfigError(where, e.reason.removeprefix(f"{feature.name}: ")) from None


def _parse_splits(raw: Any) -> tuple[tuple[str, float], ...]:
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("splits", "must map split names to fractions")
    out = []
    for name, frac in raw.items():
        if (
            not isinstance(name, str)
            or not NAME_RE.fullmatch(name)
            or name in RESERVED_SPLITS
            or len(name) > MAX_SPLIT_NAME
        ):
            raise ConfigError(
                "splits",
                f"split name {_show(name)} must match [a-z0-9_-]+ (at most {MAX_SPLIT_NAME} "
                f"characters; not {', '.join(RESERVED_SPLITS)})",
            )
        frac = _number(
            frac, f"splits.{name}", "must be a fraction in (0, 1]", low=0, high=1, low_open=True
        )
        out.append((name, float(frac)))
    total = sum(f for _, f in out)
    if abs(total - 1.0) > 1e-6:
        raise ConfigError("splits", f"fractions sum to {total:g}, not 1")
    return tuple(out)


def _parse_output(raw: Any, base_dir: str, override: str | None) -> OutputSpec:
    raw = raw if raw is not None else {}
    _mapping(raw, "output")
    _no_unknown(raw, _OUTPUT_KEYS, "output.")
    if override is not None:
        path = _dataset_folder(override, "output.path", None)
    else:
        path = _get(raw, "path", "output.", "")
        if path == "":
            raise ConfigError("output.path", "is required (or give --output)")
        path = _dataset_folder(path, "output.path", base_dir)
    compression = _choice(
        _get(raw, "compression", "output.", "gzip"), "output.compression", tuple(COMPRESSIONS)
    )
    low, high = SHARD_SIZE_MB
    size = _number(
        _get(raw, "shard_size_mb", "output.", 128),
        "output.shard_size_mb",
        f"must be a positive number of MB from {low:g} to {high:g}",
        low=low,
        high=high,
    )
    level = _number(
        _get(raw, "compression_level", "output.", 6),
        "output.compression_level",
        "must be an integer from 1 to 9",
        integer=True,
        low=1,
        high=9,
    )
    max_rejected = _get(raw, "max_rejected", "output.", None)
    if max_rejected is not None:
        _number(max_rejected, "output.max_rejected", "must be an integer >= 0", integer=True, low=0)
    fraction = _get(raw, "max_rejected_fraction", "output.", None)
    if fraction is not None:
        rule = "must be a number from 0 to 1"
        _number(fraction, "output.max_rejected_fraction", rule, low=0, high=1)
    allow = _allowances(_get(raw, "allow", "output.", []))
    return OutputSpec(
        allow=allow,
        path=path.rstrip("/"),
        compression=compression,
        compression_level=level,
        shard_size_mb=float(size),
        max_rejected=max_rejected,
        max_rejected_fraction=None if fraction is None else float(fraction),
    )


def _allowances(raw: Any) -> tuple[str, ...]:
    """`output.allow`: what the run may publish although it looks like a mistake."""
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise ConfigError(
            "output.allow", f"{_show(raw)} must be a list of {', '.join(ALLOWANCES)}"
        )
    unknown = sorted(set(raw) - set(ALLOWANCES))
    if unknown:
        raise ConfigError(
            "output.allow", f"unknown value {_show(unknown[0])} ({', '.join(ALLOWANCES)})"
        )
    return tuple(a for a in ALLOWANCES if a in raw)


def _parse_transform(
    raw: Any,
    features: tuple[FeatureSpec, ...],
    label: str | None,
    splits: tuple[tuple[str, float], ...],
    base_dir: str,
) -> TransformSpec:
    _mapping(raw, "transform")
    _no_unknown(raw, _TRANSFORM_KEYS, "transform.")
    if TRAIN_SPLIT not in dict(splits):
        raise ConfigError(
            "transform", f"tf.Transform analyzes the split named {TRAIN_SPLIT!r}; `splits` has none"
        )
    materialize = _choice(
        _get(raw, "materialize", "transform.", "raw"), "transform.materialize", MATERIALIZE
    )
    ops, module = raw.get("features"), raw.get("module")
    if (ops is None) == (module is None):
        raise ConfigError("transform", "give either `features` (ops per feature) or `module`")
    if module is not None:
        return TransformSpec(module=_check_module(module, base_dir), materialize=materialize)
    if not isinstance(ops, dict) or not ops:
        raise ConfigError("transform.features", "must map one or more features to their ops")
    by_name = {f.name: f for f in features}
    parsed = {}
    for name, fops in ops.items():
        where = f"transform.features.{name}"
        if name not in by_name:
            raise ConfigError(where, f"{name!r} is not one of the features")
        if name == label:
            raise ConfigError(where, "the label passes through untransformed; it takes no op")
        parsed[name] = _parse_feature_ops(fops, by_name[name], where)
    return TransformSpec(features=parsed, materialize=materialize)


def _parse_feature_ops(raw: Any, feature: FeatureSpec, where: str) -> tuple[TransformOp, ...]:
    """`op`, `{op: params}` or a list of those, checked against the feature and each other."""
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise ConfigError(where, "needs at least one op")
    ops: list[TransformOp] = []
    for item in items:
        if isinstance(item, str):
            name, params = item, None
        elif isinstance(item, dict) and len(item) == 1:
            ((name, params),) = item.items()
        else:
            raise ConfigError(
                where, f"{_show(item)} must be an op name or a mapping {{op: params}}"
            )
        name = _choice(name, where, tuple(TRANSFORM_OPS), "unknown op")
        stage, types = TRANSFORM_OPS[name]
        if feature.type not in types:
            raise ConfigError(
                f"{where}.{name}", f"applies to {', '.join(types)} features, not {feature.type}"
            )
        if ops and TRANSFORM_OPS[ops[-1].name][0] >= stage:
            raise ConfigError(where, f"{name!r} cannot follow {ops[-1].name!r} ({_OP_ORDER})")
        if ops and ops[-1].name == "log1p" and name not in AFTER_LOG1P:
            raise ConfigError(where, f"'log1p' can only precede {', '.join(AFTER_LOG1P)}")
        ops.append(TransformOp(name, _op_params(name, params, feature, f"{where}.{name}")))
    return tuple(ops)


_OP_ORDER = "order: fill_missing, then log1p, then one of the other ops"


def _op_params(name: str, raw: Any, feature: FeatureSpec, where: str) -> dict[str, Any]:
    if name == "fill_missing":
        return {"value": _fill_value(raw, feature, where)}
    if name == "decode_resize":
        if not feature.is_scalar:
            raise ConfigError(where, "applies to scalar image features (shape [])")
        ok = isinstance(raw, list) and len(raw) == 2
        side = {"integer": True, "low": 1, "high": MAX_IMAGE_SIDE}
        if not ok or not all(_is_number(v, **side) for v in raw):
            raise ConfigError(
                where, f"{_show(raw)} must be [height, width] in pixels (1 to {MAX_IMAGE_SIDE})"
            )
        return {"size": tuple(raw)}
    allowed = _OP_PARAMS.get(name, {})
    raw = {} if raw is None else raw
    if not allowed and raw != {}:
        raise ConfigError(where, f"takes no parameters, got {_show(raw)}")
    _mapping(raw, where)
    _no_unknown(raw, set(allowed), where + ".")
    params = {}
    for key, (default, low, high) in allowed.items():
        value = _get(raw, key, where + ".", default)
        if value is _REQUIRED:
            raise ConfigError(f"{where}.{key}", "is required")
        if value is not None:
            rule = f"must be an integer >= {low} (at most {high:,})"
            _number(value, f"{where}.{key}", rule, integer=True, low=low, high=high)
        params[key] = value
    return params


def _fill_value(raw: Any, feature: FeatureSpec, where: str) -> Any:
    """The value that replaces a missing one, typed like the feature."""
    if feature.shape == (None,):
        raise ConfigError(where, "a variable-length feature has no missing value to fill")
    if feature.required or feature.default is not None:
        why = "required" if feature.required else "it has a default"
        raise ConfigError(where, f"{feature.name!r} is never missing ({why})")
    if raw is None or isinstance(raw, (list, dict)):
        raise ConfigError(where, f"needs one {feature.type} value, e.g. `fill_missing: 0`")
    return _coerce(schema.coerce_scalar, dataclasses.replace(feature, shape=()), raw, where)


def _check_module(path: Any, base_dir: str) -> str:
    """The resolved path of a local Python file that defines `preprocessing_fn`.

    Checked by parsing, without running it: importing a module may import TensorFlow.
    """
    where = "transform.module"
    if not isinstance(path, str) or not path:
        raise ConfigError(where, "must be the path of a Python file")
    _path_text(path, where)
    if is_remote(path):
        raise ConfigError(where, f"{path!r}: the module must be a local file")
    path = _resolve(path, base_dir)
    if not path.endswith(".py"):
        raise ConfigError(where, f"{path!r} must be a Python file (.py)")
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise ConfigError(where, f"cannot read {path!r}: {e.strerror}") from None
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as e:
        line = f" (line {e.lineno})" if getattr(e, "lineno", None) else ""
        raise ConfigError(where, f"{path!r} is not valid Python{line}") from None
    except (RecursionError, MemoryError):  # how CPython's parser reports its stack overflowing
        raise ConfigError(where, f"{path!r} is nested too deeply to parse") from None
    if "preprocessing_fn" not in _top_level_names(tree.body):
        raise ConfigError(where, f"{path!r} defines no preprocessing_fn")
    return path


def _top_level_names(body: list[ast.stmt]) -> set[str]:
    """Names a module binds at its top level (also inside top-level if/try blocks)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If):
            names |= _top_level_names(node.body) | _top_level_names(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                names |= _top_level_names(block)
    return names


def _resolve(path: str, base_dir: str) -> str:
    if is_remote(path) or os.path.isabs(path):
        return path
    if is_remote(base_dir):  # a gs:// config: relative to its folder
        scheme, _, rest = base_dir.partition("://")
        return f"{scheme}://{posixpath.normpath(posixpath.join(rest, path))}"
    return os.path.normpath(os.path.join(base_dir, path))


def _dataset_folder(value: Any, where: str, base_dir: str | None) -> str:
    """OUTPUT resolved (against `base_dir`, or the current folder without one), refused when
    it cannot be a dataset folder.

    A run stages the dataset in the sibling `.NAME.incomplete-RUNID` and renames it to OUTPUT
    (transforms.publish), so OUTPUT needs a parent and a name of its own; and it must not be,
    or hold, the current or the home folder, which `--overwrite` would replace.
    """
    text = _path_text(value, where)

    def refuse(why: str) -> None:
        raise ConfigError(where, f"{_show(text)} cannot be a dataset folder ({why})")

    if not text:
        refuse("an empty path")
    last = text.rstrip("/").rsplit("/", 1)[-1]
    if last in (".", ".."):
        refuse(f"it ends in {last!r}: name a folder of the dataset's own")
    if is_remote(text) or base_dir is None:
        path = text if is_remote(text) else os.path.abspath(text)
    else:
        path = _resolve(text, base_dir)
    if is_remote(path):
        _, _, rest = path.rstrip("/").partition("://")
        bucket, _, name = rest.partition("/")
        if not bucket or not name.strip("/"):
            refuse("a bucket root; give a folder inside the bucket")
        return path.rstrip("/")
    path = os.path.normpath(path)
    parent, name = os.path.split(path)
    if not name:
        refuse("the root folder has no parent to stage the dataset in")
    if len(name.encode("utf-8")) > MAX_OUTPUT_NAME_BYTES:
        refuse(
            f"its name is longer than {MAX_OUTPUT_NAME_BYTES} bytes: the staging folder "
            ".NAME.incomplete-RUNID beside it would not fit in a file name"
        )
    if any(len(part.encode("utf-8")) > 255 for part in path.split(os.sep)):
        refuse("a folder name in it is longer than 255 bytes")
    real = os.path.realpath(path)
    for kind, folder in (("current", _cwd()), ("home", os.path.expanduser("~"))):
        if os.path.isabs(folder) and _within(os.path.realpath(folder), real):
            refuse(f"it is or holds the {kind} folder")
    ancestor = parent
    while not os.path.lexists(ancestor) and os.path.dirname(ancestor) != ancestor:
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        refuse(f"{_show(ancestor)} is not a folder")
    return path


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # the current folder was deleted: nothing there to protect
        return ""


def _within(path: str, folder: str) -> bool:
    """True when `path` is `folder` or inside it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _check_tree(value: Any, where: str, depth: int, path: set[int], done: set[int]) -> None:
    """Refuses what no field's own check should have to expect: nesting deeper than MAX_DEPTH,
    a list or mapping that contains itself (YAML aliases allow `&a [*a]`), keys that are not
    strings, and text that is not valid Unicode (a lone surrogate from a `\\ud800` escape).

    `path` holds the containers being walked (a cycle), `done` those already checked: a YAML
    alias repeats a container without copying it, and walking every repeat could take
    exponential time (the "billion laughs" config).
    """
    if isinstance(value, str):
        _text(value, where or "config")
        return
    if not isinstance(value, (dict, list)) or id(value) in done:
        return
    if id(value) in path:
        raise ConfigError(where or "config", "contains itself (a YAML alias of its own anchor)")
    if depth >= MAX_DEPTH:
        raise ConfigError(where or "config", f"nested too deeply (at most {MAX_DEPTH} levels)")
    path.add(id(value))
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                bools = " (YAML reads yes/no/on/off/true/false as booleans)"
                words = bools if isinstance(key, bool) else ""
                kind = _KINDS.get(type(key).__name__, type(key).__name__)
                raise ConfigError(
                    _join(where, str(key)),
                    f"the key {_show(key)} is {kind}, not text{words}: quote it",
                )
            _text(key, _join(where, "<key>"))
            _check_tree(item, _join(where, key), depth + 1, path, done)
    else:
        for i, item in enumerate(value):
            _check_tree(item, f"{where or 'config'}[{i}]", depth + 1, path, done)
    path.discard(id(value))
    done.add(id(value))


_KINDS = {"int": "an integer", "float": "a number", "bool": "a boolean", "NoneType": "null",
          "date": "a date", "datetime": "a timestamp", "bytes": "binary data"}  # fmt: skip


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _text(value: str, where: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(
            where, f"{_show(value)} is not valid text (a lone surrogate, e.g. from \\ud800)"
        ) from None
    return value


def _path_text(value: Any, where: str) -> str:
    """A path as given: text without NUL characters (which no file system takes)."""
    if not isinstance(value, str):
        raise ConfigError(where, f"{_show(value)} must be a path (text)")
    if "\0" in value:
        raise ConfigError(where, f"{_show(value)} holds a NUL character")
    return _text(value, where)


def _name(value: Any, where: str) -> str:
    """A feature, source or field name: non-empty printable text of at most MAX_NAME_BYTES."""
    if not isinstance(value, str) or not value:
        raise ConfigError(where, f"{_show(value)} must be a non-empty string")
    if not value.isprintable():
        raise ConfigError(where, f"{_show(value)} holds a control character (newline, tab, ...)")
    if len(value.encode("utf-8")) > MAX_NAME_BYTES:
        raise ConfigError(where, f"{_show(value)} is longer than {MAX_NAME_BYTES} bytes")
    return value


def _member(value: Any, collection: Any) -> bool:
    """`value in collection` for a collection of strings; False for any other value (a list
    or a mapping from YAML is unhashable: `[x] in {...}` raises TypeError)."""
    return isinstance(value, str) and value in collection


def _choice(
    value: Any, where: str, choices: tuple[str, ...], unknown: str = "unknown value"
) -> str:
    """`value` when it is one of `choices`; else ConfigError listing them."""
    if not _member(value, choices):
        raise ConfigError(where, f"{unknown} {_show(value)} ({', '.join(choices)})")
    return value


def _is_number(
    value: Any,
    *,
    integer: bool = False,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> bool:
    """True for an int (or, unless `integer`, a finite float) in [low, high] ((low, high] with
    `low_open`). YAML's `true` is a bool, which Python counts as an int: never a number here."""
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return False
    if not integer:
        try:
            if not math.isfinite(value):
                return False
        except OverflowError:  # an int beyond the float range
            return False
    if low is not None and (value <= low if low_open else value < low):
        return False
    return high is None or value <= high


def _number(value: Any, where: str, rule: str, **bounds: Any) -> Any:
    """`value` when `_is_number(value, **bounds)`; else ConfigError "VALUE RULE"."""
    if not _is_number(value, **bounds):
        raise ConfigError(where, f"{_show(value)} {rule}")
    return value


def _mapping(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(where, "must be a mapping")


def _get(raw: dict, key: str, prefix: str, default: Any = _MISSING) -> Any:
    """`raw[key]`, or `default` when the key is absent or null (YAML `key:` with no value);
    without a default, ConfigError "is required"."""
    value = raw.get(key)
    if value is None:
        if default is _MISSING:
            raise ConfigError(prefix + key, "is required")
        return default
    return value


def _no_unknown(raw: dict, allowed: set[str], prefix: str) -> None:
    for k in raw:
        if k not in allowed:
            raise ConfigError(
                prefix + str(k), f"unknown key (allowed: {', '.join(sorted(allowed))})"
            )
