"""`shardflow` with a pause just before publication, for tests that kill or race a run there.

    python -m tests.services.pause FLAG etl --config ...

runs `shardflow etl ...` with a `before_publish` hook (`pipelines.etl.run`): once the run has
staged its whole dataset, it creates FLAG (holding its pid) and waits until FLAG is removed (at
most a minute) before it publishes. The pause runs in the process that publishes: the default
in-process runner, not worker processes.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from pipelines import etl


def pause_on(flag: str | Path, timeout: float = 60.0):
    """A `before_publish` hook: creates `flag` and waits until it is removed (or `timeout`)."""

    def pause() -> None:
        Path(flag).write_text(str(os.getpid()))
        deadline = time.monotonic() + timeout
        while os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.01)

    return pause


if __name__ == "__main__":
    if sys.argv[2:3] != ["etl"]:
        raise SystemExit("usage: python -m tests.services.pause FLAG etl --config ...")
    etl.exit_process(etl.run(sys.argv[3:], before_publish=pause_on(sys.argv[1])))
