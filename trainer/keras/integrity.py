"""The dataset as tf.data reads it during a run: its corrupt shards, its undecodable images,
and its replacement under the run.

Before training, trainer.dataset.verify checks that the shards are the manifest's.
`DatasetWatch` then checks, at the end of every epoch, that the dataset's manifest.json is still
the one the run started with: an `etl --overwrite` of the dataset during training stops the run.

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

from collections.abc import Sequence
from dataclasses import dataclass

import tensorflow as tf
import tf_keras

from trainer.dataset.manifest import Manifest, ManifestError, read_file
from trainer.dataset.paths import join
from trainer.errors import first_line
from transforms.contract.layout import MANIFEST
from transforms.contract.manifest import MANIFEST_MAX_BYTES, FileEntry

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
