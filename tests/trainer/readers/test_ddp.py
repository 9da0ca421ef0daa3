"""Two ranks train one model under DistributedDataParallel (gloo, on CPU), each reading its own
shards through `torch_loader`: every record once, no record on both ranks, the same steps."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.trainer.datasets import REPO

pytest.importorskip("torch")

RANK = """
import json, sys
import torch
import torch.distributed as dist
from trainer.readers import torch_loader

root, rank = sys.argv[1], int(sys.argv[2])
dist.init_process_group("gloo", rank=rank, world_size=2)
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch_loader(root, "train", 16, seed=1, num_workers=1, rank=rank, world_size=2)
ids = []
for batch in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(batch["embedding"]), batch["species"])
    loss.backward()  # all-reduces the gradients: a rank with an extra step would hang here
    optimizer.step()
    ids.append(batch["id"].tolist())
weights = model.module.weight.detach().flatten().tolist()
dist.destroy_process_group()
print(json.dumps({"ids": ids, "weights": weights}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ranks_train_together_on_their_own_records(dataset):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               PYTHONPATH=str(REPO), CUDA_VISIBLE_DEVICES="")  # fmt: skip
    code = textwrap.dedent(RANK)
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(dataset.root), str(rank)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for rank in range(2)
    ]
    results = []
    for proc in ranks:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.splitlines()[-1]))
    first, second = (sum(r["ids"], []) for r in results)
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(r["id"] for r in dataset.rows["train"])
    assert len(results[0]["ids"]) == len(results[1]["ids"]) > 0
    assert results[0]["weights"] == results[1]["weights"]  # one model, kept in step
