"""Renders the config reference (`pipelines.config.reference`) as the reference page
docs/reference/config.md and as the JSON Schema docs/config.schema.json (draft 2020-12) that
editors use to complete and check a config.

    python -m pipelines.config.doc            # rewrites both files
    python -m pipelines.config.doc --check    # exit 1 when either is out of date

tests/pipelines/config/test_reference.py fails when a file differs from what this writes.

Longer than most modules because both files render the same `Part`s and `Key`s: a key's type,
bounds, allowed values and default must say the same on the page and in the schema, and in one
module a change to `Key` is rendered both ways at once.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

from pipelines.config.reference import (
    NAME,
    OPS,
    PARTS,
    REQUIRED,
    Key,
    Part,
    options_part,
)
from transforms.contract.config import SOURCE_FORMATS
from transforms.sources import registry

ROOT = Path(__file__).resolve().parents[2]
MARKDOWN = "docs/reference/config.md"
SCHEMA = "docs/config.schema.json"
COMMAND = "python -m pipelines.config.doc"
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

# The JSON Schema of each value type of the reference (a "A or B" type is anyOf its parts).
_TYPE_SCHEMAS: dict[str, dict[str, Any]] = {
    "string": {"type": "string"},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "boolean": {"type": "boolean"},
    "mapping": {"type": "object"},
    "list of strings": {"type": "array", "items": {"type": "string"}},
    "list of integers": {"type": "array", "items": {"type": "integer"}},
    "list of mappings": {"type": "array", "items": {"type": "object"}},
    "list": {"type": "array"},
    "scalar": {"type": ["string", "number", "boolean"]},
    "any": {},
    "no parameters": {"type": "object", "maxProperties": 0},
    "op or list of ops": {"$ref": "#/$defs/feature_ops"},
}


# --- JSON Schema ----------------------------------------------------------------------------------


def schema() -> dict[str, Any]:
    """The JSON Schema of a dataset config."""
    config_keys = {p.full_path(k): k for p in PARTS if p.kind == "config" for k in p.keys}
    intros = {p.path: p.intro for p in PARTS if p.kind == "config"}
    root = {
        "$schema": SCHEMA_DIALECT,
        "title": "shardflow dataset config",
        "description": (
            f"Generated from pipelines/config/reference.py by `{COMMAND}`. " + intros[""]
        ),
        **_object(config_keys, "", intros),
    }
    source = root["properties"]["sources"]["items"]
    source["allOf"] = [_format_rule(fmt) for fmt in SOURCE_FORMATS]
    root["$defs"] = _op_defs()
    return root


def _object(keys: dict[str, Key], path: str, intros: dict[str, str]) -> dict[str, Any]:
    """The object schema of the mapping at `path`, from the keys below it (full paths)."""
    properties, extra, required = {}, None, []
    for seg in _children(keys, path):
        full = f"{path}.{seg}" if path else seg
        if seg == NAME:
            extra = _value(keys, full, intros)
            continue
        properties[seg] = _value(keys, full, intros)
        if full in keys and keys[full].required:
            required.append(seg)
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    out["additionalProperties"] = extra if extra is not None else False
    return out


def _children(keys: dict[str, Key], path: str) -> list[str]:
    """The key names directly below `path`, in the reference's order (`x[]` excluded: the
    entries of the list `x` are that key's items)."""
    prefix = f"{path}." if path else ""
    out: list[str] = []
    for full in keys:
        if full.startswith(prefix) and full != path:
            seg = full[len(prefix) :].split(".")[0]
            if seg not in out and not seg.endswith("[]"):
                out.append(seg)
    return out


def _value(keys: dict[str, Key], path: str, intros: dict[str, str]) -> dict[str, Any]:
    """The schema of the value at `path`: its key's type, with the keys below it."""
    key = keys.get(path)
    frag: dict[str, Any] = key_schema(key) if key is not None else {"type": "object"}
    if key is None and path in intros:
        frag["description"] = intros[path]
    if _children(keys, path):
        mapping = _object(keys, path, intros)
        del mapping["type"]  # the key's own: "object", or with "null" where null is the default
        _object_branch(frag).update(mapping)
    if _children(keys, path + "[]"):
        item = _object(keys, path + "[]", intros)
        item["description"] = intros[path + "[]"]
        frag["items"] = item
    return frag


def _object_branch(frag: dict[str, Any]) -> dict[str, Any]:
    if "anyOf" in frag:
        return next(b for b in frag["anyOf"] if _is_object(b))
    if not _is_object(frag):
        raise ValueError(f"keys below a value that is not a mapping: {frag}")
    return frag


