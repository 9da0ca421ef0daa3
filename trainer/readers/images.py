"""Encoded images decoded and resized on the host, by the rule of the tf.data path.

The tf.data path (`trainer.keras.preprocess.DecodeImages`) decodes an image to `channels` channels,
resizes it bilinearly (`tf.image.resize`: half-pixel centers, no antialiasing) to the feature's
`image_size` in float32 and divides by 255; a missing image ("") is all zeros. Here a JPEG
is decoded by libjpeg-turbo through simplejpeg with tf.io.decode_jpeg's defaults (the fast
integer DCT, smooth chroma upsampling), so to the very pixels TensorFlow decodes (Pillow's
accurate DCT differs by up to 3 levels); one already of the size asked for as uint8 goes
straight into the batch. Any other image (and a JPEG simplejpeg refuses) is decoded by
Pillow. numpy resizes with the same sampling points and interpolation order, so both paths
give the same pixels (to float32 rounding).
"""

from __future__ import annotations

import functools
import io

import numpy as np
import simplejpeg
from PIL import Image, UnidentifiedImageError

_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
_JPEG = b"\xff\xd8\xff"  # how a JPEG file starts
_JPEG_SPACES = {1: "GRAY", 3: "RGB"}  # simplejpeg's names for the channels it decodes to


class ImageError(ValueError):
    """An image that cannot be decoded."""


DTYPES = ("float32", "uint8")


def decode_images(
    encoded: np.ndarray,
    size: tuple[int, int, int],
    dtype: str = "float32",
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Encoded images [batch] (bytes; b"" for a missing one) to [batch, height, width,
    channels]: float32 in [0, 1], or with dtype "uint8" the pixels in [0, 255] before that
    division (a resized image's rounded to the nearest integer), a quarter of the bytes to move
    for a model that divides on its device. With `out` (of that shape and dtype), into it."""
    if dtype not in DTYPES:
        raise ValueError(f"image dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    height, width, channels = size
    shape = (len(encoded), height, width, channels)
    if out is None:
        out = np.zeros(shape, dtype)
    elif out.shape != shape or out.dtype != np.dtype(dtype):
        raise ValueError(f"out is {out.dtype}{list(out.shape)}, not {dtype}{list(shape)}")
    scale = np.float32(255.0)
    for i, data in enumerate(encoded):
        if not data:
            out[i] = 0
            continue
        place = out[i]
        pixels = decode(data, channels, place if dtype == "uint8" else None)
        if np.may_share_memory(pixels, place):
            continue  # decoded straight into the batch
        if pixels.shape[:2] != (height, width):
            pixels = resize(pixels, height, width)
            if dtype == "uint8":
                pixels = np.clip(np.rint(pixels), 0, 255, out=pixels)
        if dtype == "uint8":
            place[...] = pixels
        else:
            np.divide(pixels, scale, out=place)
    return out


def decode(data: bytes, channels: int, out: np.ndarray | None = None) -> np.ndarray:
    """One encoded image (PNG, JPEG, GIF, BMP; a GIF's first frame) as uint8 [h, w, channels];
    a JPEG of out's height and width decoded into `out`."""
    pixels = _jpeg(data, channels, out)
    if pixels is not None:
        return pixels
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.seek(0)
            mode = _MODES[channels]
            pixels = np.asarray(image if image.mode == mode else image.convert(mode))
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise ImageError(f"cannot decode an image ({e})") from None
    return pixels.reshape(*pixels.shape[:2], channels)


def _jpeg(data: bytes, channels: int, out: np.ndarray | None = None) -> np.ndarray | None:
    """A JPEG decoded by libjpeg-turbo (into `out` when it is of the image's height and
    width), or None: not a JPEG it decodes to these channels (Pillow then decodes it, or
    names the problem)."""
    space = _JPEG_SPACES.get(channels)
    if space is None or not data.startswith(_JPEG):
        return None
    try:
        if out is not None and simplejpeg.decode_jpeg_header(data)[:2] != out.shape[:2]:
            out = None
        return simplejpeg.decode_jpeg(data, colorspace=space, fastdct=True, buffer=out)
    except ValueError:
        return None


def resize(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """[h, w, c] resized bilinearly to float32 [height, width, c] as tf.image.resize does:
    sample i of an axis of n values reads (i + 0.5) * n / size - 0.5, from its floor (at least
    0) and ceiling (at most n - 1); rows are interpolated along x, then along y (the same
    size: the same pixels, as floats)."""
    y_low, y_high, y_lerp = _weights(pixels.shape[0], height)
    x_low, x_high, x_lerp = _weights(pixels.shape[1], width)
    left = pixels[:, x_low].astype(np.float32)
    across = pixels[:, x_high].astype(np.float32)
    across -= left
    across *= x_lerp[None, :, None]
    across += left  # every row along x: the rows y reads are among them
    top = across[y_low]
    out = across[y_high]
    out -= top
    out *= y_lerp[:, None, None]
    out += top
    return out


@functools.cache
def _weights(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    scale = np.float32(size_in) / np.float32(size_out)
    at = (np.arange(size_out, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    floor = np.floor(at)
    low = np.maximum(floor, 0).astype(np.int64)
    high = np.minimum(np.ceil(at), size_in - 1).astype(np.int64)
    return low, high, (at - floor).astype(np.float32)
