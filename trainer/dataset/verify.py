"""Checks, before a run reads a dataset, that its shards are those the manifest lists.

`verify_shards` compares every shard's size, and by default its sha256 and the records it
frames, with the manifest's, reading each shard once through trainer.dataset.framing (the check
the PyTorch and JAX readers make as they read, here made for the whole dataset at once, several
shards at a time). A shard that differs but reads without an error was replaced or rewritten
after the dataset was published (another dataset's shard copied in, a hand edit): the run is
refused, naming it. One that fails to read is corrupt, and left to the reader (which names it,
or skips its rest with --skip-corrupt). A split whose record count is not the sum of its shards'
was edited by hand. No TensorFlow: `--verify` costs the same with every reader.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

from trainer.dataset import storage
from trainer.dataset.framing import CorruptShardError, ShardChangedError, read_shard
from trainer.dataset.manifest import Manifest, ManifestError
from transforms.contract.manifest import FileEntry

_THREADS = 8  # shards checked at once (remote storage waits more than it works)


def verify_shards(manifest: Manifest, hashes: bool = True) -> None:
    """ManifestError for a split whose record count is not the sum of its shards', for a shard
    that is no regular file (refused unread), and for the first shard whose size (or, with
    `hashes`, sha256 and record count, read in the same pass) is not the manifest's and that
    reads without an error; a corrupt shard is left to the reader."""
    for name, split in manifest.splits.items():
        listed = sum(f.records or 0 for f in split.files)
        if split.files and split.records != listed:
            raise ManifestError(
                f"{manifest.root}: split {name!r} lists {split.records:,} records but its "
                f"shards {listed:,}: the manifest was edited after the ETL wrote it; rerun the ETL"
            )
    shards = [
        f for name, split in manifest.splits.items() if split.files for f in manifest.shards(name)
    ]
    wbits = manifest.wbits
    with ThreadPoolExecutor(_THREADS) as pool:
        found = list(pool.map(lambda shard: _changed(shard, wbits, hashes), shards))
    for error in found:
        if error is not None:
            raise error


def _changed(shard: FileEntry, wbits: int | None, hashes: bool) -> ShardChangedError | None:
    """Why a shard that reads whole is not the manifest's; None when it is, or is corrupt."""
    if shard.bytes is None or not storage.exists(shard.path):
        return None  # nothing to compare with; a missing shard is check_dataset's
    if not hashes:
        if storage.size(shard.path) == shard.bytes:
            return None
        shard = dataclasses.replace(shard, sha256=None)  # read to tell changed from corrupt
    try:
        for _ in read_shard(shard, wbits, check_sha256=hashes):
            pass
    except ShardChangedError as e:
        return e
    except CorruptShardError:
        return None  # the reader names it, or --skip-corrupt skips its rest
    return None
