"""Reads folders of image files: one file, one record.

A folder path is read recursively (class subfolders), through `transforms.files`. Files whose
extension is not in `extensions` (case-insensitive; default: the image formats TensorFlow's
`tf.io.decode_image` reads) are skipped, like dot files: they are not records (counter
`images/skipped_files`); with `extensions: "*"` every file is read, and one that is not an image
is rejected. Every image is decoded with Pillow, which checks it whole; an undecodable or
truncated one is rejected with the reason `image: not a decodable image`, and one whose header
claims more pixels than Pillow's `Image.MAX_IMAGE_PIXELS` (89,478,485 by default) with `image:
too many pixels to decode`, before any pixel is decoded (a few bytes of PNG can claim 10**10
pixels: a decompression bomb). Images are decoded one at a time. `decode` is also the check of
every `type: image` feature, whatever its source (`transforms.schema`), with the feature's name
in the reasons.

Fields of a record:
  `image`     the encoded image: the file's bytes, unchanged, unless `resize` or `encode` is set
  `height`, `width`, `channels`
              of the image as delivered (after resizing); `channels` is what `tf.io.decode_image`
              gives (palette PNG: 3, or 4 with transparency; GIF: 3; 8-bit BMP: 1)
  `filename`  the path relative to the source's root folder (`cat/001.jpg`), `/`-separated
  `label`     with `label_from: parent_dir` (default), the name of the folder holding the file;
              with `label_regex`, its group `label` (or its only group) searched in `filename`
              (missing when it does not match); no `label` with `label_from: none`

A label is Unicode text in NFC form (macOS stores folder names decomposed, NFD: `é` as `e` and
a combining accent; both give the same label). An image whose label holds a control character or
a path separator (`/` or a backslash), or whose path is not valid UTF-8 (Linux names are bytes),
is rejected: `label: holds a control character`, `label: holds a path separator`, `label: not
valid UTF-8`, `filename: not valid UTF-8`. A label is never altered otherwise.

`resize: [height, width]` scales to exactly that size (bilinear, antialiased when shrinking);
`encode: png | jpeg` re-encodes (`quality` for JPEG). Resizing without `encode` keeps JPEG as
JPEG and writes anything else as PNG. A re-encoded image is written without metadata (EXIF,
ICC profile, comments, timestamps), so the same pixels and options always give the same bytes.
Palette and bilevel images are expanded to RGB(A) / grayscale first; JPEG drops alpha (and
16-bit depth, keeping the high byte, as `tf.io.decode_png` does). EXIF orientation is not
applied: pixels stay as stored, which is what TensorFlow's decoders give for the original file.

Each file becomes a chunk of one record, numbered 1 in its file (locations are `PATH:1`). A
rejected record shows its fields as JSON, with the image replaced by its size (`"<1234 bytes>"`).
"""

from __future__ import annotations

import dataclasses
import io
import re
import unicodedata
from typing import TYPE_CHECKING, Any, BinaryIO, Iterator

from transforms.contract.config import OptionError, SourceOptions, SourceSpec
from transforms.files import pattern_root, relative_path
from transforms.imaging import NOT_DECODABLE, TOO_MANY_PIXELS, decode
from transforms.records import (
    CHUNK_ROWS,
    RawChunk,
    RecordError,
    Rejected,
    location,
    one_line_records,
    printable,
    record_json,
    rejection,
)
from transforms.sources.registry import Format, OptionsReader

if TYPE_CHECKING:
    from PIL import Image

LABEL_FROM = ("parent_dir", "regex", "none")
ENCODINGS = ("png", "jpeg")
# What tf.io.decode_image reads (BMP, GIF, JPEG, PNG, WebP): the format's file endings and the
# default `extensions`.
EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".webp")
ALL_FILES = "*"
DEFAULT_QUALITY = 90
UNDECODABLE = f"image: {NOT_DECODABLE}"
TOO_LARGE = f"image: {TOO_MANY_PIXELS}"
MAX_FILE_BYTES = 64 << 20  # an image file larger than this is rejected unread
TOO_MANY_BYTES = f"image: file larger than {MAX_FILE_BYTES >> 20} MiB, not read"
NOT_UTF8_LABEL = "label: not valid UTF-8"
NOT_UTF8_PATH = "filename: not valid UTF-8"
CONTROL_LABEL = "label: holds a control character"
SEPARATOR_LABEL = "label: holds a path separator"


def _skipped() -> None:
    """Counts a file skipped for its extension (`images/skipped_files`)."""
    from apache_beam.metrics import Metrics  # Beam: only once files are read

    Metrics.counter("images", "skipped_files").inc()


# Pillow modes each encoding writes as they are; other modes are converted first.
_BMP_CHANNELS = {8: 1, 24: 3, 32: 4}  # bits per pixel → channels, for the depths TF reads
_KEEP_MODES = {"png": ("L", "LA", "RGB", "RGBA", "I;16"), "jpeg": ("L", "RGB")}


