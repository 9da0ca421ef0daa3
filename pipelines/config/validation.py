"""The `validation:` section of a dataset config: the curated schema (read and checked with the
config), the baseline dataset, the limits of the checks and the anomaly kinds that fail a run.
Its keys are declared in `pipelines.config.reference` (VALIDATION)."""

from __future__ import annotations

from typing import Any

from pipelines.config import reference
from pipelines.config.fields import (
    ConfigError,
    bounded_number,
    choice,
    name_text,
    no_unknown,
    path_text,
    require_mapping,
    resolve_path,
    show,
    value_of,
)
from transforms.contract.config import ANOMALY_KINDS, DEFAULT_BLOCKING, MEASURES, ValidationSpec
from transforms.ui.suggest import did_you_mean

_KEYS = set(reference.key_names("validation"))
_LIMIT_KEYS = {"max_missing_rate", "drift", "skew"}
_MEASURE_KEYS = set(MEASURES)


def parse_validation(
    raw: Any, features: set[str], base_dir: str, read: Any = None
) -> ValidationSpec:
    """The `validation:` section checked; `read(path) -> bytes` reads the curated schema."""
    if raw is None:
        return ValidationSpec()
    require_mapping(raw, "validation")
    no_unknown(raw, _KEYS, "validation.")
    schema = value_of(raw, "schema", "validation.", None)
    schema_text = None
    if schema is not None:
        schema = resolve_path(path_text(schema, "validation.schema"), base_dir)
        schema_text = schema_text_of(schema, read)
    baseline = value_of(raw, "baseline", "validation.", None)
    if baseline is not None:
        baseline = resolve_path(path_text(baseline, "validation.baseline"), base_dir)
        baseline = baseline.rstrip("/")
    own = {k: raw[k] for k in _LIMIT_KEYS if k in raw}
    per_feature = value_of(raw, "features", "validation.", {})
    require_mapping(per_feature, "validation.features")
    feature_limits = []
    for name, limits in per_feature.items():
        where = f"validation.features.{name}"
        name_text(name, where)
        if name not in features:
            hint = did_you_mean(name, features)
            raise ConfigError(where, f"{show(name)} is not one of the features{hint}")
        require_mapping(limits, where)
        no_unknown(limits, _LIMIT_KEYS, where + ".")
        feature_limits.append((name, _limits(limits, where)))
    return ValidationSpec(
        schema=schema,
        schema_text=schema_text,
        baseline=baseline,
        limits=_limits(own, "validation"),
        features=tuple(sorted(feature_limits)),
        block=_block(value_of(raw, "block", "validation.", list(DEFAULT_BLOCKING))),
    )


def _limits(raw: dict, where: str) -> tuple[tuple[str, float], ...]:
    """`max_missing_rate` and `drift`/`skew` measures as `Thresholds` names them."""
    out = []
    rate = value_of(raw, "max_missing_rate", where + ".", None)
    if rate is not None:
        rule = "must be a number from 0 to 1"
        bounded_number(rate, f"{where}.max_missing_rate", rule, low=0, high=1)
        out.append(("max_missing_rate", float(rate)))
    for check in ("drift", "skew"):
        limits = value_of(raw, check, where + ".", {})
        require_mapping(limits, f"{where}.{check}")
        no_unknown(limits, _MEASURE_KEYS, f"{where}.{check}.")
        for measure, short in MEASURES.items():
            value = value_of(limits, measure, f"{where}.{check}.", None)
            if value is not None:
                rule = "must be a number from 0 to 1"
                bounded_number(value, f"{where}.{check}.{measure}", rule, low=0, high=1)
                out.append((f"{check}_{short}", float(value)))
    return tuple(sorted(out))


def _block(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise ConfigError("validation.block", f"{show(raw)} must be a list of anomaly kinds")
    for kind in raw:
        choice(kind, "validation.block", ANOMALY_KINDS, "unknown anomaly kind")
    return tuple(k for k in ANOMALY_KINDS if k in raw)


def schema_text_of(path: str, read: Any, where: str = "validation.schema") -> str:
    """A curated schema's text, checked: ConfigError naming `where`. `read(path)` gives its
    bytes (None: no such file)."""
    from transforms.validation.schema import SchemaError, read_schema

    try:
        data = read(path) if read is not None else open(path, "rb").read()
    except OSError as e:
        raise ConfigError(where, f"cannot read {path!r}: {e.strerror}") from None
    except ConfigError as e:  # the config's own reader names --config
        raise ConfigError(where, str(e).split(": ", 1)[1]) from None
    if data is None:
        raise ConfigError(where, f"cannot read {path!r}: no such file")
    try:
        text = data.decode("utf-8")
        read_schema(data)
    except UnicodeDecodeError:
        raise ConfigError(where, f"{path!r} is not UTF-8 text") from None
    except SchemaError as e:
        raise ConfigError(where, f"{path}: {e}") from None
    return text
