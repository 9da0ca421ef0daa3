"""Loads and validates a dataset config (YAML) into a `transforms.contract.config.DatasetSpec`.

Everything a user can get wrong in the config is caught here, once, with an error that names the
field: `features.year.type: unknown type 'integer' (int, float, string, bytes, image); did you
mean 'int'?`.
Relative paths in the config are resolved against the config file's folder, so a config and its
data can move together.

Longer than most modules because it reads one document: each section of the config in turn,
with the cross-field rules between them (features and sources, splits and output); the typed
reading of single values is `pipelines.config.fields`, the `transform:` section
`pipelines.config.transform`, the `validation:` section `pipelines.config.validation`.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import re
import stat
from typing import Any

import yaml

from pipelines.config import reference
from pipelines.config.fields import (
    MAX_DEPTH,
    ConfigError,
    DuplicateKey,
    bounded_number,
    check_tree,
    choice,
    coerce_value,
    is_number,
    is_one_of,
    name_text,
    no_unknown,
    path_text,
    require_mapping,
    resolve_path,
    show,
    value_of,
)
from pipelines.config.scalars import load_yaml
from pipelines.config.transform import parse_transform
from pipelines.config.validation import parse_validation
from transforms import schema
from transforms.contract.config import (
    ALLOWANCES,
    FEATURE_ALLOWANCES,
    FEATURE_TYPES,
    IMAGE_CHANNELS,
    PRESENT_SUFFIX,
    SOURCE_FORMATS,
    DatasetSpec,
    FeatureSpec,
    OptionError,
    OutputSpec,
    SourceOptions,
    SourceSpec,
)
from transforms.contract.facts import VOCABULARY_CAP
from transforms.contract.layout import (
    COMPRESSIONS,
    DEFAULT_COMPRESSION,
    DEFAULT_COMPRESSION_LEVEL,
    DEFAULT_SHARD_SIZE_MB,
    REJECTED_DIR,
    SPILL_DIR,
    TRANSFORM_DIR,
    staged_name,
)
from transforms.files import is_remote, location_problem
from transforms.sources import registry
from transforms.ui.suggest import did_you_mean

NAME_RE = re.compile(r"[a-z0-9_-]+")  # with fullmatch: `$` would let a trailing newline in
DEFAULT_SPLITS = {"train": 0.9, "eval": 0.1}

# Bounds of values that pass every type check but cannot be meant: beyond them a run would take
# forever, exhaust memory or fail half-way on a limit of the file system (see the README).
SHARD_SIZE_MB = (0.001, 16384)  # 1 KiB (tests use tiny shards to get many) to 16 GiB
MAX_FIXED_LENGTH = 1_000_000  # values of a fixed-length ([n]) feature; longer lists are [null]

MAX_SPLIT_NAME = 100  # split names are folder and file names
# OUTPUT is staged as its sibling `.NAME.incomplete-RUNID` (transforms.sink.publish.staging_path):
# NAME and those 25 bytes must fit in a file name (255 bytes on Linux and macOS file systems).
MAX_OUTPUT_NAME_BYTES = 255 - len(staged_name("", "")) - 12
# Folders of OUTPUT (and of its staging folder) that are not splits.
RESERVED_SPLITS = (REJECTED_DIR, TRANSFORM_DIR, SPILL_DIR)

# The keys each mapping accepts: the config reference declares them, with their documentation.
_TOP_KEYS = set(reference.key_names(""))
_SOURCE_KEYS = set(reference.key_names("sources[]"))
_FEATURE_KEYS = set(reference.key_names("features.<name>"))
_OUTPUT_KEYS = set(reference.key_names("output"))


DATE_TOKENS = ("{date}", "{YYYY}", "{MM}", "{DD}")


MAX_FEATURES = 1000  # features a config may declare
MAX_CONFIG_BYTES = 16 << 20  # a config is a few KiB; --config /dev/zero would never end


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
    # (where, the dict holding the path and its key) or ("--output", None, the path itself)
    places: list[tuple[str, dict[str, Any] | None, str]] = []
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
    """The bytes of a local or gs:// file; ConfigError naming --config when it cannot be read.

    Only a regular file (a link to one) of at most MAX_CONFIG_BYTES is read: a device
    (/dev/zero) would be read until memory runs out, a named pipe would wait for a writer.
    """
    try:
        if is_remote(path):
            from apache_beam.io.filesystems import FileSystems

            with FileSystems.open(path) as f:
                return _within_limit(path, f.read(MAX_CONFIG_BYTES + 1))
        kind = file_kind(os.stat(path).st_mode)
        if kind is not None:
            raise ConfigError("--config", f"{path!r} is {kind}, not a regular file")
        with open(path, "rb") as f:
            return _within_limit(path, f.read(MAX_CONFIG_BYTES + 1))
    except ConfigError:
        raise
    except OSError as e:
        raise ConfigError("--config", f"cannot read {path!r}: {e.strerror or e}") from None
    except Exception as e:  # a gs:// read that failed in the client library
        raise ConfigError("--config", f"cannot read {path!r}: {type(e).__name__}: {e}") from None


def _within_limit(path: str, data: bytes) -> bytes:
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            "--config",
            f"{path!r} is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a dataset config "
            "(one is a few KiB)",
        )
    return data


def file_kind(mode: int) -> str | None:
    """None for a regular file; else what it is, in words (`a named pipe (FIFO)`)."""
    if stat.S_ISREG(mode):
        return None
    for test, kind in _FILE_KINDS:
        if test(mode):
            return kind
    return "not a file"


_FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def load_config(
    path: str, output: str | None = None, date: datetime.date | None = None
) -> DatasetSpec:
    """Reads, validates and resolves the config at `path` (local or gs://); `output` overrides
    `output.path`; `date` fills the date templates of the source and output paths."""
    text = read_text(path)
    try:
        raw = load_yaml(text)
    except RecursionError:  # PyYAML composes nested nodes recursively
        raise ConfigError(
            "--config", f"{path!r} is nested too deeply (at most {MAX_DEPTH} levels)"
        ) from None
    except ConfigError:  # a value of the config's text (pipelines.config.scalars)
        raise
    except ValueError as e:  # a scalar PyYAML resolved but cannot build: `!!int x`, 5000 digits
        reason = str(e).split(";")[0]  # Python's advice on its own limits is not the user's
        raise ConfigError("--config", f"{path!r} is not valid YAML: {reason}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        if mark is not None and _is_tab(e, mark):
            raise ConfigError(
                "--config",
                f"{path!r} line {mark.line + 1}, column {mark.column + 1}: a tab; YAML forbids "
                "tabs for indentation: indent with spaces",
            ) from None
        if isinstance(e, DuplicateKey):
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


def _is_tab(error: yaml.YAMLError, mark: Any) -> bool:
    """True when YAML stopped at a tab (`found character '\\t' that cannot start any token`)."""
    buffer = getattr(mark, "buffer", None)
    at = buffer[mark.pointer] if buffer and 0 <= mark.pointer < len(buffer) else ""
    return at == "\t" or "'\\t'" in str(getattr(error, "problem", "") or "")


def parse_config(raw: Any, base_dir: str, output: str | None = None) -> DatasetSpec:
    """Validates an already-parsed config mapping; paths are resolved against `base_dir`."""
    require_mapping(raw, "config")
    check_tree(raw, "", 0, set(), set())
    no_unknown(raw, _TOP_KEYS, "")
    name = value_of(raw, "name", "")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigError("name", f"{show(name)} must match [a-z0-9_-]+")

    sources = _parse_sources(value_of(raw, "sources", "", None), base_dir)
    features = _parse_features(value_of(raw, "features", "", None), sources)
    names = {f.name for f in features}

    key = value_of(raw, "key", "", None)
    if key is not None:
        key = name_text(key, "key")
    combine = choice(value_of(raw, "combine", "", "union"), "combine", ("union", "join"))
    if combine == "join":
        if key is None:
            raise ConfigError("combine", "'join' needs a `key` to join on")
        if len(sources) < 2:
            raise ConfigError("combine", "'join' needs at least two sources")

    label = value_of(raw, "label", "", None)
    if label is not None and not is_one_of(label, names):
        hint = did_you_mean(label, names) if isinstance(label, str) else ""
        raise ConfigError("label", f"{show(label)} is not one of the features{hint}")

    splits = _parse_splits(value_of(raw, "splits", "", DEFAULT_SPLITS))
    out = _parse_output(value_of(raw, "output", "", {}), base_dir, output)
    transform = value_of(raw, "transform", "", None)
    if transform is not None:
        transform = parse_transform(transform, features, label, splits, base_dir)
    validation = parse_validation(value_of(raw, "validation", "", None), names, base_dir, read_text)
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
        validation=validation,
    )


def _parse_sources(raw: Any, base_dir: str) -> tuple[SourceSpec, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError("sources", "must be a list of one or more sources")
    seen: set[str] = set()
    out = []
    for i, src in enumerate(raw):
        where = f"sources[{i}]"
        require_mapping(src, where)
        no_unknown(src, _SOURCE_KEYS, where + ".")
        name = value_of(src, "name", where + ".")
        if not isinstance(name, str) or not name or "." in name:
            raise ConfigError(
                f"{where}.name", f"{show(name)} must be a non-empty name without dots"
            )
        name_text(name, f"{where}.name")
        if name in seen:
            raise ConfigError(f"{where}.name", f"duplicate source name {show(name)}")
        seen.add(name)
        fmt = value_of(src, "format", where + ".")
        fmt = choice(fmt, f"{where}.format", SOURCE_FORMATS, "unknown format")
        raw_options = value_of(src, "options", where + ".", {})
        require_mapping(raw_options, f"{where}.options")
        options = _parse_options(fmt, raw_options, f"{where}.options")
        options = registry.resolve_paths(fmt, options, base_dir)
        path = value_of(src, "path", where + ".", None)
        if fmt in registry.FILE_FORMATS:
            if path is None or path == "":
                raise ConfigError(f"{where}.path", "is required for file formats")
            problem = location_problem(path) if isinstance(path, str) else None
            if problem is not None:
                raise ConfigError(f"{where}.path", problem)
            path = resolve_path(path_text(path, f"{where}.path"), base_dir)
        elif path is not None:
            raise ConfigError(f"{where}.path", f"not used by {fmt} sources (see its options)")
        out.append(SourceSpec(name=name, format=fmt, path=path, options=options))
    return tuple(out)


def _parse_options(fmt: str, options: dict[str, Any], where: str) -> SourceOptions:
    try:
        return registry.check_options(fmt, options)
    except OptionError as e:
        raise ConfigError(f"{where}.{e.field}", e.message) from None


def _parse_features(raw: Any, sources: tuple[SourceSpec, ...]) -> tuple[FeatureSpec, ...]:
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("features", "must map one or more feature names to their schema")
    if len(raw) > MAX_FEATURES:
        raise ConfigError(
            "features",
            f"{len(raw):,} features, more than the {MAX_FEATURES:,} a config may declare (each "
            "is a column of the statistics and a model input of its own); declare values that "
            "belong together as one list feature (shape: [n]), or leave out what is not needed",
        )
    source_names = {s.name for s in sources}
    out = []
    for name, fraw in raw.items():
        where = f"features.{name}"
        if not isinstance(name, str) or not name:
            raise ConfigError("features", f"feature name {show(name)} must be a non-empty string")
        name_text(name, where)
        require_mapping(fraw, where)
        no_unknown(fraw, _FEATURE_KEYS, where + ".")
        ftype = choice(
            value_of(fraw, "type", where + "."), f"{where}.type", FEATURE_TYPES, "unknown type"
        )
        shape = _parse_shape(value_of(fraw, "shape", where + ".", []), f"{where}.shape")
        required = value_of(fraw, "required", where + ".", True)
        if not isinstance(required, bool):
            raise ConfigError(f"{where}.required", "must be true or false")
        src, field = None, None
        ref = value_of(fraw, "source", where + ".", None)
        if ref is not None:
            if not isinstance(ref, str) or "." not in ref:
                raise ConfigError(f"{where}.source", f"{show(ref)} must be SOURCE.FIELD")
            src, field = ref.split(".", 1)
            if src not in source_names:
                raise ConfigError(f"{where}.source", f"no source named {show(src)}")
            if not field:
                raise ConfigError(f"{where}.source", f"{show(ref)} names no field")
        lo = _bound(fraw.get("min"), f"{where}.min", ftype)
        hi = _bound(fraw.get("max"), f"{where}.max", ftype)
        if lo is not None and hi is not None and lo > hi:
            raise ConfigError(f"{where}.min", f"{lo} is greater than max {hi}")
        values = value_of(fraw, "values", where + ".", None)
        if values is not None:
            if ftype not in ("int", "string") or not isinstance(values, list) or not values:
                raise ConfigError(
                    f"{where}.values", "must be a non-empty list, for int and string features"
                )
            probe = FeatureSpec(name, ftype, (), True)
            where_values = f"{where}.values"
            coerced = [coerce_value(schema.coerce_scalar, probe, v, where_values) for v in values]
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
            image_size=_image_size(fraw.get("image_size"), ftype, shape, f"{where}.image_size"),
            allow=_feature_allowances(value_of(fraw, "allow", where + ".", []), ftype, where),
        )
        default = value_of(fraw, "default", where + ".", None)
        if default is not None:
            if required:
                raise ConfigError(f"{where}.default", "a required feature takes no default")
            default = coerce_value(schema.coerce_feature, feature, default, f"{where}.default")
            feature = dataclasses.replace(feature, default=default)
        out.append(feature)
    _check_generated_names(out)
    return tuple(out)


def _feature_allowances(raw: Any, ftype: str, where: str) -> tuple[str, ...]:
    """A feature's `allow`: values it keeps although they look like a mistake (infinity)."""
    where = f"{where}.allow"
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        choices = ", ".join(FEATURE_ALLOWANCES)
        raise ConfigError(where, f"{show(raw)} must be a list of {choices}")
    for a in raw:
        choice(a, where, FEATURE_ALLOWANCES)
    if raw and ftype != "float":
        raise ConfigError(where, f"applies to float features, not {ftype}")
    return tuple(a for a in FEATURE_ALLOWANCES if a in raw)


def _image_size(raw: Any, ftype: str, shape: tuple, where: str) -> tuple[int, int, int] | None:
    """An image feature's [height, width] or [height, width, channels] (3 by default): the
    size the trainer decodes and resizes it to."""
    if raw is None:
        return None
    if ftype != "image" or shape != ():
        raise ConfigError(where, "is for a scalar image feature (type: image, shape [])")
    if (
        not isinstance(raw, list)
        or len(raw) not in (2, 3)
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in raw)
    ):
        raise ConfigError(
            where, f"{show(raw)} must be [height, width] or [height, width, channels]"
        )
    size = (*raw, 3) if len(raw) == 2 else tuple(raw)
    if size[2] not in IMAGE_CHANNELS:
        raise ConfigError(where, f"channels {size[2]} must be 1 (gray), 3 (RGB) or 4 (RGBA)")
    return size


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
            where, f"{show(raw)} must be [] (scalar), [n] (fixed) or [null] (variable)"
        )
    if (
        raw
        and raw[0] is not None
        and not is_number(raw[0], integer=True, low=1, high=MAX_FIXED_LENGTH)
    ):
        raise ConfigError(
            where,
            f"{show(raw)}: the length must be a positive integer (at most "
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
        raise ConfigError(where, f"{show(value)} is not a number")
    bounded_number(value, where, "is not a finite number")
    if ftype == "float":  # the float32 bounds of the values themselves (transforms.schema)
        coerce_value(schema.coerce_scalar, FeatureSpec("bound", ftype, (), True), value, where)
    elif not -(2**63) <= value < 2**63:
        raise ConfigError(where, f"{show(value)} is outside the int64 range")
    return value


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
                f"split name {show(name)} must match [a-z0-9_-]+ (at most {MAX_SPLIT_NAME} "
                f"characters; not {', '.join(RESERVED_SPLITS)})",
            )
        frac = bounded_number(
            frac, f"splits.{name}", "must be a fraction in (0, 1]", low=0, high=1, low_open=True
        )
        out.append((name, float(frac)))
    total = sum(f for _, f in out)
    if abs(total - 1.0) > 1e-6:
        raise ConfigError("splits", f"fractions sum to {total:g}, not 1")
    return tuple(out)


