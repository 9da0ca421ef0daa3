"""Work done ahead on a thread: the items of an iterator, made by a thread up to a bound ahead
of the consumer.

Reading (zlib, file reads) and tfx-bsl's decoder let other threads run while they work, so a
reading thread and a decoding thread keep two cores busy in one process. An error of the thread
is raised in the consumer; a consumer that stops early stops the thread. `parallel_map`
spreads such work over a few threads, keeping the order.
"""

from __future__ import annotations

import collections
import concurrent.futures
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_END = object()
_WAIT = 0.1  # seconds between checks that the consumer still wants items


def ahead(items: Iterator[T], size: int, name: str = "ahead") -> Iterator[T]:
    """The items, made by a thread up to `size` ahead."""
    ready: queue.Queue = queue.Queue(size)
    stop = threading.Event()

    def offer(item: object) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=_WAIT)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
            offer(_END)
        except BaseException as e:  # handed to the consumer, which raises it
            offer(e)

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        # The thread ends at its next offer: wait for it, so that no reading or decoding is
        # left running in native code (ISA-L, tfx-bsl, Arrow) while the process exits.
        if thread is not threading.current_thread():
            thread.join()


def parallel_map(
    function: Callable[[T], R], items: Iterator[T], threads: int, name: str = "parallel"
) -> Iterator[R]:
    """`function` of each item, in the items' order, computed by `threads` threads with up to
    2 * threads items in flight (for work that lets other threads run: tfx-bsl's decoder)."""
    if threads <= 1:
        yield from map(function, items)
        return
    with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix=name) as pool:
        pending: collections.deque = collections.deque()
        try:
            for item in items:
                pending.append(pool.submit(function, item))
                if len(pending) >= 2 * threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
