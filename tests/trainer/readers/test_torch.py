"""The PyTorch reader: dicts of tensors, one epoch per pass, exact resumption by step (and by
state_dict) with and without loader workers, ranks that share the split, and a small model that
learns from it."""

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
    full, again_ids = ids(3), ids(3)
    resumed = {start: ids(2, start_step=start) for start in (5, 16, 21, 40)}
    ranks = [ids(1, rank=r, world_size=2) for r in range(2)]
    # a pass broken off after 7 batches of the second epoch; its state taken to a new loader
    loader = torch_loader(root, "train", 16, seed=4, num_workers=workers)
    first = [b["id"].tolist() for b in loader]
    for n, b in enumerate(loader):
        if n == 6:
            break
    state = loader.state_dict()
    again = torch_loader(root, "train", 16, seed=4, num_workers=workers)
    again.load_state_dict(state)
    stated = [b["id"].tolist() for _ in range(2) for b in again]
    out[workers] = {"full": full, "again": again_ids, "resumed": resumed, "ranks": ranks,
                    "state": state, "stated": stated, "first": first}
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
def test_a_loader_given_the_state_of_another_gives_the_batches_that_follow(orders, workers):
    full, run = orders[workers]["full"], orders[workers]
    per_epoch = len(full) // 3
    assert run["first"] == full[:per_epoch]
    assert (run["state"]["epoch"], run["state"]["batch"]) == (1, 7)
    # the rest of the second epoch, then the third
    assert run["stated"] == full[per_epoch + 7 :]


def test_a_state_is_taken_only_by_a_loader_that_orders_its_batches_alike(dataset):
    loader = torch_loader(str(dataset.root), "train", 32, seed=1)
    assert loader.state_dict()["epoch"] == 0 and loader.state_dict()["batch"] == 0
    whole = [b["id"].tolist() for b in loader]
    state = loader.state_dict()  # a whole pass: the next epoch, none of it read
    assert (state["epoch"], state["batch"]) == (1, 0)
    other = torch_loader(str(dataset.root), "train", 32, seed=2)
    with pytest.raises(ValueError, match="a loader with seed 1, this one's is 2"):
        other.load_state_dict(state)
    same = torch_loader(str(dataset.root), "train", 32, seed=1)
    with pytest.raises(ValueError, match="batch 99 is past the 8 of epoch 0"):
        same.load_state_dict({**state, "epoch": 0, "batch": 99})
    with pytest.raises(ValueError, match="are not a position"):
        same.load_state_dict({**state, "epoch": -1})
    same.load_state_dict({**state, "epoch": 0, "batch": 3})
    assert [b["id"].tolist() for b in same] == whole[3:]


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


PACKED = """
import json, sys
import numpy as np
from trainer.readers import torch_loader

root, shapes = sys.argv[1], sys.argv[2]

def values(loader, epochs=2):
    out = []
    for _ in range(epochs):
        for b in loader:
            out.append({k: v.tolist() if hasattr(v, "tolist") else repr(v) for k, v in b.items()})
    return out

def tags(loader):
    return {i: repr(t) for b in loader for i, t in zip(b["id"].tolist(), b["tags"])}

plain = values(torch_loader(root, "train", 16, seed=5, num_workers=2))
on_cpu = values(torch_loader(root, "train", 16, seed=5, num_workers=2, device="cpu"))
first = next(iter(torch_loader(root, "train", 16, num_workers=2)))
kinds = {k: type(v).__name__ for k, v in first.items()}
floats = values(torch_loader(shapes, "train", 8, shuffle=False, deterministic=True), 1)
pixels = values(torch_loader(shapes, "train", 8, shuffle=False, deterministic=True,
                             num_workers=2, image_dtype="uint8"), 1)
count = sum(len(b["label"]) for b in floats)
want = np.rint(np.concatenate([np.array(b["image"]) for b in floats]) * 255).reshape(count, -1)
got = np.concatenate([np.array(b["image"]) for b in pixels]).reshape(count, -1)
gap = float(max(np.abs(want - g).max(axis=1).min() for g in got))  # each to its nearest
same_tags = tags(torch_loader(root, "train", 16)) == tags(
    torch_loader(root, "train", 16, num_workers=2)
)
print(json.dumps({"plain": plain, "on_cpu": on_cpu, "kinds": kinds, "gap": gap, "tags": same_tags,
                  "images": sorted(np.array(p["image"]).dtype.str for p in pixels[:1])}))
"""


@pytest.fixture(scope="module")
def packed(dataset, shapes) -> dict:
    proc = run_code(PACKED, str(dataset.root), str(shapes))
    return json.loads(proc.stdout.splitlines()[-1])


