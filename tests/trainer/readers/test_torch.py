"""The PyTorch reader: dicts of tensors, one epoch per pass, exact resumption by step with and
without loader workers, ranks that share the split, and a small model that learns from it."""

from __future__ import annotations

import json

import pytest

from tests.trainer.readers.conftest import run_code

torch = pytest.importorskip("torch")

from trainer.readers import torch_loader  # noqa: E402  (after the skip)

# Loader workers are forked: run in a child process that has no TensorFlow or JAX threads.
RESUME = """
import json, sys
from trainer.readers import torch_loader

def ids(epochs, **options):
    loader = torch_loader(root, "train", 16, seed=4, num_workers=workers, **options)
    return [b["id"].tolist() for _ in range(epochs) for b in loader]

root, out = sys.argv[1], {}
for workers in (0, 2):
    full, again = ids(3), ids(3)
    resumed = {start: ids(2, start_step=start) for start in (5, 16, 21, 40)}
    ranks = [ids(1, rank=r, world_size=2) for r in range(2)]
    out[workers] = {"full": full, "again": again, "resumed": resumed, "ranks": ranks}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def orders(dataset) -> dict:
    proc = run_code(RESUME, str(dataset.root))
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_resumed_loader_gives_the_batches_that_follow(orders, workers):
    full, resumed = orders[workers]["full"], orders[workers]["resumed"]
    assert orders[workers]["again"] == full  # a function of the arguments
    assert len(full) == 3 * 16 if workers == "2" else 3 * 15
    for start, batches in resumed.items():
        start = int(start)
        per_epoch = len(full) // 3
        # the rest of the epoch it resumes in, then the next whole one
        assert len(batches) == 2 * per_epoch - start % per_epoch
        shared = min(len(batches), len(full) - start)
        assert batches[:shared] == full[start : start + shared]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_every_epoch_holds_every_record_once_in_a_new_order(orders, dataset, workers):
    full = orders[workers]["full"]
    per_epoch = len(full) // 3
    epochs = [sum(full[i * per_epoch : (i + 1) * per_epoch], []) for i in range(3)]
    ids = sorted(r["id"] for r in dataset.rows["train"])
    assert all(sorted(e) == ids for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_ranks_read_disjoint_halves_in_as_many_steps(orders, dataset, workers):
    first, second = (sum(batches, []) for batches in orders[workers]["ranks"])
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(r["id"] for r in dataset.rows["train"])
    assert len(orders[workers]["ranks"][0]) == len(orders[workers]["ranks"][1])


def test_the_length_of_the_loader_is_that_of_its_next_pass(dataset):
    loader = torch_loader(str(dataset.root), "train", 32, start_step=3)
    assert len(loader) == 8 - 3
    assert len(list(loader)) == 5
    assert len(loader) == 8 and len(list(loader)) == 8


def test_batches_are_dicts_of_tensors_shaped_by_the_manifest(dataset):
    batch = next(iter(torch_loader(str(dataset.root), "eval", 8, shuffle=False)))
    assert batch["embedding"].shape == (8, 4) and batch["embedding"].dtype == torch.float32
    assert batch["id"].shape == (8,) and batch["id"].dtype == torch.int64
    assert batch["species"].dtype == torch.int64 and batch["island"].min() >= 1
    assert batch["tags"].__class__ is list and len(batch["tags"]) == 8  # strings: no tensor
    assert batch["tags__lengths"].tolist() == [len(r["tags"]) for r in dataset.rows["eval"][:8]]


def test_a_small_model_learns_the_penguins_species(dataset):
    torch.manual_seed(0)
    loader = torch_loader(str(dataset.root), "train", 32, seed=1)
    first = next(iter(loader))
    mean, std = first["flipper_mm"].mean(), first["flipper_mm"].std()

    def inputs(batch: dict) -> torch.Tensor:
        flipper = ((batch["flipper_mm"] - mean) / std)[:, None]
        island = torch.nn.functional.one_hot(batch["island"], 4).float()
        return torch.cat([flipper, island], dim=1)

    model = torch.nn.Sequential(torch.nn.Linear(5, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(25):
        for batch in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(inputs(batch)), batch["species"])
            loss.backward()
            optimizer.step()
    right = total = 0
    for batch in torch_loader(str(dataset.root), "eval", 64, shuffle=False):
        right += int((model(inputs(batch)).argmax(1) == batch["species"]).sum())
        total += len(batch["species"])
    assert total == 60 and right / total > 0.85


def test_a_small_cnn_learns_the_shapes(shapes):
    torch.manual_seed(0)
    loader = torch_loader(str(shapes), "train", 16, seed=2)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveMaxPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 3),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(4):
        for batch in loader:
            optimizer.zero_grad()
            images = batch["image"].permute(0, 3, 1, 2)
            loss = torch.nn.functional.cross_entropy(model(images), batch["label"])
            loss.backward()
            optimizer.step()
    right = total = 0
    for batch in torch_loader(str(shapes), "test", 64, shuffle=False):
        right += int((model(batch["image"].permute(0, 3, 1, 2)).argmax(1) == batch["label"]).sum())
        total += len(batch["label"])
    assert total > 20 and right / total > 0.8
