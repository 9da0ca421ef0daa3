"""A PyTorch training loop on a shardflow dataset with images: the shapes sample.

    python examples/shapes/generate.py               # writes examples/shapes/pictures/
    shardflow etl --config examples/shapes/shapes.yaml --output out/shapes
    python examples/torch/train.py out/shapes [--steps 300] [--batch-size 32] [--workers 2]

`trainer.readers.torch_loader` reads the dataset without TensorFlow: each batch is a dict of
tensors, the images already decoded and resized to the manifest's `image_size` (float32 in
[0, 1], [batch, height, width, channels]) and the label its class index. A small CNN learns
the class for STEPS steps (epochs follow one another: each pass over the loader is the next
one), then is evaluated on eval. The last line printed is a JSON summary.

Under DistributedDataParallel, give each rank `rank=dist.get_rank(),
world_size=dist.get_world_size()`: every rank reads its own shards and takes as many steps.
A resumed run passes the steps it has done as `start_step` and gets the batches that follow.
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn

from trainer.readers import torch_loader


def image_feature(features: dict) -> str:
    """The name of the first image input of a batch ([batch, height, width, channels])."""
    for name, value in features.items():
        if isinstance(value, torch.Tensor) and value.dim() == 4:
            return name
    raise SystemExit("this example needs an image feature with an image_size")


class SmallCnn(nn.Module):
    def __init__(self, channels: int, classes: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, classes),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.body(images.permute(0, 3, 1, 2))  # NHWC (as read) to NCHW


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)

    loader = torch_loader(
        args.data, "train", args.batch_size, seed=args.seed, num_workers=args.workers
    )
    label = loader.info.label
    classes = loader.info.classes
    if label is None or classes is None:
        raise SystemExit("this example needs a classification label")
    first = next(iter(loader))
    image = image_feature(first)
    model = SmallCnn(first[image].shape[-1], len(classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()

    losses: list[float] = []
    while len(losses) < args.steps:
        for batch in loader:  # one epoch
            optimizer.zero_grad()
            loss = loss_fn(model(batch[image]), batch[label])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) % 50 == 0:
                print(f"step {len(losses)}: loss {losses[-1]:.4f}")
            if len(losses) == args.steps:
                break

    model.eval()
    right = total = 0
    with torch.no_grad():
        for batch in torch_loader(args.data, "eval", 64, shuffle=False, deterministic=True):
            right += int((model(batch[image]).argmax(1) == batch[label]).sum())
            total += len(batch[label])
    summary = {
        "steps": len(losses),
        "first_loss": losses[0],
        "last_loss": sum(losses[-10:]) / len(losses[-10:]),
        "eval_accuracy": right / max(total, 1),
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
