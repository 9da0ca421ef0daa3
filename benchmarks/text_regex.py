"""Benchmark: what matching a `text` source's regex costs per line, and what it bounds.

A text source with `regex` turns each line into the regex's named groups. shardflow matches a
regex with RE2 (linear in the line) wherever RE2 matches it as Python's engine would, and
otherwise with the `regex` package under a time limit per line (`transforms.sources.text`:
`Linear`, `Budgeted`). Measured side by side in one run, on the same lines:

  typical    an access-log regex over generated log lines (all ASCII, and again with one
             non-ASCII character a line): Python's `re.fullmatch` (the naive baseline,
             unbounded), shardflow's RE2 path, and the `regex` package with its time limit
             (the path of a regex RE2 cannot run); the floor is a line read as one field,
             with no regex at all (`str.strip`, what every line costs anyway).
  hostile    `^(?P<w>(b|bb)+)$` on lines of n "b"s and a "c" (no match): `re` backtracks
             through every way to split the b's (Fibonacci(n) of them), RE2 answers in time
             linear in n. `re` is run up to 24 characters; longer lines are shown as estimated.

Reported: per line, the median of `--repeats` runs (2 noisy cores: medians), and the ratios.

  python benchmarks/text_regex.py [--lines 100000] [--repeats 5] [--record]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import RESULTS, append_results, command_line, machine_facts  # noqa: E402
from transforms.sources.text import Budgeted, Linear, compile_regex  # noqa: E402

LOG = (
    r"(?P<host>\S+) \S+ (?P<user>\S+) \[(?P<time>[^\]]+)\] "
    r'"(?P<method>[A-Z]+) (?P<path>\S+) (?P<proto>[^"]+)" (?P<status>\d{3}) (?P<bytes>\d+|-)'
)
HOSTILE = r"^(?P<w>(b|bb)+)$"
HOSTILE_LENGTHS = (16, 20, 24, 28, 49, 1000)
RE_MAX_LENGTH = 24  # `re` beyond this takes seconds to ages a line
GOLDEN = (1 + 5**0.5) / 2  # `re`'s time grows as Fibonacci(n)


def _duration(seconds: float) -> str:
    for unit, size in (("years", 3.15e7), ("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.2g} s"


def log_lines(n: int, non_ascii: bool, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    paths = ["/", "/index.html", "/api/v1/items", "/static/app.js", "/search?q=penguins"]
    who = "josé" if non_ascii else "jose"
    return [
        f"10.0.{rng.randrange(256)}.{rng.randrange(256)} - {who if i % 3 else '-'} "
        f"[02/Dec/2026:04:{rng.randrange(60):02d}:{rng.randrange(60):02d} +0000] "
        f'"{rng.choice(["GET", "POST"])} {rng.choice(paths)} HTTP/1.1" '
        f"{rng.choice([200, 200, 200, 304, 404, 500])} {rng.randrange(100, 50000)}"
        for i in range(n)
    ]


def per_line(match: Callable[[str], object], lines: list[str], repeats: int) -> float:
    """Median seconds per line of `match` over `lines`, over `repeats` runs."""
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for line in lines:
            match(line)
        runs.append((time.perf_counter() - start) / len(lines))
    return statistics.median(runs)


def typical(lines: int, repeats: int) -> list[str]:
    linear = compile_regex(LOG)
    assert isinstance(linear, Linear)
    budgeted = Budgeted(LOG)
    naive = re.compile(LOG).fullmatch
    rows = []
    for label, non_ascii in (("ASCII lines", False), ("lines with a non-ASCII character", True)):
        sample = log_lines(lines, non_ascii)
        assert all(linear.groups(s) == naive(s).groups() for s in sample[:1000])  # type: ignore[union-attr]
        floor = per_line(str.strip, sample, repeats)
        base = per_line(naive, sample, repeats)
        ours = per_line(linear.groups, sample, repeats)
        limited = per_line(budgeted.groups, sample, repeats)
        rows.append(
            f"| {label} | {floor * 1e6:.2f} | {base * 1e6:.2f} | {ours * 1e6:.2f} "
            f"({ours / base:.2f}× re) | {limited * 1e6:.2f} ({limited / base:.2f}× re) |"
        )
    return [
        "| typical: access-log regex, µs per line | floor (no regex) | `re` (naive, "
        "unbounded) | shardflow, RE2 | `regex` package, 1 s limit |",
        "|---|---:|---:|---:|---:|",
        *rows,
    ]


def hostile(repeats: int) -> list[str]:
    linear = compile_regex(HOSTILE)
    assert isinstance(linear, Linear)
    naive = re.compile(HOSTILE).fullmatch
    rows = []
    measured = 0.0
    for n in HOSTILE_LENGTHS:
        line = "b" * n + "c"
        ours = per_line(linear.groups, [line] * 20, repeats)
        if n <= RE_MAX_LENGTH:
            measured = per_line(naive, [line], min(repeats, 3))
            shown = f"{measured * 1e3:.1f} ms"
        else:  # not run: the last measured time grown by the golden ratio a character
            shown = f"not run: ~{_duration(measured * GOLDEN ** (n - RE_MAX_LENGTH))}"
        rows.append(f"| {n} | {shown} | {ours * 1e6:.2f} µs |")
    return [
        f"| hostile: `{HOSTILE}` on n b's and a c | `re` | shardflow, RE2 |",
        "|---:|---:|---:|",
        *rows,
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--record", action="store_true", help=f"append the tables to {RESULTS}")
    args = p.parse_args(argv)
    first = typical(args.lines, args.repeats)
    second = hostile(args.repeats)
    table = "\n".join(first) + "\n\n" + "\n".join(second)
    print(table)
    if args.record:
        command = command_line(__file__, argv)
        append_results(
            RESULTS,
            "text regexes: per-line cost of bounded matching",
            [command, machine_facts(), f"{args.lines:,} generated log lines per row"],
            table,
            [
                "The RE2 path is what every regex RE2 can run gets (most log regexes); the "
                "`regex` package column is the path of a regex only Python's engine runs.",
                "The price of the bound: RE2 with capture groups is several times slower a "
                "line than `re` on a line `re` handles well (half of it RE2's own match with "
                "submatches, half the groups turned into Python strings).",
                "Hostile: `re` grows as Fibonacci(n) (x1.6 per character); RE2 stays linear.",
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
