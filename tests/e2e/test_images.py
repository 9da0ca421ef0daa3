"""End to end: a folder tree of images → `shardflow etl` → shards read back with TensorFlow.

The tree holds three class folders of PNG, JPEG and GIF images in several modes, a nested
folder, an undecodable JPEG (truncated), a text file named `.png`, and files that are not inputs
(a README, dot files, a notebook checkpoint folder). The images are decoded back with
`tf.io.decode_image` and compared with the pixels the test wrote (or, for resized images, with
Pillow's own resize of the source files); labels with the folders; rejected records and the
ledger with the manifest.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipelines import etl
from tests import readback

pytestmark = pytest.mark.slow

UNDECODABLE = "image: not a decodable image"
# JPEG is lossy, and tf.io.decode_image decodes it with a fast, inexact IDCT: pixels of JPEG
# images are compared by their mean absolute difference (measured here: 2.3 and 4.4 levels).
JPEG_MEAN_ERROR = 6


def _noise(shape, seed) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _smooth(height, width) -> np.ndarray:
    """A gradient: JPEG keeps it within a few levels (noise it would not)."""
    y, x = np.mgrid[:height, :width]
    return np.stack([x * 255 // width, y * 255 // height, (x + y) % 256], -1).astype(np.uint8)


def _encoded(img: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **params)
    return out.getvalue()


def _palette() -> tuple[bytes, np.ndarray]:
    """A palette PNG whose index 0 is transparent, and its RGBA pixels."""
    img = Image.fromarray(_noise((9, 7, 3), 4)).convert("P")
    rgba = np.asarray(img.convert("RGBA")).copy()
    rgba[np.asarray(img) == 0, 3] = 0
    return _encoded(img, "PNG", transparency=0), rgba


def _gif() -> tuple[bytes, np.ndarray]:
    img = Image.fromarray(_noise((6, 11, 3), 5)).convert("P")  # GIF is a palette format
    return _encoded(img, "GIF"), np.asarray(img.convert("RGB"))


# relative path → (file bytes, expected pixels as tf.io.decode_image gives them, exact?)
def _images() -> dict[str, tuple[bytes, np.ndarray, bool]]:
    rgb, rgba, gray = _noise((10, 12, 3), 1), _noise((8, 5, 4), 2), _noise((7, 9), 3)
    smooth, smooth_gray = _smooth(16, 24), _smooth(12, 8)[..., 0]
    palette, palette_rgba = _palette()
    gif, gif_rgb = _gif()
    return {
        "cat/c1.png": (_encoded(Image.fromarray(rgb), "PNG"), rgb, True),
        "cat/c2.jpg": (_encoded(Image.fromarray(smooth), "JPEG", quality=95), smooth, False),
        "cat/c3.png": (_encoded(Image.fromarray(rgba), "PNG"), rgba, True),
        "dog/d1.png": (_encoded(Image.fromarray(gray), "PNG"), gray[..., None], True),
        "dog/d2.jpeg": (
            _encoded(Image.fromarray(smooth_gray), "JPEG", quality=95),
            smooth_gray[..., None],
            False,
        ),
        "dog/d3.png": (palette, palette_rgba, True),
        "bird/b1.gif": (gif, gif_rgb, True),
        "bird/B2.PNG": (_encoded(Image.fromarray(rgb[:4]), "PNG"), rgb[:4], True),
        "bird/2024/b3.png": (_encoded(Image.fromarray(rgb[:, :3]), "PNG"), rgb[:, :3], True),
    }


IMAGES = _images()
JPEG = IMAGES["cat/c2.jpg"][0]
BAD = {"cat/broken.jpg": JPEG[: len(JPEG) // 2], "dog/notes.png": b"not an image\n"}
NOT_INPUTS = {
    "README.txt": b"three kinds of pets\n",
    ".DS_Store": b"\0\0\0\1Bud1",
    "cat/.c1.png.swp": b"swap",
    ".ipynb_checkpoints/c1-checkpoint.png": IMAGES["cat/c1.png"][0],
}
FEATURES = """
features:
  image:    {type: image}
  label:    {type: string, values: [bird, cat, dog]}
  height:   {type: int}
  width:    {type: int}
  channels: {type: int}
  filename: {type: string}
label: label
splits: {train: 0.5, eval: 0.5}
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("images")
    for name, data in {**{k: v[0] for k, v in IMAGES.items()}, **BAD, **NOT_INPUTS}.items():
        path = folder / "photos" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


def run_etl(
    folder: Path, name: str, options: str, path: str = "photos", allow: str = "[]"
) -> tuple[Path, dict]:
    """Runs the ETL on `path` with the source `options`; returns the output and its manifest."""
    config = folder / f"{name}.yaml"
    config.write_text(
        f"name: {name}\n"
        f"sources: [{{name: photos, format: images, path: {path}, options: {options}}}]\n"
        f"{FEATURES}output: {{path: {name}, allow: {allow}}}\n"
    )
    assert etl.run(["--config", str(config)]) == 0
    out = folder / name
    return out, json.loads((out / "manifest.json").read_text())


def read_records(out: Path, manifest: dict) -> dict[str, dict]:
    """filename → the example's values, decoded with TensorFlow."""
    import tensorflow as tf

    records = {}
    for feature in readback.features(out, manifest):
        assert sorted(feature) == sorted(
            ["image", "label", "height", "width", "channels", "filename"]
        )
        (image,) = feature["image"].bytes_list.value
        values = {
            "image": image,
            "pixels": tf.io.decode_image(image, expand_animations=False).numpy(),
            "label": feature["label"].bytes_list.value[0].decode(),
            "shape": tuple(
                feature[name].int64_list.value[0] for name in ("height", "width", "channels")
            ),
        }
        records[feature["filename"].bytes_list.value[0].decode()] = values
    return records


