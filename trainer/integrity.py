"""Finds the corrupt shards of a split: files whose records cannot all be read back.

tf.data checks the CRC-32C of every TFRecord length and payload and the zlib checksums of
compressed shards; a flipped byte or a truncation fails the read with DataLossError. That error
does not name the file, so the trainer scans the split here, file by file, to say which shards
are corrupt and how many of their listed records are lost. A reader that skips errors
(`make_dataset(..., skip_corrupt=True)`) cannot resynchronize after a bad record: it loses the
rest of that file, and for a compressed shard the decompressor may fail before the first record,
losing the whole file. The scan counts exactly what such a reader keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import tensorflow as tf

from trainer.manifest import ShardFile


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


def find_corrupt(shards: Sequence[ShardFile], compression: str) -> list[CorruptShard]:
    """The shards, in manifest order, that hold fewer readable records than the manifest lists."""
    corrupt = []
    for shard in shards:
        readable = readable_records(shard.path, compression)
        if readable < shard.records:
            corrupt.append(CorruptShard(shard.path, shard.records, readable))
    return corrupt
