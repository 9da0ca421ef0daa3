"""TensorFlow's native start-up chatter kept off the terminal.

TensorFlow's C++ libraries write to file descriptor 2 directly, some of it before their logging
is set up (so `TF_CPP_MIN_LOG_LEVEL` cannot hold it back): "All log messages before
absl::InitializeLog() ...", oneDNN and CPU-feature notices, and on a machine without a GPU
driver "failed call to cuInit". `native_log_filtered()` puts a pipe in front of descriptor 2
for the length of a command; a thread passes every line on except those (`NOISE`), so Python's
own messages and TensorFlow's real errors still show. `shardflow train --verbose`, or
`TF_CPP_MIN_LOG_LEVEL=0` in the environment, leaves stderr alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from typing import Iterator

from transforms.ui.safe import masked

NOISE = re.compile(
    rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|[IW]\d{4} [\d:.]+ +\d+ \S+:\d+\] "  # native INFO and WARNING lines
    rb"|E\d{4} [\d:.]+ +\d+ \S+:\d+\] .*(cuInit|CUDA driver|cuda drivers)"
    rb"|To enable the following instructions: "
    rb"|This TensorFlow binary is optimized to use available CPU instructions)"
)


@contextlib.contextmanager
def native_log_filtered() -> Iterator[None]:
    """Descriptor 2 through a filter that drops `NOISE` lines, until the block ends."""
    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    thread = threading.Thread(target=_pass_on, args=(read_end, saved), daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last write end closes: the thread reads to its end
        thread.join(timeout=10)
        os.close(saved)


def _pass_on(read_end: int, out: int) -> None:
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        for line in _lines(pipe):
            if NOISE.match(line):
                continue
            try:  # TensorFlow's C++ names paths as given: a password in one is masked
                os.write(
                    out,
                    masked(line.decode("utf-8", "surrogateescape")).encode(
                        "utf-8", "surrogateescape"
                    ),
                )
            except OSError:  # stderr went away (a closed pipe): keep draining, or writers block
                pass


def _lines(pipe) -> Iterator[bytes]:
    """The pipe's lines as they come (a last line without a newline too)."""
    pending = b""
    while chunk := pipe.read(65536):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line + b"\n"
    if pending:
        yield pending
