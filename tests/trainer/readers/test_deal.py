"""Shards dealt to ranks and loader workers, seeded shuffles, and where a resumed epoch starts."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.readers.deal import Layout, Position, assign, shard_order
from trainer.readers.stream import Reader, cut, shuffled
from transforms.contract.manifest import FileEntry

SHARDS = tuple(FileEntry(f"s{i}", records=10 + i) for i in range(5))


def test_shards_are_dealt_to_every_stream_once_per_epoch():
    for epoch in range(3):
        parts = [assign(SHARDS, 4, s, epoch, seed=1, shuffle=True).shards for s in range(4)]
        dealt = [shard.path for part in parts for shard in part]
        assert sorted(dealt) == sorted(s.path for s in SHARDS)


def test_the_shard_order_depends_on_the_seed_and_the_epoch_only():
    orders = {(seed, epoch): [s.path for s in shard_order(SHARDS, epoch, seed, True)]
              for seed in range(3) for epoch in range(3)}  # fmt: skip
    assert len({tuple(o) for o in orders.values()}) > 5
    assert orders[(1, 2)] == [s.path for s in shard_order(SHARDS, 2, 1, True)]
    assert [s.path for s in shard_order(SHARDS, 2, 1, False)] == [s.path for s in SHARDS]


def test_fewer_shards_than_streams_keep_every_nth_record():
    parts = [assign(SHARDS[:2], 3, s, 0, 0, False) for s in range(3)]
    assert [(p.every, p.offset, p.records) for p in parts] == [(3, 0, 7), (3, 1, 7), (3, 2, 7)]


def test_every_rank_takes_the_fewest_steps_of_any_rank():
    layout = Layout(SHARDS, batch_size=4, world_size=2, workers=2, shuffle=False)
    # streams 0..3 hold shards (0, 4), 1, 2, 3: 24, 11, 12, 13 records, in batches of 4
    assert [layout.worker_batches(0, r) for r in range(2)] == [[6, 3], [3, 4]]
    assert layout.steps(0) == 7
    assert layout.start(0) == (0, 0) and layout.start(16) == (2, 2)


def _turns(counts: list[int]) -> list[tuple[int, int]]:
    """(worker, its batch) in the order a DataLoader yields them: each worker in turn."""
    order, r = [], 0
    while any(c > r for c in counts):
        order += [(w, r) for w, c in enumerate(counts) if c > r]
        r += 1
    return order


@pytest.mark.parametrize(
    "counts, steps", [([3, 3], 6), ([5, 1, 3], 9), ([2, 0, 4, 4], 8), ([4, 4, 4], 7), ([1], 1)]
)
def test_a_resumed_epoch_yields_the_batches_that_follow(counts, steps):
    full = _turns(counts)[:steps]
    for done in range(steps + 1):
        p = Position.of(counts, done, steps)
        roles = [p.role(i, len(counts)) for i in range(len(counts))]
        left = [[(r, b) for b in range(p.taken[r], p.limit[r])] for r in roles]
        resumed = []
        while any(left):
            resumed += [worker.pop(0) for worker in left if worker]
        assert resumed == full[done:], (counts, done)


def test_shuffling_keeps_every_record_and_depends_on_the_seed():
    runs = [[bytes([i, j]) for j in range(37)] for i in range(5)]
    records = [r for run in runs for r in run]

    def order(seed: int) -> list[bytes]:
        return [r for run in shuffled(iter(runs), 16, np.random.default_rng(seed)) for r in run]

    assert sorted(order(0)) == sorted(records) and order(0) == order(0)
    assert order(0) != order(1) and order(0) != records


def test_batches_are_cut_across_runs():
    runs = [[b"a"] * 5, [b"b"] * 2, [b"c"] * 9]
    assert [len(b) for b in cut(runs, 4)] == [4, 4, 4, 4]
    assert [len(b) for b in cut(runs, 7)] == [7, 7, 2]


def test_ranks_read_disjoint_records_that_cover_the_split(dataset):
    reader = Reader(str(dataset.root), "train", 16, seed=5)
    layout = reader.layout(world_size=3)  # 2 shards, 3 ranks: every 3rd record each
    ids = [np.concatenate([b["id"] for b in reader.batches(layout, 0, rank)]) for rank in range(3)]
    assert sorted(np.concatenate(ids).tolist()) == [r["id"] for r in dataset.rows["train"]]
    assert all(len(i) == 80 for i in ids)


def test_an_empty_glob_of_shards_is_an_error(dataset):
    with pytest.raises(ValueError, match="no split 'test'"):
        Reader(str(dataset.root), "test", 8)
