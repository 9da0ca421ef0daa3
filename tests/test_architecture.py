"""The architecture, read from the code's imports: every import points down the layers, and no
module imports another package's private names.

    pipelines/cli.py         → every command's module (its COMMANDS table: importlib strings,
                               read here as imports); nothing of ours imports it
    deploy/                  → pipelines, trainer, transforms
    pipelines/               → transforms
    trainer/ (the commands)  → its wings below, transforms.contract, transforms.ui (no Beam)
      trainer/run/           → keras, recipe, dataset, the ground (config, errors)
      trainer/keras/         → recipe, dataset, the ground
      trainer/readers/       → dataset, the ground (PyTorch and JAX beside Keras, not on it)
      trainer/recipe/        → dataset, the ground; no Keras
      trainer.config, .errors  → dataset (the trainer's ground: every wing reads them)
      trainer/dataset/       → transforms.contract, transforms.ui; no TensorFlow
    transforms/sink/         → transforms (element logic), transforms.contract
    transforms/sources/      → transforms (element logic), transforms.contract
    transforms/ (flat)       → transforms (element logic), transforms.contract
    transforms/contract/     → transforms.ui
    transforms/ui/           → nothing of ours (the ground floor: errors, argument types and
                               parser, "did you mean", the reports' style; every layer may
                               import it)

Imports inside functions count too (they are how heavy libraries are put off, not a way around
the layers).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipelines", "transforms", "trainer", "deploy")


CLI = "pipelines.cli"
SUBLAYERS = ("contract", "sources", "sink", "ui")
WINGS = ("dataset", "recipe", "keras", "run", "readers")  # of trainer/
GROUND = ("trainer.config", "trainer.errors")
TRAINER = {"trainer", "trainer.ground", *(f"trainer.{w}" for w in WINGS)}
BASE = {"transforms.contract", "transforms.ui"}
# What a module of a trainer layer may not import, even lazily (third-party modules).
FORBIDDEN = {
    "trainer.dataset": ("tensorflow", "tf_keras", "keras", "tensorflow_transform"),
    "trainer.readers": ("tensorflow", "tf_keras", "keras", "tensorflow_transform"),
    "trainer.recipe": ("tf_keras", "keras"),
}


def _layer(module: str) -> str:
    """The layer of a dotted module name of ours."""
    if module == CLI:
        return "cli"
    if module in GROUND:
        return "trainer.ground"
    parts = module.split(".")
    if parts[0] == "trainer" and len(parts) > 1 and parts[1] in WINGS:
        return f"trainer.{parts[1]}"
    if parts[0] == "transforms" and len(parts) > 2 and parts[1] in SUBLAYERS:
        return f"transforms.{parts[1]}"
    if parts[0] == "transforms" and len(parts) == 2 and parts[1] in SUBLAYERS:
        return f"transforms.{parts[1]}"
    return parts[0]


# layer → the layers it may import (its own always)
ALLOWED = {
    "cli": {"deploy", "pipelines", "transforms", "transforms.contract",
            "transforms.sources", "transforms.sink", "transforms.ui"} | TRAINER,
    "deploy": {"pipelines", "transforms", "transforms.contract", "transforms.sources",
               "transforms.sink", "transforms.ui"} | TRAINER,
    "pipelines": {"transforms", "transforms.contract", "transforms.sources", "transforms.sink",
                  "transforms.ui"},
    "trainer": TRAINER | BASE,
    "trainer.run": {"trainer.keras", "trainer.recipe", "trainer.dataset", "trainer.ground"} | BASE,
    "trainer.keras": {"trainer.recipe", "trainer.dataset", "trainer.ground"} | BASE,
    "trainer.readers": {"trainer.dataset", "trainer.ground"} | BASE,
    "trainer.recipe": {"trainer.dataset", "trainer.ground"} | BASE,
    "trainer.ground": {"trainer.dataset"} | BASE,
    "trainer.dataset": BASE,
    "transforms.sink": {"transforms", "transforms.contract", "transforms.ui"},
    "transforms.sources": {"transforms", "transforms.contract", "transforms.ui"},
    "transforms": {"transforms.contract", "transforms.ui"},
    "transforms.contract": {"transforms.ui"},
    "transforms.ui": set(),
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
    """(line, imported module, names taken from it) of every import of ours in a module; the
    CLI's command table counts as imports of the modules it names."""
    found = _imports_of(path.read_text(), module, path)
    if module == CLI:
        found += _command_table(path)
    return found


def _command_table(path: Path) -> list[tuple[int, str, list[str]]]:
    """The modules the CLI's COMMANDS table imports when a command runs (its entry point) or
    asks for help (its parser: `module:function`), as (line, module, [function])."""
    found = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
            "COMMANDS"
        ]:
            for entry in node.value.values:
                module, function, parser = (ast.literal_eval(e) for e in entry.elts[:3])
                found.append((entry.lineno, module, [function]))
                parser_module, _, parser_function = parser.partition(":")
                found.append((entry.lineno, parser_module, [parser_function]))
    assert found, f"no COMMANDS table in {path}"
    return found


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


