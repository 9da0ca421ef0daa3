"""Work done ahead on a thread: every item in order, the thread's error raised in the consumer,
and a consumer that stops early stops the thread."""

from __future__ import annotations

import itertools
import threading

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
    thread = next(t for t in threading.enumerate() if t.name == "stops-early")
    thread.join(timeout=5)
    assert not thread.is_alive() and len(made) < 10
