"""WriteShards alone on the in-process runner: one file per planned shard, each holding exactly
its records in order with a key's later duplicates dropped, whole or joined from many pieces,
facts that match the files, and the same bytes however small the spills are and however many
worker processes write them."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
import struct
import zlib
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import BeamAssertException, assert_that, equal_to
from xxhash import xxh3_128_intdigest

from pipelines.config.loader import parse_config
from tests.transforms.keyed import keys_of
from transforms.contract.layout import SPILL_DIR, shard_name, shard_suffix
from transforms.prepare_records import PrepareRecords
from transforms.records import EncodedChunk
from transforms.sink.write import WriteShards
from transforms.sources.read import ReadSource

SPLITS = ("train", "eval")
KEYS = 200
DUPLICATES = 20  # keys k000 ... k019 come twice
PIECE_BYTES = 100  # about 10 pieces a shard
INFLATE = {"gzip": gzip.decompress, "zlib": zlib.decompress, "none": lambda data: data}
TWO_PROCESSES = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _dataset(compression: str = "gzip"):
    return parse_config(
        {
            "name": "w",
            "sources": [{"name": "a", "format": "csv", "path": "a.csv"}],
            "key": "id",
            "features": {"id": {"type": "string"}},
            "splits": {"train": 0.5, "eval": 0.5},
            # shards of 1 KiB: several a split
            "output": {"path": "out", "shard_size_mb": 0.001, "compression": compression},
        },
        base_dir="/cfg",
    )


def _records() -> list[tuple[int, int, str, tuple, bytes]]:
    """(split, order hash, key, provenance, payload) of every input record, shuffled.

    Split and order hash come from the key's 128-bit XXH3 as the ETL makes them; a duplicate
    of a key has a different provenance and payload, and sometimes the smaller provenance.
    """
    out = []
    for i in range(KEYS + DUPLICATES):
        key = f"k{i % KEYS:03d}"
        h = xxh3_128_intdigest(key.encode())
        split, order_hash = int(h >> 64 >= 1 << 63), h & ((1 << 64) - 1)
        # an even duplicate comes from line 1, before its key's first record: it is kept
        line = i + 2 if i < KEYS or i % 2 else 1
        payload = f"{key}@{line}:".encode() + bytes(range(i % 41))
        out.append((split, order_hash, key, (0, "in.csv", line), payload))
    random.Random(5).shuffle(out)
    return out


def _chunks(records) -> list[EncodedChunk]:
    """The records as encoded chunks of 37 (the last shorter)."""
    chunks = []
    for start in range(0, len(records), 37):
        part = records[start : start + 37]
        chunks.append(
            EncodedChunk(
                np.array([r[0] for r in part], np.int16),
                np.array([r[1] for r in part], np.uint64),
                keys_of([r[2] for r in part], [r[3] for r in part]),
                pa.array([r[4] for r in part], pa.binary()),
            )
        )
    return chunks


def _expected_shards(
    records, shard_bytes, compression: str = "gzip"
) -> dict[str, tuple[str, list[bytes], int]]:
    """Shard path -> (split, payloads in order, duplicates dropped), from the documented rules.

    A split has ceil(payload bytes / shard size) shards (at least one); a record's shard is
    (high 32 bits of its order hash * shards) >> 32; a shard holds its records by (order hash,
    key, provenance), the first record of each key only.
    """
    out = {}
    for split, name in enumerate(SPLITS):
        mine = sorted((r for r in records if r[0] == split), key=lambda r: (r[1], r[2], r[3]))
        count = max(1, math.ceil(sum(len(r[4]) for r in mine) / shard_bytes))
        for shard in range(count):
            rows = [r for r in mine if ((r[1] >> 32) * count) >> 32 == shard]
            kept = [r for j, r in enumerate(rows) if j == 0 or rows[j - 1][2] != r[2]]
            path = shard_name(name, shard, count, shard_suffix(compression))
            out[path] = (name, [r[4] for r in kept], len(rows) - len(kept))
    return out


def _tfrecords(data: bytes) -> list[bytes]:
    """The payloads of TFRecord framing: length (u64), its CRC (u32), data, data's CRC (u32)."""
    out, at = [], 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        out.append(data[at + 12 : at + 12 + length])
        at += 16 + length
    assert at == len(data)
    return out


def _facts_match_files(staging: str):
    """A matcher: each shard's facts give the size and SHA-256 of its file as written."""

    def check(facts):
        for fact in facts:
            data = Path(staging, fact.path).read_bytes()
            if (fact.bytes, fact.sha256) != (len(data), hashlib.sha256(data).hexdigest()):
                raise BeamAssertException(f"{fact.path}: facts do not match the file: {fact}")

    return check


