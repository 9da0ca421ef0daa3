"""The readers for PyTorch: an IterableDataset of the reading core and its DataLoader.

Each `iter()` of the loader is one epoch (0, 1, 2, ...). Rank `rank` of `world_size` reads its
own streams (trainer.readers.deal), each loader worker one of them, so under
DistributedDataParallel no two ranks read the same records; every rank yields the same number
of batches in an epoch. Workers decode whole batches (the DataLoader's `batch_size` is None: a
dataset item is already a batch). Where the cores allow (`worker_threads`: 1.25 cores or more
per worker), a worker reads (files, inflating, unframing, shuffling) on one thread and decodes
on two others; where (nearly) every core has a worker, it does all of it on one thread: threads
that wait on each other for the interpreter cost more than they overlap when no core is free.

A batch crosses to the training process in a block of shared memory (`Packed`): a worker
writes every numeric array into it, and decodes images straight into it. Each worker reuses a
ring of blocks (`Blocks`), and the training process keeps the blocks it has seen (`Crossing`),
so a block crosses once, the first time it is used; every later batch in it crosses as a few
numbers (which block, and where its arrays lie), not as memory handed over again, which costs
the training process more than a batch takes to decode. There the batch is copied out of its
block (into pinned memory by the DataLoader's pinning thread when CUDA is there), the block is
released to its worker, and the loader hands out views of the copy, or, given a `device`, views
of it moved there in one copy.

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
import multiprocessing
import os
import uuid
import weakref
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from trainer.config import MAX_WORKERS, MAX_WORLD_SIZE
from trainer.readers.ahead import ahead, parallel_map
from trainer.readers.deal import Layout, Position
from trainer.readers.stream import Reader

PREFETCH = 2  # batches each worker decodes ahead
READ_AHEAD = 2  # batches of serialized records each worker reads ahead
RING = PREFETCH + 3  # blocks of shared memory each worker reuses in turn (see Blocks)
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


class Crossing:
    """How batches cross from a loader's workers to the training process: `released`, shared
    with the workers (per worker, the number of the last batch copied out of its block), and,
    in the training process, the blocks it has seen, by (worker, slot) (`held`). A Packed batch
    names its Crossing by `token`: the DataLoader's pinning thread, which copies it out, finds
    it through `Crossing.open`."""

    open: ClassVar[weakref.WeakValueDictionary[str, Crossing]] = weakref.WeakValueDictionary()

    def __init__(self, workers: int):
        self.token = uuid.uuid4().hex
        self.released = multiprocessing.RawArray("q", max(1, workers))
        self.held: dict[tuple[int, int], torch.Tensor] = {}
        Crossing.open[self.token] = self

    def __getstate__(self) -> dict:  # what a worker started by spawning needs
        return {"token": self.token, "released": self.released}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, held={})

    def copied(self, packed: Packed, pinned: bool) -> torch.Tensor:
        """The bytes of `packed`'s batch, copied out of its block (into pinned memory when
        `pinned`), which is then released to its worker."""
        assert packed.block is not None  # Packed.copied checks it
        out = torch.empty(packed.size, dtype=torch.uint8, pin_memory=pinned)
        out.copy_(packed.block[: packed.size])
        self.released[packed.worker] = packed.number
        return out


class Blocks:
    """A loader worker's ring of RING blocks of shared memory for its batches. A batch's block
    is the next of the ring, reused once the training process has released the batch it held
    last (`Crossing.released`); a new block is made when the slot is still held or too small,
    and crosses with the batch. (A new block's pages also fault in one at a time as they are
    first written, which costs more than the copy into it.)"""

    def __init__(self, crossing: Crossing, worker: int):
        self.token = crossing.token
        self.released = crossing.released
        self.worker = worker
        self.number = 0
        self.ring: list[tuple[int, torch.Tensor] | None] = [None] * RING

    def take(self, size: int) -> tuple[int, int, torch.Tensor, bool]:
        """The next batch's number, its slot in the ring, a shared block of at least `size`
        bytes, and whether that block is new (the training process has not seen it)."""
        self.number += 1
        slot = self.number % RING
        held = self.ring[slot]
        if held is None or held[1].numel() < size or self.released[self.worker] < held[0]:
            new, block = True, torch.empty(size, dtype=torch.uint8).share_memory_()
        else:
            new, block = False, held[1]
        self.ring[slot] = (self.number, block)
        return self.number, slot, block, new


_TORCH_DTYPES: dict[np.dtype, torch.dtype] = {
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.bool_): torch.bool,
}


class Packed:
    """A batch as it crosses from a loader worker: where its arrays lie in its block, its bytes
    lists, and its block (`Blocks`) by worker and slot. The arrays lie grouped by dtype, each
    group one run (64-byte aligned), so the training process makes them again in a few calls:
    a view of each group as its dtype, split into the group's arrays (`unpacked`), where one
    view per array costs more than the rest of the batch's way to the GPU. The block itself
    crosses only when it is `new`; the training process finds the others among those it has
    seen (`Crossing.held`) as it receives the batch, before any later batch can bring a new
    block for the same slot. There `copied` (through `pin_memory` when the DataLoader pins)
    holds the batch's bytes instead, and `unpacked(block)` is the batch again, its tensors
    views of `block`."""

    ALIGN = 64

    def __init__(
        self,
        groups: list[tuple],
        lists: dict[str, list],
        order: list[str],
        *,
        token: str | None = None,
        worker: int = 0,
        number: int = 0,
        slot: int = 0,
        size: int = 0,
        block: torch.Tensor | None = None,
        new: bool = False,
    ):
        self.groups = groups  # (torch dtype, offset, bytes, [(name, shape, elements)])
        self.lists = lists
        self.order = order
        self.token = token  # its Crossing's; None once copied out
        self.worker, self.number, self.slot, self.size = worker, number, slot, size
        self.block = block
        self.new = new

    def __getstate__(self) -> dict:
        return self.__dict__ if self.new else {**self.__dict__, "block": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        crossing = Crossing.open.get(self.token) if self.token is not None else None
        if crossing is None:  # not from a live loader's worker
            return
        key = (self.worker, self.slot)
        if self.new and self.block is not None:
            crossing.held[key] = self.block
        else:
            self.block = crossing.held.get(key)

    @classmethod
    def of(
        cls, batch: dict[str, np.ndarray], blocks: Blocks, reader: Reader | None = None
    ) -> Packed:
        """The batch as it crosses, written into a block taken from `blocks`; images the
        reader left encoded are decoded into the block."""
        images = reader.decoder.images if reader is not None else {}
        by_dtype: dict[np.dtype, list[tuple[str, tuple[int, ...]]]] = {}
        shape: tuple[int, ...]
        for name, value in batch.items():
            if name in images:
                image_size, kind = images[name]
                dtype, shape = np.dtype(kind), (len(value), *image_size)
            elif value.dtype != object:
                dtype, shape = value.dtype, value.shape
            else:
                continue
            by_dtype.setdefault(dtype, []).append((name, shape))
        layout: list[tuple[np.dtype, int, int, list[tuple[str, tuple[int, ...], int]]]] = []
        end = 0
        for dtype, arrays in by_dtype.items():
            members = [(name, shape, int(np.prod(shape, dtype=np.int64))) for name, shape in arrays]
            nbytes = dtype.itemsize * sum(count for _, _, count in members)
            layout.append((dtype, end, nbytes, members))
            end += -(-nbytes // cls.ALIGN) * cls.ALIGN
        number, slot, block, new = blocks.take(end)
        memory = block.numpy()
        for dtype, start, _, members in layout:
            for name, shape, count in members:
                stop = start + count * dtype.itemsize
                place = memory[start:stop].view(dtype).reshape(shape)
                start = stop
                if name in images:
                    assert reader is not None  # images come from a reader
                    reader.images_into(name, batch[name], place)
                else:
                    place[...] = batch[name]
        groups = [(_TORCH_DTYPES[d], at, nbytes, members) for d, at, nbytes, members in layout]
        lists = {
            name: v.tolist()
            for name, v in batch.items()
            if v.dtype == object and name not in images
        }
        return cls(
            groups, lists, list(batch), token=blocks.token, worker=blocks.worker,
            number=number, slot=slot, size=end, block=block, new=new,
        )  # fmt: skip

    def copied(self, pinned: bool = False) -> Packed:
        """In the training process: the batch with its bytes copied out of its block (which
        goes back to its worker), into pinned memory when `pinned`."""
        if self.token is None:
            return self
        crossing = Crossing.open.get(self.token)
        if crossing is None or self.block is None:
            raise RuntimeError("a batch arrived from a loader worker whose loader is gone")
        block = crossing.copied(self, pinned)
        return Packed(self.groups, self.lists, self.order, size=self.size, block=block)

    def pin_memory(self, *_: Any) -> Packed:
        """What the DataLoader's pinning thread calls: copied out into pinned memory."""
        return self.copied(pinned=True)

    def unpacked(self, block: Any) -> dict[str, Any]:
        """The batch as views of `block` (where its bytes are now): a view per dtype, split."""
        out: dict[str, Any] = dict(self.lists)
        for dtype, at, nbytes, members in self.groups:
            typed = block[at : at + nbytes].view(dtype)
            sizes = [count for _, _, count in members]
            pieces = typed.split(sizes) if len(sizes) > 1 else [typed]
            for (name, shape, _), piece in zip(members, pieces):
                out[name] = piece if len(shape) == 1 else piece.view(shape)
        return {name: out[name] for name in self.order}


