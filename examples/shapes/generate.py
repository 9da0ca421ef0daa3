"""Writes the shapes sample: an image folder of three classes for `format: images`.

    python examples/shapes/generate.py [FOLDER] [--per-class N]

FOLDER/pictures/{blue,green,red}/NNN.png: 24×24 PNGs, each a square of its class's colour at a
random place and size on a grey, noisy background (seeded: the same files on every run). Then:

    shardflow etl --config examples/shapes/shapes.yaml --output out/shapes
    shardflow train --data out/shapes --model-dir model/shapes
    shardflow train --data out/shapes --model-dir model/shapes-cnn --model-module \\
        examples/shapes/model.py
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np
from PIL import Image

COLOURS = {"blue": (40, 60, 220), "green": (40, 200, 60), "red": (220, 50, 40)}


def picture(rng: np.random.Generator, colour: tuple[int, int, int]) -> bytes:
    """One 24×24 PNG: a square of `colour` on grey noise."""
    pixels = rng.integers(90, 150, (24, 24, 3)).astype(np.uint8)
    size = int(rng.integers(6, 13))
    top, left = rng.integers(0, 24 - size, 2)
    pixels[top : top + size, left : left + size] = colour
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def generate(folder: Path, per_class: int = 70, seed: int = 7) -> Path:
    """Writes FOLDER/pictures/CLASS/NNN.png; returns FOLDER/pictures."""
    rng = np.random.default_rng(seed)
    for label, colour in COLOURS.items():
        target = folder / "pictures" / label
        target.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            (target / f"{i:03d}.png").write_bytes(picture(rng, colour))
    return folder / "pictures"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=str(Path(__file__).parent))
    parser.add_argument("--per-class", type=int, default=70)
    args = parser.parse_args()
    print(f"wrote {generate(Path(args.folder), args.per_class)}")


if __name__ == "__main__":
    main()
