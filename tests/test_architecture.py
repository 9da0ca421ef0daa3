"""The architecture, read from the code's imports: every import points down the layers, and no
module imports another package's private names.

    deploy/                  → pipelines, trainer, transforms
    pipelines/               → transforms
    trainer/                 → transforms.contract only (no Beam: tests/transforms/contract)
    transforms/sink/         → transforms (element logic), transforms.contract
    transforms/sources/      → transforms (element logic), transforms.contract
    transforms/ (flat)       → transforms (element logic), transforms.contract
    transforms/contract/     → nothing of ours

Imports inside functions count too (they are how heavy libraries are put off, not a way around
the layers).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipelines", "transforms", "trainer", "deploy")


def _layer(module: str) -> str:
    """The layer of a dotted module name of ours."""
    parts = module.split(".")
    if parts[0] == "transforms" and len(parts) > 2 and parts[1] in ("contract", "sources", "sink"):
        return f"transforms.{parts[1]}"
    if parts[0] == "transforms" and len(parts) == 2 and parts[1] in ("contract", "sources", "sink"):
        return f"transforms.{parts[1]}"
    return parts[0]


# layer → the layers it may import (its own always)
ALLOWED = {
    "deploy": {"pipelines", "trainer", "transforms", "transforms.contract", "transforms.sources",
               "transforms.sink"},
    "pipelines": {"transforms", "transforms.contract", "transforms.sources", "transforms.sink"},
    "trainer": {"transforms.contract"},
    "transforms.sink": {"transforms", "transforms.contract"},
    "transforms.sources": {"transforms", "transforms.contract"},
    "transforms": {"transforms.contract"},
    "transforms.contract": set(),
}  # fmt: skip


def _modules() -> list[tuple[str, Path]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found.append((".".join(parts), path))
    return found


def _imports(module: str, path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names taken from it) of every import of ours in a module."""
    return _imports_of(path.read_text(), module, path)


def _imports_of(source: str, module: str, path: Path) -> list[tuple[int, str, list[str]]]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + [base]
                )
            found.append((node.lineno, base.strip("."), [a.name for a in node.names]))
    return [(line, name, names) for line, name, names in found if name.split(".")[0] in PACKAGES]


MODULES = _modules()


def test_the_packages_are_all_found():
    names = {m for m, _ in MODULES}
    expected = {"pipelines.etl", "transforms.sources.csv", "transforms.sink.publish",
                "transforms.contract.manifest", "trainer.task", "deploy.vertex.launch"}  # fmt: skip
    assert expected <= names


def test_every_import_points_down_the_layers():
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: {_layer(module)} imports {name}"
        for module, path in MODULES
        for line, name, _ in _imports(module, path)
        if _layer(name) != _layer(module) and _layer(name) not in ALLOWED[_layer(module)]
    ]
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_private_names_of_another_package():
    wrong = []
    for module, path in MODULES:
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        wrong += [
            f"{path.relative_to(ROOT)}:{line}: from {name} import {n}"
            for line, name, names in _imports(module, path)
            for n in names
            if n.startswith("_") and name.rpartition(".")[0] != package
        ]
    assert not wrong, "\n".join(wrong)


def test_the_rules_see_a_wrong_import():
    """The checks above are not vacuous: a sideways import and a private one are caught."""
    assert _layer("transforms.sources.csv") == "transforms.sources"
    assert "transforms.sink" not in ALLOWED["transforms.sources"]
    assert "pipelines" not in ALLOWED["trainer"] | ALLOWED["transforms"]
    source = "from transforms.sink.publish import _locked\nimport pipelines.etl\n"
    path = ROOT / "transforms" / "sources" / "csv.py"
    found = [(n, names) for _, n, names in _imports_of(source, "transforms.sources.csv", path)]
    assert found == [("transforms.sink.publish", ["_locked"]), ("pipelines.etl", [])]
