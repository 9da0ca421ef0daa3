"""How a command's process ends."""

from __future__ import annotations

import atexit
import os
import sys


def exit_process(code: int) -> None:
    """Ends the process with `code`, also when TensorFlow was loaded by a tf.Transform.

    After a tf.Transform analysis the interpreter may crash while it tears down TensorFlow's
    objects (exit status 139 after a successful run). With TensorFlow loaded, the exit
    handlers run (logging, temporary files) and the process ends without that teardown.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if "tensorflow" not in sys.modules:
        sys.exit(code)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