@dataclasses.dataclass(frozen=True)
class ImagesOptions(SourceOptions):
    """The options of an images source: where an image's label comes from (`parent_dir`, the
    `label_regex` searched in its filename, or `none`), the file extensions read, and how an
    image is resized and re-encoded."""

    label_from: str = "parent_dir"  # one of LABEL_FROM
    label_regex: str | None = None
    # lower-case, with their dot; None: every file
    extensions: list[str] | None = dataclasses.field(default_factory=lambda: list(EXTENSIONS))
    resize: list[int] | None = None  # [height, width]
    encode: str | None = None  # one of ENCODINGS; None: the file's own bytes when not resized
    quality: int = DEFAULT_QUALITY  # of JPEG encoding


def options(raw: dict[str, Any]) -> ImagesOptions:
    """The images options, checked, with their defaults."""
    opts = OptionsReader(raw)
    regex = opts.string("label_regex", None)
    label_from = opts.choice("label_from", LABEL_FROM, "parent_dir" if regex is None else "regex")
    if label_from == "regex" and regex is None:
        raise OptionError("label_regex", "is required with label_from: regex")
    if regex is not None:
        if label_from != "regex":
            raise OptionError(
                "label_regex", f"applies only with label_from: regex, not {label_from}"
            )
        _label_group(regex)
    encode = opts.get("encode", None)
    if encode is not None:
        encode = opts.choice("encode", ENCODINGS)
    quality = opts.integer("quality", None, minimum=1)
    if quality is not None:
        if quality > 100:
            raise OptionError("quality", "must be at most 100")
        if encode == "png":
            raise OptionError("quality", "applies only to JPEG encoding, not encode: png")
    out = ImagesOptions(
        label_from=label_from,
        label_regex=regex,
        extensions=_extensions(opts.get("extensions", list(EXTENSIONS))),
        resize=_resize(opts.get("resize", None)),
        encode=encode,
        quality=DEFAULT_QUALITY if quality is None else quality,
    )
    opts.done()
    return out


def _label_group(regex: str) -> str | int:
    """The group of `label_regex` that holds the label: `label`, else its only group."""
    try:
        pattern = re.compile(regex)
    except re.error as e:
        raise OptionError("label_regex", f"invalid regular expression {regex!r}: {e}") from None
    if "label" in pattern.groupindex:
        return "label"
    if pattern.groups != 1:
        raise OptionError("label_regex", f"{regex!r} needs one group, or a group named 'label'")
    return 1


def _extensions(value: Any) -> list[str] | None:
    """Lower-case extensions with their dot; None (every file) for `"*"`."""
    if value == ALL_FILES:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise OptionError("extensions", f'must be a non-empty list of extensions, or "{ALL_FILES}"')
    return sorted({v.lower() if v.startswith(".") else "." + v.lower() for v in value})


def _resize(value: Any) -> list[int] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        raise OptionError("resize", "must be [height, width], two positive integers")
    return list(value)


def parse_images(
    stream: BinaryIO, path: str, source: SourceSpec, chunk_rows: int = CHUNK_ROWS
) -> Iterator[RawChunk | Rejected]:
    """Yields the one record of an image file (a chunk, or a `Rejected` record).

    Yields nothing for a file whose extension is not one of `extensions`.
    """
    opts = source.options_as(ImagesOptions)
    extensions = opts.extensions
    if extensions is not None and not path.lower().endswith(tuple(extensions)):
        _skipped()
        return
    assert source.path is not None  # a file format's source has a path
    filename = relative_path(path, pattern_root(source.path))
    fields: dict[str, Any] = {"filename": filename}
    data = stream.read(MAX_FILE_BYTES + 1)
    try:
        if len(data) > MAX_FILE_BYTES:  # a huge file is not held in memory to be rejected
            data = data[:0]
            raise RecordError(TOO_MANY_BYTES)
        if opts.label_from != "none":
            fields["label"] = label_of(path, filename, opts)
        if not _is_utf8(filename):
            raise RecordError(NOT_UTF8_PATH)
        fields.update(image_fields(data, opts))
    except RecordError as e:
        # a path that is not UTF-8 holds lone surrogates: shown as \xNN escapes, never written
        record = {k: printable(v) if isinstance(v, str) else v for k, v in fields.items()}
        record["image"] = _size(data)
        yield rejection(source.name, location(printable(path), 1), e.reason, record)
        return
    summary = record_json({**fields, "image": _size(fields["image"])})
    columns = {name: [value] for name, value in fields.items()}
    yield RawChunk(source.name, path, columns, [1], **one_line_records([summary]))


parse = parse_images
FORMAT = Format(
    name="images",
    kind="file",
    options_type=ImagesOptions,
    options=options,
    reader=parse_images,
    extensions=EXTENSIONS,
)


