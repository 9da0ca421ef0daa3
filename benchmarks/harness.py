"""What every benchmark shares: where the results go, the facts of the machine and the commit,
and how a command is measured (wall and CPU time, the peak memory of its whole process tree).

Benchmarks import it as `from benchmarks.harness import ...`, the repository root on sys.path.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "RESULTS.md"
SAMPLE_S = 0.1  # how often the memory of a measured process tree is read
PAGE = os.sysconf("SC_PAGE_SIZE")


def machine_facts() -> str:
    versions = []
    for package in ("apache-beam", "tensorflow", "pyarrow", "tfx-bsl"):
        try:
            versions.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{package} missing")
    return (
        f"nproc {os.cpu_count()}, Python {platform.python_version()}, {platform.platform()}, "
        f"{', '.join(versions)}, commit {git_commit() or 'none'}"
    )


def git_commit() -> str | None:
    """The checkout's short commit; None without git or outside a checkout (a copied tree)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
        )
    except OSError:  # no git installed
        return None
    return done.stdout.strip() or None


def command_line(script: str, argv: list[str] | None) -> str:
    """The command that ran a benchmark, as RESULTS.md records it: `python benchmarks/NAME.py`
    and its arguments (`argv`, or the process's own when None)."""
    args = sys.argv[1:] if argv is None else argv
    return shlex.join(["python", f"benchmarks/{Path(script).name}", *args])


def append_results(path: Path, title: str, facts: list[str], table: str, notes: list[str]) -> None:
    """Appends a dated section to a results file: `facts` are the command, the machine and the
    input, then the table and one bullet per note."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command, machine, inputs = facts
    text = "" if path.exists() else "# Benchmark results\n"
    text += (
        f"\n## {now}: {title}\n\n"
        f"- Command: `{command}`\n- Machine: {machine}\n- Input: {inputs}\n\n"
        f"{table}\n\n" + "".join(f"- {n}\n" for n in notes)
    )
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def tree_memory(root: int) -> tuple[int, int]:
    """The summed RSS and PSS of `root` and all its descendants, from /proc (one scan). Forked
    processes share the pages of their parent, which RSS counts in each of them and PSS divides
    among them: the tree's PSS is the memory it holds."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid ... rss": comm may hold spaces and parentheses.
        fields = stat[stat.rindex(b")") + 2 :].split()
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        rss[pid] = int(fields[21]) * PAGE
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total_rss, total_pss, todo = 0, 0, [root]
    while todo:
        pid = todo.pop()
        total_rss += rss.get(pid, 0)
        total_pss += _pss(pid)
        todo += children.get(pid, [])
    return total_rss, total_pss


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # gone meanwhile, or no smaps_rollup
        pass
    return 0


def become_subreaper() -> bool:
    """Makes the processes this one starts, and their orphans, children of this one (Linux
    PR_SET_CHILD_SUBREAPER), so that `measure` can reap them all and count their CPU time: a
    fork server outlives the process that started it by a moment and is not reaped by it."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans(deadline_s: float = 30.0) -> float:
    """Waits for the children this process still has (orphans of a measured run) and returns
    their CPU seconds, theirs and their reaped children's."""
    cpu, end = 0.0, time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            pid, _, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.02)
            continue
        cpu += usage.ru_utime + usage.ru_stime
    return cpu


def measure(
    cmd: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path = REPO_ROOT
) -> tuple[int, float, float, float, float, float]:
    """Runs cmd (in `env`, default this process's, from `cwd`); returns exit code, wall s, CPU s
    (the process's, its descendants' and their orphans'), peak tree RSS MB, peak tree PSS MB and
    the largest process MB."""
    become_subreaper()
    peak_rss = peak_pss = 0
    done = threading.Event()
    with log.open("wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)

        def sample() -> None:
            nonlocal peak_rss, peak_pss
            while not done.is_set():
                rss, pss = tree_memory(proc.pid)
                peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
                done.wait(SAMPLE_S)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime + reap_orphans()
    return proc.returncode, wall, cpu, peak_rss / 2**20, peak_pss / 2**20, usage.ru_maxrss / 1024
