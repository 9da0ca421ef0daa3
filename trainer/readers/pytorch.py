"""The readers for PyTorch: an IterableDataset of the reading core and its DataLoader.

Each `iter()` of the loader is one epoch (0, 1, 2, ...). Rank `rank` of `world_size` reads its
own streams (trainer.readers.plan), each loader worker one of them, so under
DistributedDataParallel no two ranks read the same records; every rank yields the same number
of batches in an epoch. Workers decode whole batches (the DataLoader's `batch_size` is None: a
dataset item is already a batch), in two threads where the cores allow (`decode_threads`),
while a third reads ahead.

A batch crosses to the training process as one block of shared memory (`Packed`): a worker
writes every numeric array into it, and decodes images straight into it, so the block is the
one tensor that crosses and the one copy the DataLoader makes to pin it (when CUDA is there);
the loader hands out views of it, or, given a `device`, views of the block moved there in one
copy. Once pinned, a block is released to its worker, which reuses it (`Blocks`): fresh shared
memory faults in page by page, which costs more than the copy.

The order of batches depends only on (seed, epoch, rank, world_size, num_workers): the
DataLoader takes a batch from each worker in turn, in order. Its workers persist from one epoch
to the next (no new processes each epoch): each holds its own copy of the dataset, which moves
to the next epoch each time the loader starts one, as the loader's own copy does. A loader
made with `start_step` (the batches a run has consumed) starts in the epoch and at the batch
where that run stopped: whole epochs are skipped without reading, and in the epoch it resumes,
each worker skips its own batches without decoding them and the workers' turns start where
they stood.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from trainer.readers.ahead import ahead, parallel_map
from trainer.readers.plan import Layout, Position
from trainer.readers.stream import Reader

PREFETCH = 2  # batches each worker decodes ahead
READ_AHEAD = 2  # batches of serialized records each worker reads ahead
RING = PREFETCH + 3  # blocks of shared memory each worker reuses in turn (see Blocks)


class ShardDataset(IterableDataset):
    """A rank's batches of one epoch at a time, as dicts of tensors; `begin(epoch, done)` sets
    the epoch the next iteration reads and the batches of it already consumed."""

    def __init__(
        self, reader: Reader, rank: int, world_size: int, workers: int, released: Any = None
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
        self.released = released  # shared: per worker, the last batch copied out (Blocks)
        self._blocks: Blocks | None = None

    def begin(self, epoch: int, done: int = 0) -> None:
        self.epoch, self.done = epoch, done

    def __len__(self) -> int:
        return self.layout.steps(self.epoch) - self.done

    def __iter__(self) -> Iterator[dict[str, Any]]:
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
    ) -> Iterator[dict[str, Any]]:
        layout = self.layout
        steps = layout.steps(epoch)
        position = Position.of(layout.worker_batches(epoch, self.rank), done, steps)
        role = position.role(worker, workers)
        records = self.reader.record_batches(
            layout, epoch, self.rank, role, skip=position.taken[role], limit=position.limit[role]
        )
        # a thread reads (files, inflating, unframing, shuffling) while this one decodes
        records = ahead(records, READ_AHEAD, "loader-read")
        if not in_worker:  # in the training process: nothing to cross
            for batch in map(self.reader.decode, records):
                yield {name: as_tensor(value) for name, value in batch.items()}
            return
        if self._blocks is None:  # this worker's, kept from epoch to epoch
            self._blocks = Blocks(self.released, worker)
        decode = functools.partial(self.reader.decode, images=False)
        threads = decode_threads(self.workers)
        for batch in parallel_map(decode, records, threads, "loader-decode"):
            yield Packed.of(batch, self._blocks, self.reader)  # images decoded into the block


def decode_threads(workers: int) -> int:
    """Threads each of `workers` loader workers decodes with: two where the cores allow
    (tfx-bsl's decoder lets other threads run), else one."""
    return 2 if 2 * workers + 1 <= (os.cpu_count() or 1) else 1


class Blocks:
    """A loader worker's blocks of shared memory for its batches. A new block's pages fault in
    one at a time as they are first written, which costs more than the copy into it, so when
    the training process pins what it receives (a copy out: it then holds none of the block)
    and says so in `released` (per worker, the number of the last batch it took), the worker
    reuses its last RING blocks in turn: a block is reused once the batch it held is released,
    else a new one is made."""

    def __init__(self, released: Any, worker: int):
        self.released = released
        self.worker = worker
        self.number = 0
        self.ring: list[tuple[int, torch.Tensor] | None] = [None] * RING

    def take(self, size: int) -> tuple[int, torch.Tensor]:
        """The next batch's number and a shared block of at least `size` bytes."""
        self.number += 1
        if self.released is None:
            return self.number, torch.empty(size, dtype=torch.uint8).share_memory_()
        slot = self.number % RING
        held = self.ring[slot]
        if held is None or held[1].numel() < size or self.released[self.worker] < held[0]:
            held = (self.number, torch.empty(size, dtype=torch.uint8).share_memory_())
        self.ring[slot] = (self.number, held[1])
        return self.number, held[1]


_TORCH_DTYPES: dict[np.dtype, torch.dtype] = {
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.bool_): torch.bool,
}