def rejected_records(out: Path, manifest: dict) -> list[dict]:
    rows = []
    for f in manifest["rejected"]["files"]:
        rows += [json.loads(line) for line in (out / f["path"]).read_text().splitlines()]
    return rows


def _check_ledger(manifest: dict, read: int) -> None:
    written = sum(s["records"] for s in manifest["splits"].values())
    assert manifest["sources"] == {
        "photos": {"format": "images", "records": read, "ignored_fields": {}}
    }
    assert read == written + manifest["rejected"]["records"] + manifest["duplicates"]


def test_every_image_is_written_with_its_label_size_and_pixels(tree):
    out, manifest = run_etl(tree, "pets", "{label_from: parent_dir}")
    records = read_records(out, manifest)
    written = sorted(set(IMAGES) - {"bird/2024/b3.png"})  # its label is 2024
    assert sorted(records) == written
    for name in written:
        data, expected, exact = IMAGES[name]
        record = records[name]
        assert record["image"] == data  # the file's own bytes, unchanged
        assert record["label"] == name.split("/")[0]
        assert record["shape"] == record["pixels"].shape == expected.shape, name
        difference = np.abs(record["pixels"].astype(int) - expected)
        assert difference.max() == 0 if exact else difference.mean() < JPEG_MEAN_ERROR, name

    _check_ledger(manifest, read=len(IMAGES) + len(BAD))
    assert manifest["rejected"]["reasons"] == {
        UNDECODABLE: 2,
        "label: not one of the allowed values [bird, cat, dog]": 1,
    }
    rejected = {json.loads(r["record"])["filename"]: r for r in rejected_records(out, manifest)}
    assert sorted(rejected) == ["bird/2024/b3.png", "cat/broken.jpg", "dog/notes.png"]
    for name, r in rejected.items():
        assert (r["source"], r["location"]) == ("photos", f"{tree / 'photos' / name}:1")
    assert rejected["cat/broken.jpg"]["reason"] == UNDECODABLE
    assert json.loads(rejected["cat/broken.jpg"]["record"]) == {
        "filename": "cat/broken.jpg",
        "label": "cat",
        "image": f"<{len(BAD['cat/broken.jpg'])} bytes>",
    }
    b3 = IMAGES["bird/2024/b3.png"][0]
    assert json.loads(rejected["bird/2024/b3.png"]["record"]) == {
        "filename": "bird/2024/b3.png",
        "label": "2024",
        "image": f"<{len(b3)} bytes>",
        "height": 10,
        "width": 3,
        "channels": 3,
    }


def _pillow_resized(data: bytes, height: int, width: int) -> np.ndarray:
    """The expected pixels of a resized image, computed with Pillow from the source file."""
    img = Image.open(io.BytesIO(data))
    if img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    resized = np.asarray(img.resize((width, height), Image.Resampling.BILINEAR))
    return resized if resized.ndim == 3 else resized[..., None]


def test_resized_png_images_labelled_by_regex_are_deterministic(tree):
    options = "{label_regex: '^(?P<label>[a-z]+)/', resize: [6, 4], encode: png}"
    out, manifest = run_etl(tree, "small", options)
    records = read_records(out, manifest)
    assert sorted(records) == sorted(IMAGES)  # b3 is a bird now: the top folder is the label
    for name, (data, _, _) in IMAGES.items():
        record = records[name]
        assert record["label"] == name.split("/")[0]
        assert Image.open(io.BytesIO(record["image"])).format == "PNG"
        assert record["shape"] == record["pixels"].shape
        assert np.array_equal(record["pixels"], _pillow_resized(data, 6, 4)), name
    _check_ledger(manifest, read=len(IMAGES) + len(BAD))
    assert manifest["rejected"]["reasons"] == {UNDECODABLE: 2}

    again, manifest_again = run_etl(tree, "small-again", options)
    assert manifest_again["splits"] == manifest["splits"]
    for split in manifest["splits"].values():
        for f in split["files"]:
            assert (out / f["path"]).read_bytes() == (again / f["path"]).read_bytes()


def test_a_folder_holding_only_subfolders_re_encoded_as_jpeg(tmp_path):
    smooth = _smooth(12, 20)
    for name in ("2023/cat/1.png", "2024/dog/2.png"):
        (tmp_path / "shots" / name).parent.mkdir(parents=True)
        (tmp_path / "shots" / name).write_bytes(_encoded(Image.fromarray(smooth), "PNG"))
    options = "{encode: jpeg, quality: 95, label_regex: '/(cat|dog)/'}"
    # two images in two splits: one split may be empty
    out, manifest = run_etl(tmp_path, "jpegs", options, path="shots", allow="[empty_split]")
    records = read_records(out, manifest)
    assert sorted(records) == ["2023/cat/1.png", "2024/dog/2.png"]
    for name, record in records.items():
        assert record["label"] == name.split("/")[1]
        assert Image.open(io.BytesIO(record["image"])).format == "JPEG"
        assert record["shape"] == record["pixels"].shape == (12, 20, 3)
        assert np.abs(record["pixels"].astype(int) - smooth).mean() < JPEG_MEAN_ERROR
    _check_ledger(manifest, read=2)
