"""Work done ahead on a thread: every item in order, the thread's error raised in the consumer,
and a consumer that stops early stops the thread and waits for it to end."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from trainer.readers.ahead import ahead


def test_items_come_in_order():
    assert list(ahead(iter(range(100)), 3)) == list(range(100))


def test_an_error_of_the_thread_is_raised_to_the_consumer():
    def items():
        yield 1
        raise OSError("disk gone")

    got = ahead(items(), 2)
    assert next(got) == 1
    with pytest.raises(OSError, match="disk gone"):
        next(got)


def test_a_consumer_that_stops_early_stops_the_thread():
    made = []

    def endless():
        for i in itertools.count():
            made.append(i)
            yield i

    got = ahead(endless(), 2, name="stops-early")
    assert [next(got) for _ in range(5)] == [0, 1, 2, 3, 4]
    got.close()
    assert not [t for t in threading.enumerate() if t.name == "stops-early"]
    assert len(made) < 10


def test_closing_the_consumer_waits_for_the_thread_to_end():
    # A thread left running in native code (inflating, decoding) while the process exits may
    # abort it ("terminate called without an active exception"): close() returns only once
    # the thread is gone, even in the middle of making an item.
    def slow():
        for i in itertools.count():
            time.sleep(0.05)  # an item's work, not interrupted by the stop
            yield i

    got = ahead(slow(), 2, name="slow-items")
    assert next(got) == 0
    got.close()
    assert not [t for t in threading.enumerate() if t.name == "slow-items"]


@pytest.mark.parametrize("threads", [1, 3])
def test_parallel_map_keeps_the_order(threads):
    from trainer.readers.ahead import parallel_map

    assert list(parallel_map(lambda x: x * x, iter(range(50)), threads)) == [
        x * x for x in range(50)
    ]


def test_parallel_map_raises_the_error_of_an_item():
    from trainer.readers.ahead import parallel_map

    def work(x):
        if x == 7:
            raise ValueError("item 7")
        return x

    got = parallel_map(work, iter(range(20)), 2)
    assert [next(got) for _ in range(7)] == list(range(7))
    with pytest.raises(ValueError, match="item 7"):
        next(got)
