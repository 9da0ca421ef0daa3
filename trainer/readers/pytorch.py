"""The readers for PyTorch: an IterableDataset of the reading core and its DataLoader.

Each `iter()` of the loader is one epoch (0, 1, 2, ...). Rank `rank` of `world_size` reads its
own streams (trainer.readers.plan), each loader worker one of them, so under
DistributedDataParallel no two ranks read the same records; every rank yields the same number
of batches in an epoch. Workers decode whole batches (the DataLoader's `batch_size` is None: a
dataset item is already a batch) and hand over dicts of tensors, pinned when CUDA is there.

The order of batches depends only on (seed, epoch, rank, world_size, num_workers): the
DataLoader takes a batch from each worker in turn, in order. A loader made with `start_step`
(the batches a run has consumed) starts in the epoch and at the batch where that run stopped:
whole epochs are skipped without reading, and in the epoch it resumes, each worker skips its
own batches without decoding them and the workers' turns start where they stood.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from trainer.readers.plan import Layout, Position
from trainer.readers.stream import Reader

PREFETCH = 2  # batches each worker decodes ahead


class ShardDataset(IterableDataset):
    """A rank's batches of one epoch at a time, as dicts of tensors; `begin(epoch, done)` sets
    the epoch the next iteration reads and the batches of it already consumed."""

    def __init__(self, reader: Reader, rank: int, world_size: int, workers: int):
        super().__init__()
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        self.reader = reader
        self.rank = rank
        self.workers = max(1, workers)
        self.layout: Layout = reader.layout(world_size, self.workers)
        self.epoch = 0
        self.done = 0

    def begin(self, epoch: int, done: int = 0) -> None:
        self.epoch, self.done = epoch, done

    def __len__(self) -> int:
        return self.layout.steps(self.epoch) - self.done

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        if workers != self.workers:
            raise RuntimeError(f"made for {self.workers} loader workers, run by {workers}")
        layout, epoch = self.layout, self.epoch
        steps = layout.steps(epoch)
        position = Position.of(layout.worker_batches(epoch, self.rank), self.done, steps)
        role = position.role(worker, workers)
        batches = self.reader.batches(
            layout,
            epoch,
            self.rank,
            role,
            skip=position.taken[role],
            limit=position.limit[role],
        )
        for batch in batches:
            yield {name: as_tensor(value) for name, value in batch.items()}


def as_tensor(value: np.ndarray) -> Any:
    """A numeric array as a tensor; bytes stay a list (no tensor holds them). Arrays that
    Arrow lent read-only are copied (a tensor may be written to)."""
    if value.dtype == object:
        return value.tolist()
    return torch.from_numpy(value if value.flags.writeable else value.copy())


class EpochLoader(DataLoader):
    """A DataLoader whose every iteration is the next epoch, the first one resuming after
    `start_step` batches."""

    def __init__(self, dataset: ShardDataset, start_step: int = 0, **options: Any):
        super().__init__(dataset, **options)
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
        return super().__iter__()


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
) -> EpochLoader:
    """A DataLoader of `split`'s batches as dicts of tensors (see trainer.readers)."""
    if num_workers < 0 or start_step < 0:
        raise ValueError(f"num_workers {num_workers} and start_step {start_step} must be >= 0")
    reader = Reader(
        data, split, batch_size, shuffle=shuffle, seed=seed, deterministic=deterministic
    )
    dataset = ShardDataset(reader, rank, world_size, num_workers)
    return EpochLoader(
        dataset,
        start_step,
        batch_size=None,
        collate_fn=_as_is,
        num_workers=num_workers,
        pin_memory=torch.cuda.is_available(),
        prefetch_factor=PREFETCH if num_workers else None,
        persistent_workers=False,  # each epoch's workers get the dataset set for that epoch
    )
