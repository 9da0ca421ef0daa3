"""Readers of shardflow datasets for PyTorch and JAX, without TensorFlow or Beam.

    from trainer.readers import torch_loader, jax_batches

    loader = torch_loader("out/penguins", "train", 64, num_workers=2)  # a torch DataLoader
    for epoch in range(3):
        for batch in loader:  # each iteration of the loader is the next epoch
            ...  # dict of tensors: every feature and the label, first dimension the batch

    batches = jax_batches("out/penguins", "train", 64)  # endless when shuffling
    batch = next(batches)  # dict of arrays (numbers on the device, strings numpy)

Both read the same core (trainer.readers.stream): the manifest and its shards (sizes and
checksums checked), shards dealt to ranks and loader workers, seeded shuffles of shards and
records, whole batches decoded by tfx-bsl's C++ decoder into the arrays of the tf.data path
(`trainer.features.dense_inputs`), images decoded and resized as it does, string features with
a vocabulary as ids and the label as its class index, and resumption after `start_step`
batches. torch and jax are imported only by the function that needs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.readers.jaxfeed import Batches
    from trainer.readers.pytorch import EpochLoader

__all__ = ["jax_batches", "torch_loader"]


def torch_loader(
    data: str | Sequence[str],
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
    from trainer.readers.pytorch import torch_loader as make

    return make(
        data,
        split,
        batch_size,
        shuffle=shuffle,
        seed=seed,
        deterministic=deterministic,
        num_workers=num_workers,
        rank=rank,
        world_size=world_size,
        start_step=start_step,
        device=device,
        image_dtype=image_dtype,
    )


def jax_batches(
    data: str | Sequence[str],
    split: str,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    deterministic: bool = False,
    process_index: int | None = None,
    process_count: int | None = None,
    start_step: int = 0,
    image_dtype: str = "float32",
    sharding: Any = None,
) -> Batches:
    """An iterator of this JAX process's batches of `split` (dicts of arrays), after the first
    `start_step`; endless with `shuffle`, one pass without; `image_dtype` as for
    torch_loader. The arrays go to the local device, split along the batch over several local
    devices, or as `sharding` (a jax.sharding.Sharding) says, this process giving its batch."""
    from trainer.readers.jaxfeed import jax_batches as make

    return make(
        data,
        split,
        batch_size,
        shuffle=shuffle,
        seed=seed,
        deterministic=deterministic,
        process_index=process_index,
        process_count=process_count,
        start_step=start_step,
        image_dtype=image_dtype,
        sharding=sharding,
    )
