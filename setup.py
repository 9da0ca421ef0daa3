"""Packaging for shardflow: the ETL (pipelines/, transforms/), the trainer and the deploy tools.

Extras: `etl` (Beam, tfx-bsl, tf.Transform), `trainer` (TensorFlow only, never Beam),
`transform` (what the trainer needs for datasets with a tf.Transform output: tf.Transform, and
so Beam), `deploy` (the Google clients of the deploy tools), `test`, `benchmark`, and `all`.
The Dataflow workers install this same file (`--setup_file ./setup.py`).
"""

from setuptools import find_packages, setup

TENSORFLOW = "tensorflow==2.21.0"
BEAM = "apache-beam[gcp]==2.77.0"
TFT = "tensorflow-transform==1.21.0"
TFX_BSL = "tfx-bsl==1.21.0"

# Small libraries the ETL's workers import. They are install_requires, not the `etl` extra:
# a Dataflow job given `--setup_file ./setup.py` installs this package on Beam's worker image
# without extras (that image has Beam, pyarrow and fastavro, not these).
COMMON = [
    "pyyaml>=6.0",
    "pyarrow",
    "google-cloud-storage",
    "google-crc32c",
    # ISA-L's inflate for the TensorFlow-free readers (trainer.dataset.framing): zlib's streams
    "isal==1.9.1",
    # libjpeg-turbo for the readers' JPEGs (trainer.readers.images), decoded into the batch
    "simplejpeg==1.9.0",
    "xxhash>=3.0",
    "pillow",
    "pg8000>=1.31",
    "fastavro>=1.9",
    # a linear-time engine for `text` regexes: every regex it can run as Python would
    "google-re2==1.1.20251105",
    # the regexes RE2 cannot run (a backreference, a lookaround), matched under a time limit
    "regex==2026.11.19",
    # the statistics and schema in TFDV's formats (statistics.pb, schema.pbtxt): protos only
    "tensorflow-metadata==1.21.0",
]
ETL = [BEAM, TFT, TFX_BSL, TENSORFLOW]
TRAINER = [TENSORFLOW, "tf-keras==2.21.0", "tensorboard==2.21.0"]
# Training on a dataset with a tf.Transform output reads it with tensorflow-transform, which
# itself requires Apache Beam: a separate extra, so that the plain trainer installs no Beam.
TRANSFORM = [TFT]
# Deploy tools (`shardflow submit`, `launch-training`, schedules): the Google clients they build
# requests with. Beam's [gcp] extra brings the first two already; pinned here for the tools.
DEPLOY = [
    "google-cloud-aiplatform==1.165.1",
    "google-cloud-dataflow-client==0.13.0",
    "google-cloud-scheduler==2.21.0",
]
# The docs site (MkDocs with the Material theme, built with --strict by `make test`) and the
# JSON Schema check of the published config schema.
DOCS = ["mkdocs==1.6.1", "mkdocs-material==9.8.2", "jsonschema==4.26.0"]
# benchmarks/model_quality.py: scikit-learn's trees beside the trained model (the datasets come
# from packages fetched with `pip download`, not installed)
BENCHMARK = ["scikit-learn==1.9.1"]
# trainer/readers/: PyTorch and JAX (CPU builds; a CUDA or TPU build of the same version works)
FRAMEWORKS = ["torch==2.13.0", "jax==0.10.2", "jaxlib==0.10.2"]
TEST = [
    "pytest",
    "pytest-timeout",
    "pytest-xdist==3.8.0",
    "gcp-storage-emulator",
    "dockerfile==3.4.0",
    "ruff==0.17.6",
    "mypy==2.4.1",
    *DOCS,
]

setup(
    name="shardflow",
    version="0.1.0",
    description=(
        "Heterogeneous sources to sharded TFRecords with Apache Beam, and a fast tf.data trainer"
    ),
    python_requires=">=3.11,<3.12",
    packages=find_packages(include=["pipelines*", "transforms*", "trainer*", "deploy*"]),
    install_requires=COMMON,
    extras_require={
        "etl": ETL,
        "trainer": TRAINER,
        "transform": TRANSFORM,
        "deploy": DEPLOY,
        "docs": DOCS,
        "test": TEST,
        "benchmark": BENCHMARK,
        "frameworks": FRAMEWORKS,
        "all": sorted(set(ETL + TRAINER + TRANSFORM + DEPLOY)),
    },
    entry_points={"console_scripts": ["shardflow = pipelines.cli:main"]},
)
