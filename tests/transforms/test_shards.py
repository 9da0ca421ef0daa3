"""Shard sizing, routing, canonical order and duplicate dropping."""

from tests.transforms.keyed import key_rows, keys_of
from transforms.shards import ShardPart, route_chunk, shard_counts, sorted_records


def test_shard_counts_follow_bytes_and_never_drop_to_zero():
    assert shard_counts({0: 250, 2: 100}, 3, 100.0) == [3, 1, 1]


def _sorted(parts):
    payloads, duplicates = sorted_records(parts)
    return payloads.to_pylist(), duplicates


def test_sorted_records_order_is_independent_of_part_order_and_drops_later_duplicates():
    p1 = ShardPart([5, 1], keys_of(["k5", "k1"], [(0, "f", 3), (0, "f", 1)]), [b"e", b"a"])
    p2 = ShardPart([5, 3], keys_of(["k5", "k3"], [(0, "f", 0), (1, "g", 0)]), [b"e-first", b"c"])
    assert _sorted([p1, p2]) == ([b"a", b"c", b"e-first"], 1)
    assert _sorted([p2, p1]) == ([b"a", b"c", b"e-first"], 1)


def test_ties_are_ordered_by_key_then_provenance_whatever_the_input_order():
    hashes, payloads = [7, 7, 7, 1], [b"b9", b"a5", b"b2", b"z1"]
    keys = ["b", "a", "b", "z"]
    orders = [(0, "f", 9), (0, "f", 5), (0, "f", 2), (0, "f", 1)]
    parts = [ShardPart(hashes, keys_of(keys, orders), payloads)]
    assert _sorted(parts) == ([b"z1", b"a5", b"b2"], 1)
    reversed_part = ShardPart(hashes[::-1], keys_of(keys[::-1], orders[::-1]), payloads[::-1])
    assert _sorted([reversed_part]) == ([b"z1", b"a5", b"b2"], 1)


def test_route_chunk_groups_records_by_split_and_shard_in_order():
    import numpy as np

    from transforms.records import EncodedChunk

    top = 1 << 63
    chunk = EncodedChunk(
        np.array([1, 0, 1, 0], np.int16),
        np.array([top + 5, 3, 7, top + 1], np.uint64),
        keys_of(["d", "a", "c", "b"], [(0, "f", i) for i in range(4)]),
        [b"p0", b"p1", b"p2", b"p3"],
    )
    routed = [
        (
            dest,
            part.payload.to_pylist(),
            [k for k, _ in key_rows(part.keys)],
            part.order_hash.tolist(),
        )
        for dest, part in route_chunk(chunk, [2, 1])
    ]
    assert routed == [
        ((0, 0), [b"p1"], ["a"], [3]),
        ((0, 1), [b"p3"], ["b"], [top + 1]),
        ((1, 0), [b"p0", b"p2"], ["d", "c"], [top + 5, 7]),
    ]


def test_without_key_equal_hashes_are_all_kept():
    p = ShardPart([2, 2, 1], None, [b"y", b"x", b"w"])
    assert _sorted([p]) == ([b"w", b"x", b"y"], 0)