def _libraries(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module) of every import in a module, ours or not, anywhere in it."""
    return _libraries_of(path.read_text(), path)


def _libraries_of(source: str, path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def test_the_dataset_floor_loads_no_tensorflow_and_the_recipe_no_keras():
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: {_layer(module)} imports {library}"
        for module, path in MODULES
        if _layer(module) in FORBIDDEN
        for line, library in _libraries(path)
        if library in FORBIDDEN[_layer(module)]
    ]
    assert not wrong, "\n".join(wrong)
    floor = [m for m, _ in MODULES if _layer(m) == "trainer.dataset"]
    assert {"trainer.dataset.manifest", "trainer.dataset.storage"} <= set(floor)


def test_the_command_table_names_real_modules_and_nothing_imports_the_cli():
    from pipelines.cli import COMMANDS

    paths = dict(MODULES)
    table = _command_table(ROOT / "pipelines" / "cli.py")
    assert len(table) == 2 * len(COMMANDS)
    for _, module, (function,) in table:
        assert module in paths, f"the CLI names {module}, which is not a module of ours"
        body = ast.parse(paths[module].read_text()).body
        defined = {n.name for n in body if isinstance(n, ast.FunctionDef)}
        assert function in defined, f"{module} has no function {function}"
    importers = [
        f"{path.relative_to(ROOT)}:{line}"
        for module, path in MODULES
        for line, name, _ in _imports(module, path)
        if name == CLI and module != CLI
    ]
    assert not importers, importers


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
    assert (
        _layer("trainer.keras.model") == "trainer.keras"
        and _layer("trainer.config") in (ALLOWED["trainer.recipe"])
    )
    assert "trainer.keras" not in ALLOWED["trainer.recipe"] | ALLOWED["trainer.readers"]
    assert "trainer.run" not in ALLOWED["trainer.keras"] and "trainer" not in ALLOWED["trainer.run"]
    assert ALLOWED["trainer.dataset"] == BASE
    bad = ROOT / "trainer" / "dataset" / "storage.py"
    assert "tensorflow" in [lib for _, lib in _libraries_of("import tensorflow as tf\n", bad)]
    assert "deploy" not in ALLOWED["pipelines"] and "trainer" not in ALLOWED["pipelines"]
    assert ("trainer.task", ["main"]) in [(m, f) for _, m, f in _command_table(
        ROOT / "pipelines" / "cli.py")]  # fmt: skip
    source = "from transforms.sink.publish import _locked\nimport pipelines.etl\n"
    path = ROOT / "transforms" / "sources" / "csv.py"
    found = [(n, names) for _, n, names in _imports_of(source, "transforms.sources.csv", path)]
    assert found == [("transforms.sink.publish", ["_locked"]), ("pipelines.etl", [])]


def _import_graph() -> dict[str, set[str]]:
    """Module → the modules of ours it imports (anywhere in it); `from package import module`
    counts as importing that module."""
    names = {m for m, _ in MODULES}
    graph: dict[str, set[str]] = {}
    for module, path in MODULES:
        targets = set()
        for _, name, taken in _imports_of(path.read_text(), module, path):
            subs = {f"{name}.{n}" for n in taken} & names
            targets |= subs or ({name} & names)
        graph[module] = targets - {module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others():
    assert _cycles(_import_graph()) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# Words that held two meanings in the trainer; each is now defined once, anywhere of ours.
ONE_MEANING = (
    "SAMPLE_RECORDS", "SIZE_SAMPLE", "RULE_SAMPLE", "VALIDATE_SAMPLE", "RecordError",
    "ExampleError", "Moments", "Numbers", "Label", "make_dataset", "Facts", "Evidence",
    "MAX_CYCLE_LENGTH", "MAX_TAKE", "EXPORT", "RUN", "InputPlan", "plan_input",
)  # fmt: skip


def _top_level_names(path: Path) -> list[str]:
    names = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def test_a_word_of_the_trainer_has_one_meaning():
    """A class, function or constant of those words is defined in one module only, and no two
    modules of trainer/ define the same public class."""
    where: dict[str, list[str]] = {}
    classes: dict[str, list[str]] = {}
    for module, path in MODULES:
        for name in _top_level_names(path):
            where.setdefault(name, []).append(module)
        if module.startswith("trainer."):
            for node in ast.parse(path.read_text(), str(path)).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    classes.setdefault(node.name, []).append(module)
    twice = {w: where[w] for w in ONE_MEANING if len(where.get(w, ())) > 1}
    assert not twice, twice
    assert {c: m for c, m in classes.items() if len(m) > 1} == {}
    assert len(where["Evidence"]) == 1 and "trainer.recipe.facts" in where["Evidence"]


MODULE_LINES = 400  # docs/architecture.md: modules stay under about 400 lines
SAYS_WHY = "Longer than most modules because"


def test_a_module_over_400_lines_says_why_at_its_top():
    """A module longer than MODULE_LINES says, in its docstring, why it is one piece."""
    silent = []
    for module, path in MODULES:
        text = path.read_text()
        if text.count("\n") > MODULE_LINES:
            doc = ast.get_docstring(ast.parse(text, str(path))) or ""
            if SAYS_WHY not in " ".join(doc.split()):
                silent.append(f"{module} ({text.count(chr(10))} lines)")
    assert not silent, f"over {MODULE_LINES} lines without '{SAYS_WHY} ...': {silent}"
