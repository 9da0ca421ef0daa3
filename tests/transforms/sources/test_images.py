"""Image folders: options, one record per image, labels, validation, resizing and re-encoding.

Fixtures are real image files written with Pillow; expected pixels come from numpy arrays and
from Pillow applied directly, never from the module under test.
"""

import io
import json

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from PIL import Image

from transforms.contract.config import OptionError, SourceSpec
from transforms.records import RawChunk, record_json
from transforms.sources import images
from transforms.sources.images import TOO_LARGE, UNDECODABLE, options, parse_images
from transforms.sources.read import ReadSource

ROOT = "gs://bucket/photos"  # parse does no I/O on it: the stream is in memory


def pixels(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def encoded(img: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **params)
    return out.getvalue()


RGB = pixels((12, 16, 3))
# JPEG is lossy, the more so on noise (chroma is subsampled): its tests use smooth gradients.
SMOOTH = np.stack([*np.meshgrid(np.arange(16) * 15, np.arange(12) * 20), np.full((12, 16), 99)], -1)
SMOOTH = SMOOTH.astype(np.uint8)
PNG = encoded(Image.fromarray(RGB), "PNG")
JPEG = encoded(Image.fromarray(RGB), "JPEG", quality=95)


def _source(path=ROOT + "/", **raw):
    return SourceSpec("photos", "images", path, options(raw))


def _parse(data: bytes, path: str, source=None):
    """(fields of the record or None, rejected dicts, raw text of the record)."""
    items = list(parse_images(io.BytesIO(data), path, source or _source()))
    chunks = [i for i in items if isinstance(i, RawChunk)]
    rejected = [i for i in items if not isinstance(i, RawChunk)]
    assert len(chunks) <= 1
    if not chunks:
        return None, rejected, None
    chunk = chunks[0]
    assert chunk.lines == [1] and chunk.path == path and len(chunk) == 1
    return {name: chunk.values(name)[0] for name in chunk.columns}, rejected, chunk.raw(0)


# --- options -------------------------------------------------------------------------------------


def test_default_options():
    assert options({}).to_dict() == {
        "label_from": "parent_dir",
        "label_regex": None,
        "extensions": [".bmp", ".gif", ".jpeg", ".jpg", ".png", ".webp"],
        "resize": None,
        "encode": None,
        "quality": 90,
    }


def test_label_regex_alone_means_label_from_regex():
    assert options({"label_regex": r"^(\w+)/"}).label_from == "regex"
    assert options({"label_from": "regex", "label_regex": r"(?P<label>\w+)_\d+"}).label_regex


def test_extensions_are_normalized_and_star_means_every_file():
    assert options({"extensions": ["PNG", ".Tif", "png"]}).extensions == [".png", ".tif"]
    assert options({"extensions": "*"}).extensions is None


@pytest.mark.parametrize(
    "raw, field, message",
    [
        ({"label_from": "folder"}, "label_from", "'folder' is not one of parent_dir, regex, none"),
        ({"label_from": "regex"}, "label_regex", "is required with label_from: regex"),
        (
            {"label_from": "none", "label_regex": "(a)"},
            "label_regex",
            "applies only with label_from: regex, not none",
        ),
        (
            {"label_regex": "a(b"},
            "label_regex",
            "invalid regular expression 'a(b': missing ), unterminated subpattern at position 1",
        ),
        (
            {"label_regex": "(a)(b)"},
            "label_regex",
            "'(a)(b)' needs one group, or a group named 'label'",
        ),
        ({"label_regex": "ab"}, "label_regex", "'ab' needs one group, or a group named 'label'"),
        ({"extensions": []}, "extensions", 'must be a non-empty list of extensions, or "*"'),
        ({"extensions": ".png"}, "extensions", 'must be a non-empty list of extensions, or "*"'),
        ({"resize": [32]}, "resize", "must be [height, width], two positive integers"),
        ({"resize": [32, 0]}, "resize", "must be [height, width], two positive integers"),
        ({"resize": [32, 2.5]}, "resize", "must be [height, width], two positive integers"),
        ({"encode": "jpg"}, "encode", "'jpg' is not one of png, jpeg; did you mean 'jpeg'?"),
        ({"encode": "jpeg", "quality": 0}, "quality", "must be at least 1"),
        ({"encode": "jpeg", "quality": 101}, "quality", "must be at most 100"),
        (
            {"encode": "png", "quality": 80},
            "quality",
            "applies only to JPEG encoding, not encode: png",
        ),
        (
            {"size": [1, 2]},
            "size",
            "unknown key (allowed: encode, extensions, label_from, label_regex, quality, resize); "
            "did you mean 'resize'?",
        ),
    ],
)
def test_bad_options_name_the_option(raw, field, message):
    with pytest.raises(OptionError) as e:
        options(raw)
    assert (e.value.field, e.value.message) == (field, message)


# --- one record per image ------------------------------------------------------------------------


def test_an_image_is_one_record_with_its_bytes_size_label_and_filename():
    fields, rejected, raw = _parse(PNG, f"{ROOT}/cat/sub/001.png")
    assert rejected == []
    assert fields == {
        "filename": "cat/sub/001.png",
        "label": "sub",
        "image": PNG,
        "height": 12,
        "width": 16,
        "channels": 3,
    }
    # the raw record of the rejected output: the fields, the image as its size
    assert json.loads(raw) == {**fields, "image": f"<{len(PNG)} bytes>"}


def test_files_of_other_extensions_are_skipped_and_extensions_ignore_case():
    assert _parse(b"notes", f"{ROOT}/README.txt") == (None, [], None)
    assert _parse(b"", f"{ROOT}/cat/photo.png.gz") == (None, [], None)
    assert _parse(PNG, f"{ROOT}/cat/LOUD.PNG")[0]["label"] == "cat"
    assert _parse(JPEG, f"{ROOT}/cat/x.tif", _source(extensions=["tif"]))[0]["width"] == 16


def test_with_every_file_read_a_file_that_is_not_an_image_is_rejected():
    fields, rejected, _ = _parse(b"notes\n", f"{ROOT}/README.txt", _source(extensions="*"))
    assert fields is None
    assert [r.to_json() for r in rejected] == [
        {
            "source": "photos",
            "location": f"{ROOT}/README.txt:1",
            "reason": UNDECODABLE,
            "record": record_json(
                {"filename": "README.txt", "label": "photos", "image": "<6 bytes>"}
            ),
        }
    ]


@pytest.mark.parametrize("name, data", [("png", PNG), ("jpeg", JPEG)])
def test_truncated_and_corrupt_images_are_rejected_with_their_path(name, data):
    for bad in (data[: len(data) // 2], data[:40], b"\x89PNG\r\n\x1a\n" + b"\0" * 30, b""):
        path = f"{ROOT}/dog/bad.{name}"
        fields, rejected, _ = _parse(bad, path)
        assert fields is None
        assert [(r.location, r.reason) for r in rejected] == [(f"{path}:1", UNDECODABLE)]
        assert json.loads(rejected[0].record) == {
            "filename": f"dog/bad.{name}",
            "label": "dog",
            "image": f"<{len(bad)} bytes>",
        }


def test_images_beyond_the_decompression_bomb_limit_are_rejected(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 40)  # 12 x 16 pixels is more than twice that
    _, rejected, _ = _parse(PNG, f"{ROOT}/cat/big.png")
    assert [r.reason for r in rejected] == [TOO_LARGE]


def test_label_from_none_gives_no_label_field():
    fields, _, _ = _parse(PNG, f"{ROOT}/cat/1.png", _source(label_from="none"))
    assert "label" not in fields and fields["filename"] == "cat/1.png"


@pytest.mark.parametrize(
    "regex, filename, label",
    [
        (r"^([^/]+)/", "cat/sub/1.png", "cat"),  # the top folder instead of the parent
        (r"(?P<label>[a-z]+)_\d+\.png$", "all/tabby_01.png", "tabby"),
        (r"(?P<kind>\w)/(?P<label>\w+)/", "a/cat/1.png", "cat"),
        (r"^([^/]+)/", "1.png", None),  # no match: the label is missing
        (r"^(x)?", "1.png", None),  # the group does not take part in the match
    ],
)
def test_label_regex_searches_the_path_relative_to_the_root(regex, filename, label):
    fields, _, _ = _parse(PNG, f"{ROOT}/{filename}", _source(label_regex=regex))
    assert (fields["label"], fields["filename"]) == (label, filename)


def test_filename_and_label_of_globs_gcs_paths_and_single_files():
    assert _parse(PNG, "gs://b/photos/cat/1.png", _source("gs://b/photos/*/*.png"))[0] == {
        **_parse(PNG, f"{ROOT}/cat/1.png")[0],
        "filename": "cat/1.png",
        "label": "cat",
    }
    fields = _parse(PNG, "gs://b/photos/cat/1.png", _source("gs://b/photos/cat/1.png"))[0]
    assert (fields["filename"], fields["label"]) == ("1.png", "cat")
    fields = _parse(PNG, "gs://b/photos/2.png", _source("gs://b/photos/"))[0]
    assert (fields["filename"], fields["label"]) == ("2.png", "photos")


# --- channels as TensorFlow's decoders count them ------------------------------------------------


def _img(mode: str) -> Image.Image:
    return Image.fromarray(RGB).convert(mode)


# Measured with TensorFlow 2.21: the shape tf.io.decode_image gives for each of these files.
@pytest.mark.parametrize(
    "data, channels",
    [
        (encoded(_img("L"), "PNG"), 1),
        (encoded(_img("1"), "PNG"), 1),
        (encoded(_img("LA"), "PNG"), 2),
        (encoded(_img("RGBA"), "PNG"), 4),
        (encoded(_img("L"), "PNG", transparency=5), 1),
        (encoded(_img("P"), "PNG"), 3),
        (encoded(_img("P"), "PNG", transparency=0), 4),
        (encoded(Image.fromarray(pixels((12, 16), 1).astype(np.uint16) * 257), "PNG"), 1),
        (encoded(_img("L"), "JPEG"), 1),
        (encoded(_img("CMYK"), "JPEG"), 3),
        (encoded(_img("RGB"), "GIF"), 3),
        (encoded(_img("L"), "GIF"), 3),
        (encoded(_img("RGB"), "BMP"), 3),
        (encoded(_img("RGBA"), "BMP"), 4),
        (encoded(_img("L"), "BMP"), 1),
        (encoded(_img("P"), "BMP"), 1),
        (encoded(_img("RGB"), "WEBP"), 3),
        (encoded(Image.fromarray(pixels((12, 16, 4))), "WEBP"), 4),  # alpha not all opaque
    ],
)
def test_channels_are_those_tensorflow_decodes(data, channels):
    fields = images.image_fields(data, options({}))
    assert (fields["image"], fields["channels"]) == (data, channels)


# --- resizing and re-encoding --------------------------------------------------------------------


def test_resize_gives_exactly_height_by_width_with_bilinear_pixels():
    fields = images.image_fields(PNG, options({"resize": [6, 5]}))
    out = Image.open(io.BytesIO(fields["image"]))
    expected = Image.fromarray(RGB).resize((5, 6), Image.Resampling.BILINEAR)
    assert (out.format, out.size, fields["height"], fields["width"]) == ("PNG", (5, 6), 6, 5)
    assert np.array_equal(np.asarray(out), np.asarray(expected))


def test_resize_without_encode_keeps_jpeg_as_jpeg_and_writes_the_rest_as_png():
    gif = encoded(_img("RGB"), "GIF")
    for data, fmt in ((JPEG, "JPEG"), (PNG, "PNG"), (gif, "PNG")):
        fields = images.image_fields(data, options({"resize": [4, 4]}))
        assert Image.open(io.BytesIO(fields["image"])).format == fmt


def test_encode_png_is_lossless_and_palettes_become_rgba():
    fields = images.image_fields(encoded(Image.fromarray(RGB), "BMP"), options({"encode": "png"}))
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(fields["image"]))), RGB)
    palette = _img("P")
    data = encoded(palette, "PNG", transparency=0)
    out = Image.open(io.BytesIO(images.image_fields(data, options({"encode": "png"}))["image"]))
    expected = np.asarray(palette.convert("RGBA"))
    expected = np.where(np.asarray(palette)[..., None] == 0, expected * [1, 1, 1, 0], expected)
    assert out.mode == "RGBA" and np.array_equal(np.asarray(out), expected)


