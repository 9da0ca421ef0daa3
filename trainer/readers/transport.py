"""How a batch crosses from a PyTorch loader worker to the training process: in a block of
shared memory.

A worker writes every numeric array of a batch into a block (`Packed.of`), and decodes images
straight into it. Each worker reuses a ring of RING blocks (`Blocks`), and the training process
keeps the blocks it has seen (`Crossing`), so a block crosses once, the first time it is used;
every later batch in it crosses as a few numbers (which block, and where its arrays lie), not as
memory handed over again, which costs the training process more than a batch takes to decode.
There the batch is copied out of its block (into pinned memory by the DataLoader's pinning
thread when CUDA is there), the block is released to its worker, and the loader hands out views
of the copy (`Unpacking`), or, given a device, views of it moved there in one copy.
"""

from __future__ import annotations

import multiprocessing
import uuid
import weakref
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

if TYPE_CHECKING:
    from trainer.readers.stream import Reader

PREFETCH = 2  # batches each worker decodes ahead
RING = PREFETCH + 3  # blocks of shared memory each worker reuses in turn (see Blocks)


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


class Unpacking:
    """A DataLoader iterator whose batches are unpacked (`Packed`) as they come, and moved to
    `device` (a packed batch in one copy: its bytes) when one is given; each one handed out is
    counted in `reading` (the loader's state_dict)."""

    def __init__(self, batches: Any, device: Any = None, reading: list[int] | None = None):
        self.batches = batches
        self.device = device
        self.reading = reading  # [epoch, batches handed out], counted here

    def __iter__(self) -> Unpacking:
        return self

    def __next__(self) -> dict[str, Any]:
        batch = next(self.batches)
        if self.reading is not None:
            self.reading[1] += 1
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
