"""Config fuzzing: hundreds of seeded mutations of one valid config, none of which may crash.

The valid config (`BASE`) has a CSV and a JSONL source written here, features of every type and
shape, a key, a label, splits, every output option and a declarative transform section. Each
mutation changes it at one place (or a few): every key at every depth gets values of other types
and edge values (None, booleans, 0, -1, 1e-300, 1e300, nan, inf, "", 10,000 characters, unicode,
control characters, empty and nested lists and mappings, ...) and a perturbed value of its own
type; every key is also deleted and renamed, every mapping gets an unknown key; random picks of
those fill up the count, and some configs are cut short or have a line repeated as text.
`random.Random(SEED)` makes the list the same on every run.

`shardflow etl --validate-only` must answer each one with exit 0, or exit 2 and exactly one line
`shardflow etl: error: ...`: never an exception, never exit 1. A sample of the mutations it
accepts then runs for real (without the transform section: tf.Transform costs ~20 s a run and
its config is checked above) and must end with exit 0, 2 with one error line, or 1 with one line
`shardflow etl: ...` (a data-quality refusal).
"""

from __future__ import annotations

import copy
import dataclasses
import random
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from pipelines.etl import run

SEED = 20261126
RANDOM_MUTATIONS = 300  # on top of the systematic ones (two per value, one per key and mapping)
REAL_RUNS = 10
NAN, INF = float("nan"), float("inf")

BASE: dict[str, Any] = {
    "name": "fuzz",
    "sources": [
        {
            "name": "rows",
            "format": "csv",
            "path": "rows.csv",
            "options": {"delimiter": ",", "header": True, "null_values": [""], "encoding": "utf-8"},
        },
        {"name": "more", "format": "jsonl", "path": "more.jsonl", "options": {"encoding": "utf-8"}},
    ],
    "key": "id",
    "combine": "union",
    "features": {
        "id": {"type": "int", "min": 0, "max": 100_000},
        "x": {"type": "float", "required": False, "default": 0.0, "min": -1000, "max": 1000},
        "y": {"type": "float", "required": False},
        "kind": {"type": "string", "values": ["a", "b", "c"]},
        "tags": {"type": "string", "shape": [None], "required": False},
        "vec": {"type": "int", "shape": [2], "required": False},
        "blob": {"type": "bytes", "required": False},
        "photo": {"type": "image", "required": False},
        "note": {"type": "string", "required": False, "source": "more.note"},
    },
    "label": "kind",
    "splits": {"train": 0.8, "eval": 0.2},
    "transform": {
        "features": {
            "x": "z_score",
            "y": [{"fill_missing": 0}, "log1p", {"bucketize": {"num_buckets": 3}}],
            "tags": {"vocabulary": {"top_k": 10, "num_oov_buckets": 1}},
            "blob": {"hash": {"buckets": 8}},
        },
        "materialize": "raw",
    },
    "output": {
        "path": "out",
        "compression": "gzip",
        "compression_level": 6,
        "shard_size_mb": 1,
        "max_rejected": 1000,
        "max_rejected_fraction": 0.5,
    },
}

# Edge values by kind: every value of the config is replaced by one of each kind.
EDGE_VALUES: dict[str, list[Any]] = {
    "null/bool": [None, True, False],
    "int": [0, -1, 1, 2, 10**30, -(2**63) - 1],
    "float": [1e-300, 1e300, -1e300, 0.5, NAN, INF, -INF],
    "text": [
        "", " ", "x", "x" * 10_000, "ü", "日本語", "\U0001f600", "a\nb", "a\tb", "a.b", "a: b",
        "{date}", "*", "/", ".", "..", "none", "gzip", "int", "train", "csv", "union", "raw",
        "z_score", "id",
    ],
    "list": [[], [None], [1, 2], ["a", "a"], [[[]]], [{}], [NAN], [-1]],
    "mapping": [
        {}, {"a": 1}, {"": None}, {"a": {"b": {"c": []}}}, {"z_score": None, "log1p": None},
    ],
}  # fmt: skip
ANY_EDGE_VALUE = [v for values in EDGE_VALUES.values() for v in values]
NEW_KEYS: list[Any] = [
    "unknown", "", "X", 1, True, None, 2.5, "x" * 300, "a.b", "ü", "a\nb", "kind__present",
    "x__present", "Train", "rejected", "transform",
]  # fmt: skip
Path_ = tuple  # a path into the config: keys and list indices