def test_encode_jpeg_drops_alpha_and_16_bit_depth():
    rgba = encoded(Image.fromarray(SMOOTH).convert("RGBA"), "PNG")
    fields = images.image_fields(rgba, options({"encode": "jpeg", "quality": 100}))
    out = Image.open(io.BytesIO(fields["image"]))
    assert (out.format, out.mode, fields["channels"]) == ("JPEG", "RGB", 3)
    assert np.abs(np.asarray(out, dtype=int) - SMOOTH).mean() < 3
    deep = SMOOTH[..., 0].astype(np.uint16) * 257  # high byte == low byte
    data = encoded(Image.fromarray(deep), "PNG")
    fields = images.image_fields(data, options({"encode": "jpeg", "quality": 100}))
    out = np.asarray(Image.open(io.BytesIO(fields["image"])), dtype=int)
    assert fields["channels"] == 1 and np.abs(out - (deep >> 8)).mean() < 3


def test_re_encoding_is_deterministic_and_drops_metadata():
    exif = Image.Exif()
    exif[0x0132] = "2024:01:01 10:00:00"  # DateTime
    source = encoded(
        Image.fromarray(RGB),
        "JPEG",
        exif=exif.tobytes(),
        comment=b"taken today",
        icc_profile=b"not really a profile",
    )
    assert {"exif", "comment", "icc_profile"} <= set(Image.open(io.BytesIO(source)).info)
    for raw in ({"encode": "jpeg", "quality": 80}, {"encode": "png"}, {"resize": [6, 8]}):
        first = images.image_fields(source, options(raw))["image"]
        assert images.image_fields(source, options(raw))["image"] == first
        info = Image.open(io.BytesIO(first)).info
        assert not {"exif", "comment", "icc_profile"} & set(info), raw


