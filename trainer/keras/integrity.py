"""Checks that the shards are those the manifest lists, and finds the corrupt ones.

Before training, `verify_shards` compares every shard's size, and by default its sha256, with
the manifest's. A shard that differs but reads without an error was replaced or rewritten after
the dataset was published (another dataset's shard copied in, a hand edit): the run is refused,
naming it. One that fails to read is corrupt, and left to what follows. `DatasetWatch` then
checks, at the end of every epoch, that the dataset's manifest.json is still the one the run
started with: an `etl --overwrite` of the dataset during training stops the run.

Corrupt shards: files whose records cannot all be read back.

tf.data checks the CRC-32C of every TFRecord length and payload and the zlib checksums of
compressed shards; a flipped byte or a truncation fails the read with DataLossError. That error
does not name the file, so the trainer scans the split here, file by file, to say which shards
are corrupt and how many of their listed records are lost. A reader that skips errors
(`input_batches(..., skip_corrupt=True)`) cannot resynchronize after a bad record: it loses the
rest of that file, and for a compressed shard the decompressor may fail before the first record,
losing the whole file. The scan counts exactly what such a reader keeps.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import tensorflow as tf
import tf_keras

from trainer.dataset.manifest import Manifest, ManifestError, read_file
from trainer.dataset.paths import join
from trainer.errors import first_line
from transforms.contract.layout import MANIFEST
from transforms.contract.manifest import MANIFEST_MAX_BYTES, FileEntry

_READ = 4 << 20  # bytes hashed at a time
_THREADS = 8  # shards checked at once (remote storage waits more than it works)


_DECODE_ERRORS = (
    "Invalid PNG", "Invalid JPEG", "Invalid GIF", "Invalid BMP", "Unknown image file format",
    "decode_image", "DecodePng", "DecodeJpeg",
)  # fmt: skip


def undecodable_image(manifest: Manifest, e: tf.errors.OpError) -> str | None:
    """For an error of TensorFlow's image decoder: one line naming the first record whose image
    it cannot decode (its shard and number, the feature), found by decoding every image of the
    dataset's splits in file order; None for any other error, or when none is found."""
    message = getattr(e, "message", None) or str(e)
    images = [name for name, f in manifest.features.items() if f.type == "image"]
    if not images or not any(text in message for text in _DECODE_ERRORS):
        return None
    for split in manifest.splits.values():
        for shard in split.files:
            records = tf.data.TFRecordDataset(
                shard.path, compression_type=manifest.compression_type
            )
            for number, record in enumerate(records.as_numpy_iterator(), start=1):
                example = tf.train.Example.FromString(record)
                for name in images:
                    for data in example.features.feature[name].bytes_list.value:
                        try:
                            tf.io.decode_image(data, expand_animations=False)
                        except tf.errors.InvalidArgumentError as bad:
                            why = first_line(bad).removeprefix("InvalidArgumentError: ")
                            return (
                                f"{shard.path}: record {number}: feature {name!r}: TensorFlow "
                                f"cannot decode its image ({why}); rerun the ETL, which rejects "
                                "such images, or leave the feature out (--exclude-features "
                                f"{name})"
                            )
    return None


class DatasetChanged(RuntimeError):
    """The dataset was replaced while the run read it (exit status 1)."""


def verify_shards(manifest: Manifest, hashes: bool = True) -> None:
    """ManifestError for a split whose record count is not the sum of its shards', and for the
    first shard whose size (or, with `hashes`, sha256 and record count, read in the same pass)
    is not the manifest's and that reads without an error; a corrupt shard is left to the
    reader. A shard that is no regular file (a FIFO, a link to a device) is refused unread."""
    for name, split in manifest.splits.items():
        listed = sum(f.records or 0 for f in split.files)
        if split.files and split.records != listed:
            raise ManifestError(
                f"{manifest.root}: split {name!r} lists {split.records:,} records but its "
                f"shards {listed:,}: the manifest was edited after the ETL wrote it; rerun the ETL"
            )
    # each split's shards, refused unread when one is no regular file (Manifest.shards)
    shards = [
        f for name, split in manifest.splits.items() if split.files for f in manifest.shards(name)
    ]
    compression = manifest.compression_type

    def differs(shard: FileEntry) -> str | None:
        if shard.bytes is None or not tf.io.gfile.exists(shard.path):
            return None  # nothing to compare with; a missing shard is check_dataset's
        if tf.io.gfile.stat(shard.path).length != shard.bytes:
            return "size differs"
        if not hashes:
            return None
        digest, records = _sha256_and_records(shard.path, compression)
        if shard.sha256 is not None and digest != shard.sha256:
            return "sha256 differs"
        if records is not None and records != shard.records:
            return "record count differs"
        return None

    with ThreadPoolExecutor(_THREADS) as pool:
        changed = [(s, why) for s, why in zip(shards, pool.map(differs, shards)) if why]
    for shard, why in changed:
        records = _records_if_readable(shard.path, compression)
        if records is None:
            continue  # corrupt: the read fails naming it, or --skip-corrupt skips it
        size = tf.io.gfile.stat(shard.path).length
        raise ManifestError(
            f"{shard.path}: holds {records:,} records in {size:,} bytes where the manifest lists "
            f"{shard.records:,} in {shard.bytes:,} ({why}): the dataset changed after "
            "it was written (a shard replaced or rewritten, or the manifest edited); rerun the ETL"
        )


