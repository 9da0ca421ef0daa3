"""Beam's options from the leftover flags, and the tuning a run derives from its runner: how
many records it works on at once, the shard pieces and encoder threads of a worker process, the
bytes a worker gathers before it spills."""

from __future__ import annotations

import os
import re

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    WorkerOptions,
)

from transforms.prepare import ENCODE_THREADS
from transforms.tuning import SPILL_BYTES, WRITE_THREADS

# The DirectRunner of Beam 2.77 first tries the Prism runner, which downloads a binary (no
# network here) and then falls back to the FnApiRunner; we go to the FnApiRunner directly. It
# honours --direct_num_workers and --direct_running_mode like the DirectRunner.
_LOCAL_RUNNERS = {None, "DirectRunner", "direct", "directrunner"}


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Beam options from the leftover flags, with the local runner made explicit."""
    options = PipelineOptions(beam_args)
    standard = options.view_as(StandardOptions)
    if standard.runner in _LOCAL_RUNNERS:
        standard.runner = "FnApiRunner"
    return options


def parallelism(options: PipelineOptions) -> int:
    """How many records the runner works on at once: the local runner's worker processes or
    threads, or Dataflow's largest worker count times the vCPUs of its machine type."""
    runner = options.view_as(StandardOptions).runner
    if runner == "FnApiRunner":
        direct = options.view_as(DirectOptions)
        if direct.direct_running_mode == "in_memory":
            return 1
        return direct.direct_num_workers or os.cpu_count() or 1
    if runner == "DataflowRunner":
        workers = options.view_as(WorkerOptions)
        count = workers.max_num_workers or workers.num_workers or 1
        vcpus = re.search(r"-(\d+)$", workers.machine_type or "")
        return count * (int(vcpus.group(1)) if vcpus else 1)
    return 1


def write_threads(options: PipelineOptions) -> int:
    """Shard pieces each worker process writes at once: the cores shared among local worker
    processes (so that 16 of them on 16 cores do not each run 4), else `WRITE_THREADS` (at most
    one per core of the worker's machine, as the writer sees it there)."""
    local = _local_processes(options)
    return (
        WRITE_THREADS if local == 1 else max(1, min(WRITE_THREADS, (os.cpu_count() or 1) // local))
    )


def encode_threads(options: PipelineOptions) -> int:
    """Helper threads of each worker's encoder: none where local worker processes already
    outnumber half the cores, else `ENCODE_THREADS`."""
    return 0 if _local_processes(options) > (os.cpu_count() or 1) // 2 else ENCODE_THREADS


def _local_processes(options: PipelineOptions) -> int:
    """Worker processes of this run on this machine, beside each other (1: one, or remote)."""
    direct = options.view_as(DirectOptions)
    if parallelism(options) > 1 and direct.direct_running_mode == "multi_processing":
        return parallelism(options)
    return 1


def spill_bytes(options: PipelineOptions) -> int:
    """Encoded bytes a worker process gathers before it sorts and spills them: `SPILL_BYTES`,
    halved where local worker processes outnumber half the cores (a worker holds about 2.7 times
    this above its code)."""
    return (
        SPILL_BYTES // 2 if _local_processes(options) > (os.cpu_count() or 1) // 2 else SPILL_BYTES
    )