@dataclasses.dataclass(frozen=True)
class Mutation:
    kind: str  # replace | delete | rename | add | text
    path: Path_ = ()
    value: Any = None  # the new value, key, or for `text` a function of the YAML text
    also: tuple[Mutation, ...] = ()  # further mutations applied with this one

    def describe(self) -> str:
        where = ".".join(map(str, self.path)) or "<config>"
        text = f"{self.kind} {where}" + (f" = {self.value!r:.60}" if self.kind != "text" else "")
        return "; ".join([text, *(m.describe() for m in self.also)])

    @property
    def touches(self) -> set[str]:
        """The top-level keys it changes ('<text>' for a change of the text)."""
        top = {"<text>" if self.kind == "text" else str(self.path[0]) if self.path else "<all>"}
        return top.union(*(m.touches for m in self.also))


def _nodes(node: Any, path: Path_ = ()) -> list[Path_]:
    paths = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            paths += _nodes(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            paths += _nodes(v, (*path, i))
    return paths


def _at(cfg: Any, path: Path_) -> Any:
    for p in path:
        cfg = cfg[p]
    return cfg


def _perturb(value: Any, rng: random.Random) -> Any:
    """A value of the same type, changed: the right type with a wrong value."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice([value + 1, value - 1, -value - 1, value * 1_000_000, 2**63, 0])
    if isinstance(value, float):
        return rng.choice([value / 1e6, -value - 0.5, value * 1e6, value + 0.3, 1e-12, 2.0])
    if isinstance(value, str):
        changed = [value + "x", value.upper(), value * 3, value[::-1], value + "\n", " " + value]
        return rng.choice([*changed, value[:1]])
    if isinstance(value, list):
        return rng.choice([[], value + value, value[:1], list(reversed(value)), [value]])
    if isinstance(value, dict):
        items = list(value.items())
        return rng.choice([{}, dict(items[:1]), dict(reversed(items)), {**value, "extra": 1}])
    return rng.choice(ANY_EDGE_VALUE)


def _apply(cfg: dict, m: Mutation) -> dict:
    if m.kind == "replace":
        if not m.path:
            return m.value
        _at(cfg, m.path[:-1])[m.path[-1]] = copy.deepcopy(m.value)
    elif m.kind == "delete":
        del _at(cfg, m.path[:-1])[m.path[-1]]
    elif m.kind == "rename":  # in place, keeping the order of the keys
        parent = _at(cfg, m.path[:-1])
        items = [(m.value if k == m.path[-1] else k, v) for k, v in parent.items()]
        parent.clear()
        parent.update(items)
    elif m.kind == "add":  # a copy of a sibling: a new feature, source option, split, ...
        target = _at(cfg, m.path)
        target[m.value] = copy.deepcopy(next(iter(target.values()), 1))
    for other in m.also:
        cfg = _apply(cfg, other)
    return cfg


def _cut(at: float) -> Callable[[str], str]:
    return lambda text: text[: int(len(text) * at)]


def _repeat_line(at: float) -> Callable[[str], str]:
    def repeat(text: str) -> str:
        lines = text.splitlines(keepends=True)
        i = int(len(lines) * at)
        return "".join(lines[: i + 1] + lines[i:])

    return repeat


def mutations() -> list[Mutation]:
    """Every mutation, in a fixed order (the same on every run)."""
    rng = random.Random(SEED)
    paths = _nodes(BASE)
    keyed = [p for p in paths if p and isinstance(_at(BASE, p[:-1]), dict)]
    mappings = [p for p in paths if isinstance(_at(BASE, p), dict)]
    out = []
    for p in paths:
        out += [Mutation("replace", p, rng.choice(values)) for values in EDGE_VALUES.values()]
        out.append(Mutation("replace", p, _perturb(_at(BASE, p), rng)))
    out += [Mutation("delete", p) for p in paths if p]
    out += [Mutation("rename", p, rng.choice(NEW_KEYS)) for p in keyed]
    out += [Mutation("add", p, rng.choice(NEW_KEYS)) for p in mappings]
    out += [Mutation("text", value=_cut(rng.random())) for _ in range(20)]
    out += [Mutation("text", value=_repeat_line(rng.random())) for _ in range(10)]

    def one() -> Mutation:
        kind = rng.choice(["replace", "replace", "perturb", "delete", "rename", "add"])
        if kind == "rename":
            return Mutation("rename", rng.choice(keyed), rng.choice(NEW_KEYS))
        if kind == "add":
            return Mutation("add", rng.choice(mappings), rng.choice(NEW_KEYS))
        if kind == "delete":
            return Mutation("delete", rng.choice(keyed))
        p = rng.choice(paths)
        value = _perturb(_at(BASE, p), rng) if kind == "perturb" else rng.choice(ANY_EDGE_VALUE)
        return Mutation("replace", p, value)

    for _ in range(RANDOM_MUTATIONS):
        first = one()
        # a few at once, on different top-level keys so that one does not undo another
        others = [one() for _ in range(rng.choice([0, 0, 0, 1, 2]))]
        taken = first.touches | {"<all>"}
        others = [m for m in others if not m.touches & taken and m.kind != "delete"]
        others = [] if "<all>" in first.touches else others
        out.append(dataclasses.replace(first, also=tuple(others)))
    return out


def _write_inputs(folder: Path) -> None:
    rows = ["id,x,y,kind,tags,vec,blob"]
    rows += [
        f"{i},{i % 7 - 3}.5,{i % 5},{'abc'[i % 3]},t{i % 4}|u,{i}|{i + 1},b{i}" for i in range(60)
    ]
    (folder / "rows.csv").write_text("\n".join(rows) + "\n")
    more = [
        f'{{"id": {i}, "kind": "b", "x": 1.5, "tags": ["p"], "note": "n{i}"}}'
        for i in range(60, 80)
    ]
    (folder / "more.jsonl").write_text("\n".join(more) + "\n")


def _config_text(m: Mutation) -> str:
    cfg = _apply(copy.deepcopy(BASE), m)
    text = yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True, width=1000)
    if m.kind == "text":
        text = m.value(text)
    return text


def _one_error_line(err: str) -> bool:
    lines = err.splitlines()
    return len(lines) == 1 and lines[0].startswith("shardflow etl: error: ")


def _validate_all(folder: Path, capsys) -> tuple[list[tuple[Mutation, int]], list[str]]:
    """Runs --validate-only on every mutation: (mutation, exit code) pairs, and failures."""
    config = folder / "c.yaml"
    results, failures = [], []
    for i, m in enumerate(mutations()):
        config.write_text(_config_text(m), encoding="utf-8")
        try:
            code = run(["--config", str(config), "--validate-only"])
        except BaseException:  # noqa: BLE001 - what the test looks for; reported below
            capsys.readouterr()
            failures.append(f"#{i} {m.describe()}: raised\n{traceback.format_exc(limit=-3)}")
            continue
        out, err = capsys.readouterr()
        if not (code == 0 and not err or code == 2 and _one_error_line(err)):
            failures.append(f"#{i} {m.describe()}: exit {code}, stderr {err!r:.500}")
        results.append((m, code))
    return results, failures


@pytest.fixture
def fuzz_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths of mutated configs stay in here
    _write_inputs(tmp_path)
    return tmp_path


def test_no_config_mutation_crashes_the_check(fuzz_folder, capsys):
    results, failures = _validate_all(fuzz_folder, capsys)
    assert not failures, f"{len(failures)} of {len(results)}:\n" + "\n".join(failures[:20])
    codes = Counter(code for _, code in results)
    assert len(results) >= 300 and codes[0] and codes[2]
    with capsys.disabled():
        print(
            f"\nconfig fuzz: {len(results)} mutations (seed {SEED}): {codes[0]} valid (exit 0), "
            f"{codes[2]} refused (exit 2)"
        )


def _runnable(m: Mutation) -> bool:
    """Outside the transform section (left out of the real runs) and the paths (a mutated
    source path may name any folder of this machine)."""
    paths = [m.path, *(o.path for o in m.also)]
    return not m.touches & {"transform", "<text>", "<all>"} and not any(
        p and p[-1] == "path" for p in paths
    )


@pytest.mark.slow
def test_accepted_mutations_run_without_a_crash(fuzz_folder, capsys):
    # The first REAL_RUNS mutations that the check accepts, in a seeded shuffled order.
    candidates = [m for m in mutations() if _runnable(m)]
    random.Random(SEED).shuffle(candidates)
    config = fuzz_folder / "c.yaml"
    sample = []
    for m in candidates:
        cfg = _apply(copy.deepcopy(BASE), m)
        if isinstance(cfg, dict):
            cfg.pop("transform", None)
        config.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True), "utf-8")
        if run(["--config", str(config), "--validate-only"]) == 0:
            sample.append((m, config.read_text("utf-8")))
        capsys.readouterr()
        if len(sample) == REAL_RUNS:
            break
    assert len(sample) == REAL_RUNS
    outcomes = Counter()
    for i, (m, text) in enumerate(sample):
        config.write_text(text, "utf-8")
        code = run(["--config", str(config), "--output", str(fuzz_folder / f"out{i}")])
        err = capsys.readouterr().err
        lines = err.splitlines()
        assert code in (0, 1, 2), (m.describe(), code, err)
        if code == 0:
            assert not err, (m.describe(), err)
        elif code == 2:
            assert _one_error_line(err), (m.describe(), err)
        else:  # a data-quality refusal or a failed job: one line that says why
            assert len(lines) == 1 and lines[0].startswith("shardflow etl: "), (m.describe(), err)
        outcomes[code] += 1
    with capsys.disabled():
        print(f"\nconfig fuzz, real runs: {dict(sorted(outcomes.items()))} (exit code: runs)")