class Packed:
    """Where a batch's arrays lie in the one block of shared memory it crosses in from a loader
    worker (each 64-byte aligned), and its bytes lists. The worker hands over
    `{"block": tensor, "packed": Packed}`; the DataLoader pins the block and passes this object
    as it is (it is no container to walk); `unpacked(block)` is the batch again, its tensors
    views of the block."""

    ALIGN = 64

    def __init__(
        self,
        entries: list[tuple],
        lists: dict[str, list],
        order: list[str],
        worker: int = 0,
        number: int = 0,
    ):
        self.entries = entries  # (name, torch dtype, shape, offset, bytes)
        self.lists = lists
        self.order = order
        self.worker, self.number = worker, number  # whose batch, and its number (Blocks)

    @classmethod
    def of(
        cls, batch: dict[str, np.ndarray], blocks: Blocks, reader: Reader | None = None
    ) -> dict[str, Any]:
        """The batch as it crosses: its block (taken from `blocks`) and its Packed; images the
        reader left encoded are decoded into the block."""
        images = reader.decoder.images if reader is not None else {}
        places: list[tuple[str, np.dtype, tuple[int, ...], int, int]] = []
        shape: tuple[int, ...]
        end = 0
        for name, value in batch.items():
            if name in images:
                image_size, kind = images[name]
                dtype, shape = np.dtype(kind), (len(value), *image_size)
            elif value.dtype != object:
                dtype, shape = value.dtype, value.shape
            else:
                continue
            nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            places.append((name, dtype, shape, end, nbytes))
            end += -(-nbytes // cls.ALIGN) * cls.ALIGN
        number, block = blocks.take(end)
        memory = block.numpy()
        for name, dtype, shape, at, nbytes in places:
            place = memory[at : at + nbytes].view(dtype).reshape(shape)
            if name in images:
                assert reader is not None  # images come from a reader
                reader.images_into(name, batch[name], place)
            else:
                place[...] = batch[name]
        entries = [(n, _TORCH_DTYPES[d], shape, at, size) for n, d, shape, at, size in places]
        lists = {
            name: v.tolist()
            for name, v in batch.items()
            if v.dtype == object and name not in images
        }
        packed = cls(entries, lists, list(batch), blocks.worker, number)
        return {"block": block, "packed": packed}

    def unpacked(self, block: Any) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.lists)
        for name, dtype, shape, at, size in self.entries:
            out[name] = block[at : at + size].view(dtype).view(shape)
        return {name: out[name] for name in self.order}


class _Unpacking:
    """A DataLoader iterator whose batches are unpacked (`Packed`) as they come, and moved to
    `device` (a packed batch in one copy: its block) when one is given."""

    def __init__(self, batches: Any, device: Any = None, released: Any = None):
        self.batches = batches
        self.device = device
        self.released = released

    def __iter__(self) -> _Unpacking:
        return self

    def __next__(self) -> dict[str, Any]:
        batch = next(self.batches)
        device = self.device
        packed = batch.get("packed") if isinstance(batch, dict) else None
        if isinstance(packed, Packed):
            if self.released is not None:  # pinned: a copy, the worker may reuse the block
                self.released[packed.worker] = packed.number
            block = batch["block"]
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
        return _Unpacking(super().__iter__(), self.device, dataset.released)


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
    """A DataLoader of `split`'s batches as dicts of tensors (see trainer.readers)."""
    if num_workers < 0 or start_step < 0:
        raise ValueError(f"num_workers {num_workers} and start_step {start_step} must be >= 0")
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
    # shared with the workers (made before they start): the last batch of each taken and pinned
    released = multiprocessing.RawArray("q", num_workers) if pin and num_workers else None
    dataset = ShardDataset(reader, rank, world_size, num_workers, released)
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