def _parse_output(raw: Any, base_dir: str, override: str | None) -> OutputSpec:
    raw = raw if raw is not None else {}
    require_mapping(raw, "output")
    no_unknown(raw, _OUTPUT_KEYS, "output.")
    if override is not None:
        path = _dataset_folder(override, "output.path", None)
    else:
        path = value_of(raw, "path", "output.", "")
        if path == "":
            raise ConfigError("output.path", "is required (or give --output)")
        path = _dataset_folder(path, "output.path", base_dir)
    compression = choice(
        value_of(raw, "compression", "output.", DEFAULT_COMPRESSION),
        "output.compression",
        tuple(COMPRESSIONS),
    )
    low, high = SHARD_SIZE_MB
    size = bounded_number(
        value_of(raw, "shard_size_mb", "output.", DEFAULT_SHARD_SIZE_MB),
        "output.shard_size_mb",
        f"must be a positive number of MB from {low:g} to {high:g}",
        low=low,
        high=high,
    )
    level = bounded_number(
        value_of(raw, "compression_level", "output.", DEFAULT_COMPRESSION_LEVEL),
        "output.compression_level",
        "must be an integer from 1 to 9",
        integer=True,
        low=1,
        high=9,
    )
    max_rejected = value_of(raw, "max_rejected", "output.", None)
    if max_rejected is not None:
        bounded_number(
            max_rejected, "output.max_rejected", "must be an integer >= 0", integer=True, low=0
        )
    fraction = value_of(raw, "max_rejected_fraction", "output.", None)
    if fraction is not None:
        rule = "must be a number from 0 to 1"
        bounded_number(fraction, "output.max_rejected_fraction", rule, low=0, high=1)
    allow = _allowances(value_of(raw, "allow", "output.", []))
    cap = value_of(raw, "vocabulary_cap", "output.", VOCABULARY_CAP)
    bounded_number(cap, "output.vocabulary_cap", "must be an integer >= 1", integer=True, low=1)
    return OutputSpec(
        vocabulary_cap=int(cap),
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
        raise ConfigError("output.allow", f"{show(raw)} must be a list of {', '.join(ALLOWANCES)}")
    unknown = sorted(set(raw) - set(ALLOWANCES))
    if unknown:
        raise ConfigError(
            "output.allow", f"unknown value {show(unknown[0])} ({', '.join(ALLOWANCES)})"
        )
    return tuple(a for a in ALLOWANCES if a in raw)


def _dataset_folder(value: Any, where: str, base_dir: str | None) -> str:
    """OUTPUT resolved (against `base_dir`, or the current folder without one), refused when
    it cannot be a dataset folder.

    A run stages the dataset in the sibling `.NAME.incomplete-RUNID` and renames it to OUTPUT
    (transforms.sink.publish), so OUTPUT needs a parent and a name of its own; and it must not be,
    or hold, the current or the home folder, which `--overwrite` would replace.
    """
    text = path_text(value, where)

    def refuse(why: str) -> None:
        raise ConfigError(where, f"{show(text)} cannot be a dataset folder ({why})")

    if not text:
        refuse("an empty path")
    control = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
    if control is not None:  # a newline pasted in, a tab: no one means a folder named so
        refuse(f"it holds a control character, U+{ord(control):04X}")
    last = text.rstrip("/").rsplit("/", 1)[-1]
    if last in (".", ".."):
        refuse(f"it ends in {last!r}: name a folder of the dataset's own")
    if is_remote(text) or base_dir is None:
        path = text if is_remote(text) else os.path.abspath(text)
    else:
        path = resolve_path(text, base_dir)
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
        refuse(f"{show(ancestor)} is not a folder")
    return path


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # the current folder was deleted: nothing there to protect
        return ""


def _within(path: str, folder: str) -> bool:
    """True when `path` is `folder` or inside it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