def _write(staging: Path, chunks, expected, compression="gzip", flags=(), **sizes):
    """WriteShards of `chunks` under `staging`, checking the facts; `sizes`: its spill_bytes and
    piece_bytes; `flags`: Beam's (worker processes)."""
    dataset = _dataset(compression)
    counts = [sum(1 for v in expected.values() if v[0] == name) for name in SPLITS]
    options = PipelineOptions(list(flags))
    with TestPipeline(runner="FnApiRunner", options=options) as p:
        facts, shard_counts = p | beam.Create(chunks) | WriteShards(dataset, str(staging), **sizes)
        assert_that(
            facts | beam.Map(lambda f: (f.split, f.path, f.records, f.duplicates)),
            equal_to([(s, path, len(rows), d) for path, (s, rows, d) in expected.items()]),
            label="CheckFacts",
        )
        assert_that(facts, _facts_match_files(str(staging)), label="CheckFiles")
        assert_that(shard_counts, equal_to([counts]), label="CheckCounts")


def _shard_files(staging: Path) -> dict[str, bytes]:
    return {
        p.relative_to(staging).as_posix(): p.read_bytes()
        for p in staging.rglob("*")
        if p.is_file() and SPILL_DIR not in p.relative_to(staging).parts
    }


def test_write_shards_writes_every_planned_shard_with_exactly_its_records(tmp_path):
    records = _records()
    shard_bytes = _dataset().output.shard_size_mb * 1024 * 1024
    expected = _expected_shards(records, shard_bytes)
    # the data gives several shards a split and duplicates to drop
    assert [sum(1 for v in expected.values() if v[0] == s) for s in SPLITS] == [3, 3]
    assert sum(d for _, _, d in expected.values()) == DUPLICATES
    _write(tmp_path / "staging", _chunks(records), expected)
    files = _shard_files(tmp_path / "staging")
    assert sorted(files) == sorted(expected)
    for path, (_, payloads, _) in expected.items():
        assert _tfrecords(gzip.decompress(files[path])) == payloads, path
    written = sum(len(rows) for _, rows, _ in expected.values())
    assert written == len(records) - DUPLICATES == KEYS


def test_small_spills_write_the_same_bytes_as_the_default(tmp_path):
    records = _records()
    chunks = _chunks(records)
    expected = _expected_shards(records, _dataset().output.shard_size_mb * 1024 * 1024)
    _write(tmp_path / "default", chunks, expected)
    _write(tmp_path / "small", chunks, expected, spill_bytes=1)  # one spill per chunk and split
    spills = {
        name: sorted((tmp_path / name / SPILL_DIR).iterdir()) for name in ("default", "small")
    }
    assert len(spills["small"]) == sum(len(set(c.split.tolist())) for c in chunks) == 12
    assert len(spills["default"]) < len(spills["small"])
    default, small = _shard_files(tmp_path / "default"), _shard_files(tmp_path / "small")
    assert sorted(small) == sorted(default) == sorted(expected)
    assert all(small[path] == default[path] for path in default)


def _segments(staging: Path) -> list[str]:
    return sorted(p.name for p in (staging / SPILL_DIR / "segments").rglob("*") if p.is_file())


@pytest.mark.parametrize("compression", ["gzip", "zlib", "none"])
def test_shards_joined_from_many_pieces_hold_exactly_their_records(tmp_path, compression):
    records = _records()
    shard_bytes = _dataset().output.shard_size_mb * 1024 * 1024
    expected = _expected_shards(records, shard_bytes, compression)
    staging = tmp_path / "staging"
    _write(staging, _chunks(records), expected, compression, piece_bytes=PIECE_BYTES)
    files = _shard_files(staging)
    assert sorted(files) == sorted(expected)
    for path, (_, payloads, _) in expected.items():
        assert _tfrecords(INFLATE[compression](files[path])) == payloads, path
    # every shard was joined from its pieces' segments
    assert len(_segments(staging)) >= 8 * len(expected)


