"""The `shardflow` command: dispatches to the ETL, the trainer and the tools.

Subcommands import their module only when called, so `shardflow train` never imports Beam and
`shardflow etl` never imports TensorFlow.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

from pipelines import forkserver

COMMANDS = {
    "etl": ("pipelines.etl", "run", "read sources, write sharded TFRecords and a manifest"),
    "train": ("trainer.task", "main", "train and export a model on a dataset"),
    "inspect": ("trainer.inspect", "main", "summarize a dataset, its statistics and examples"),
    "predict": ("deploy.predict", "main", "predict with a model: new records or a split"),
    "submit": ("deploy.dataflow.submit", "main", "launch the ETL's Dataflow flex template"),
    "launch-training": ("deploy.vertex.launch", "main", "run the trainer as a Vertex AI job"),
    "schedule": (
        "deploy.schedule.cloud_scheduler",
        "main",
        "launch the ETL on a Cloud Scheduler cron",
    ),
}

USAGE = "usage: shardflow {%s} [ARGS ...]\n\n%s" % (
    ",".join(COMMANDS),
    "\n".join(f"  {name:<16} {help_}" for name, (_, _, help_) in COMMANDS.items()),
)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        sys.exit(0 if argv else 2)
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"shardflow: error: unknown command {name!r}\n{USAGE}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # TensorFlow's C++ start-up chatter (CUDA probing, CPU features) is not for users.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    module, func, _ = COMMANDS[name]
    if name == "etl" and forkserver.wanted(rest):
        forkserver.start()  # local worker processes: their server imports Beam meanwhile
    try:
        command = importlib.import_module(module)
        code = getattr(command, func)(rest)
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status for SIGINT, no traceback
        print(f"shardflow {name}: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.stdout.flush()
    sys.stderr.flush()
    # A command module may end the process its own way (`pipelines.etl.exit_process`).
    getattr(command, "exit_process", sys.exit)(code)


if __name__ == "__main__":
    main()
