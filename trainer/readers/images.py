"""Encoded images decoded and resized on the host, by the rule of the tf.data path.

The tf.data path (`trainer.preprocess.DecodeImages`) decodes an image to `channels` channels,
resizes it bilinearly (`tf.image.resize`: half-pixel centers, no antialiasing) to the feature's
`image_size` in float32 and divides by 255; a missing image ("") is all zeros. Here Pillow
decodes and numpy resizes with the same sampling points and interpolation order, so both paths
give the same pixels (to float32 rounding).
"""

from __future__ import annotations

import functools
import io

import numpy as np
from PIL import Image, UnidentifiedImageError

_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


class ImageError(ValueError):
    """An image that cannot be decoded."""


def decode_images(encoded: np.ndarray, size: tuple[int, int, int]) -> np.ndarray:
    """Encoded images [batch] (bytes; b"" for a missing one) to float32
    [batch, height, width, channels] in [0, 1]."""
    height, width, channels = size
    out = np.zeros((len(encoded), height, width, channels), np.float32)
    for i, data in enumerate(encoded):
        if data:
            out[i] = resize(decode(data, channels), height, width) / np.float32(255.0)
    return out


def decode(data: bytes, channels: int) -> np.ndarray:
    """One encoded image (PNG, JPEG, GIF, BMP; a GIF's first frame) as uint8 [h, w, channels]."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.seek(0)
            pixels = np.asarray(image.convert(_MODES[channels]))
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise ImageError(f"cannot decode an image ({e})") from None
    return pixels.reshape(*pixels.shape[:2], channels)


def resize(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """[h, w, c] resized bilinearly to float32 [height, width, c] as tf.image.resize does:
    sample i of an axis of n values reads (i + 0.5) * n / size - 0.5, from its floor (at least
    0) and ceiling (at most n - 1); rows are interpolated along x, then along y."""
    image = pixels.astype(np.float32)
    y_low, y_high, y_lerp = _weights(image.shape[0], height)
    x_low, x_high, x_lerp = _weights(image.shape[1], width)
    x_lerp = x_lerp[None, :, None]
    top_left, top_right = image[y_low][:, x_low], image[y_low][:, x_high]
    bottom_left, bottom_right = image[y_high][:, x_low], image[y_high][:, x_high]
    top = top_left + (top_right - top_left) * x_lerp
    bottom = bottom_left + (bottom_right - bottom_left) * x_lerp
    return top + (bottom - top) * y_lerp[:, None, None]


@functools.cache
def _weights(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    scale = np.float32(size_in) / np.float32(size_out)
    at = (np.arange(size_out, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    floor = np.floor(at)
    low = np.maximum(floor, 0).astype(np.int64)
    high = np.minimum(np.ceil(at), size_in - 1).astype(np.int64)
    return low, high, (at - floor).astype(np.float32)