class _Unpacking:
    """A DataLoader iterator whose batches are unpacked (`Packed`) as they come, and moved to
    `device` (a packed batch in one copy: its bytes) when one is given."""

    def __init__(self, batches: Any, device: Any = None):
        self.batches = batches
        self.device = device

    def __iter__(self) -> _Unpacking:
        return self

    def __next__(self) -> dict[str, Any]:
        batch = next(self.batches)
        device = self.device
        if isinstance(batch, Packed):
            packed = batch.copied()  # not pinned: nothing copied it out yet
            block: Any = packed.block
            if device is not None:
                block = block.to(device, non_blocking=True)
            return packed.unpacked(block)
        if device is None:
            return batch
        return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v
                for k, v in batch.items()}  # fmt: skip

    def __len__(self) -> int:
        return len(self.batches)


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

    def __len__(self) -> int:
        """The batches of the next pass (the epoch the next iteration reads)."""
        dataset = self.dataset
        assert isinstance(dataset, ShardDataset)  # what __init__ takes
        return dataset.layout.steps(self.next_epoch) - self.resume_at

    def __iter__(self) -> Any:
        dataset = self.dataset
        assert isinstance(dataset, ShardDataset)  # what __init__ takes
        dataset.begin(self.next_epoch, self.resume_at)
        self.next_epoch, self.resume_at = self.next_epoch + 1, 0
        return _Unpacking(super().__iter__(), self.device)


