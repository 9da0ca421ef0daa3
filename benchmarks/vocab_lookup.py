"""Benchmark: a string column's vocabulary ids, as the PyTorch and JAX readers look them up.

The readers encode a string feature with the facts' whole vocabulary (up to 100,000 values, most
frequent first). Measured side by side in one run, on batches of 1,024 values drawn from a
100,000-value vocabulary (one in eleven not in it, nearly every value distinct in its batch):

  floor       the batch's distinct values found (Arrow `dictionary_encode`) and made Python
              objects: what any lookup by value must do before it looks anything up
  dict        trainer.readers.decode.looked_up: a dict built once, each distinct value of the
              batch looked up once, spread back by the dictionary's indices (the readers' way)
  pandas      a pandas Index built once, `get_indexer` over the batch's distinct values (C)
  searchsorted  the vocabulary sorted once as fixed-width bytes; the distinct values copied
              into the same width and found with numpy's `searchsorted` (C), then checked

Reported: the median of `--repeats` runs of each over all batches, in microseconds per value, and
each one over the floor. Every way's ids are checked equal to the dict's first.

  python benchmarks/vocab_lookup.py [--vocabulary 100000] [--batches 200] [--repeats 5] [--record]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import RESULTS, append_results, command_line, machine_facts  # noqa: E402
from trainer.readers.decode import looked_up  # noqa: E402

BATCH = 1024


def _indexed(words: list[bytes]) -> dict[bytes, int]:
    """The readers' lookup: each value's first index."""
    index: dict[bytes, int] = {}
    for i, word in enumerate(words):
        index.setdefault(word, i)
    return index


class _Sorted:
    """The vocabulary as sorted fixed-width bytes, found with searchsorted."""

    def __init__(self, lookup: dict[bytes, int]):
        keys = list(lookup)
        self.width = max(len(k) for k in keys)
        words = np.array(keys, dtype=f"S{self.width}")
        order = np.argsort(words, kind="stable")
        self.words = words[order]
        self.ids = np.array([lookup[keys[i]] for i in order], np.int64)
        self.lengths = np.array([len(keys[i]) for i in order], np.int64)

    def __call__(self, values: pa.Array) -> np.ndarray:
        encoded = values.dictionary_encode(null_encoding="encode")
        distinct = encoded.dictionary
        offsets = np.frombuffer(distinct.buffers()[1], np.int32, len(distinct) + 1)
        data = np.frombuffer(distinct.buffers()[2], np.uint8)
        lengths = np.diff(offsets)
        fits = lengths <= self.width
        take = np.where(fits, lengths, 0)
        rows = np.repeat(np.arange(len(distinct)), take)
        starts = np.repeat(offsets[:-1], take)
        firsts = np.repeat(np.cumsum(take) - take, take)
        columns = np.arange(int(take.sum())) - firsts
        table = np.zeros((len(distinct), self.width), np.uint8)
        table[rows, columns] = data[starts + columns]
        wanted = table.view(f"S{self.width}").ravel()
        at = np.minimum(np.searchsorted(self.words, wanted), len(self.words) - 1)
        found = fits & (self.words[at] == wanted) & (self.lengths[at] == lengths)
        ids = np.where(found, self.ids[at], -1)
        return ids[encoded.indices.to_numpy(zero_copy_only=False)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocabulary", type=int, default=100_000)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--record", action="store_true", help=f"append the table to {RESULTS}")
    args = p.parse_args(argv)

    rng = np.random.default_rng(0)
    words = [f"2024-{i % 12 + 1:02d}-{i % 28 + 1:02d}T{i % 24:02d}:{i % 60:02d}.{i}".encode()
             for i in range(args.vocabulary)]  # fmt: skip
    lookup = _indexed(words)
    index = pd.Index(list(lookup))
    ids = np.fromiter(lookup.values(), np.int64, len(lookup))
    searched = _Sorted(lookup)
    batches = []
    for _ in range(args.batches):
        drawn = rng.integers(0, args.vocabulary * 11 // 10, BATCH)
        values = [words[i] if i < args.vocabulary else b"other-%d" % i for i in drawn]
        batches.append(pa.array(values, pa.binary()))

    def pandas_ids(values: pa.Array) -> np.ndarray:
        encoded = values.dictionary_encode(null_encoding="encode")
        at = index.get_indexer(encoded.dictionary.to_numpy(zero_copy_only=False))
        found = np.where(at >= 0, ids[at], -1)
        return found[encoded.indices.to_numpy(zero_copy_only=False)]

    ways = {
        "floor: distinct values as objects": lambda v: v.dictionary_encode().dictionary.to_pylist(),
        "dict (the readers' looked_up)": lambda v: looked_up(lookup, v),
        "pandas Index.get_indexer": pandas_ids,
        "numpy searchsorted, fixed width": searched,
    }
    for name, way in list(ways.items())[2:]:
        for batch in batches[:5]:
            assert (way(batch) == looked_up(lookup, batch)).all(), name
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.repeats):  # interleaved: the machine's noise falls on every way
        for name, way in ways.items():
            started = time.perf_counter()
            for batch in batches:
                way(batch)
            times[name].append(time.perf_counter() - started)
    values = args.batches * BATCH
    medians = {name: statistics.median(t) / values * 1e6 for name, t in times.items()}
    floor = medians["floor: distinct values as objects"]
    readers = medians["dict (the readers' looked_up)"]
    rows = ["| way | median us / value | × floor |", "|---|---:|---:|"]
    rows += [f"| {name} | {us:.3f} | {us / floor:.1f} |" for name, us in medians.items()]
    table = "\n".join(rows)
    print(table)
    if args.record:
        append_results(
            RESULTS,
            "Vocabulary lookup: the readers' ids of a string column",
            [
                command_line(__file__, argv),
                machine_facts(),
                f"{args.batches} batches of {BATCH} binary values drawn from a "
                f"{args.vocabulary:,}-value vocabulary (one in eleven outside it)",
            ],
            table,
            [
                f"median of {args.repeats} interleaved runs; every way's ids equal the dict's",
                "the readers' per-batch cost of a whole-vocabulary lookup: the dict is "
                f"{readers / floor:.1f}x the floor; neither C "
                "path beats it by enough to replace it (docs/trainer.md, the readers' figures)",
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
