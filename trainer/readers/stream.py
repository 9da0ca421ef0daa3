"""The reading core: a split's records, as each stream reads them in an epoch, in batches.

`Reader` holds what every stream shares (the dataset, its shards, the decoder, the options);
`Reader.batches(layout, epoch, rank, worker)` is one stream's epoch: its shards
(trainer.readers.deal) read in turn (`deterministic`) or a few at a time, runs of records taken
from each in turn, as the tf.data path interleaves them; with fewer shards than streams, every
n-th record; then a bounded shuffle buffer of serialized records seeded by (seed, epoch,
stream); then batches of `batch_size` (the last one may be smaller), each decoded at once
(trainer.readers.decode). `skip` batches at the start are read but not decoded: a resumed run
starts where the run it resumes stopped. Sizes are checked against the flags' bounds
(trainer.flags) before anything is allocated, and a shard that is no regular file is refused
unread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainer.config import (
    DEFAULT_SHUFFLE_BUFFER,
    MAX_BATCH_SIZE,
    MAX_SHUFFLE_BUFFER,
    MAX_WORKERS,
    MAX_WORLD_SIZE,
)
from trainer.dataset.facts import DatasetFacts
from trainer.dataset.framing import read_shard
from trainer.dataset.manifest import Manifest
from trainer.dataset.union import load_datasets
from trainer.readers.deal import Assignment, Layout, seeded
from trainer.readers.decode import Decoder, ExampleError

CYCLE = 4  # shards read at once when not deterministic
RUN_RECORDS = 64  # records taken from one shard at a time


@dataclass(frozen=True)
class ReadOptions:
    """How a reader reads a split, the same for torch_loader, jax_batches and `Reader`:
    shuffled (seeded; `deterministic`: shards in turn rather than a few at a time), through a
    shuffle buffer of `shuffle_buffer` records; `skip_corrupt` skips the rest of a corrupt
    shard, `check_sha256` checks each shard's sha256 (trainer.dataset.framing); `encode`,
    `decode_images` and `image_dtype` go to the Decoder. Checked when made: a mistake is a
    ValueError naming the option (an unknown one a TypeError) before anything is read."""

    shuffle: bool = True
    seed: int = 0
    deterministic: bool = False
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    skip_corrupt: bool = False
    check_sha256: bool = True
    encode: bool = True
    decode_images: bool = True
    image_dtype: str = "float32"

    def __post_init__(self) -> None:
        _whole("shuffle_buffer", self.shuffle_buffer, 1, MAX_SHUFFLE_BUFFER)


def _whole(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} {value!r} is not a whole number")
    if not low <= value <= high:
        raise ValueError(f"{name} {value:,} is not in {low:,}..{high:,}")


class Reader:
    """Batches of `split` of the dataset(s) at `data` (see the module's doc), read as `options`
    say (`ReadOptions`, or its fields as keywords)."""

    def __init__(
        self,
        data: str | Sequence[str] | Manifest,
        split: str,
        batch_size: int,
        options: ReadOptions | None = None,
        **choices: Any,
    ):
        if options is not None and choices:
            raise TypeError("give ReadOptions or its fields as keywords, not both")
        options = options or ReadOptions(**choices)
        _whole("batch_size", batch_size, 1, MAX_BATCH_SIZE)
        self.manifest = data if isinstance(data, Manifest) else load_datasets(data)
        self.split = split
        self.shards = self.manifest.shards(split)
        self.batch_size = batch_size
        self.options = options
        self.info = DatasetFacts.of(self.manifest)
        self.decoder = Decoder(
            self.manifest.features,
            self.info,
            encode=options.encode,
            decode_images=options.decode_images,
            image_dtype=options.image_dtype,
        )

    def layout(self, world_size: int = 1, workers: int = 1) -> Layout:
        """The streams of `world_size` ranks of `workers` loader workers each."""
        if not (1 <= world_size <= MAX_WORLD_SIZE and 1 <= workers <= MAX_WORKERS):
            raise ValueError(
                f"world size {world_size} and workers {workers}: not in 1..{MAX_WORLD_SIZE:,} "
                f"and 1..{MAX_WORKERS:,}"
            )
        return Layout(
            self.shards,
            self.batch_size,
            world_size,
            workers,
            self.options.seed,
            self.options.shuffle,
        )

    def batches(
        self,
        layout: Layout,
        epoch: int,
        rank: int = 0,
        worker: int = 0,
        *,
        skip: int = 0,
        limit: int | None = None,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Stream (rank, worker)'s decoded batches of `epoch`, from batch `skip` up to `limit`."""
        records = self.record_batches(layout, epoch, rank, worker, skip=skip, limit=limit)
        return map(self.decode, records)

    def decode(self, records: list[bytes], images: bool = True) -> dict[str, np.ndarray]:
        """A batch of serialized records decoded (with `images` off, its images left encoded:
        `images_into`); ExampleError naming the dataset and split."""
        with self._naming():
            return self.decoder(records, images)

    def images_into(self, name: str, encoded: np.ndarray, out: np.ndarray) -> None:
        """Image feature `name` of a batch decoded with `images` off, decoded into `out`."""
        with self._naming():
            self.decoder.images_into(name, encoded, out)

    @contextlib.contextmanager
    def _naming(self) -> Iterator[None]:
        """An ExampleError raised inside names the dataset and split."""
        try:
            yield
        except ExampleError as e:
            raise ExampleError(f"{self.manifest.root}: split {self.split!r}: {e}") from None

    def record_batches(
        self,
        layout: Layout,
        epoch: int,
        rank: int = 0,
        worker: int = 0,
        *,
        skip: int = 0,
        limit: int | None = None,
    ) -> Iterator[list[bytes]]:
        """The same batches, serialized (to decode on another thread: `decode`)."""
        stream = rank * layout.workers + worker
        records = self.records(layout.assignment(epoch, rank, worker), epoch, stream)
        for i, batch in enumerate(cut(records, self.batch_size)):
            if limit is not None and i >= limit:
                return
            if i >= skip:
                yield batch

    def records(self, part: Assignment, epoch: int, stream: int) -> Iterator[list[bytes]]:
        """The serialized records of a stream's part of an epoch, in runs, in its order."""
        runs = [self._read(s) for s in part.shards]
        mixed = (
            _chained(runs) if self.options.deterministic else _interleaved(runs, CYCLE, RUN_RECORDS)
        )
        if part.every > 1:
            mixed = _every(mixed, part.every, part.offset)
        if not self.options.shuffle:
            return mixed
        return shuffled(
            mixed, max(2, self.options.shuffle_buffer), seeded(self.options.seed, epoch, stream)
        )

    def _read(self, shard) -> Iterator[list[bytes]]:
        return read_shard(
            shard,
            self.manifest.wbits,
            skip_corrupt=self.options.skip_corrupt,
            check_sha256=self.options.check_sha256,
        )


def cut(runs: Iterable[list[bytes]], size: int) -> Iterator[list[bytes]]:
    """Runs of records cut into batches of `size` (the last one the rest)."""
    pending: list[bytes] = []
    for run in runs:
        if pending:
            need = size - len(pending)
            pending.extend(run[:need])
            run = run[need:]
            if len(pending) < size:
                continue
            yield pending
        whole = len(run) - len(run) % size
        for start in range(0, whole, size):
            yield run[start : start + size]
        pending = run[whole:]
    if pending:
        yield pending


def shuffled(
    runs: Iterable[list[bytes]], size: int, rng: np.random.Generator
) -> Iterator[list[bytes]]:
    """The records of `runs` through a shuffle buffer of at most `size` records: when it is
    full, it is permuted and all but half of it leave; the rest leave permuted at the end."""
    keep = size // 2
    pool: list[bytes] = []
    for run in runs:
        for start in range(0, len(run), size - keep):
            pool.extend(run[start : start + size - keep])
            if len(pool) >= size:
                pool = _permuted(pool, rng)
                yield pool[keep:]
                pool = pool[:keep]
    if pool:
        yield _permuted(pool, rng)


def _permuted(items: list[bytes], rng: np.random.Generator) -> list[bytes]:
    """`items` in the order of `rng.permutation(len(items))` (taken through an object array:
    a third of the time of a Python loop)."""
    held = np.empty(len(items), dtype=object)
    held[:] = items
    return held[rng.permutation(len(items))].tolist()


def _chained(runs: Sequence[Iterator[list[bytes]]]) -> Iterator[list[bytes]]:
    for shard in runs:
        yield from shard


def _interleaved(
    runs: Sequence[Iterator[list[bytes]]], cycle: int, run: int
) -> Iterator[list[bytes]]:
    """Runs of up to `run` records taken in turn from `cycle` shards at a time; a finished
    shard's place goes to the next one."""
    waiting = list(reversed(runs))
    active: list[tuple[Iterator[list[bytes]], list[bytes], int]] = []
    while waiting or active:
        while waiting and len(active) < cycle:
            active.append((waiting.pop(), [], 0))
        i = 0
        while i < len(active):
            source, piece, at = active[i]
            while at >= len(piece):
                more = next(source, None)
                if more is None:
                    break
                piece, at = more, 0
            if at >= len(piece):
                active.pop(i)
                continue
            yield piece[at : at + run]
            active[i] = (source, piece, at + run)
            i += 1


def _every(runs: Iterable[list[bytes]], every: int, offset: int) -> Iterator[list[bytes]]:
    """Every `every`-th record, from record `offset` on."""
    seen = 0
    for run in runs:
        kept = run[(offset - seen) % every :: every]
        seen += len(run)
        if kept:
            yield kept