def test_the_bytes_are_the_same_whatever_the_spills_and_the_worker_processes(tmp_path):
    records = _records()
    chunks = _chunks(records)
    expected = _expected_shards(records, _dataset().output.shard_size_mb * 1024 * 1024)
    runs = {
        "one": {},
        "small": {"spill_bytes": 1},  # one spill per chunk and split
        "processes": {"flags": TWO_PROCESSES},
    }
    for name, extra in runs.items():
        _write(tmp_path / name, chunks, expected, piece_bytes=PIECE_BYTES, **extra)
    files = {name: _shard_files(tmp_path / name) for name in runs}
    assert sorted(files["one"]) == sorted(expected)
    assert files["small"] == files["one"] and files["processes"] == files["one"]
    assert _segments(tmp_path / "small") == _segments(tmp_path / "one")


def _keyed_inputs(folder: Path) -> None:
    """A CSV and a JSON Lines file keyed by id: duplicates within and across them, ids written
    with leading zeros and signs, unicode and multi-line text, and records without a key."""
    rng = random.Random(2026)
    names = ["ann", "Zürich", "東京", 'q"u,o\nte', "", "a\u2028b"]
    lines = ["id,name,sid"]
    for _ in range(3000):
        k = rng.randrange(1200)
        key = rng.choice([str(k), f"00{k}", f" +{k}", str(k), "", "x1"])
        name = rng.choice(names).replace('"', '""')
        lines.append(f'{key},"{name}",s{rng.randrange(900)}{rng.choice(["", "é", " "])}')
    (folder / "a.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = []
    for _ in range(1500):
        k = rng.randrange(1500)
        key = rng.choice([k, str(k), f"0{k}", None])
        sid = rng.choice([f"s{k % 900}", k % 900, f"s{k % 900}é"])
        rows.append(json.dumps({"id": key, "name": rng.choice(names), "sid": sid}))
    (folder / "b.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")


def _keyed_shards(folder: Path, key: str) -> dict[str, str]:
    """The start of the SHA-256 of the TFRecords of every shard of the keyed inputs, read,
    prepared and written by the ETL's steps (one spill file per chunk and split)."""
    _keyed_inputs(folder)
    features = {"id": {"type": "int"}, "name": {"type": "string"}}
    if key == "id":
        features["sid"] = {"type": "string"}
    dataset = parse_config(
        {
            "name": "golden",
            "sources": [
                {"name": "a", "format": "csv", "path": "a.csv"},
                {"name": "b", "format": "jsonl", "path": "b.jsonl"},
            ],
            "key": key,
            "features": features,
            "splits": {"train": 0.6, "eval": 0.4},
            "output": {"path": "out", "shard_size_mb": 0.02},
        },
        base_dir=str(folder),
    )
    staging = folder / "staging"
    with TestPipeline(runner="FnApiRunner") as p:
        read = [p | f"Read {s.name}" >> ReadSource(s) for s in dataset.sources]
        encoded, _, _, _ = (
            [chunks for chunks, _, _ in read]
            | beam.Flatten()
            | PrepareRecords(dataset, str(staging))
        )
        _ = encoded | WriteShards(dataset, str(staging), 1)
    return {
        path.removesuffix(".tfrecord.gz"): hashlib.sha256(gzip.decompress(data)).hexdigest()[:16]
        for path, data in _shard_files(staging).items()
    }


# Written by the ETL before keys were made a column at a time (commit 0efa247), from the same
# inputs: the keys, their hashes, the record kept of each key and the order are unchanged.
KEYED_SHARDS = {
    "id": {
        "eval/eval-00000-of-00004": "496c30fa44ad8a76",
        "eval/eval-00001-of-00004": "aa8b678dee1a88a9",
        "eval/eval-00002-of-00004": "c8fecc7e05d8365f",
        "eval/eval-00003-of-00004": "246287c2b54c0f39",
        "train/train-00000-of-00005": "3c06bd0d71ac6605",
        "train/train-00001-of-00005": "b5ff218226d6ba49",
        "train/train-00002-of-00005": "eccadaa1cc844e99",
        "train/train-00003-of-00005": "da4489b00597686b",
        "train/train-00004-of-00005": "50af4e3b7c9a60e7",
    },
    "sid": {
        "eval/eval-00000-of-00002": "4bc30209e9e73230",
        "eval/eval-00001-of-00002": "72a22ec671ece783",
        "train/train-00000-of-00003": "b7f3a2bb13aa22a1",
        "train/train-00001-of-00003": "c94adf23fc56abba",
        "train/train-00002-of-00003": "63f0fa73ee1ba4b5",
    },
}


@pytest.mark.parametrize("key", ["id", "sid"])  # an int key feature; a text key, no feature
def test_keyed_shards_are_byte_identical_to_those_of_the_per_record_keys(tmp_path, key):
    assert _keyed_shards(tmp_path, key) == KEYED_SHARDS[key]
