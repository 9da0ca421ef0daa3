"""Reads a config's YAML so that text means what it says: where the config expects text, a plain
(unquoted) scalar is the text written, not what YAML 1.1 makes of it.

PyYAML reads YAML 1.1, which resolves plain `yes`, `no`, `on`, `off`, `y`, `n`, `true`, `false`
to booleans and `1.0`, `010` (octal: 8), `1_000`, `12:30` (sexagesimal: 750) or `2024-01-02` to
numbers and dates. A string feature's `values: [yes, no, maybe]` would become `[True, False,
'maybe']` and reject every valid `yes`; its `default: no` would write "false"; `null_values: [no]`
would be a boolean. So the document is composed first, and before it is constructed such scalars
are retagged as strings (their text is kept in the node) in the places that take text:
- every mapping key (a config's keys are names: features, splits, fields, options);
- the keys the config reference (`pipelines.config.reference`) types as text (`string`, `list
  of strings`, ...) in the top level, a source, its format's `options`, a feature, `output`,
  `transform` and `validation`;
- the `values` and `default` of a `string` or `bytes` feature, and its `fill_missing` value in
  `transform.features`.
An `int` feature's `values` or `default` that YAML reads otherwise than the data would be read
(`010`: 8, where a CSV cell `010` is 10) is refused, naming both readings.
A null (`null`, `~`, nothing) keeps its meaning everywhere: the key is given no value.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

import yaml

from pipelines.config import reference
from pipelines.config.fields import ConfigError, Loader
from pipelines.config.reference_keys import Part

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")  # an integer YAML and the data read alike
# The tags YAML 1.1 gives plain text that looks like a boolean, a number or a date.
_RESOLVED = {
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:timestamp",
}
_TEXT_TYPES = {
    "string",
    "list of strings",
    "list of strings or mapping",
    "list of strings or string",
    "string or list of strings",
}
_TEXT_FEATURES = ("string", "bytes")  # a feature whose `values` and `default` are text
_SECTIONS = ("output", "transform", "validation")


def load_yaml(text: bytes) -> Any:
    """The config document of `text`, read with `fields.Loader`, its text scalars kept as text;
    None for an empty document. Raises what `yaml.load` raises."""
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        keep_text(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def keep_text(root: yaml.Node) -> None:
    """Retags, in place, the plain scalars of a composed config that stand for text."""
    _keys(root, set())
    if not isinstance(root, yaml.MappingNode):
        return
    top = _fields(root)
    _part(root, reference.part(""))
    for src in _items(top.get("sources")):
        if not isinstance(src, yaml.MappingNode):
            continue
        _part(src, reference.part("sources[]"))
        fields = _fields(src)
        fmt, options = fields.get("format"), fields.get("options")
        if isinstance(fmt, yaml.ScalarNode) and isinstance(options, yaml.MappingNode):
            try:
                part = reference.options_part(fmt.value)
            except KeyError:  # an unknown format: the loader names it
                continue
            _part(options, part)
    features = top.get("features")
    texts = set()  # the string and bytes features
    if isinstance(features, yaml.MappingNode):
        for name, feature in _pairs(features):
            if isinstance(feature, yaml.MappingNode) and isinstance(name, yaml.ScalarNode):
                if _feature(feature, f"features.{name.value}"):
                    texts.add(name.value)
    transform = top.get("transform")
    ops = _fields(transform).get("features") if isinstance(transform, yaml.MappingNode) else None
    if isinstance(ops, yaml.MappingNode):
        for name, op in _pairs(ops):
            if isinstance(name, yaml.ScalarNode) and name.value in texts:
                for one in _items(op) if isinstance(op, yaml.SequenceNode) else [op]:
                    if isinstance(one, yaml.MappingNode):  # {fill_missing: VALUE}
                        _text(_fields(one).get("fill_missing"))
    for section in _SECTIONS:
        node = top.get(section)
        if isinstance(node, yaml.MappingNode):
            _part(node, reference.part(section))


def _feature(node: yaml.MappingNode, where: str) -> bool:
    """Retags a feature's text; True for a string or bytes feature."""
    _part(node, reference.part("features.<name>"))
    fields = _fields(node)
    ftype = fields.get("type")
    if not isinstance(ftype, yaml.ScalarNode):
        return False
    for key in ("values", "default"):
        if ftype.value in _TEXT_FEATURES:
            _text(fields.get(key))
        elif ftype.value == "int":
            _decimal(fields.get(key), f"{where}.{key}")
    return ftype.value in _TEXT_FEATURES


def _decimal(node: yaml.Node | None, where: str) -> None:
    """Refuses an integer YAML 1.1 reads otherwise than the data's syntax (transforms.schema):
    `010` is 8 there (octal), 10 in a CSV cell; `0x10`, `1_000` and `1:30` are numbers there,
    no integers in the data."""
    many = isinstance(node, yaml.SequenceNode)
    for i, item in enumerate(_items(node) if many else [node]):
        if (
            isinstance(item, yaml.ScalarNode)
            and item.style is None
            and item.tag == _INT
            and not _DECIMAL.fullmatch(item.value)
        ):
            value = yaml.safe_load(item.value)
            raise ConfigError(
                f"{where}[{i}]" if many else where,
                f"YAML reads {item.value} as {value}; write {value}, or quote it "
                f'("{item.value}") for the data\'s reading',
            )


def _part(node: yaml.MappingNode, part: Part) -> None:
    """The values of the keys `part` types as text."""
    keys = {k.name: k for k in part.keys}
    for key, value in _pairs(node):
        if isinstance(key, yaml.ScalarNode) and key.value in keys:
            if keys[key.value].type in _TEXT_TYPES:
                _text(value)


def _text(node: yaml.Node | None) -> None:
    """A scalar, or each scalar of a list, as its text."""
    for item in _items(node) if isinstance(node, yaml.SequenceNode) else [node]:
        if (
            isinstance(item, yaml.ScalarNode)
            and item.style is None  # plain: a quoted scalar is a string already
            and item.tag in _RESOLVED
        ):
            item.tag = _STR


def _keys(node: yaml.Node, seen: set[int]) -> None:
    """Every mapping key in the document, as its text. `seen`: a node an alias repeats (or
    that holds itself, which the loader refuses later) is walked once."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            _text(key)
            _keys(value, seen)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _keys(item, seen)


def _fields(node: yaml.MappingNode) -> dict[str, yaml.Node]:
    """The value node of each text key of a mapping (its own before a merge's, which PyYAML
    lets it override)."""
    out: dict[str, yaml.Node] = {}
    for key, value in _pairs(node):
        if isinstance(key, yaml.ScalarNode):
            out.setdefault(key.value, value)
    return out


def _pairs(
    node: yaml.MappingNode, seen: set[int] | None = None
) -> Iterator[tuple[yaml.Node, yaml.Node]]:
    """The (key, value) nodes of a mapping, those of its `<<` merges after its own; a mapping
    merged more than once (through aliases, or into itself) is walked once."""
    seen = set() if seen is None else seen
    seen.add(id(node))
    merges = []
    for key, value in node.value:
        if key.tag == "tag:yaml.org,2002:merge":
            merges.extend(_items(value) if isinstance(value, yaml.SequenceNode) else [value])
        else:
            yield key, value
    for merged in merges:
        if isinstance(merged, yaml.MappingNode) and id(merged) not in seen:
            yield from _pairs(merged, seen)


def _items(node: yaml.Node | None) -> list[yaml.Node]:
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []
