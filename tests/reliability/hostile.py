"""The hostile corpus: inputs, configs and datasets a hostile user would try, and the harness
that runs each with the same invariants (tests/reliability/test_hostile_*.py run them).

A case writes its files in a fresh folder and names one command (`etl`, `init`, `inspect`,
`train`, `validate`, `predict`) with its arguments; the command runs in this process. Whatever
the case, the harness asserts:
- no traceback on stdout or stderr, and the exit status the case expects;
- the line the case expects (a substring of stdout + stderr);
- no hang: each case under a time limit (the test's timeout) and its memory under a limit (the
  peak growth of this process's RSS, sampled every 20 ms while it runs);
- nothing damaged: no staging folder left beside OUTPUT (`.NAME.incomplete-*`,
  `.NAME.replaced-*`); a dataset the case started with is byte-identical after a refused run;
- every record counted: a published dataset's ledger balances (records read = written +
  rejected + duplicates + joined), and its values are checked where the case says so;
- no secret printed: a case's password appears nowhere in what the command printed.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

MEMORY_LIMIT_MB = 1500  # the most a case may grow this process's RSS


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # the class of the list: secret, input, date, records, values, ...
    setup: Callable[[Path], tuple[str, list[str]]]  # (command, argv) from the case's folder
    code: int
    says: str = ""
    secret: str | None = None
    check: Callable[[Path], None] | None = None  # more checks of what the run left
    keep: tuple[str, ...] = field(default=())  # files that must be unchanged (relative)


def config(d: Path, sources: list[dict], features: dict, **top) -> str:
    """Writes d/c.yaml; output `out` beside it, every split in train."""
    raw = {
        "name": "hostile",
        "sources": sources,
        "features": features,
        "splits": {"train": 1.0},
        "output": {"path": "out"},
    }
    raw.update(top)
    (d / "c.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True))
    return str(d / "c.yaml")


def csv_source(d: Path, text: str | bytes, name: str = "a.csv", **options) -> dict:
    data = text.encode() if isinstance(text, str) else text
    (d / name).write_bytes(data)
    source = {"name": "s", "format": "csv", "path": name}
    if options:
        source["options"] = options
    return source


def jsonl_source(d: Path, lines: list[str], name: str = "a.jsonl") -> dict:
    (d / name).write_text("\n".join(lines) + "\n")
    return {"name": "s", "format": "jsonl", "path": name}


# The commands a case may run, in this process: module and function.
COMMANDS = {
    "etl": ("pipelines.etl", "run"),
    "init": ("pipelines.init", "main"),
    "validate": ("pipelines.validate", "main"),
    "inspect": ("trainer.inspect", "main"),
    "train": ("trainer.task", "main"),
    "predict": ("deploy.predict", "main"),
}


def run_command(command: str, argv: list[str]) -> int:
    """The command's exit status, as a shell sees it (argparse refuses a flag by SystemExit)."""
    module, function = COMMANDS[command]
    try:
        return getattr(importlib.import_module(module), function)(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1


class PeakMemory:
    """The peak growth of this process's RSS while the block runs, in MB."""

    def __enter__(self):
        self.start = self.peak = _rss_mb()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._done.is_set():
            self.peak = max(self.peak, _rss_mb())
            self._done.wait(0.02)

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mb())
        self.growth = self.peak - self.start


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def digest(d: Path, names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for name in names:
        for path in sorted((d / name).rglob("*")) if (d / name).is_dir() else [d / name]:
            if path.is_file():
                out[str(path.relative_to(d))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def ledger_balances(out: Path) -> None:
    manifest = json.loads((out / "manifest.json").read_text())
    read = sum(s["records"] for s in manifest["sources"].values())
    written = sum(s["records"] for s in manifest["splits"].values())
    accounted = written + manifest["rejected"]["records"] + manifest.get("duplicates", 0)
    accounted += manifest.get("joined") or 0
    assert read == accounted, (read, written, manifest["rejected"], manifest.get("duplicates"))


def run_case(case: Case, d: Path, capfd) -> None:
    command, argv = case.setup(d)
    before = digest(d, case.keep)
    capfd.readouterr()
    started = time.monotonic()
    with PeakMemory() as memory:
        code = run_command(command, argv)
    seconds = time.monotonic() - started
    out, err = capfd.readouterr()
    printed = out + err
    assert "Traceback" not in printed, printed[-3000:]
    assert code == case.code, (code, printed[-3000:])
    assert case.says in printed, printed[-3000:]
    assert memory.growth < MEMORY_LIMIT_MB, f"{memory.growth:.0f} MB in {seconds:.1f} s"
    if case.secret is not None:
        assert case.secret not in printed
    left = [p.name for p in d.rglob(".*") if ".incomplete-" in p.name or ".replaced-" in p.name]
    assert left == [], left
    assert digest(d, case.keep) == before
    if (d / "out" / "manifest.json").exists():
        ledger_balances(d / "out")
    if case.check is not None:
        case.check(d)
