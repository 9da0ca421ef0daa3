"""The flex template's entry point: template parameters → `shardflow etl` flags → the ETL.

Dataflow's Python template launcher runs this file (`FLEX_TEMPLATE_PYTHON_PY_FILE` in the
Dockerfile) with every launch parameter as `--name=value`, plus the Beam options of the launch
(`--runner`, `--project`, `--region`, `--temp_location`, `--setup_file`, ...). The template's own
parameters (metadata.json) are mapped to the flags of `shardflow etl`; the rest pass through
untouched and become the job's pipeline options.
"""

from __future__ import annotations

import argparse
import logging
import sys

# The template parameters (metadata.json) and the `shardflow etl` flag each one becomes.
# Boolean parameters arrive as text (`--overwrite=true`) and become bare flags.
VALUE_PARAMETERS = {"config": "--config", "output": "--output", "date": "--date"}
BOOLEAN_PARAMETERS = {"overwrite": "--overwrite", "skip_complete": "--skip-complete"}
PARAMETERS = (*VALUE_PARAMETERS, *BOOLEAN_PARAMETERS)


class ParameterError(ValueError):
    """A template parameter with a value the ETL cannot take."""


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false")
    return value == "true"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="launcher", add_help=False, allow_abbrev=False)
    for name in VALUE_PARAMETERS:
        parser.add_argument(f"--{name}", default="")
    for name in BOOLEAN_PARAMETERS:
        parser.add_argument(f"--{name}", type=_boolean, default=False)

    def error(message: str):  # argparse would print usage and exit: the launch log needs why
        raise ParameterError(message)

    parser.error = error  # type: ignore[method-assign]
    return parser


def etl_args(argv: list[str]) -> list[str]:
    """The `shardflow etl` command line for the launcher's arguments.

    `--config=gs://b/c.yaml --output=gs://b/out --overwrite=true --runner=DataflowRunner ...`
    becomes `--config gs://b/c.yaml --output gs://b/out --overwrite --runner=DataflowRunner ...`.
    Empty values are left out (an optional parameter given as ""). Raises ParameterError
    without a config or with a boolean that is not true/false.
    """
    args, beam_args = _parser().parse_known_args(argv)
    if not args.config:
        raise ParameterError("the template parameter 'config' is required")
    out: list[str] = []
    for name, flag in VALUE_PARAMETERS.items():
        value = getattr(args, name)
        if value:
            out += [flag, value]
    out += [flag for name, flag in BOOLEAN_PARAMETERS.items() if getattr(args, name)]
    return out + beam_args


def main(argv: list[str] | None = None) -> int:
    """Runs the ETL with the launcher's arguments; its exit status (2 for a bad parameter)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = etl_args(argv)
    except ParameterError as e:
        print(f"shardflow flex template: error: {e}", file=sys.stderr)
        return 2
    from pipelines import etl  # Beam: only once the parameters are known to be usable

    return etl.run(args)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from pipelines.runner.process import exit_process

    exit_process(main())