def _is_object(frag: dict[str, Any]) -> bool:
    kind = frag.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def key_schema(key: Key) -> dict[str, Any]:
    """A key's value: its type with its bounds and allowed values, null where YAML null means
    the default, and its description, default and example."""
    if key.type in _TYPE_SCHEMAS:
        branches = [_branch(key, key.type)]
    else:
        branches = [_branch(key, t) for t in key.type.split(" or ")]
    frag: dict[str, Any] = branches[0] if len(branches) == 1 else {"anyOf": branches}
    frag.update(copy.deepcopy(dict(key.schema or {})))
    if key.accepts_null:
        _add_null(frag)
    frag["description"] = key.description
    if key.default is not None and key.default is not REQUIRED:
        frag["default"] = key.default
    frag["examples"] = [key.example]
    return frag


def _branch(key: Key, kind: str) -> dict[str, Any]:
    frag = copy.deepcopy(_TYPE_SCHEMAS[kind])
    low, high = key.length or (None, None)
    if kind == "string":
        if key.case_insensitive:  # an enum for completion, a pattern for the other spellings
            either = "|".join(_any_case(v) for v in key.allowed)
            frag = {
                "anyOf": [
                    {"enum": list(key.allowed)},
                    {"type": "string", "pattern": f"^(?:{either})$"},
                ]
            }
        elif key.allowed:
            frag["enum"] = list(key.allowed)
        if key.pattern is not None:
            frag["pattern"] = key.pattern
        _put(frag, minLength=low, maxLength=high)
    elif kind in ("integer", "number"):
        frag.update(_bounds(key))
    elif kind.startswith("list"):
        if kind == "list of strings" and key.allowed:
            frag["items"]["enum"] = list(key.allowed)
        elif kind == "list of integers":
            frag["items"].update(_bounds(key))
        _put(frag, minItems=low, maxItems=high)
    elif kind == "mapping":
        _put(frag, minProperties=low, maxProperties=high)
    return frag


def _any_case(text: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in text)


def _bounds(key: Key) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if key.minimum is not None:
        out["exclusiveMinimum" if key.exclusive_minimum else "minimum"] = key.minimum
    if key.maximum is not None:
        out["maximum"] = key.maximum
    return out


def _put(frag: dict[str, Any], **values: Any) -> None:
    frag.update({k: v for k, v in values.items() if v is not None})


def _add_null(frag: dict[str, Any]) -> None:
    if "$ref" in frag:
        frag["anyOf"] = [{"$ref": frag.pop("$ref")}, {"type": "null"}]
        return
    if "anyOf" in frag:
        frag["anyOf"].append({"type": "null"})
        return
    kind = frag.get("type")
    if kind is None:
        return  # any value, null included
    frag["type"] = [*([kind] if isinstance(kind, str) else kind), "null"]
    if "enum" in frag:
        frag["enum"] = [*frag["enum"], None]


def _format_rule(fmt: str) -> dict[str, Any]:
    """`options` (and `path`) of a source whose `format` is `fmt`."""
    part = options_part(fmt)
    keys = {k.name: k for k in part.keys}
    fragment = _object(keys, "", {})
    fragment["type"] = ["object", "null"]
    fragment["description"] = f"Options of `format: {fmt}`. {part.intro}"
    then: dict[str, Any] = {"properties": {"options": fragment}}
    if fmt in registry.QUERY_FORMATS:
        then["properties"]["path"] = {"type": "null"}
    else:
        then["properties"]["path"] = {"type": "string", "minLength": 1}
        then["required"] = ["path"]
    return {"if": {"properties": {"format": {"const": fmt}}, "required": ["format"]}, "then": then}


