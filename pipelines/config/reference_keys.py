"""The vocabulary of the config reference (`pipelines.config.reference`): a `Key` of the
config, a `Part` (one mapping of it and its keys), the value types the reference page names.
No Beam, no TensorFlow, no YAML here."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping


class _Required:
    """The default of a key that must be given."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
NAME = "<name>"  # a key segment that stands for any name (a feature, a split, a field)

# The value types of keys, as the reference page names them (JSON Schema in pipelines.config.doc).
TYPES = (
    "string",
    "integer",
    "number",
    "boolean",
    "mapping",
    "list of strings",
    "list of integers",
    "list of mappings",
    "list",
    "list of strings or mapping",
    "list of strings or string",
    "string or list of strings",
    "scalar",
    "any",
    "no parameters",
    "op or list of ops",
)


@dataclasses.dataclass(frozen=True)
class Key:
    """One key of the config: `Key(name, type, description, example, ...)`.

    `default` is the value the parser uses when the key is absent (None: unset, REQUIRED: must be
    given); `default_text` says it in words where the value alone would mislead. `allowed` is a
    fixed set of values (for lists, of their items); `minimum`/`maximum` bound numbers (for
    lists of integers, their items); `length` is the (min, max) length of a string, list or
    mapping. `nullable`: whether YAML null stands for the default (None: unless the key is
    required). `schema` is JSON Schema for a value `type` alone does not describe.
    `context` (source options only) holds the other options the example is given with: the key
    applies only alongside them (a null there means "left out").
    """

    name: str
    type: str
    description: str
    example: Any
    default: Any = None
    default_text: str | None = None
    allowed: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    length: tuple[int | None, int | None] | None = None
    pattern: str | None = None
    case_insensitive: bool = False
    nullable: bool | None = None
    schema: Mapping[str, Any] | None = None
    context: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def accepts_null(self) -> bool:
        return not self.required if self.nullable is None else self.nullable


@dataclasses.dataclass(frozen=True)
class Part:
    """One mapping of the config and its keys.

    `path` is where it sits in the config (`sources[]` is any entry of the list `sources`,
    `<name>` any key of a mapping). `kind`: `config` (checked by pipelines.config.loader and
    pipelines.config.transform), `options` (a source format's options, checked by
    transforms/sources/<format>.py; `format` names it) or `ops` (the transform ops of one
    feature). `example` is YAML: top-level keys of a config, complete with the top-level part's.
    """

    title: str
    path: str
    intro: str
    keys: tuple[Key, ...]
    example: str
    kind: str = "config"
    format: str | None = None

    def key(self, name: str) -> Key:
        for k in self.keys:
            if k.name == name:
                return k
        raise KeyError(name)

    def key_names(self) -> frozenset[str]:
        """The keys directly in this part's mapping (not nested ones, not `<name>`)."""
        return frozenset(k.name for k in self.keys if "." not in k.name and k.name != NAME)

    def full_path(self, key: Key) -> str:
        return f"{self.path}.{key.name}" if self.path else key.name