def label_of(path: str, filename: str, opts: ImagesOptions) -> str | None:
    """The label of the file at `path` (`filename` relative to the source's root), in NFC.

    Raises RecordError for a label that is not UTF-8 or holds a control character or a path
    separator.
    """
    if opts.label_from == "parent_dir":
        parts = path.rsplit("/", 2)
        label = parts[-2] if len(parts) == 3 else None
    else:
        regex = opts.label_regex
        assert regex is not None  # label_from: regex has one
        match = re.search(regex, filename)
        label = None if match is None else match.group(_label_group(regex))
    return None if label is None else clean_label(label)


def clean_label(label: str) -> str:
    """`label` in Unicode NFC; RecordError when it cannot be a class name."""
    if not _is_utf8(label):
        raise RecordError(NOT_UTF8_LABEL)
    if any(unicodedata.category(c) == "Cc" for c in label):
        raise RecordError(CONTROL_LABEL)
    if "/" in label or "\\" in label:
        raise RecordError(SEPARATOR_LABEL)
    return unicodedata.normalize("NFC", label)


def _is_utf8(text: str) -> bool:
    """False for text holding lone surrogates (the undecodable bytes of a file name)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def image_fields(data: bytes, opts: ImagesOptions) -> dict[str, Any]:
    """`image`, `height`, `width`, `channels` of an encoded image; RecordError if undecodable."""
    from PIL import Image

    img = decode(data)
    resize, encode = opts.resize, opts.encode
    if resize is None and encode is None:
        channels = _decoded_channels(img, data)
        return {"image": data, "height": img.height, "width": img.width, "channels": channels}
    if encode is None:
        encode = "jpeg" if img.format in ("JPEG", "MPO") else "png"
    img = _expanded(img)
    if resize is not None:
        height, width = resize
        img = img.resize((width, height), Image.Resampling.BILINEAR)
    img = _encodable(img, encode)
    img.info = {}  # no metadata in the output: only pixels and the options decide its bytes
    out = io.BytesIO()
    if encode == "png":
        img.save(out, "PNG", compress_level=6)
    else:
        img.save(out, "JPEG", quality=opts.quality)
    return {
        "image": out.getvalue(),
        "height": img.height,
        "width": img.width,
        "channels": len(img.getbands()),
    }


def _decoded_channels(img: Image.Image, data: bytes) -> int:
    """The channels `tf.io.decode_image` gives for the file's own bytes (`img` is their decode).

    TensorFlow decodes GIF as RGB, JPEG as grayscale or RGB (CMYK too), BMP by its bit depth
    (8-bit as one channel, palette or not), and palette PNG as RGB, or RGBA with transparency.
    """
    fmt, mode = img.format, img.mode
    if fmt == "GIF":
        return 3
    if fmt in ("JPEG", "MPO"):
        return 1 if mode == "L" else 3
    if fmt == "BMP":
        bits_at = 28 if int.from_bytes(data[14:18], "little") >= 40 else 24
        bits = int.from_bytes(data[bits_at : bits_at + 2], "little")
        if bits in _BMP_CHANNELS:
            return _BMP_CHANNELS[bits]
    if mode == "P":
        return 4 if "transparency" in img.info else 3
    if mode == "PA":
        return 4
    return len(img.getbands())


def _expanded(img: Image.Image) -> Image.Image:
    """Palette, bilevel and color-keyed images as plain grayscale or RGB(A) pixels."""
    mode, keyed = img.mode, "transparency" in img.info
    if mode == "P":
        return img.convert("RGBA" if keyed else "RGB")
    if mode == "PA":
        return img.convert("RGBA")
    if mode == "1":
        return img.convert("L")
    if keyed and mode in ("L", "RGB"):
        return img.convert("LA" if mode == "L" else "RGBA")
    return img


def _encodable(img: Image.Image, encode: str) -> Image.Image:
    """The image in a mode that `encode` writes (and tf.io.decode_image reads back)."""
    from PIL import Image

    mode = img.mode
    if mode in _KEEP_MODES[encode]:
        return img
    if mode.startswith("I;16"):
        if encode == "png":
            return img.convert("I;16")
        import numpy as np

        return Image.fromarray((np.asarray(img, dtype=np.uint16) >> 8).astype(np.uint8))
    # the rest: 1 or 2 bands (I, F, La) to grayscale, more (CMYK, YCbCr, RGBa...) to RGB
    alpha = encode == "png" and mode in ("La", "RGBa", "PA")
    if len(img.getbands()) <= 2:
        return img.convert("LA" if alpha else "L")
    return img.convert("RGBA" if alpha else "RGB")


def _size(data: bytes) -> str:
    """How an image shows in a rejected record's JSON: its size, not its bytes."""
    return f"<{len(data)} bytes>"