def _op_defs() -> dict[str, Any]:
    """`op` (one op: a name, or `{name: parameters}`) and `feature_ops` (an op or a list)."""
    keys = {k.name: k for k in OPS.keys}
    mapping = _object(keys, "", {})
    mapping.update(minProperties=1, maxProperties=1)
    bare = [k.name for k in OPS.keys if "." not in k.name and k.accepts_null]
    return {
        "op": {"description": OPS.intro, "anyOf": [{"enum": bare}, mapping]},
        "feature_ops": {
            "anyOf": [
                {"$ref": "#/$defs/op"},
                {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/op"}},
            ]
        },
    }


def schema_text() -> str:
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


# --- Markdown -------------------------------------------------------------------------------------


def markdown() -> str:
    """The reference page: one section and one table per part, each with a YAML example."""
    lines = [
        "# Dataset config reference",
        "",
        f"*Generated from `pipelines/config/reference.py` by `{COMMAND}`: edit that file "
        "and rerun the command, not this page.*",
        "",
        "Every key of the dataset config (YAML), with its type, its default and the values it "
        "allows. A key the table does not list is an error naming it; `—` means no default (the "
        "key is unset); YAML `null` (or `key:` with no value) means the default. `<name>` "
        "stands for a name you choose (a feature, a split, a field).",
        "",
        "The same reference is the JSON Schema [`config.schema.json`](../config.schema.json): "
        "with it, an editor that uses yaml-language-server (VS Code's YAML extension, among "
        "others) completes and checks a config whose first line is "
        "`# yaml-language-server: $schema=<path or URL of config.schema.json>`.",
        "",
    ]
    for part in PARTS:
        lines += _section(part)
    return "\n".join(lines).rstrip("\n") + "\n"


def _section(part: Part) -> list[str]:
    where = f"In `{part.path}`. " if part.path else ""
    if part.kind == "options":
        where = f"In `{part.path}` of a source with `format: {part.format}`. "
    lines = [f"## {part.title}", "", where + part.intro, ""]
    if part.kind == "options" and part.format in registry.FILE_FORMATS:
        lines += [_files(registry.describe(part.format)), ""]
    if part.keys:
        lines += [
            "| key | type | default | allowed | description |",
            "|---|---|---|---|---|",
        ]
        lines += [_row(key) for key in part.keys]
    else:
        lines.append("No options.")
    lines += ["", "```yaml", part.example.rstrip("\n"), "```", ""]
    return lines


def _files(described: registry.Format) -> str:
    """What a file format reads, from its descriptor: the file endings `init` and `predict`
    tell it by, its compression endings, whether large files are read in parallel."""
    endings = ", ".join(f"`{e}`" for e in described.extensions)
    text = f"File endings (how `shardflow init` and `predict --input` tell the format): {endings}"
    if described.compressed:
        compressed = ", ".join(f"`{e}`" for e in described.compressed)
        text += f"; compressed files, decompressed by their last ending: {compressed}"
    else:
        text += "; a file compressed as a whole is not read"
    if described.splittable:
        text += "; a large file is read by several workers in parallel"
    return text + "."


def _row(key: Key) -> str:
    description = f"{key.description} Example: {_code(flow(key.example))}"
    cells = [_code(key.name), key.type, _default(key), _allowed(key), description]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _code(text: str) -> str:
    """`text` as a code span (one that holds a backtick is fenced by two)."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


_CODE_SPAN = re.compile(r"(``.+?``|`[^`]*`)")


def _cell(text: str) -> str:
    """A table cell: `|` escaped outside code spans (MkDocs' tables keep it inside them)."""
    parts = _CODE_SPAN.split(text)
    return "".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def _default(key: Key) -> str:
    if key.required:
        return "required"
    if key.default_text is not None:
        return key.default_text
    if key.default is None:
        return "—"
    return _code(flow(key.default))


def _allowed(key: Key) -> str:
    parts = []
    if key.allowed:
        parts.append(", ".join(_code(flow(v)) for v in key.allowed))
        if key.case_insensitive:
            parts[-1] += " (any case)"
    items = "items " if key.type.startswith("list") else ""
    if key.minimum is not None and key.maximum is not None:
        if key.exclusive_minimum:
            parts.append(f"{items}more than {_number(key.minimum)}, at most "
                         f"{_number(key.maximum)}")  # fmt: skip
        else:
            parts.append(f"{items}{_number(key.minimum)} to {_number(key.maximum)}")
    elif key.minimum is not None:
        parts.append(f"{items}at least {_number(key.minimum)}")
    if key.length is not None:
        parts.append(_length(key))
    if key.pattern is not None:
        parts.append(f"matches `{key.pattern}`")
    return "; ".join(p for p in parts if p)


def _number(value: float) -> str:
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _length(key: Key) -> str:
    low, high = key.length or (None, None)
    unit = "character" if key.type == "string" else "item"
    if key.type == "mapping":
        unit = "key"
    if low == high:
        return f"{low} {unit}{'s' * (low != 1)}"
    if high is None:
        return "not empty" if low == 1 else f"at least {low} {unit}s"
    if low in (0, None):
        return f"at most {high} {unit}{'s' * (high != 1)}"
    return f"{low} to {high} {unit}s"


_PLAIN = re.compile(r"[A-Za-z_./][A-Za-z0-9_./-]*")
_YAML_WORDS = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}


def flow(value: Any) -> str:
    """`value` as YAML in flow style (`{num_buckets: 4}`, `[64, 64]`, `"*"`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
            return value
        if "\\" in value and "'" not in value:
            return f"'{value}'"
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{flow(k)}: {flow(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no YAML form for {value!r}")


# --- command --------------------------------------------------------------------------------------


def outputs() -> dict[str, str]:
    """What this writes: path relative to the repository -> text."""
    return {MARKDOWN: markdown(), SCHEMA: schema_text()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Writes the config reference page and the config's JSON Schema."
    )
    parser.add_argument("--markdown", default=str(ROOT / MARKDOWN), help="the page to write")
    parser.add_argument("--schema", default=str(ROOT / SCHEMA), help="the JSON Schema to write")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is out of date"
    )
    args = parser.parse_args(argv)
    texts = outputs()
    stale = []
    for path, text in ((args.markdown, texts[MARKDOWN]), (args.schema, texts[SCHEMA])):
        target = Path(path)
        if args.check:
            if not target.is_file() or target.read_text("utf-8") != text:
                stale.append(path)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, "utf-8")
        print(f"wrote {path}")
    if stale:
        print(f"out of date: {', '.join(stale)}; run {COMMAND}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
