"""One `apt-get` at a time across the suite's worker processes.

The suite runs in several processes (pytest-xdist): two session fixtures installing Debian
packages at once would find dpkg's lock taken and fail. `installing()` holds a file lock for the
whole install, so the second process waits, then finds the package already there.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator

LOCK = os.path.join(tempfile.gettempdir(), "shardflow-tests-apt.lock")


@contextlib.contextmanager
def installing() -> Iterator[None]:
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
