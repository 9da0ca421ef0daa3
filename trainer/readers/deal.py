"""Which records each reader reads, in which epoch, and where a resumed run starts.

Readers are *streams*: `world_size` ranks (or JAX processes) × `num_workers` loader workers,
stream `rank * num_workers + worker`. In each epoch the split's shards are put in an order (a
permutation seeded by (seed, epoch) when shuffling, the manifest's order otherwise) and dealt
to the streams, as the tf.data path shards its file list: shard i of that order goes to stream
i mod streams. With fewer shards than streams, every stream reads every shard and keeps every
n-th record. The manifest's record counts then give each stream's records and batches without
reading anything.

A rank's loader workers yield their batches in turns (torch's DataLoader takes one batch from
each worker in order, skipping a worker that is done), so a rank's order of batches is a fixed
function of its streams' batch counts; `Position` finds, for a number of batches consumed,
each worker's own count and whose turn is next, which is all a resumed run needs. Under
DistributedDataParallel every rank must take as many steps: each epoch is cut to the fewest
batches of any rank. A resume position past the end of the data (after `epochs` epochs, at most
MAX_EPOCHS) is refused, naming the steps there are, without walking the epochs up to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainer.config import MAX_EPOCHS
from transforms.contract.manifest import FileEntry


def seeded(seed: int, *keys: int) -> np.random.Generator:
    """A generator that depends only on the seed and the keys (epoch, stream, ...)."""
    return np.random.default_rng(np.random.SeedSequence([seed, *keys]))


@dataclass(frozen=True)
class Assignment:
    """A stream's part of an epoch: its shards in reading order and, when every stream reads
    every shard, which of their records it keeps (every `every`-th, from `offset`)."""

    shards: tuple[FileEntry, ...]
    every: int = 1
    offset: int = 0

    @property
    def records(self) -> int:
        """The records it yields (as the manifest counts them)."""
        total = sum(s.records or 0 for s in self.shards)
        return max(0, total - self.offset + self.every - 1) // self.every


def shard_order(
    shards: Sequence[FileEntry], epoch: int, seed: int, shuffle: bool
) -> list[FileEntry]:
    """The shards in an epoch's order: permuted by (seed, epoch) when shuffling."""
    if not shuffle:
        return list(shards)
    return [shards[i] for i in seeded(seed, epoch).permutation(len(shards))]


def assign(
    shards: Sequence[FileEntry], streams: int, stream: int, epoch: int, seed: int, shuffle: bool
) -> Assignment:
    """Stream `stream`'s part of `epoch` among `streams` streams."""
    order = shard_order(shards, epoch, seed, shuffle)
    if len(order) >= streams:
        return Assignment(tuple(order[stream::streams]))
    return Assignment(tuple(order), every=streams, offset=stream)


