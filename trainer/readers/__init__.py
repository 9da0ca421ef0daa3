"""Readers of shardflow datasets for PyTorch and JAX, without TensorFlow or Beam.

    from trainer.readers import torch_loader, jax_batches

    loader = torch_loader("out/penguins", "train", 64, num_workers=2)  # a torch DataLoader
    for epoch in range(3):
        for batch in loader:  # each iteration of the loader is the next epoch
            ...  # dict of tensors: every feature and the label, first dimension the batch

    batches = jax_batches("out/penguins", "train", 64)  # endless when shuffling
    batch = next(batches)  # dict of arrays (numbers on the device, strings numpy)

    facts = dataset_facts("out/penguins")  # vocabularies, counts, classes, moments, quantiles

Both read the same core (trainer.readers.stream): the manifest and its shards (sizes and
checksums checked), shards dealt to ranks and loader workers, seeded shuffles of shards and
records, whole batches decoded by tfx-bsl's C++ decoder into the arrays of the tf.data path
(`trainer.keras.features.dense_inputs`), images decoded and resized as it does, string features with
a vocabulary (trainer.dataset.facts: the dataset's facts) as ids and the label as its class
index, and resumption after `start_step`
batches. torch and jax are imported only when `torch_loader` or `jax_batches` is first taken
from the package (its `__getattr__`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.dataset.facts import dataset_facts
    from trainer.readers.jaxfeed import jax_batches
    from trainer.readers.pytorch import torch_loader

__all__ = ["dataset_facts", "jax_batches", "torch_loader"]

_HOMES = {
    "torch_loader": "trainer.readers.pytorch",
    "jax_batches": "trainer.readers.jaxfeed",
    "dataset_facts": "trainer.dataset.facts",
}


def __getattr__(name: str) -> Any:
    """`torch_loader`, `jax_batches` and `dataset_facts`, imported from their modules when first
    asked for (so importing the package imports neither torch nor JAX)."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_HOMES[name]), name)
