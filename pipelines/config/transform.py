"""Loads the `transform:` section of a dataset config into a `TransformSpec`
(`transforms.contract.config`).

Declarative ops per feature (`z_score`, `vocabulary`, ...) are checked against the feature's
type, their stage order and each other, with their parameters completed and bounded; a
`module` is checked as a local Python file that defines `preprocessing_fn`, without running it.
Errors name the field, as in the rest of the config (`pipelines.config.loader`).
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

from pipelines.config import reference
from pipelines.config.fields import (
    ConfigError,
    bounded_number,
    choice,
    coerce_value,
    is_number,
    no_unknown,
    path_text,
    require_mapping,
    resolve_path,
    show,
    value_of,
)
from transforms import schema
from transforms.contract.config import (
    AFTER_LOG1P,
    MATERIALIZE,
    TRAIN_SPLIT,
    TRANSFORM_OPS,
    FeatureSpec,
    TransformOp,
    TransformSpec,
)
from transforms.files import is_remote

_TRANSFORM_KEYS = set(reference.key_names("transform"))
# Parameters of the declarative transform ops, from the config reference: name -> (default, or
# _REQUIRED, minimum, maximum). The maxima bound the ids the trainer one-hot encodes or embeds
# per feature; `vocabulary.num_oov_buckets` is at least 1 because a model cannot embed -1.
_REQUIRED = object()
_OP_PARAMS: dict[str, dict[str, tuple[Any, int, int]]] = reference.op_params(_REQUIRED)
MAX_IMAGE_SIDE = 4096  # pixels, each side of `decode_resize`


def parse_transform(
    raw: Any,
    features: tuple[FeatureSpec, ...],
    label: str | None,
    splits: tuple[tuple[str, float], ...],
    base_dir: str,
) -> TransformSpec:
    require_mapping(raw, "transform")
    no_unknown(raw, _TRANSFORM_KEYS, "transform.")
    if TRAIN_SPLIT not in dict(splits):
        raise ConfigError(
            "transform", f"tf.Transform analyzes the split named {TRAIN_SPLIT!r}; `splits` has none"
        )
    materialize = choice(
        value_of(raw, "materialize", "transform.", "raw"), "transform.materialize", MATERIALIZE
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
            raise ConfigError(where, f"{show(item)} must be an op name or a mapping {{op: params}}")
        name = choice(name, where, tuple(TRANSFORM_OPS), "unknown op")
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
        if not ok or not all(is_number(v, integer=True, low=1, high=MAX_IMAGE_SIDE) for v in raw):
            raise ConfigError(
                where, f"{show(raw)} must be [height, width] in pixels (1 to {MAX_IMAGE_SIDE})"
            )
        return {"size": tuple(raw)}
    allowed = _OP_PARAMS.get(name, {})
    raw = {} if raw is None else raw
    if not allowed and raw != {}:
        raise ConfigError(where, f"takes no parameters, got {show(raw)}")
    require_mapping(raw, where)
    no_unknown(raw, set(allowed), where + ".")
    params = {}
    for key, (default, low, high) in allowed.items():
        value = value_of(raw, key, where + ".", default)
        if value is _REQUIRED:
            raise ConfigError(f"{where}.{key}", "is required")
        if value is not None:
            rule = f"must be an integer >= {low} (at most {high:,})"
            bounded_number(value, f"{where}.{key}", rule, integer=True, low=low, high=high)
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
    return coerce_value(schema.coerce_scalar, dataclasses.replace(feature, shape=()), raw, where)


def _check_module(path: Any, base_dir: str) -> str:
    """The resolved path of a local Python file that defines `preprocessing_fn`.

    Checked by parsing, without running it: importing a module may import TensorFlow.
    """
    where = "transform.module"
    if not isinstance(path, str) or not path:
        raise ConfigError(where, "must be the path of a Python file")
    path_text(path, where)
    if is_remote(path):
        raise ConfigError(where, f"{path!r}: the module must be a local file")
    path = resolve_path(path, base_dir)
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
        lineno = getattr(e, "lineno", None)  # a SyntaxError's; a ValueError has none
        line = f" (line {lineno})" if lineno else ""
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
