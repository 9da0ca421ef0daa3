"""The `shardflow` command: dispatches to the ETL, the trainer and the tools.

Subcommands import their module only when called, so `shardflow train` never imports Beam and
`shardflow etl` never imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys

from pipelines.runner import forkserver, quiet
from transforms.ui.safe import mask_logs
from transforms.ui.suggest import did_you_mean

# name -> (module, its entry point, the module:function of its argument parser, summary). The
# parser's module imports neither Beam nor TensorFlow: `shardflow NAME --help` answers at once.
COMMANDS = {
    "etl": ("pipelines.etl", "run", "pipelines.flags:build_parser",
            "read sources, write sharded TFRecords and a manifest"),
    "validate": ("pipelines.validate", "main", "pipelines.validate:build_parser",
                 "recompute a dataset's anomalies against a schema and a baseline"),
    "train": ("trainer.task", "main", "trainer.flags:build_parser",
              "train and export a model on a dataset"),
    "inspect": ("trainer.inspect", "main", "trainer.flags:inspect_parser",
                "summarize a dataset, its statistics and examples"),
    "predict": ("deploy.predict", "main", "deploy.predict:build_parser",
                "predict with a model: new records or a split"),
    "submit": ("deploy.dataflow.submit", "main", "deploy.dataflow.submit:build_parser",
               "launch the ETL's Dataflow flex template"),
    "launch-training": ("deploy.vertex.launch", "main", "deploy.vertex.launch:build_parser",
                        "run the trainer as a Vertex AI job"),
    "schedule": ("deploy.schedule.cloud_scheduler", "main",
                 "deploy.schedule.cloud_scheduler:build_parser",
                 "launch the ETL on a Cloud Scheduler cron"),
    "init": ("pipelines.init", "main", "pipelines.init:build_parser",
             "write a commented config inferred from sample files"),
}  # fmt: skip

# What a Ctrl-C that ends a command leaves behind, told after "interrupted": whether the rerun
# starts from nothing or from what was kept. The ETL publishes a dataset whole or not at all
# (its own Ctrl-C line, `pipelines.etl.run`, says the same); the trainer keeps its checkpoints
# (every epoch, or every --checkpoint-every steps) and its run.json, so the same command resumes.
INTERRUPTED = {
    "etl": "nothing published",  # as `pipelines.etl.run` says of a Ctrl-C while it runs
    "train": "checkpoints kept; rerun the same command to resume (or --fresh to start anew)",
}

# The commands that run TensorFlow in this process (the ETL for a `transform:` section): its
# native chatter is filtered (`pipelines.runner.quiet`) unless --verbose.
TENSORFLOW_COMMANDS = ("train", "inspect", "predict", "etl")

USAGE = "usage: shardflow [--version] {%s} [ARGS ...]\n\n%s\n\n%s" % (
    ",".join(COMMANDS),
    "\n".join(f"  {name:<16} {help_}" for name, (_, _, _, help_) in COMMANDS.items()),
    "`shardflow COMMAND --help` describes a command, e.g. `shardflow etl --help`.",
)


def version() -> str:
    """The installed shardflow's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("shardflow")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


def wants_help(args: list[str]) -> bool:
    """`-h` or `--help` among a command's arguments (before a `--`)."""
    before = args[: args.index("--")] if "--" in args else args
    return "-h" in before or "--help" in before


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        sys.exit(0 if argv else 2)
    if argv[0] == "--version":
        print(f"shardflow {version()}")
        sys.exit(0)
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        hint = did_you_mean(name, COMMANDS)
        print(f"shardflow: error: unknown command {name!r}{hint}\n{USAGE}", file=sys.stderr)
        sys.exit(2)
    module, func, parser, _ = COMMANDS[name]
    if wants_help(rest):  # from the parser alone: no Beam, no TensorFlow
        parser_module, parser_func = parser.split(":")
        getattr(importlib.import_module(parser_module), parser_func)().print_help()
        sys.exit(0)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    mask_logs()  # no log line of any command repeats a password
    # TensorFlow's C++ start-up chatter (CUDA probing, CPU features) is not for users.
    verbose = "--verbose" in rest or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    filtered = name in TENSORFLOW_COMMANDS and not verbose
    try:
        if name == "etl":
            _check_etl(rest)
        with quiet.native_log_filtered() if filtered else contextlib.nullcontext():
            command = importlib.import_module(module)
            code = getattr(command, func)(rest)
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status for SIGINT, no traceback
        left = INTERRUPTED.get(name)
        print(f"shardflow {name}: interrupted{f'; {left}' if left else ''}", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:  # `shardflow inspect ... | head`: the reader has what it wanted
        _stop_writing()
        sys.exit(141)  # as a process ended by SIGPIPE
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _stop_writing()
        sys.exit(141)
    sys.stderr.flush()
    # A command module may end the process its own way (`pipelines.etl.exit_process`).
    getattr(command, "exit_process", sys.exit)(code)


def _check_etl(args: list[str]) -> None:
    """Tells a config error of an `etl` command line before Beam is imported (exit 2); starts
    the server of local worker processes, which imports Beam meanwhile."""
    from pipelines.flags import config_error

    error = config_error(args)
    if error is not None:
        print(f"shardflow etl: error: {error}", file=sys.stderr)
        sys.exit(2)
    if forkserver.wanted(args):
        forkserver.start()


def _stop_writing() -> None:
    """Points stdout at /dev/null, so that the interpreter's last flush of a closed pipe is
    silent (else Python prints `Exception ignored ... BrokenPipeError`)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    main()
