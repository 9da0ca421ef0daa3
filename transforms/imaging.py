"""Images decoded with Pillow under one pixel limit: the images source (`transforms.sources.images`)
and the `image` feature type of the schema (`transforms.schema`) share it, so that both reject
the same files with the same reasons.

A PNG is also checked as libpng, TensorFlow's PNG decoder, checks it: Pillow decodes a PNG whose
IDAT chunk fails its CRC, or that holds an unknown critical chunk, which `tf.io.decode_png` then
refuses in every training run ("Invalid PNG"). Such an image is rejected here, by the ETL, with
`PNG_REFUSED`. (Images the images source writes are Pillow's own re-encodings, always sound.)
"""

from __future__ import annotations

import functools
import io
import struct
import warnings
import zlib
from typing import TYPE_CHECKING

from transforms.records import RecordError

if TYPE_CHECKING:
    from PIL import Image

NOT_DECODABLE = "not a decodable image"
TOO_MANY_PIXELS = "too many pixels to decode"
PNG_REFUSED = "a PNG TensorFlow's decoder refuses (a critical chunk fails its CRC or is unknown)"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CRITICAL = {b"IHDR", b"PLTE", b"IDAT", b"IEND"}


def decode(data: bytes, field: str = "image") -> Image.Image:
    """The decoded image (its first frame). RecordError `{field}: not a decodable image` when
    Pillow cannot decode it whole, `{field}: too many pixels to decode` when its header claims
    more than `Image.MAX_IMAGE_PIXELS` pixels (no limit when that is None)."""
    Image = _pillow()
    if data.startswith(_PNG_SIGNATURE) and not png_is_sound(data):
        raise RecordError(f"{field}: {PNG_REFUSED}")
    try:
        img = Image.open(io.BytesIO(data))  # reads the header only
    except Image.DecompressionBombError:  # twice the limit: Pillow refuses on its own
        raise RecordError(f"{field}: {TOO_MANY_PIXELS}") from None
    except (OSError, SyntaxError, ValueError, EOFError):  # UnidentifiedImageError is an OSError
        raise RecordError(f"{field}: {NOT_DECODABLE}") from None
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and img.width * img.height > limit:
        img.close()
        raise RecordError(f"{field}: {TOO_MANY_PIXELS}")
    try:
        img.load()
    except (OSError, SyntaxError, ValueError, EOFError):
        img.close()
        raise RecordError(f"{field}: {NOT_DECODABLE}") from None
    return img


def png_is_sound(data: bytes) -> bool:
    """Whether libpng would read a PNG's chunks: every critical chunk (IHDR, PLTE, IDAT, IEND)
    whole with its CRC right, no unknown critical chunk (a type whose first letter is upper
    case) before IEND. Ancillary chunks may be damaged (libpng drops them); a chunk list cut
    short is left to the decoder."""
    at = len(_PNG_SIGNATURE)
    while at + 8 <= len(data):
        length, kind = struct.unpack_from(">I4s", data, at)
        end = at + 8 + length + 4
        if end > len(data):
            return True  # truncated: the decoder says so
        critical = kind[:1].isupper()
        if critical and kind not in _PNG_CRITICAL:
            return False
        if critical:
            (crc,) = struct.unpack_from(">I", data, end - 4)
            if zlib.crc32(memoryview(data)[at + 4 : end - 4]) != crc:
                return False
        if kind == b"IEND":
            return True
        at = end
    return True


@functools.cache
def _pillow():
    """PIL.Image, imported on first use (workers that read no image never pay for it)."""
    from PIL import Image

    # Between the limit and twice it, Pillow only warns (once per process, at whichever image
    # came first); `decode` rejects every such image itself, so the warning says nothing more.
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
    return Image