def _sha256_and_records(path: str, compression: str) -> tuple[str, int | None]:
    """A shard's sha256 and the TFRecord frames it holds, in one read (None: its compressed
    stream or framing is broken, which the reader reports)."""
    digest = hashlib.sha256()
    frames = _Frames()
    inflate = {"GZIP": 16 + 15, "ZLIB": 15}.get(compression)
    unzip = zlib.decompressobj(inflate) if inflate else None
    broken = False
    with tf.io.gfile.GFile(path, "rb") as f:
        while chunk := f.read(_READ):
            digest.update(chunk)
            if broken:
                continue
            try:
                frames.feed(unzip.decompress(chunk) if unzip else chunk)
            except zlib.error:
                broken = True
    if unzip is not None and not broken:
        frames.feed(unzip.flush())
    return digest.hexdigest(), None if broken or not frames.whole else frames.records


class _Frames:
    """Counts the TFRecord frames of a byte stream fed in pieces: an 8-byte little-endian
    length and its 4-byte CRC, then the payload and its 4-byte CRC."""

    def __init__(self):
        self.records = 0
        self._header = b""
        self._skip = 0

    @property
    def whole(self) -> bool:
        return not self._header and not self._skip

    def feed(self, data: bytes) -> None:
        i, n = 0, len(data)
        while i < n:
            if self._skip:
                taken = min(self._skip, n - i)
                i += taken
                self._skip -= taken
                continue
            taken = min(12 - len(self._header), n - i)
            self._header += data[i : i + taken]
            i += taken
            if len(self._header) == 12:
                self._skip = struct.unpack("<Q", self._header[:8])[0] + 4
                self._header = b""
                self.records += 1


def _records_if_readable(path: str, compression: str) -> int | None:
    """The records of a shard, or None when reading it fails (corrupt)."""
    try:
        ds = tf.data.TFRecordDataset(path, compression_type=compression)
        return int(ds.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
    except tf.errors.OpError:
        return None


class DatasetWatch(tf_keras.callbacks.Callback):
    """Stops the run (DatasetChanged) when the manifest.json of a dataset it reads is not the
    one it started with, checked at the end of every epoch: the dataset was replaced."""

    def __init__(self, roots: Sequence[str]):
        super().__init__()
        self._started = {root: _manifest_bytes(root) for root in roots}

    def on_epoch_end(self, epoch, logs=None):
        for root, started in self._started.items():
            if _manifest_bytes(root) != started:
                raise DatasetChanged(
                    f"{root}: the dataset was replaced while training read it (its manifest "
                    f"changed during epoch {epoch + 1}); training stopped, nothing exported: "
                    "rerun on the new dataset"
                )


def _manifest_bytes(root: str) -> bytes | None:
    path = join(root, MANIFEST)
    if not tf.io.gfile.exists(path):
        return None
    try:
        return read_file(path, MANIFEST_MAX_BYTES)
    except ManifestError as e:  # replaced by what no reader reads: changed all the same
        return str(e).encode()


@dataclass(frozen=True)
class CorruptShard:
    """A shard of which only the first `readable` of its `listed` records can be read."""

    path: str
    listed: int
    readable: int

    @property
    def skipped(self) -> int:
        """Records the manifest lists that a reader skipping errors never sees."""
        return self.listed - self.readable


def readable_records(path: str, compression: str) -> int:
    """Records read from the start of `path` before the first error (all of them if none)."""
    ds = tf.data.TFRecordDataset(path, compression_type=compression).ignore_errors()
    return int(ds.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))


def find_corrupt(shards: Sequence[FileEntry], compression: str) -> list[CorruptShard]:
    """The shards, in manifest order, that hold fewer readable records than the manifest lists."""
    corrupt = []
    for shard in shards:
        readable = readable_records(shard.path, compression)
        listed = shard.records or 0
        if readable < listed:
            corrupt.append(CorruptShard(shard.path, listed, readable))
    return corrupt
