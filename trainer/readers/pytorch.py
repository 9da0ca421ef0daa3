"""The readers for PyTorch: an IterableDataset of the reading core and its DataLoader.

Each `iter()` of the loader is one epoch (0, 1, 2, ...). Rank `rank` of `world_size` reads its
own streams (trainer.readers.deal), each loader worker one of them, so under
DistributedDataParallel no two ranks read the same records; every rank yields the same number
of batches in an epoch. Workers decode whole batches (the DataLoader's `batch_size` is None: a
dataset item is already a batch). Where the cores allow (`worker_threads`: 1.25 cores or more
per worker), a worker reads (files, inflating, unframing, shuffling) on one thread and decodes
on two others; where (nearly) every core has a worker, it does all of it on one thread: threads
that wait on each other for the interpreter cost more than they overlap when no core is free.

A batch crosses to the training process in a block of shared memory, written once per block
(trainer.readers.transport).

The order of batches depends only on (seed, epoch, rank, world_size, num_workers): the
DataLoader takes a batch from each worker in turn, in order. Its workers persist from one epoch
to the next (no new processes each epoch): each holds its own copy of the dataset, which moves
to the next epoch each time the loader starts one, as the loader's own copy does. A loader
made with `start_step` (the batches a run has consumed) starts in the epoch and at the batch
where that run stopped: whole epochs are skipped without reading, and in the epoch it resumes,
each worker skips its own batches without decoding them and the workers' turns start where
they stood; a `start_step` past the end of the data (MAX_EPOCHS epochs) is refused, naming
the steps there are.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from trainer.config import MAX_EPOCHS, MAX_WORKERS, MAX_WORLD_SIZE
from trainer.readers.ahead import ahead, parallel_map
from trainer.readers.deal import Layout, Position
from trainer.readers.stream import Reader, ReadOptions
from trainer.readers.transport import PREFETCH, Blocks, Crossing, Packed, Unpacking

READ_AHEAD = 2  # batches of serialized records each worker reads ahead
THREADED_SHARE = 1.25  # cores per worker from which a worker reads and decodes on threads


class ShardDataset(IterableDataset):
    """A rank's batches of one epoch at a time, as dicts of tensors; `begin(epoch, done)` sets
    the epoch the next iteration reads and the batches of it already consumed."""

    def __init__(
        self, reader: Reader, rank: int, world_size: int, workers: int, crossing: Crossing
    ):
        super().__init__()
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        self.reader = reader
        self.rank = rank
        self.workers = max(1, workers)
        self.layout: Layout = reader.layout(world_size, self.workers)
        self.epoch = 0
        self.done = 0
        self.crossing = crossing  # how batches cross from the loader workers
        self._blocks: Blocks | None = None

    def begin(self, epoch: int, done: int = 0) -> None:
        self.epoch, self.done = epoch, done

    def __len__(self) -> int:
        return self.layout.steps(self.epoch) - self.done

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        if workers != self.workers:
            raise RuntimeError(f"made for {self.workers} loader workers, run by {workers}")
        epoch, done = self.epoch, self.done
        if info is not None:  # a persistent worker's copy: its next iteration is the next epoch
            self.begin(epoch + 1)
        return self._batches(epoch, done, worker, workers, in_worker=info is not None)

    def _batches(
        self, epoch: int, done: int, worker: int, workers: int, in_worker: bool
    ) -> Iterator[Any]:  # dicts of tensors, or Packed from a worker
        layout = self.layout
        steps = layout.steps(epoch)
        position = Position.of(layout.worker_batches(epoch, self.rank), done, steps)
        role = position.role(worker, workers)
        records = self.reader.record_batches(
            layout, epoch, self.rank, role, skip=position.taken[role], limit=position.limit[role]
        )
        read_ahead, threads = worker_threads(self.workers if in_worker else 0)
        if read_ahead:
            records = ahead(records, READ_AHEAD, "loader-read")
        if not in_worker:  # in the training process: nothing to cross
            for batch in map(self.reader.decode, records):
                yield {name: as_tensor(value) for name, value in batch.items()}
            return
        if self._blocks is None:  # this worker's, kept from epoch to epoch
            self._blocks = Blocks(self.crossing, worker)
        decode = functools.partial(self.reader.decode, images=False)
        for batch in parallel_map(decode, records, threads, "loader-decode"):
            yield Packed.of(batch, self._blocks, self.reader)  # images decoded into the block


def worker_threads(workers: int, cpus: int | None = None) -> tuple[bool, int]:
    """Whether each of `workers` loader workers (0: the training process reads) reads on a
    thread of its own, and how many threads it decodes with, from its share of the cores (one
    is the training process's): THREADED_SHARE or more, a reading thread and two decoding ones
    (tfx-bsl's decoder lets other threads run, and a worker's threads wait on each other for
    the interpreter, so three of them keep about 1.5 cores busy); less, no thread of its own.
    Measured on 16 cores (benchmarks/RESULTS.md, gpu_feed --only threads): 8 workers with
    threads 1.15M examples/s, on one thread 0.71M; 12 workers 1.28M against 1.01M; 16 workers
    (0.94 of a core each) 1.34M against 1.36M."""
    cpus = cpus or os.cpu_count() or 1
    if not workers:  # the training process reads, a thread ahead of it
        return True, 2 if cpus >= 3 else 1
    threaded = (cpus - 1) / workers >= THREADED_SHARE
    return threaded, 2 if threaded else 1


def as_tensor(value: np.ndarray) -> Any:
    """A numeric array as a tensor; bytes stay a list (no tensor holds them). Arrays that
    Arrow lent read-only are copied (a tensor may be written to)."""
    if value.dtype == object:
        return value.tolist()
    return torch.from_numpy(value if value.flags.writeable else value.copy())


class EpochLoader(DataLoader):
    """A DataLoader whose every iteration is the next epoch, the first one resuming after
    `start_step` batches."""

    def __init__(
        self, dataset: ShardDataset, start_step: int = 0, device: Any = None, **options: Any
    ):
        super().__init__(dataset, **options)
        self.device = None if device is None else torch.device(device)
        self.info = dataset.reader.info
        self.next_epoch, self.resume_at = dataset.layout.start(start_step)
        self._reading: list[int] | None = None  # [epoch, batches handed out] of the last pass

    def __len__(self) -> int:
        """The batches of the next pass (the epoch the next iteration reads)."""
        dataset = self.dataset
        assert isinstance(dataset, ShardDataset)  # what __init__ takes
        return dataset.layout.steps(self.next_epoch) - self.resume_at

    def __iter__(self) -> Any:
        dataset = self.dataset
        assert isinstance(dataset, ShardDataset)  # what __init__ takes
        dataset.begin(self.next_epoch, self.resume_at)
        self._reading = [self.next_epoch, self.resume_at]
        self.next_epoch, self.resume_at = self.next_epoch + 1, 0
        return Unpacking(super().__iter__(), self.device, self._reading)

    def state_dict(self) -> dict[str, int]:
        """Where the loader stands, as torchdata's stateful loaders give it: the epoch it reads
        and the batches of it handed out (once a pass has handed out all of its epoch, the next
        epoch and none), with what the order of the batches depends on. A loader made with the
        same arguments goes on from there after `load_state_dict`, as one made with the
        `start_step` of the batches consumed does."""
        dataset = self.dataset
        assert isinstance(dataset, ShardDataset)  # what __init__ takes
        layout = dataset.layout
        epoch, done = self._reading or (self.next_epoch, self.resume_at)
        if done >= layout.steps(epoch):
            epoch, done = epoch + 1, 0
        return {
            "epoch": epoch, "batch": done, "seed": layout.seed, "shuffle": int(layout.shuffle),
            "batch_size": layout.batch_size, "rank": dataset.rank,
            "world_size": layout.world_size, "workers": layout.workers,
        }  # fmt: skip

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Makes the next pass go on from `state` (`state_dict` of a loader made alike); before
        the first pass only, when loader workers read (each holds its own copy of where it
        stands once started). ValueError when the state is of a loader that orders its batches
        otherwise, or stands past the end of the data."""
        if self._reading is not None and self.num_workers:
            raise RuntimeError(
                "load_state_dict before the first pass: this loader's workers already read on"
            )
        dataset = self.dataset
        assert isinstance(dataset, ShardDataset)  # what __init__ takes
        mine = self.state_dict()
        for key in ("seed", "shuffle", "batch_size", "rank", "world_size", "workers"):
            if state.get(key) != mine[key]:
                raise ValueError(
                    f"the state is of a loader with {key} {state.get(key)!r}, this one's is "
                    f"{mine[key]!r}: the batches that follow it would be another loader's"
                )
        epoch, done = state.get("epoch"), state.get("batch")
        if (
            type(epoch) is not int
            or type(done) is not int
            or not (0 <= epoch <= MAX_EPOCHS and done >= 0)
        ):
            raise ValueError(f"the state's epoch {epoch!r} and batch {done!r} are not a position")
        steps = dataset.layout.steps(epoch)
        if done > steps:
            raise ValueError(f"the state's batch {done:,} is past the {steps:,} of epoch {epoch}")
        self.next_epoch, self.resume_at = (epoch + 1, 0) if done == steps else (epoch, done)
        self._reading = None


def _as_is(batch: Any) -> Any:
    return batch


def torch_loader(
    data: Any,
    split: str,
    batch_size: int,
    *,
    num_workers: int = 0,
    rank: int = 0,
    world_size: int = 1,
    start_step: int = 0,
    device: Any = None,
    **options: Any,
) -> EpochLoader:
    """A torch DataLoader of `split`'s batches (dicts of tensors; bytes as lists): each
    iteration the next epoch, resuming after `start_step` batches; rank `rank` of `world_size`
    reads its own shards, `num_workers` loader processes decode. With `device` (e.g. "cuda")
    the batches come on it, each moved in one copy. `options` are ReadOptions' fields (shuffle,
    seed, deterministic, shuffle_buffer, skip_corrupt, check_sha256, image_dtype, ...):
    `image_dtype="uint8"` gives images as pixels in [0, 255] instead of floats in [0, 1] (for a
    model that divides on the GPU)."""
    if not 0 <= num_workers <= MAX_WORKERS:
        raise ValueError(f"num_workers {num_workers} is not in 0..{MAX_WORKERS:,}")
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"world_size {world_size} is not in 1..{MAX_WORLD_SIZE:,}")
    if start_step < 0:
        raise ValueError(f"start_step {start_step} must be >= 0")
    reader = Reader(data, split, batch_size, ReadOptions(**options))
    pin = torch.cuda.is_available()
    # made before the workers start: what they share with the training process
    dataset = ShardDataset(reader, rank, world_size, num_workers, Crossing(num_workers))
    return EpochLoader(
        dataset,
        start_step,
        device,
        batch_size=None,
        collate_fn=_as_is,
        num_workers=num_workers,
        pin_memory=pin,
        prefetch_factor=PREFETCH if num_workers else None,
        persistent_workers=num_workers > 0,
    )
