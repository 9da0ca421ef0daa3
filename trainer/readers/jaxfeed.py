"""The readers for JAX: an iterator of batches of this process's records, put on the device
ahead of the step that takes them.

Process `process_index` of `process_count` (jax.process_index() and jax.process_count() by
default) reads its own stream (trainer.readers.deal); every process yields the same number of
batches per epoch. One thread reads and a few decode batches ahead, in order
(trainer.readers.ahead: tfx-bsl's decoder and Pillow let other threads run);
the numeric arrays of the next batches are put on the devices (asynchronously) while the
current one trains; arrays of a dtype JAX would change (int64 while jax_enable_x64 is off: JAX
narrows it to int32) and string and bytes arrays stay numpy. Where they go (`Placement`): on
the one local device; over several local devices, split along the batch (a mesh of the local
devices, axis "batch"), each device its slice; or as a `sharding` given, of which this process
gives its batch (jax.make_array_from_process_local_data: a sharding over every process's
devices makes global arrays). A batch the devices cannot split evenly (the smaller last batch
of a pass) goes whole to the first local device. With
`shuffle`, epochs follow one another without end (a training loop takes the steps it wants);
without, the iterator ends after one pass. A run resumed with `start_step` gets the batches
after the first `start_step` of the same run; one past the end of the data (of the one pass
without shuffling) is refused (ValueError naming start_step and the steps there are).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from trainer.config import MAX_EPOCHS, MAX_WORLD_SIZE
from trainer.readers.ahead import ahead, parallel_map
from trainer.readers.stream import Reader, ReadOptions

DEVICE_AHEAD = 2  # batches on the device ahead of the one in use
HOST_AHEAD = 4  # batches read, and batches decoded, ahead on the host
DECODE_THREADS = max(1, min(8, (os.cpu_count() or 1) // 2))  # threads decoding batches


class Batches:
    """The iterator `jax_batches` returns; `info` is the dataset's (classes, vocabularies,
    moments)."""

    def __init__(
        self, reader: Reader, index: int, count: int, start_step: int, sharding: Any = None
    ):
        self.info = reader.info
        self.placement = Placement(sharding)
        layout = reader.layout(world_size=count)
        passes = MAX_EPOCHS if reader.options.shuffle else 1  # without shuffling: one pass
        epoch, done = layout.start(start_step, passes)

        def serialized() -> Iterator[list[bytes]]:
            first = epoch
            while reader.options.shuffle or first < passes:
                steps = layout.steps(first)
                skip = done if first == epoch else 0
                yield from reader.record_batches(layout, first, index, skip=skip, limit=steps)
                first += 1

        # one thread reads, a few decode, and this one puts batches on the device
        read = ahead(serialized(), HOST_AHEAD, "jax-batches-read")
        decoding = parallel_map(reader.decode, read, DECODE_THREADS, "jax-batches-decode")
        decoded = ahead(decoding, HOST_AHEAD, "jax-batches-decoded")
        self._batches = _on_device(decoded, DEVICE_AHEAD, self.placement)

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> dict[str, Any]:
        return next(self._batches)


class Placement:
    """Where a batch's arrays go (the module's doc): `sharding` None, the local devices (split
    along the batch when there are several); else that sharding."""

    def __init__(self, sharding: Any = None):
        local = jax.local_devices()
        self.first = local[0]
        if sharding is None and len(local) > 1:
            mesh = jax.sharding.Mesh(np.array(local), ("batch",))
            sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
        self.sharding = sharding

    def __call__(self, value: np.ndarray) -> Any:
        """The array placed; numpy where JAX would change its dtype, and strings."""
        if value.dtype == object or jax.dtypes.canonicalize_dtype(value.dtype) != value.dtype:
            return value
        if self.sharding is not None:
            try:
                return jax.make_array_from_process_local_data(self.sharding, value)
            except ValueError:  # jax's IndivisibleError: the batch does not split evenly
                pass
        return jax.device_put(value, self.first)


def _on_device(batches: Iterator[dict], ahead: int, place: Placement) -> Iterator[dict]:
    waiting: collections.deque = collections.deque()
    for batch in batches:
        waiting.append({k: place(v) for k, v in batch.items()})
        if len(waiting) > ahead:
            yield waiting.popleft()
    while waiting:
        yield waiting.popleft()


def jax_batches(
    data: Any,
    split: str,
    batch_size: int,
    *,
    process_index: int | None = None,
    process_count: int | None = None,
    start_step: int = 0,
    sharding: Any = None,
    **options: Any,
) -> Batches:
    """An iterator of this JAX process's batches of `split` (dicts of arrays), after the first
    `start_step`; endless with `shuffle`, one pass without; `options` are ReadOptions' fields,
    as for torch_loader. The arrays go to the local device, split along the batch over several local
    devices, or as `sharding` (a jax.sharding.Sharding) says, this process giving its batch."""
    index = jax.process_index() if process_index is None else process_index
    count = jax.process_count() if process_count is None else process_count
    if not 1 <= count <= MAX_WORLD_SIZE:
        raise ValueError(f"process_count {count} is not in 1..{MAX_WORLD_SIZE:,}")
    if not 0 <= index < count:
        raise ValueError(f"process index {index} is not in [0, {count})")
    if start_step < 0:
        raise ValueError(f"start_step {start_step} must be >= 0")
    reader = Reader(data, split, batch_size, ReadOptions(**options))
    return Batches(reader, index, count, start_step, sharding)
