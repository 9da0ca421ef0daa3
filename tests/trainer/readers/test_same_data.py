"""The readers give the records of the tf.data path, with the same values: the raw arrays of
`trainer.keras.features.dense_inputs`, the label as `label_encoder` encodes it, the images as
`trainer.keras.preprocess.DecodeImages` decodes them; in the same order when deterministic."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tensorflow as tf

from trainer.dataset.manifest import load_manifest
from trainer.keras.features import dense_inputs, label_encoder, parse_spec
from trainer.keras.input import input_batches
from trainer.keras.preprocess import DecodeImages
from trainer.readers import jax_batches, torch_loader
from trainer.readers.stream import Reader

BATCH = 32


def _tf_batches(root: str, split: str, **options) -> list[dict[str, np.ndarray]]:
    manifest = load_manifest(root)
    ds = input_batches(
        manifest.split_files(split),
        parse_spec(manifest),
        manifest.compression_type,
        BATCH,
        preprocess=functools.partial(dense_inputs, features=manifest.features),
        **options,
    )
    return [{k: v.numpy() for k, v in batch.items()} for batch in ds]


def _joined(batches: list[dict], key: str) -> list:
    """A key's rows over all batches (variable-length rows without their padding)."""
    rows = []
    for batch in batches:
        values = batch[key] if isinstance(batch[key], list) else np.asarray(batch[key]).tolist()
        rows += [[v for v in row if v != b""] if isinstance(row, list) else row for row in values]
    return rows


def _by_id(batches: list[dict], keys) -> dict:
    ids = _joined(batches, "id")
    return {k: [row for _, row in sorted(zip(ids, _joined(batches, k)))] for k in keys}


@pytest.fixture(scope="module")
def tf_order(dataset) -> list[dict]:
    """The tf.data path's batches in shard order (one file at a time)."""
    return _tf_batches(
        str(dataset.root), "train", shuffle=False, deterministic=True, cycle_length=1
    )


def test_the_core_gives_the_arrays_of_the_tf_data_path_in_shard_order(dataset, tf_order):
    reader = Reader(
        str(dataset.root), "train", BATCH, shuffle=False, deterministic=True, encode=False
    )
    ours = list(reader.batches(reader.layout(), 0))
    assert len(ours) == len(tf_order)
    for mine, theirs in zip(ours, tf_order):
        assert set(theirs) <= set(mine)
        for key, value in theirs.items():
            assert mine[key].dtype == value.dtype or value.dtype == object, key
            np.testing.assert_array_equal(mine[key], value, err_msg=key)
    assert _joined(ours, "id") == [r["id"] for r in dataset.rows["train"]]


def test_torch_and_jax_give_the_same_records_in_the_same_order(dataset, tf_order):
    manifest = load_manifest(str(dataset.root))
    species = manifest.features["species"]
    loader = torch_loader(str(dataset.root), "train", BATCH, shuffle=False, deterministic=True)
    batches = jax_batches(str(dataset.root), "train", BATCH, shuffle=False, deterministic=True)
    for framework in (list(loader), list(batches)):
        assert len(framework) == len(tf_order)
        for mine, theirs in zip(framework, tf_order):
            for key in ("id", "flipper_mm", "bill_length_mm", "body_mass_g", "embedding", "year"):
                np.testing.assert_array_equal(np.asarray(mine[key]), theirs[key], err_msg=key)
            np.testing.assert_array_equal(
                np.asarray(mine["body_mass_g__present"]), theirs["body_mass_g__present"]
            )
            labels = label_encoder(species)(tf.constant(theirs["species"])).numpy()
            np.testing.assert_array_equal(np.asarray(mine["species"]), labels)
            islands = [
                manifest.features["island"].values.index(v.decode()) + 1 for v in theirs["island"]
            ]
            np.testing.assert_array_equal(np.asarray(mine["island"]), islands)
            assert _joined([mine], "tags") == _joined([theirs], "tags")


def test_shuffled_readers_give_the_same_records_as_tf_data(dataset):
    keys = ("flipper_mm", "embedding", "body_mass_g", "sex", "tags", "photo")
    theirs = _by_id(_tf_batches(str(dataset.root), "train", shuffle=True, seed=3), keys)
    reader = Reader(str(dataset.root), "train", BATCH, seed=3, encode=False)
    core = list(reader.batches(reader.layout(), 1))
    assert _joined(core, "id") != [r["id"] for r in dataset.rows["train"]]  # shuffled
    assert _by_id(core, keys) == theirs
    torch_keys = ("flipper_mm", "embedding", "body_mass_g", "sex", "tags")
    from_torch = _by_id(list(torch_loader(str(dataset.root), "train", BATCH, seed=3)), torch_keys)
    assert from_torch == {k: theirs[k] for k in torch_keys}
    jax_keys = ("flipper_mm", "embedding", "body_mass_g")
    batches = jax_batches(str(dataset.root), "train", 40, seed=3)
    one_epoch = [next(batches) for _ in range(6)]  # 240 records
    assert _by_id(one_epoch, jax_keys) == {k: theirs[k] for k in jax_keys}


