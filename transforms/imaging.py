"""Images decoded with Pillow under one pixel limit: the images source (`transforms.sources.images`)
and the `image` feature type of the schema (`transforms.schema`) share it, so that both reject
the same files with the same reasons."""

from __future__ import annotations

import functools
import io
import warnings
from typing import TYPE_CHECKING

from transforms.schema import RecordError

if TYPE_CHECKING:
    from PIL import Image

NOT_DECODABLE = "not a decodable image"
TOO_MANY_PIXELS = "too many pixels to decode"


def decode(data: bytes, field: str = "image") -> Image.Image:
    """The decoded image (its first frame). RecordError `{field}: not a decodable image` when
    Pillow cannot decode it whole, `{field}: too many pixels to decode` when its header claims
    more than `Image.MAX_IMAGE_PIXELS` pixels (no limit when that is None)."""
    Image = _pillow()
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


@functools.cache
def _pillow():
    """PIL.Image, imported on first use (workers that read no image never pay for it)."""
    from PIL import Image

    # Between the limit and twice it, Pillow only warns (once per process, at whichever image
    # came first); `decode` rejects every such image itself, so the warning says nothing more.
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
    return Image