def test_quality_changes_jpeg_bytes():
    low = images.image_fields(PNG, options({"encode": "jpeg", "quality": 10}))["image"]
    high = images.image_fields(PNG, options({"encode": "jpeg", "quality": 95}))["image"]
    assert len(low) < len(high)


# --- the Beam read of a folder tree --------------------------------------------------------------


def _tree(root, files: dict[str, bytes]):
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


TREE = {
    "cat/1.png": PNG,
    "cat/deeper/2.jpg": JPEG,
    "dog/3.png": PNG[:100],
    "README.txt": b"about these photos",
    ".DS_Store": b"\0",
    "dog/.4.png": PNG,
    ".ipynb_checkpoints/5.png": PNG,
}


def _read(path: str):
    """(filename, label, width) of records, (filename, reason) of rejected, counts."""
    source = SourceSpec("photos", "images", path, options({}))
    with TestPipeline(runner="FnApiRunner") as p:
        chunks, rejected, counts = p | ReadSource(source)
        records = chunks | beam.Map(
            lambda c: (c.values("filename")[0], c.values("label")[0], c.values("width")[0])
        )
        assert_that(
            records,
            equal_to([("cat/1.png", "cat", 16), ("cat/deeper/2.jpg", "deeper", 16)]),
            label="CheckRecords",
        )
        reasons = rejected | beam.Map(lambda r: (json.loads(r.record)["filename"], r.reason))
        assert_that(reasons, equal_to([("dog/3.png", UNDECODABLE)]), label="CheckRejected")
        total = counts | beam.Map(lambda pair: pair[1]) | beam.CombineGlobally(sum)
        assert_that(total, equal_to([3]), label="CheckCounts")


def test_read_source_reads_a_folder_tree_and_skips_hidden_and_other_files(tmp_path):
    _tree(tmp_path / "photos", TREE)
    _read(str(tmp_path / "photos"))


def test_read_source_reads_a_gcs_folder_tree(gcs_emulator):
    bucket = gcs_emulator.client().bucket("shardflow-test")
    for name, data in {**TREE, "cat/": b""}.items():
        bucket.blob(f"images/photos/{name}").upload_from_string(data)
    _read("gs://shardflow-test/images/photos/")