@dataclass(frozen=True)
class Layout:
    """The streams of a run: ranks × loader workers, and the batch size."""

    shards: tuple[FileEntry, ...]
    batch_size: int
    world_size: int = 1
    workers: int = 1
    seed: int = 0
    shuffle: bool = True

    def assignment(self, epoch: int, rank: int, worker: int) -> Assignment:
        streams = self.world_size * self.workers
        return assign(
            self.shards, streams, rank * self.workers + worker, epoch, self.seed, self.shuffle
        )

    def worker_batches(self, epoch: int, rank: int) -> list[int]:
        """The batches of each of a rank's workers in `epoch` (a last partial batch counts)."""
        b = self.batch_size
        return [-(-self.assignment(epoch, rank, w).records // b) for w in range(self.workers)]

    def steps(self, epoch: int) -> int:
        """The batches every rank yields in `epoch`: the fewest of any rank."""
        return min(sum(self.worker_batches(epoch, r)) for r in range(self.world_size))

    @property
    def same_every_epoch(self) -> bool:
        """True when every epoch has as many steps: its streams' records do not depend on the
        shards' order (no shuffle, one stream, fewer shards than streams, or shards alike)."""
        streams = self.world_size * self.workers
        return (
            not self.shuffle
            or streams == 1
            or len(self.shards) < streams
            or len({s.records for s in self.shards}) <= 1
        )

    def start(self, start_step: int, epochs: int = MAX_EPOCHS) -> tuple[int, int]:
        """(epoch, batches into it) of the batch after `start_step` consumed ones; ValueError
        naming start_step when it is past the end of `epochs` epochs (`start_step` equal to
        the steps of all of them gives (epochs, 0): nothing left)."""
        first = self.steps(0)
        if first == 0:
            raise ValueError("the split holds no records to read")
        if self.same_every_epoch:
            if start_step > epochs * first:
                raise ValueError(self._past(start_step, epochs, f"{epochs * first:,}"))
            return divmod(start_step, first)
        # an epoch's steps are at most its records over the batch, plus a partial batch each
        most = epochs * (sum(s.records or 0 for s in self.shards) // self.batch_size + self.workers)
        if start_step > most:
            raise ValueError(self._past(start_step, epochs, f"at most {most:,}"))
        epoch, left = 0, start_step
        while epoch < epochs:
            steps = self._steps_of_order(epoch)
            if left < steps:
                return epoch, left
            epoch, left = epoch + 1, left - steps
        if left:
            raise ValueError(self._past(start_step, epochs, f"{start_step - left:,}"))
        return epoch, 0

    def _steps_of_order(self, epoch: int) -> int:
        """`steps(epoch)` where each stream reads whole shards (shards >= streams), in one
        permutation and a few array operations: a resumed run may walk many epochs."""
        streams = self.world_size * self.workers
        records = np.array([s.records or 0 for s in self.shards], np.int64)
        if self.shuffle:
            records = records[seeded(self.seed, epoch).permutation(len(records))]
        records = np.concatenate([records, np.zeros(-len(records) % streams, np.int64)])
        per_stream = records.reshape(-1, streams).sum(axis=0)  # shard i: stream i mod streams
        batches = -(-per_stream // self.batch_size)
        return int(batches.reshape(self.world_size, self.workers).sum(axis=1).min())

    def _past(self, start_step: int, epochs: int, total: str) -> str:
        span = "its one pass" if epochs == 1 else f"{epochs:,} epochs, the most a run reads"
        return (
            f"start_step {start_step:,} is past the end of the data: the split gives "
            f"{self.steps(0):,} steps in an epoch (batch size {self.batch_size:,}, "
            f"{self.world_size} rank(s)), {total} in {span}"
        )


@dataclass(frozen=True)
class Position:
    """Where a rank stands in an epoch after `done` of its batches: `taken[w]` of worker w's
    own batches are among them, worker `next` (None: all done) gives the next one; `limit[w]`
    of worker w's batches are within the epoch's cut."""

    taken: tuple[int, ...]
    next: int | None
    limit: tuple[int, ...]

    @classmethod
    def of(cls, counts: Sequence[int], done: int, steps: int) -> Position:
        """After `done` of the `steps` batches of an epoch whose workers hold `counts`."""
        limit, _ = _first(counts, steps)
        taken, following = _first(limit, done)
        return cls(tuple(taken), following, tuple(limit))

    def role(self, worker: int, workers: int) -> int:
        """The worker whose batches loader worker `worker` of a resumed loader yields: turns
        start at worker 0, so the roles turn to start at the worker whose turn was next."""
        return (worker + (self.next or 0)) % workers


def _first(counts: Sequence[int], m: int) -> tuple[list[int], int | None]:
    """For workers taking turns over `counts` batches: how many of each are among the first m,
    and whose turn comes next (None when all are done)."""
    counts_arr = np.asarray(counts, np.int64)
    low, high = 0, int(counts_arr.max(initial=0))
    while low < high:  # the most whole turns r with sum(min(counts, r)) <= m
        mid = (low + high + 1) // 2
        if int(np.minimum(counts_arr, mid).sum()) <= m:
            low = mid
        else:
            high = mid - 1
    taken = [min(int(c), low) for c in counts_arr]
    left = m - sum(taken)
    for w, c in enumerate(counts_arr):
        if c > low:
            if left == 0:
                return taken, w
            taken[w] += 1
            left -= 1
    following = [w for w, c in enumerate(counts_arr) if c > taken[w]]
    return taken, following[0] if following else None
