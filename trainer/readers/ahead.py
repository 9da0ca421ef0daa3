"""Work done ahead on a thread: the items of an iterator, made by a thread up to a bound ahead
of the consumer.

Reading (zlib, file reads) and tfx-bsl's decoder let other threads run while they work, so a
reading thread and a decoding thread keep two cores busy in one process. An error of the thread
is raised in the consumer; a consumer that stops early stops the thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

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