def _as_is(batch: Any) -> Any:
    return batch


def torch_loader(
    data: Any,
    split: str,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    deterministic: bool = False,
    num_workers: int = 0,
    rank: int = 0,
    world_size: int = 1,
    start_step: int = 0,
    device: Any = None,
    image_dtype: str = "float32",
) -> EpochLoader:
    """A torch DataLoader of `split`'s batches (dicts of tensors; bytes as lists): each
    iteration the next epoch, resuming after `start_step` batches; rank `rank` of `world_size`
    reads its own shards, `num_workers` loader processes decode. With `device` (e.g. "cuda")
    the batches come on it, each moved in one copy; `image_dtype="uint8"` gives images as
    pixels in [0, 255] instead of floats in [0, 1] (for a model that divides on the GPU)."""
    if not 0 <= num_workers <= MAX_WORKERS:
        raise ValueError(f"num_workers {num_workers} is not in 0..{MAX_WORKERS:,}")
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"world_size {world_size} is not in 1..{MAX_WORLD_SIZE:,}")
    if start_step < 0:
        raise ValueError(f"start_step {start_step} must be >= 0")
    reader = Reader(
        data,
        split,
        batch_size,
        shuffle=shuffle,
        seed=seed,
        deterministic=deterministic,
        image_dtype=image_dtype,
    )
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