def test_batches_from_workers_cross_packed_and_come_whole(packed, dataset):
    assert packed["plain"] == packed["on_cpu"]  # `device`: the same batches, moved
    assert packed["kinds"]["tags"] == "list" and packed["kinds"]["id"] == "Tensor"
    epoch = len(packed["plain"]) // 2
    ids = sorted(i for b in packed["plain"][:epoch] for i in b["id"])
    assert ids == sorted(r["id"] for r in dataset.rows["train"])
    assert packed["tags"]  # bytes lists cross as they are


def test_uint8_images_from_workers_are_the_pixels(packed):
    assert packed["gap"] <= 1


def test_a_worker_reuses_a_block_only_once_its_batch_is_released():
    from trainer.readers.transport import RING, Blocks, Crossing

    crossing = Crossing(1)
    blocks = Blocks(crossing, 0)
    first = [blocks.take(100) for _ in range(RING)]  # numbers 1 .. RING, every block new
    assert [n for n, *_ in first] == list(range(1, RING + 1))
    assert all(new and block.is_shared() for *_, block, new in first)
    assert len({b.data_ptr() for *_, b, _ in first}) == RING
    number, slot, block, new = blocks.take(100)  # slot of batch 1, not released yet: a new block
    assert number == RING + 1 and new and slot == first[0][1]
    assert block.data_ptr() not in {b.data_ptr() for *_, b, _ in first}
    crossing.released[0] = RING + 1  # the training process copied out every batch so far
    number, slot, block, new = blocks.take(100)  # slot of batch 2: reused, crosses as numbers
    assert not new and block.data_ptr() == first[1][2].data_ptr()
    assert blocks.take(10_000)[2].numel() == 10_000  # too small to reuse: a new one


def test_a_block_crosses_once_and_each_batch_is_copied_out_of_it():
    import pickle
    from multiprocessing.reduction import ForkingPickler

    import numpy as np

    from trainer.readers.transport import RING, Blocks, Crossing, Packed

    crossing = Crossing(1)
    blocks = Blocks(crossing, 0)  # the worker's side (here in the same process)
    got, sizes = [], []
    for i in range(3 * RING):
        batch = {"x": np.full(4, i, np.int64), "y": np.arange(3, dtype=np.float32) + i}
        message = bytes(ForkingPickler.dumps(Packed.of(batch, blocks)))  # as a worker sends it
        sizes.append(len(message))
        received = pickle.loads(message)  # as the training process receives it
        copied = received.copied()
        assert copied.token is None and crossing.released[0] == i + 1
        got.append(copied.unpacked(copied.block))
    assert len(crossing.held) == RING  # the ring's blocks crossed once each, then were reused
    assert max(sizes[RING:]) < min(sizes[:RING])  # a reused block is not sent again
    assert [b["x"].tolist() for b in got] == [[i] * 4 for i in range(3 * RING)]
    assert [b["y"].tolist() for b in got] == [[i, i + 1.0, i + 2.0] for i in range(3 * RING)]


def test_a_batch_finds_its_block_as_it_arrives():
    """A batch held back (the DataLoader keeps one that arrives before its turn) still reads the
    block it was written into, even after a later batch brought a new block for its slot."""
    import pickle
    from multiprocessing.reduction import ForkingPickler

    import numpy as np

    from trainer.readers.transport import RING, Blocks, Crossing, Packed

    crossing = Crossing(1)
    blocks = Blocks(crossing, 0)
    send = [ForkingPickler.dumps(Packed.of({"x": np.full(2, i)}, blocks)) for i in range(RING)]
    for message in send:
        pickle.loads(message).copied()  # all released: the ring is reused from here on
    early = pickle.loads(ForkingPickler.dumps(Packed.of({"x": np.full(2, 100)}, blocks)))
    late = [Packed.of({"x": np.full(2, 200 + i)}, blocks) for i in range(RING)]  # not released
    assert late[-1].new and late[-1].slot == early.slot  # the slot's block is replaced
    pickle.loads(ForkingPickler.dumps(late[-1]))
    copied = early.copied()
    assert copied.unpacked(copied.block)["x"].tolist() == [100, 100]


def test_workers_use_threads_only_where_cores_are_free():
    from trainer.readers.pytorch import worker_threads

    assert worker_threads(1, cpus=16) == (True, 2)  # read, and decode in two threads
    assert worker_threads(8, cpus=16) == (True, 2)  # 1.875 cores each
    assert worker_threads(12, cpus=16) == (True, 2)  # 1.25
    assert worker_threads(13, cpus=16) == (False, 1)  # 1.15: all on one thread
    assert worker_threads(16, cpus=16) == (False, 1)
    assert worker_threads(1, cpus=2) == (False, 1)  # the other core is the training process's
    assert worker_threads(1, cpus=4) == (True, 2)
    assert worker_threads(0, cpus=2) == (True, 1)  # the training process reads ahead
    assert worker_threads(0, cpus=16) == (True, 2)
