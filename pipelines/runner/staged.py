"""What a job's workers get from `--setup_file`, checked before the job starts.

A worker that Beam starts from its own SDK image (Dataflow, or PortableRunner's default Docker
environment) installs the sdist that the stager builds from `--setup_file`, with setup.py's
`install_requires` and nothing more: every source's reader and the whole ETL but two parts,
whose libraries need TensorFlow and are the `etl` extra's:

- a TFRecord source (`format: tfrecord`) decodes `tf.train.Example`s with tfx-bsl;
- a `transform:` section runs tf.Transform.

A config with either, run that way, would fail on the workers minutes after submission with
"No module named ...". `check_workers` refuses it before any work (exit 2), naming the source and
the two ways to give the workers those libraries: the deploy/dataflow image
(`--sdk_container_image`, which `shardflow submit` uses) or a `--requirements_file`. Workers the
user starts (`--environment_type EXTERNAL` or `PROCESS`), and jobs given an image, a
requirements file or extra packages, are taken as having what they need.
"""

from __future__ import annotations

from importlib import metadata

from apache_beam.options.pipeline_options import (
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    StandardOptions,
    WorkerOptions,
)

from pipelines.config.loader import ConfigError
from transforms.contract.config import DatasetSpec

# Runners whose workers Beam starts from an SDK image, installing --setup_file's sdist.
IMAGE_RUNNERS = {"DataflowRunner", "dataflow", "PortableRunner", "portable"}
USER_WORKERS = {"EXTERNAL", "PROCESS", "LOOPBACK"}  # environment types: workers of the user's
ETL_NEEDS = ("tfx-bsl", "tensorflow-transform", "tensorflow")  # the `etl` extra's, as pinned


def worker_needs(dataset: DatasetSpec) -> list[str]:
    """What of `dataset` needs the `etl` extra on the workers, in words (empty: nothing)."""
    needs = [
        f"source {source.name!r} (format: tfrecord) needs tfx-bsl"
        for source in dataset.sources
        if source.format == "tfrecord"
    ]
    if dataset.transform is not None:
        needs.append("the transform: section needs tensorflow-transform")
    return needs


def etl_requirements() -> str:
    """The `etl` extra's pins of ETL_NEEDS, as setup.py declares them (the installed package's
    metadata); the names alone where the package's metadata is not installed."""
    try:
        declared = metadata.requires("shardflow") or []
    except metadata.PackageNotFoundError:
        return ", ".join(ETL_NEEDS)
    pins = {}
    for line in declared:
        requirement, _, marker = line.partition(";")
        name = requirement.split("=")[0].split("[")[0].strip()
        if name in ETL_NEEDS and "etl" in marker:
            pins[name] = requirement.strip()
    return ", ".join(pins.get(name, name) for name in ETL_NEEDS)


def check_workers(dataset: DatasetSpec, options: PipelineOptions) -> None:
    """Raises ConfigError when the job's workers would get only `--setup_file`'s package and
    `dataset` needs more (see the module's doc)."""
    setup = options.view_as(SetupOptions)
    if not setup.setup_file or setup.requirements_file or setup.extra_packages:
        return
    if options.view_as(StandardOptions).runner not in IMAGE_RUNNERS:
        return
    if options.view_as(WorkerOptions).sdk_container_image:
        return
    portable = options.view_as(PortableOptions)
    if (portable.environment_type or "").upper() in USER_WORKERS:
        return
    needs = worker_needs(dataset)
    if needs:
        raise ConfigError(
            "--setup_file",
            f"{needs[0]} on the workers, and a worker installs only setup.py's install_requires "
            f"from --setup_file: give the workers the deploy/dataflow image "
            f"(--sdk_container_image IMAGE, as `shardflow submit` does), or a "
            f"--requirements_file listing {etl_requirements()}",
        )
