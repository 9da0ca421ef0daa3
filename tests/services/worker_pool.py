"""Beam's external SDK worker pool served on 127.0.0.1, as a script of its own.

Run as `python worker_pool.py --port_file FILE` by any interpreter that has Apache Beam: it imports
nothing of this repository (a clean worker environment copies this file and runs it from an
empty folder, tests/services/clean_env.py). The same servicer as
`python -m apache_beam.runners.worker.worker_pool_main`, which binds every interface; each
StartWorker request starts an SDK harness process with the `python` found on PATH.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import signal
import sys

HOST = "127.0.0.1"


def serve_worker_pool(port_file: str) -> None:
    """Serves the pool on a free port of 127.0.0.1, written to `port_file` once it listens."""
    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2_grpc
    from apache_beam.runners.worker.worker_pool_main import (
        BeamFnExternalWorkerPoolServicer,
        kill_process_gracefully,
    )
    from apache_beam.utils import thread_pool_executor

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    pool = BeamFnExternalWorkerPoolServicer(use_process=True, data_buffer_time_limit_ms=-1)
    server = grpc.server(
        thread_pool_executor.shared_unbounded_instance(),
        options=[("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)],
    )
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
    port = server.add_insecure_port(f"{HOST}:0")
    server.start()
    atexit.register(lambda: [kill_process_gracefully(p) for p in pool._worker_processes.values()])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # run the exit handlers
    with open(port_file + ".tmp", "w") as f:
        f.write(str(port))
    os.replace(port_file + ".tmp", port_file)
    logging.getLogger(__name__).info("worker pool serving on %s:%d", HOST, port)
    server.wait_for_termination()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=serve_worker_pool.__doc__)
    parser.add_argument("--port_file", required=True)
    serve_worker_pool(parser.parse_args().port_file)
