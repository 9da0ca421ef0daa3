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
import math
import os
import posixpath
import re
from typing import Any

import yaml

from transforms import formats, schema
from transforms.files import is_remote
from transforms.spec import (
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
    SourceSpec,
    TransformOp,
    TransformSpec,
)

NAME_RE = re.compile(r"^[a-z0-9_-]+$")
DEFAULT_SPLITS = {"train": 0.9, "eval": 0.1}
FILE_FORMATS = ("csv", "jsonl", "parquet", "avro", "tfrecord", "text", "binary", "images")
IMPLEMENTED_FORMATS = formats.IMPLEMENTED

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
    "max_rejected_fraction",
}
_TRANSFORM_KEYS = {"features", "module", "materialize"}
# Parameters of the declarative transform ops: name -> (default, or _REQUIRED, and minimum).
_REQUIRED = object()
_OP_PARAMS: dict[str, dict[str, tuple[Any, int]]] = {
    "bucketize": {"num_buckets": (_REQUIRED, 2)},
    "vocabulary": {
        "top_k": (None, 1),
        "num_oov_buckets": (1, 1),  # unknown values need an id: a model cannot embed -1
        "frequency_threshold": (None, 1),
    },
    "hash": {"buckets": (_REQUIRED, 1)},
}


class ConfigError(ValueError):
    """A config that cannot be used; the message starts with the offending field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


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
        for i, src in enumerate(raw.get("sources") or []):
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
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
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


def parse_config(raw: Any, base_dir: str, output: str | None = None) -> DatasetSpec:
    """Validates an already-parsed config mapping; paths are resolved against `base_dir`."""
    _mapping(raw, "config")
    _no_unknown(raw, _TOP_KEYS, "")
    name = _required(raw, "name", "")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError("name", f"{name!r} must match [a-z0-9_-]+")

    sources = _parse_sources(raw.get("sources"), base_dir)
    features = _parse_features(raw.get("features"), sources)
    names = {f.name for f in features}

    key = raw.get("key")
    if key is not None and (not isinstance(key, str) or not key):
        raise ConfigError("key", "must be a field name")
    combine = raw.get("combine", "union")
    if combine not in ("union", "join"):
        raise ConfigError("combine", f"unknown value {combine!r} (union, join)")
    if combine == "join":
        if key is None:
            raise ConfigError("combine", "'join' needs a `key` to join on")
        if len(sources) < 2:
            raise ConfigError("combine", "'join' needs at least two sources")

    label = raw.get("label")
    if label is not None and label not in names:
        raise ConfigError("label", f"{label!r} is not one of the features")

    splits = _parse_splits(raw.get("splits", DEFAULT_SPLITS))
    out = _parse_output(raw.get("output"), base_dir, output)
    transform = raw.get("transform")
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
        name = _required(src, "name", where + ".")
        if not isinstance(name, str) or not name or "." in name:
            raise ConfigError(f"{where}.name", f"{name!r} must be a non-empty name without dots")
        if name in seen:
            raise ConfigError(f"{where}.name", f"duplicate source name {name!r}")
        seen.add(name)
        fmt = _required(src, "format", where + ".")
        if fmt not in SOURCE_FORMATS:
            raise ConfigError(
                f"{where}.format", f"unknown format {fmt!r} ({', '.join(SOURCE_FORMATS)})"
            )
        if fmt not in IMPLEMENTED_FORMATS:
            raise ConfigError(
                f"{where}.format",
                f"format {fmt!r} is not supported by this version "
                f"(supported: {', '.join(IMPLEMENTED_FORMATS)})",
            )
        options = src.get("options") or {}
        _mapping(options, f"{where}.options")
        options = _parse_options(fmt, options, f"{where}.options")
        options = formats.resolve_paths(fmt, options, base_dir)
        path = src.get("path")
        if fmt in FILE_FORMATS:
            if not isinstance(path, str) or not path:
                raise ConfigError(f"{where}.path", "is required for file formats")
            path = _resolve(path, base_dir)
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
            raise ConfigError("features", f"feature name {name!r} must be a non-empty string")
        _mapping(fraw, where)
        _no_unknown(fraw, _FEATURE_KEYS, where + ".")
        ftype = _required(fraw, "type", where + ".")
        if ftype not in FEATURE_TYPES:
            raise ConfigError(
                f"{where}.type", f"unknown type {ftype!r} ({', '.join(FEATURE_TYPES)})"
            )
        shape = _parse_shape(fraw.get("shape", []), f"{where}.shape")
        required = fraw.get("required", True)
        if not isinstance(required, bool):
            raise ConfigError(f"{where}.required", "must be true or false")
        src, field = None, None
        if "source" in fraw:
            ref = fraw["source"]
            if not isinstance(ref, str) or "." not in ref:
                raise ConfigError(f"{where}.source", f"{ref!r} must be SOURCE.FIELD")
            src, field = ref.split(".", 1)
            if src not in source_names:
                raise ConfigError(f"{where}.source", f"no source named {src!r}")
            if not field:
                raise ConfigError(f"{where}.source", f"{ref!r} names no field")
        lo = _number(fraw.get("min"), f"{where}.min", ftype)
        hi = _number(fraw.get("max"), f"{where}.max", ftype)
        if lo is not None and hi is not None and lo > hi:
            raise ConfigError(f"{where}.min", f"{lo} is greater than max {hi}")
        values = fraw.get("values")
        if values is not None:
            if ftype not in ("int", "string") or not isinstance(values, list) or not values:
                raise ConfigError(
                    f"{where}.values", "must be a non-empty list, for int and string features"
                )
            probe = FeatureSpec(name, ftype, (), True)
            try:
                coerced = [schema.coerce_scalar(probe, v) for v in values]
            except schema.RecordError as e:
                raise ConfigError(f"{where}.values", e.reason.split(": ", 1)[-1]) from None
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
        if "default" in fraw and fraw["default"] is not None:
            if required:
                raise ConfigError(f"{where}.default", "a required feature takes no default")
            try:
                default = schema.coerce_feature(feature, fraw["default"])
            except schema.RecordError as e:
                raise ConfigError(f"{where}.default", e.reason.split(": ", 1)[-1]) from None
            feature = dataclasses.replace(feature, default=default)
        out.append(feature)
    return tuple(out)


def _parse_shape(raw: Any, where: str) -> tuple[int | None, ...]:
    if not isinstance(raw, list) or len(raw) > 1:
        raise ConfigError(where, f"{raw!r} must be [] (scalar), [n] (fixed) or [null] (variable)")
    if raw and raw[0] is not None and (not isinstance(raw[0], int) or raw[0] < 1):
        raise ConfigError(where, f"{raw!r}: the length must be a positive integer or null")
    return tuple(raw)


def _number(value: Any, where: str, ftype: str) -> float | None:
    if value is None:
        return None
    if ftype not in ("int", "float"):
        raise ConfigError(where, f"applies to int and float features, not {ftype}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(where, f"{value!r} is not a number")
    return value


def _parse_splits(raw: Any) -> tuple[tuple[str, float], ...]:
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("splits", "must map split names to fractions")
    out = []
    for name, frac in raw.items():
        if not isinstance(name, str) or not NAME_RE.match(name) or name == "rejected":
            raise ConfigError("splits", f"split name {name!r} must match [a-z0-9_-]+ (not 'rejected')")
        if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 < frac <= 1:
            raise ConfigError(f"splits.{name}", f"{frac!r} must be a fraction in (0, 1]")
        out.append((name, float(frac)))
    total = sum(f for _, f in out)
    if abs(total - 1.0) > 1e-6:
        raise ConfigError("splits", f"fractions sum to {total:g}, not 1")
    return tuple(out)


def _parse_output(raw: Any, base_dir: str, override: str | None) -> OutputSpec:
    raw = raw if raw is not None else {}
    _mapping(raw, "output")
    _no_unknown(raw, _OUTPUT_KEYS, "output.")
    if override:
        path = override if is_remote(override) else os.path.abspath(override)
    else:
        path = raw.get("path")
        if not isinstance(path, str) or not path:
            raise ConfigError("output.path", "is required (or give --output)")
        path = _resolve(path, base_dir)
    compression = raw.get("compression", "gzip")
    if compression not in COMPRESSIONS:
        raise ConfigError(
            "output.compression", f"unknown value {compression!r} ({', '.join(COMPRESSIONS)})"
        )
    size = raw.get("shard_size_mb", 128)
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
        raise ConfigError("output.shard_size_mb", f"{size!r} must be a positive number")
    level = raw.get("compression_level", 6)
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= 9:
        raise ConfigError("output.compression_level", f"{level!r} must be an integer from 1 to 9")
    max_rejected = raw.get("max_rejected")
    if max_rejected is not None and (
        isinstance(max_rejected, bool) or not isinstance(max_rejected, int) or max_rejected < 0
    ):
        raise ConfigError("output.max_rejected", f"{max_rejected!r} must be an integer >= 0")
    fraction = raw.get("max_rejected_fraction")
    if fraction is not None and (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not 0 <= fraction <= 1
    ):
        raise ConfigError(
            "output.max_rejected_fraction", f"{fraction!r} must be a number from 0 to 1"
        )
    return OutputSpec(
        path=path.rstrip("/"),
        compression=compression,
        compression_level=level,
        shard_size_mb=float(size),
        max_rejected=max_rejected,
        max_rejected_fraction=None if fraction is None else float(fraction),
    )


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
    materialize = raw.get("materialize", "raw")
    if materialize not in MATERIALIZE:
        raise ConfigError(
            "transform.materialize", f"unknown value {materialize!r} ({', '.join(MATERIALIZE)})"
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
            raise ConfigError(where, f"{item!r} must be an op name or a mapping {{op: params}}")
        if name not in TRANSFORM_OPS:
            raise ConfigError(where, f"unknown op {name!r} ({', '.join(TRANSFORM_OPS)})")
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
        if not ok or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in raw):
            raise ConfigError(where, f"{raw!r} must be [height, width] in pixels")
        return {"size": tuple(raw)}
    allowed = _OP_PARAMS.get(name, {})
    raw = {} if raw is None else raw
    if not allowed and raw != {}:
        raise ConfigError(where, f"takes no parameters, got {raw!r}")
    _mapping(raw, where)
    _no_unknown(raw, set(allowed), where + ".")
    params = {}
    for key, (default, low) in allowed.items():
        value = raw.get(key, default)
        if value is _REQUIRED:
            raise ConfigError(f"{where}.{key}", "is required")
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < low
        ):
            raise ConfigError(f"{where}.{key}", f"{value!r} must be an integer >= {low}")
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
    try:
        value = schema.coerce_scalar(dataclasses.replace(feature, shape=()), raw)
    except schema.RecordError as e:
        raise ConfigError(where, e.reason.split(": ", 1)[-1]) from None
    return value


def _check_module(path: Any, base_dir: str) -> str:
    """The resolved path of a local Python file that defines `preprocessing_fn`.

    Checked by parsing, without running it: importing a module may import TensorFlow.
    """
    where = "transform.module"
    if not isinstance(path, str) or not path:
        raise ConfigError(where, "must be the path of a Python file")
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


def _mapping(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(where, "must be a mapping")


def _required(raw: dict, key: str, prefix: str) -> Any:
    if key not in raw or raw[key] is None:
        raise ConfigError(prefix + key, "is required")
    return raw[key]


def _no_unknown(raw: dict, allowed: set[str], prefix: str) -> None:
    for k in raw:
        if k not in allowed:
            raise ConfigError(prefix + str(k), f"unknown key (allowed: {', '.join(sorted(allowed))})")
