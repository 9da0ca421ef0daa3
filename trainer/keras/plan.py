"""The input pipeline's knobs, from the flags and the manifest, under a RAM budget.

Every knob of trainer.keras.input has a flag; a flag left unset gets a value derived from the
dataset:
- `read_batch`: records moved together (trainer.keras.input): 32, fewer for a split under 64,000
  records (one per 2,000; at least 1), whose epochs are short enough to shuffle record by record
  and whose batches should differ from epoch to epoch (at least 8 when the model inputs are
  cached: each run is parsed on its own);
- `cycle_length`: files read at once, one per core (at least 4), never more than the shards a
  worker reads;
- `shuffle_buffer`: 10,000 records, fewer when the split is smaller or when that many records
  would take more than a quarter of the RAM budget;
- `cache`: by default (`auto`) the model inputs themselves, parsed and preprocessed in the first
  epoch, stay in RAM when they have fixed shapes (no list or free text) and take at most a
  quarter of the RAM budget: later epochs only shuffle and batch them; else nothing is cached.
  `memory` keeps the serialized split in RAM; when the split would take more than half of the
  RAM budget, the cache goes to a local file instead (said in the log);
- `ram_budget`: what tf.data may buffer in all (autotuned prefetches included): a quarter of the
  machine's memory unless given.
The size of a record comes from the manifest (uncompressed shards: exact) or from reading the
first records of the first shard (compressed shards: their size on disk says little).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile

import tensorflow as tf

from trainer.config import DEFAULT_READ_BATCH, DEFAULT_SHUFFLE_BUFFER, InputFlags
from trainer.dataset.manifest import Manifest
from trainer.keras.input import INPUTS, default_cycle_length

logger = logging.getLogger("trainer.keras.plan")

SIZE_SAMPLE = 256
MIN_CACHED_RUN = 8  # records parsed at once to fill the cache of model inputs
_FRAMING_BYTES = 16  # a TFRecord's length, its CRC and the data's CRC


@dataclasses.dataclass(frozen=True)
class InputPlan:
    """The resolved knobs of the training input (trainer.keras.input.input_batches's arguments)."""

    shuffle_buffer: int
    read_batch: int
    cycle_length: int
    block_length: int
    cache: str | bool  # False, "memory", INPUTS or a file path prefix
    ram_budget_bytes: int
    record_bytes: int

    def dataset_options(self) -> dict:
        return {
            "shuffle_buffer": self.shuffle_buffer,
            "read_batch": self.read_batch,
            "cycle_length": self.cycle_length,
            "block_length": self.block_length,
            "cache": self.cache,
            "ram_budget_bytes": self.ram_budget_bytes,
        }

    def describe(self) -> str:
        cache = {False: "none", "memory": "memory", INPUTS: "the model inputs, in memory"}.get(
            self.cache, f"file {self.cache}"
        )
        return (
            f"read {self.cycle_length} files at once in runs of {self.read_batch} records "
            f"(block {self.block_length}), shuffle buffer {self.shuffle_buffer} records "
            f"(~{_mb(self.shuffle_buffer * self.record_bytes)} MB), cache {cache}, "
            f"RAM budget {_mb(self.ram_budget_bytes)} MB"
        )


def plan_input(
    manifest: Manifest,
    flags: InputFlags,
    split: str = "train",
    workers: int = 1,
    cache_dir: str | None = None,
    input_bytes: int | None = None,
) -> InputPlan:
    """The knobs for reading `split` on each of `workers` input pipelines; `input_bytes`: the
    bytes of one record's model inputs (None: they do not all have fixed shapes)."""
    budget = (flags.ram_budget_mb * 2**20) if flags.ram_budget_mb else default_ram_budget()
    records = manifest.split_records(split)
    shards = len(manifest.split_files(split))
    record_bytes = record_size(manifest, split)
    shuffle = flags.shuffle_buffer
    if shuffle is None:
        affordable = max(1, budget // 4 // max(1, record_bytes))
        shuffle = max(1, min(DEFAULT_SHUFFLE_BUFFER, records, affordable))
    cycle = flags.cycle_length or default_cycle_length(max(1, shards // max(1, workers)))
    cache: str | bool = False
    if flags.cache == "auto":
        if input_bytes is not None and records * input_bytes <= budget // 4:
            cache = INPUTS
    elif flags.cache == "memory":
        split_bytes = records * record_bytes
        if split_bytes > budget // 2:
            logger.warning(
                "--cache memory: the %s split takes ~%d MB, more than half the input RAM budget "
                "(%d MB): caching to a local file instead",
                split,
                _mb(split_bytes),
                _mb(budget),
            )
            cache = _cache_file(cache_dir, split)
        else:
            cache = "memory"
    elif flags.cache == "disk":
        cache = _cache_file(cache_dir, split)
    read_batch = flags.read_batch or default_read_batch(records)
    if cache == INPUTS and not flags.read_batch:
        read_batch = max(read_batch, MIN_CACHED_RUN)
    return InputPlan(
        shuffle_buffer=shuffle,
        read_batch=read_batch,
        cycle_length=cycle,
        block_length=flags.block_length,
        cache=cache,
        ram_budget_bytes=budget,
        record_bytes=record_bytes,
    )


def default_read_batch(records: int) -> int:
    """Records moved together: DEFAULT_READ_BATCH, one per 2,000 records of a smaller split."""
    return max(1, min(DEFAULT_READ_BATCH, records // 2000))


def default_ram_budget() -> int:
    """A quarter of the machine's memory (at least 256 MB)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 4 * 2**30
    return max(256 * 2**20, total // 4)


def record_size(manifest: Manifest, split: str) -> int:
    """Average bytes of a serialized example of the split."""
    info = manifest.splits[split]
    if manifest.compression == "none" and all(f.bytes is not None for f in info.files):
        total = sum(f.bytes or 0 for f in info.files) - _FRAMING_BYTES * info.records
        return max(1, total // max(1, info.records))
    records = tf.data.TFRecordDataset(
        info.files[0].path, compression_type=manifest.compression_type
    )
    sizes = records.take(SIZE_SAMPLE).map(lambda r: tf.strings.length(r))
    total, n = sizes.reduce((0, 0), lambda acc, size: (acc[0] + size, acc[1] + 1))
    return max(1, int(total) // max(1, int(n)))


def _cache_file(cache_dir: str | None, split: str) -> str:
    folder = cache_dir or tempfile.mkdtemp(prefix="shardflow-cache-")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{split}.cache")


def _mb(n: int) -> int:
    return int(round(n / 2**20))