def test_images_are_decoded_and_resized_as_the_tf_data_path_does(shapes):
    raw = Reader(str(shapes), "train", 64, shuffle=False, deterministic=True, decode_images=False)
    decoded = Reader(str(shapes), "train", 64, shuffle=False, deterministic=True)
    for encoded, images in zip(raw.batches(raw.layout(), 0), decoded.batches(decoded.layout(), 0)):
        want = DecodeImages(16, 16, 3)(tf.constant(encoded["image"].tolist())).numpy()
        assert images["image"].shape == want.shape and images["image"].dtype == np.float32
        np.testing.assert_allclose(images["image"], want, rtol=0, atol=1e-6)
    assert decoded.info.classes == ("blue", "green", "red")  # from the statistics


def test_a_string_label_gets_its_classes_from_the_statistics(shapes):
    batch = next(iter(torch_loader(str(shapes), "eval", 8, shuffle=False, deterministic=True)))
    labels = Reader(str(shapes), "eval", 8, shuffle=False, deterministic=True, encode=False)
    names = next(labels.batches(labels.layout(), 0))["label"]
    classes = ["blue", "green", "red"]
    assert batch["label"].tolist() == [classes.index(n.decode()) for n in names]


def test_uint8_images_are_the_pixels_before_the_division(shapes):
    floats = Reader(str(shapes), "train", 64, shuffle=False, deterministic=True)
    pixels = Reader(
        str(shapes), "train", 64, shuffle=False, deterministic=True, image_dtype="uint8"
    )
    for f, p in zip(floats.batches(floats.layout(), 0), pixels.batches(pixels.layout(), 0)):
        assert p["image"].dtype == np.uint8 and p["image"].shape == f["image"].shape
        # resized: rounded to the nearest integer (a float rounded at .5 may land either side)
        gap = np.abs(p["image"].astype(np.int16) - np.rint(f["image"] * 255).astype(np.int16))
        assert gap.max() <= 1 and (gap == 0).mean() > 0.99
        np.testing.assert_array_equal(p["label"], f["label"])


def test_images_decoded_into_a_given_array_fill_a_missing_one_with_zeros(shapes):
    from trainer.readers.images import decode_images

    raw = Reader(str(shapes), "eval", 4, shuffle=False, deterministic=True, decode_images=False)
    encoded = next(raw.batches(raw.layout(), 0))["image"].copy()
    encoded[1] = b""
    out = np.full((4, 16, 16, 3), 7, np.uint8)
    assert decode_images(encoded, (16, 16, 3), "uint8", out=out) is out
    assert not out[1].any() and out[0].any()
    np.testing.assert_array_equal(out, decode_images(encoded, (16, 16, 3), "uint8"))
    with pytest.raises(ValueError, match="not float32"):
        decode_images(encoded, (16, 16, 3), "float32", out=out)
    with pytest.raises(ValueError, match="image dtype 'int8'"):
        decode_images(encoded, (16, 16, 3), "int8")


@pytest.mark.parametrize("channels", [1, 3])
def test_jpegs_decode_to_the_pixels_tensorflow_decodes(channels):
    """JPEGs decode to the very pixels DecodeImages decodes (tf.io.decode_jpeg's fast DCT, not
    Pillow's accurate one, which differs by up to 3 levels): color and gray, 4:2:0 and 4:4:4,
    of the size asked for (decoded straight into the batch) and resized; a file that only
    starts like a JPEG is named as an error."""
    import io

    from PIL import Image

    from trainer.readers.images import ImageError, decode_images

    rng = np.random.default_rng(channels)
    encoded = []
    for side, subsampling, mode in ((24, 2, "RGB"), (24, 0, "RGB"), (37, 2, "RGB"), (24, 0, "L")):
        smooth = np.cumsum(rng.integers(0, 9, (side, side, 3)), axis=1) % 256
        image = Image.fromarray(smooth.astype(np.uint8)).convert(mode)
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=85, subsampling=subsampling)
        encoded.append(buffer.getvalue())
    want = DecodeImages(24, 24, channels)(tf.constant(encoded)).numpy()
    batch = np.array(encoded, dtype=object)
    floats = decode_images(batch, (24, 24, channels))
    np.testing.assert_allclose(floats, want, rtol=0, atol=1e-6)
    pixels = decode_images(batch, (24, 24, channels), "uint8")
    exact = [0, 1, 3]  # not resized: the decoded pixels themselves
    np.testing.assert_array_equal(pixels[exact], np.rint(want[exact] * 255).astype(np.uint8))
    assert np.abs(pixels[2] - want[2] * 255).max() <= 0.5 + 1e-3  # resized, then rounded
    broken = np.array([encoded[0][:3] + b"not a jpeg"], dtype=object)
    with pytest.raises(ImageError, match="cannot decode an image"):
        decode_images(broken, (24, 24, channels), "uint8")
