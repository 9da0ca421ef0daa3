"""Typed reading of a raw YAML config: each function checks one value and raises ConfigError
naming the field (`output.shard_size_mb: 1e-300 must be ...`), on one line whatever the value.

The config is the user's file: any value may be of any YAML type, megabytes long, hold control
characters, or (through aliases) refer to itself. `Loader` reads it (plain YAML, each key once
per mapping); `check_tree` refuses what no field's own check should have to expect; the other
functions are the accessors `pipelines.config.loader` validates every key with.
"""

from __future__ import annotations

import itertools
import math
import os
import posixpath
import reprlib
from typing import Any

import yaml

from transforms.contract.config import FeatureSpec
from transforms.files import is_remote
from transforms.ui.errors import ShardflowError
from transforms.ui.suggest import did_you_mean

MAX_NAME_BYTES = 200  # feature and source names: files (vocabularies) are named after them
MAX_DEPTH = 32  # levels of mappings and lists; a real config nests 6 deep at most
MISSING = object()


class ConfigError(ShardflowError, ValueError):
    """A config that cannot be used; the message starts with the offending field (a password
    in it masked, as in every ShardflowError).

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


def show(value: Any, limit: int = 200) -> str:
    """A value for an error message: its repr, cut short (a path of up to `limit` in full)."""
    if isinstance(value, str) and len(value) <= limit:
        return repr(value)
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping of the config gives the same key twice."""


class Loader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping: PyYAML keeps the last
    one, so a feature declared twice would silently lose its first declaration."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue  # `<<` merges may override keys; other keys fail as unhashable
            key = self.construct_object(key_node)
            if key in seen:
                raise DuplicateKey(
                    None, None, f"the key {show(key)} appears twice in one mapping",
                    key_node.start_mark,
                )  # fmt: skip
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def check_tree(value: Any, where: str, depth: int, path: set[int], done: set[int]) -> None:
    """Refuses what no field's own check should have to expect: nesting deeper than MAX_DEPTH,
    a list or mapping that contains itself (YAML aliases allow `&a [*a]`), keys that are not
    strings, and text that is not valid Unicode (a lone surrogate from a `\\ud800` escape).

    `path` holds the containers being walked (a cycle), `done` those already checked: a YAML
    alias repeats a container without copying it, and walking every repeat could take
    exponential time (the "billion laughs" config).
    """
    if isinstance(value, str):
        checked_text(value, where or "config")
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
                    join_field(where, str(key)),
                    f"the key {show(key)} is {kind}, not text{words}: quote it",
                )
            checked_text(key, join_field(where, "<key>"))
            check_tree(item, join_field(where, key), depth + 1, path, done)
    else:
        for i, item in enumerate(value):
            check_tree(item, f"{where or 'config'}[{i}]", depth + 1, path, done)
    path.discard(id(value))
    done.add(id(value))


_KINDS = {"int": "an integer", "float": "a number", "bool": "a boolean", "NoneType": "null",
          "date": "a date", "datetime": "a timestamp", "bytes": "binary data"}  # fmt: skip


def join_field(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def checked_text(value: str, where: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(
            where, f"{show(value)} is not valid text (a lone surrogate, e.g. from \\ud800)"
        ) from None
    return value


def path_text(value: Any, where: str) -> str:
    """A path as given: text without NUL characters (which no file system takes)."""
    if not isinstance(value, str):
        raise ConfigError(where, f"{show(value)} must be a path (text)")
    if "\0" in value:
        raise ConfigError(where, f"{show(value)} holds a NUL character")
    return checked_text(value, where)


def name_text(value: Any, where: str) -> str:
    """A feature, source or field name: non-empty printable text of at most MAX_NAME_BYTES."""
    if not isinstance(value, str) or not value:
        raise ConfigError(where, f"{show(value)} must be a non-empty string")
    if not value.isprintable():
        raise ConfigError(where, f"{show(value)} holds a control character (newline, tab, ...)")
    if len(value.encode("utf-8")) > MAX_NAME_BYTES:
        raise ConfigError(where, f"{show(value)} is longer than {MAX_NAME_BYTES} bytes")
    return value


def is_one_of(value: Any, collection: Any) -> bool:
    """`value in collection` for a collection of strings; False for any other value (a list
    or a mapping from YAML is unhashable: `[x] in {...}` raises TypeError)."""
    return isinstance(value, str) and value in collection


def choice(value: Any, where: str, choices: tuple[str, ...], unknown: str = "unknown value") -> str:
    """`value` when it is one of `choices`; else ConfigError listing them."""
    if not is_one_of(value, choices):
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        raise ConfigError(where, f"{unknown} {show(value)} ({', '.join(choices)}){hint}")
    return value


def is_number(
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


def bounded_number(value: Any, where: str, rule: str, **bounds: Any) -> Any:
    """`value` when `is_number(value, **bounds)`; else ConfigError "VALUE RULE"."""
    if not is_number(value, **bounds):
        raise ConfigError(where, f"{show(value)} {rule}")
    return value


def require_mapping(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(where, "must be a mapping")


def value_of(raw: dict, key: str, prefix: str, default: Any = MISSING) -> Any:
    """`raw[key]`, or `default` when the key is absent or null (YAML `key:` with no value);
    without a default, ConfigError "is required"."""
    value = raw.get(key)
    if value is None:
        if default is MISSING:
            raise ConfigError(prefix + key, "is required")
        return default
    return value


def no_unknown(raw: dict, allowed: set[str], prefix: str) -> None:
    for k in raw:
        if k not in allowed:
            raise ConfigError(
                prefix + str(k),
                f"unknown key (allowed: {', '.join(sorted(allowed))}){did_you_mean(k, allowed)}",
            )


def coerce_value(convert: Any, feature: FeatureSpec, value: Any, where: str) -> Any:
    """`convert(feature, value)`, a coercion of `transforms.schema`, its refusal a ConfigError."""
    from transforms.records import RecordError  # Arrow: only where a value is coerced

    try:
        return convert(feature, value)
    except RecordError as e:
        raise ConfigError(where, e.reason.removeprefix(f"{feature.name}: ")) from None


def resolve_path(path: str, base_dir: str) -> str:
    """`path` as given in a config at `base_dir` (its folder, local or gs://)."""
    if is_remote(path) or os.path.isabs(path):
        return path
    if is_remote(base_dir):  # a gs:// config: relative to its folder
        scheme, _, rest = base_dir.partition("://")
        return f"{scheme}://{posixpath.normpath(posixpath.join(rest, path))}"
    return os.path.normpath(os.path.join(base_dir, path))
