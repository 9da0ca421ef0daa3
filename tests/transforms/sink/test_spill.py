"""SpillFile files: what is spilled is read back, a shard's slice at a time, exactly."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.transforms.keyed import key_rows, keys_of
from transforms.records import EncodedChunk
from transforms.shards import sorted_records
from transforms.sink import spill
from transforms.sink.spill import shard_parts
from transforms.split import shard_bounds, shard_of


def _chunk(rng: random.Random, n: int, keyed: bool, equal_hashes: bool = False) -> EncodedChunk:
    if equal_hashes:  # long runs of one hash: they cross the fence's blocks
        hashes = [rng.choice([1 << 40, (1 << 63) + 7, (1 << 64) - 1]) for _ in range(n)]
    else:
        hashes = [rng.getrandbits(64) for _ in range(n)]
    keys = [
        rng.choice(["k", "ключ\n", "a\u2028b", '"q"']) + str(rng.randrange(50)) for _ in range(n)
    ]
    orders = [(rng.randrange(2), f"path/{rng.randrange(3)}", rng.randrange(1000)) for _ in keys]
    return EncodedChunk(
        np.array([rng.randrange(3) for _ in range(n)], np.int16),
        np.array(hashes, np.uint64),
        keys_of(keys, orders) if keyed else None,
        [bytes(rng.randrange(256) for _ in range(rng.randrange(30))) for _ in range(n)],
    )


def _records(chunks, split, shard, count, keyed):
    """(hash, key, order, payload) of the records of one shard, straight from the chunks."""
    out = []
    for c in chunks:
        dest = shard_of(c.order_hash, count)
        keys = key_rows(c.keys) or [(None, None)] * len(c)
        for i in np.flatnonzero((c.split == split) & (dest == shard)).tolist():
            out.append((int(c.order_hash[i]), *keys[i], c.payload[i]))
    return sorted(out, key=lambda r: (r[0], r[1] or "", r[2] or (), r[3]))


@pytest.mark.parametrize("keyed, equal_hashes", [(True, False), (False, False), (True, True)])
def test_every_shard_reads_back_exactly_its_records(tmp_path, monkeypatch, keyed, equal_hashes):
    monkeypatch.setattr(spill, "FENCE_STRIDE", 16)  # many fence blocks in a small run
    rng = random.Random(3)
    chunks = [_chunk(rng, n, keyed, equal_hashes) for n in (700, 0, 1, 300)]
    written = list(spill.write_spill_files(chunks[:2], str(tmp_path), keyed))
    written += list(spill.write_spill_files(chunks[2:], str(tmp_path), keyed))
    assert sorted(r.split for r in written) == [0, 0, 1, 1, 2, 2]
    for split in range(3):
        split_runs = [r for r in written if r.split == split]
        total = sum(r.records for r in split_runs)
        assert total == sum(int((c.split == split).sum()) for c in chunks)
        for count in (1, 2, 3, 7, 64):
            seen = 0
            for shard in range(count):
                parts = shard_parts(split_runs, *shard_bounds(shard, count))
                got = [
                    (int(h), *key, pay)
                    for p in parts
                    for h, key, pay in zip(
                        p.order_hash,
                        key_rows(p.keys) or [(None, None)] * len(p.payload),
                        p.payload.to_pylist(),
                    )
                ]
                got.sort(key=lambda r: (r[0], r[1] or "", r[2] or (), r[3]))
                assert got == _records(chunks, split, shard, count, keyed), (split, shard, count)
                seen += len(got)
            assert seen == total


def test_a_shard_from_runs_equals_the_shard_from_the_chunks(tmp_path):
    from transforms.split import record_hash

    rng = random.Random(8)
    chunks = [_chunk(rng, 500, keyed=True) for _ in range(3)]
    for c in chunks:  # a key's records share its hash, as in a dataset: duplicates meet
        c.order_hash = np.array(
            [record_hash(k.encode())[1] for k, _ in key_rows(c.keys)], np.uint64
        )
    written = list(spill.write_spill_files(chunks, str(tmp_path), keyed=True))
    from transforms.shards import route_chunk

    for shard in range(4):
        direct = [
            part for c in chunks for dest, part in route_chunk(c, [4, 4, 4]) if dest == (1, shard)
        ]
        spilled = shard_parts([r for r in written if r.split == 1], *shard_bounds(shard, 4))
        a, b = sorted_records(direct), sorted_records(spilled)
        assert a[0].to_pylist() == b[0].to_pylist() and a[1] == b[1] > 0


def test_shard_bounds_agree_with_shard_of():
    rng = random.Random(1)
    for count in (1, 2, 3, 5, 7, 1000, 65537):
        for shard in {0, 1 % count, count // 2, count - 1}:
            low, high = shard_bounds(shard, count)
            edges = [low, low + 1, (high or 1 << 64) - 1] + [
                rng.randrange(low, high or 1 << 64) for _ in range(20)
            ]
            assert (shard_of(np.array(edges, np.uint64), count) == shard).all()
            if low:
                assert shard_of(np.array([low - 1], np.uint64), count)[0] == shard - 1
            if high is not None:
                assert shard_of(np.array([high], np.uint64), count)[0] == shard + 1


def test_a_truncated_run_file_is_an_error_naming_it(tmp_path):
    rng = random.Random(2)
    (run, *_) = spill.write_spill_files([_chunk(rng, 50, keyed=False)], str(tmp_path), keyed=False)
    with open(run.path, "r+b") as f:
        f.truncate(run.payload_bytes // 2)
    with pytest.raises(OSError, match="truncated"):
        spill.read_slice(run, 0, None)


@pytest.mark.parametrize("count, pieces", [(1, 1), (1, 5), (3, 4), (7, 2)])
def test_shard_pieces_cover_the_shard_in_order(count, pieces):
    from transforms.shards import shard_pieces

    for shard in range(count):
        low, high = shard_bounds(shard, count)
        got = list(shard_pieces(shard, count, pieces))
        assert len(got) == pieces and got[0][0] == low and got[-1][1] == high
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(got, got[1:]))


def test_a_shard_written_in_pieces_holds_the_records_of_the_shard_written_whole(tmp_path):
    import gzip
    import threading

    from transforms.contract.config import OutputSpec
    from transforms.records import PieceTask
    from transforms.sink.write import WritePieceFn, join_shard
    from transforms.split import record_hash

    rng = random.Random(4)
    chunks = [_chunk(rng, 400, keyed=True) for _ in range(3)]
    for c in chunks:
        c.order_hash = np.array(
            [record_hash(k.encode())[1] for k, _ in key_rows(c.keys)], np.uint64
        )
    spills = list(spill.write_spill_files(chunks, str(tmp_path / "runs"), keyed=True))
    output = OutputSpec(path=str(tmp_path / "out"), compression="gzip", shard_size_mb=1)
    facts, framed = [], []
    for pieces in (1, 9):
        staging = str(tmp_path / f"staging{pieces}")
        fn = WritePieceFn(staging, ["train", "eval", "test"], output)
        written = [
            fn._write(PieceTask(0, 1, 2, pieces, piece), spills, threading.Event())
            for piece in range(pieces)
        ]
        shard = join_shard((written[0]["path"], written), staging, output)
        facts.append((shard.split, shard.path, shard.records, shard.duplicates))
        framed.append(gzip.decompress(open(f"{staging}/{shard.path}", "rb").read()))
    assert facts[0][3] > 0 and facts[0][2] > 0
    assert facts[0] == facts[1] and framed[0] == framed[1]


@pytest.mark.parametrize("keys", ["varied", "empty"])
def test_keys_and_provenance_read_back_exactly(tmp_path, monkeypatch, keys):
    monkeypatch.setattr(spill, "FENCE_STRIDE", 8)
    rng = random.Random(12)
    n = 400
    texts = [
        "" if keys == "empty" else rng.choice(["", "k", "ключ\n", "a\u2028b", '"q"', "🎁"]) + str(i)
        for i in range(n)
    ]
    paths = ["a.csv", "dir/é.csv", "bad\udcff.csv", "gs://b/x y.jsonl", '"[q]"\n.csv']
    orders = [(rng.randrange(4), rng.choice(paths), rng.randrange(2**62)) for _ in range(n)]
    hashes = np.array([rng.getrandbits(64) >> rng.choice([0, 62]) for _ in range(n)], np.uint64)
    chunk = EncodedChunk(
        np.zeros(n, np.int16), hashes, keys_of(texts, orders), [b"p%d" % i for i in range(n)]
    )
    (written,) = spill.write_spill_files([chunk], str(tmp_path), keyed=True)
    assert written.keyed and written.key_bytes == sum(len(t.encode()) for t in texts)
    by_hash = sorted(range(n), key=lambda i: hashes[i])  # stable: ties stay in input order
    expected = [(int(hashes[i]), texts[i], orders[i], b"p%d" % i) for i in by_hash]
    for low, high in [(0, None), (0, 4), (3, 1 << 40), (1 << 40, 1 << 63), (1 << 63, None)]:
        part = spill.read_slice(written, low, high)
        got = []
        if part is not None:
            rows = zip(part.order_hash.tolist(), key_rows(part.keys), part.payload.to_pylist())
            got = [(h, key, order, payload) for h, (key, order), payload in rows]
        assert got == [r for r in expected if low <= r[0] < (high or 1 << 64)], (low, high)
