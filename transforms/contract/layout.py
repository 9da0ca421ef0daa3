"""The layout of a published dataset: its file names, its compressions and the output defaults.

Written by the ETL and read by the trainer, so defined here once. A dataset is a folder holding
MANIFEST (written last: its presence means the run is complete), one folder of shards per split
(`shard_name`), the rejected records (REJECTED_FILE), STATISTICS, FACTS and, after publication,
REPORT.
No Beam and no TensorFlow here: the trainer's image holds this package.
"""

from __future__ import annotations

import dataclasses

import google_crc32c

FORMAT_VERSION = 1  # of manifest.json
STATISTICS_FORMAT_VERSION = 1  # of statistics.json
FACTS_FORMAT_VERSION = 1  # of facts.json

MANIFEST = "manifest.json"
STATISTICS = "statistics.json"
FACTS = "facts.json"  # what a model is built from, counted over every record (contract.facts)
# statistics.json as TFDV's DatasetFeatureStatisticsList (binary), and the schema inferred from
# the config and the statistics (text format): what `tfdv.load_stats_binary` and
# `tfdv.load_schema_text` read (transforms.validation).
STATISTICS_PROTO = "statistics.pb"
SCHEMA = "schema.pbtxt"
REPORT = "report.html"  # written after publication, from the published dataset
TRANSFORM_DIR = "transform"  # tf.Transform output: transform_fn/, transformed_metadata/
RECORD_SUFFIX = ".tfrecord"
# TFRecord framing: each record is its length (u64) and that length's masked CRC-32C, then the
# data and its masked CRC-32C; a CRC is masked by rotating it right by 15 bits and adding this.
CRC_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes) -> int:
    """The masked CRC-32C of TFRecord framing, of one piece of data."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + CRC_MASK_DELTA) & 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class Compression:
    """One compression of the shards: the file name suffix, the zlib window bits of its stream
    (None: not compressed) and its name for tf.data.TFRecordDataset's `compression_type`."""

    suffix: str
    wbits: int | None
    tf_type: str


# zlib window bits: 31 writes and reads a gzip stream (TF "GZIP"), 15 a zlib stream (TF "ZLIB").
COMPRESSIONS = {
    "gzip": Compression(".gz", 31, "GZIP"),
    "zlib": Compression(".zz", 15, "ZLIB"),
    "none": Compression("", None, ""),
}

DEFAULT_COMPRESSION = "gzip"
DEFAULT_COMPRESSION_LEVEL = 6  # zlib level 1 (fastest) to 9 (smallest); 6 is TensorFlow's
DEFAULT_SHARD_SIZE_MB = 128


def shard_suffix(compression: str) -> str:
    """The file name suffix of a shard: `.tfrecord` and the compression's (`.gz`, `.zz`, none)."""
    return RECORD_SUFFIX + COMPRESSIONS[compression].suffix


def shard_name(split: str, index: int, count: int, suffix: str) -> str:
    """The path of a shard relative to the dataset: `{split}/{split}-{index:05d}-of-{count:05d}`
    followed by `suffix`."""
    return f"{split}/{split}-{index:05d}-of-{count:05d}{suffix}"


# What is published whole is written beside itself first and switched into place: the hidden
# sibling `.NAME.incomplete-ID` while it is written (ID: the run's), `.NAME.replaced-ID` the one
# it replaces until that is deleted. The ETL's OUTPUT and a model folder's outputs are named so.
STAGED_TAG, REPLACED_TAG = ".incomplete-", ".replaced-"


def staged_name(name: str, run: object) -> str:
    """The hidden sibling that `name` is written under by run `run`."""
    return f".{name}{STAGED_TAG}{run}"


def replaced_name(name: str, run: object) -> str:
    """The hidden sibling that the earlier `name` is moved to by run `run` as it publishes."""
    return f".{name}{REPLACED_TAG}{run}"


def staged_of(entry: str) -> str | None:
    """The NAME that a hidden entry `.NAME.incomplete-ID` or `.NAME.replaced-ID` stages or
    replaces; None for any other entry."""
    if not entry.startswith("."):
        return None
    # the tag that comes last is the one the run added: NAME may hold a tag too
    base = max((entry[1:].rpartition(tag)[0] for tag in (STAGED_TAG, REPLACED_TAG)), key=len)
    return base or None


# The spill files of a run, in its staging folder only (deleted before publication).
SPILL_DIR = "_spill"


def segment_name(shard: str, piece: int) -> str:
    """The path of a segment (one piece of a shard, compressed on its own; joined into the shard
    once all are written) relative to the staging folder: under SPILL_DIR, deleted with it.
    `shard` is the shard's `shard_name`."""
    return f"{SPILL_DIR}/segments/{shard}.{piece:05d}"


# The rejected records: one JSON Lines file, named like a single shard of a `rejected` split.
REJECTED_DIR = "rejected"
REJECTED_SUFFIX = ".jsonl"  # rejected records: JSON Lines, uncompressed
REJECTED_FILE = shard_name(REJECTED_DIR, 0, 1, REJECTED_SUFFIX)
