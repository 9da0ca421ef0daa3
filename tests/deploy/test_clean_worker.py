"""The ETL as Dataflow runs it: the staged package on a worker that has Beam and nothing else.

On Dataflow the job's code reaches the workers as the sdist Beam's stager builds for
`--setup_file`, installed into an SDK worker image that holds Apache Beam and little else. Here:
the sdist built by Beam's own stager, installed with its `install_requires` into a fresh virtual
environment holding only the pinned `apache-beam[gcp]` (tests/services/clean_env.py); Beam's
external worker pool served from that environment, from an empty folder outside the repository,
with a container's environment variables (no PYTHONPATH); the job submitted through
`PortableRunner` (the Fn API of Dataflow Runner v2) with `--setup_file`. Each dataset must be
byte-identical to the in-process run's: a keyed join of CSV, JSON Lines, Parquet and SQLite; an
image folder; a union of text lines, fixed-length binary records and Avro. (A TFRecord source and
a tf.Transform need the `etl` extra's libraries on the workers, which `--setup_file` does not give
them: pipelines/runner/staged.py refuses such a job before it starts, tests/pipelines/runner.) The
flex template's entry point (deploy/dataflow/launcher.py) is started as the template's container
starts it: the file run by path from the unpacked sources, the package imported from its own
install, the job's parameters as `--name=value`.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fastavro
import pytest
import yaml

from pipelines import etl
from tests.reliability.test_faults import tree
from tests.services import clean_env
from tests.services.beam_portable import BeamPortableServices, Pool, running_services

ROOT = Path(__file__).resolve().parents[2]
SHARDFLOW = Path(sys.executable).parent / "shardflow"
pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class CleanWorker:
    services: BeamPortableServices
    worker_python: Path
    launcher_python: Path
    sources: Path  # the sdist unpacked: what the flex template's image holds in /template


@pytest.fixture(scope="module")
def clean_worker(tmp_path_factory) -> Iterator[CleanWorker]:
    base = tmp_path_factory.mktemp("clean-worker")
    sdist = clean_env.build_sdist(base / "dist")
    worker = clean_env.worker_env(base / "worker", sdist)
    launcher = clean_env.launcher_env(base / "launcher", sdist)
    with tarfile.open(sdist) as archive:
        archive.extractall(base / "unpacked", filter="data")
    (sources,) = (base / "unpacked").iterdir()
    pool_folder = base / "pool"
    pool_folder.mkdir()
    script = pool_folder / "worker_pool.py"
    shutil.copy(ROOT / "tests" / "services" / "worker_pool.py", script)
    pool = Pool(
        command=[str(worker), str(script)],
        cwd=pool_folder,
        env=clean_env.minimal_env(worker),
    )
    with running_services(pool) as services:
        yield CleanWorker(services, worker, launcher, sources)


def _imports_from(python: Path, cwd: Path, module: str) -> tuple[str, list[str]]:
    """Where `python`, started as a container starts it in `cwd`, imports `module` from (`-P`:
    the working folder not on sys.path, as for a script run by path), and its sys.path."""
    code = f"import {module}, sys; print({module}.__file__); print(sys.path)"
    done = subprocess.run(
        [str(python), "-P", "-c", code],
        cwd=cwd, env=clean_env.minimal_env(python), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    where, paths = done.stdout.splitlines()[-2:]
    return where, ast.literal_eval(paths)


def test_the_worker_has_beam_and_the_package_and_nothing_of_the_repository(clean_worker):
    worker = clean_worker.worker_python
    where, paths = _imports_from(worker, clean_worker.services.pool_log.parent, "pipelines")
    assert where.startswith(str(worker.parent.parent))
    assert not any(p.startswith(str(ROOT)) for p in paths), paths
    done = subprocess.run(
        [str(worker), "-c", "import tensorflow"],
        env=clean_env.minimal_env(worker), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0 and "No module named 'tensorflow'" in done.stderr


def _etl_both_ways(cfg: Path, out: Path, clean_worker: CleanWorker) -> dict[str, bytes]:
    """Runs `cfg` in-process, then on the clean worker with --setup_file; returns the in-process
    run's files after checking that the clean worker wrote the same bytes."""
    assert etl.run(["--config", str(cfg), "--output", str(out)]) == 0
    expected = tree(out)
    shutil.rmtree(out)  # same OUTPUT for both: rejected records name their inputs' full paths
    services = clean_worker.services
    before = services.workers_started()
    done = subprocess.run(
        [str(SHARDFLOW), "etl", "--config", str(cfg), "--output", str(out),
         *services.flags(), "--setup_file", str(ROOT / "setup.py")],
        cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, (
        done.stdout + done.stderr[-3000:] + services.pool_log.read_text()[-3000:]
    )
    assert "with the PortableRunner" in done.stdout
    assert services.workers_started() > before  # the work ran in the clean worker's harnesses
    assert tree(out) == expected
    return expected


def test_a_keyed_join_of_csv_jsonl_parquet_and_sqlite(clean_worker, tmp_path):
    shutil.copytree(ROOT / "examples" / "penguins", tmp_path / "penguins")
    cfg = tmp_path / "penguins" / "penguins.yaml"
    config = yaml.safe_load(cfg.read_text())
    del config["transform"]  # tf.Transform needs TensorFlow on the workers: the image's (.[etl])
    cfg.write_text(yaml.safe_dump(config))

    files = _etl_both_ways(cfg, tmp_path / "out", clean_worker)

    manifest = json.loads(files["manifest.json"])
    assert set(manifest["sources"]) == {"measurements", "observations", "nests", "bands"}
    assert sum(s["records"] for s in manifest["splits"].values()) > 300


def test_an_image_folder(clean_worker, tmp_path):
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "shapes" / "generate.py"),
         str(tmp_path / "pictures"), "--per-class", "12"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    cfg = tmp_path / "shapes.yaml"
    config = yaml.safe_load((ROOT / "examples" / "shapes" / "shapes.yaml").read_text())
    config["sources"][0]["path"] = str(tmp_path / "pictures")
    config["output"] = {"path": str(tmp_path / "out"), "shard_size_mb": 0.01}
    cfg.write_text(yaml.safe_dump(config))

    files = _etl_both_ways(cfg, tmp_path / "out", clean_worker)

    manifest = json.loads(files["manifest.json"])
    pictures = [p for p in (tmp_path / "pictures").rglob("*") if p.is_file()]
    assert sum(s["records"] for s in manifest["splits"].values()) == len(pictures) > 30


def _union_inputs(folder: Path) -> Path:
    """Text lines, fixed-length binary records and an Avro file of one schema."""
    rows = [(i, f"n{i % 7}", i * 0.5) for i in range(180)]
    text = [f"{i} {name} {score}" for i, name, score in rows[:60]] + ["not a record"]
    (folder / "a.txt").write_text("\n".join(text) + "\n")
    (folder / "b.bin").write_bytes(b"".join(struct.pack("<qd", i, s) for i, _, s in rows[60:120]))
    schema = {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
            {"name": "score", "type": "double"},
        ],
    }
    with open(folder / "c.avro", "wb") as f:
        fastavro.writer(f, schema, [{"id": i, "name": n, "score": s} for i, n, s in rows[120:180]])
    config = {
        "name": "union",
        "sources": [
            {"name": "text", "format": "text", "path": str(folder / "a.txt"),
             "options": {"regex": r"(?P<id>\d+) (?P<name>\w+) (?P<score>[\d.]+)"}},
            {"name": "binary", "format": "binary", "path": str(folder / "b.bin"),
             "options": {"record_bytes": 16, "struct": "<qd", "fields": ["id", "score"]}},
            {"name": "avro", "format": "avro", "path": str(folder / "c.avro")},
        ],
        "key": "id",
        "features": {
            "id": {"type": "int"},
            "name": {"type": "string", "required": False},
            "score": {"type": "float"},
        },
        "splits": {"train": 0.8, "eval": 0.2},
        "output": {"path": str(folder / "out"), "compression": "gzip", "shard_size_mb": 0.001},
    }  # fmt: skip
    (folder / "union.yaml").write_text(yaml.safe_dump(config))
    return folder / "union.yaml"


def test_a_union_of_text_binary_and_avro(clean_worker, tmp_path):
    cfg = _union_inputs(tmp_path)

    files = _etl_both_ways(cfg, tmp_path / "out", clean_worker)

    manifest = json.loads(files["manifest.json"])
    assert sum(s["records"] for s in manifest["splits"].values()) == 180
    assert manifest["rejected"]["records"] == 1


def test_the_flex_template_entry_point_as_its_container_starts_it(clean_worker, tmp_path):
    """The launcher's container runs FLEX_TEMPLATE_PYTHON_PY_FILE by path from its working
    folder (/template, the sources), with the package installed from them; the job it submits
    runs on the clean worker."""
    cfg = _union_inputs(tmp_path)
    out = tmp_path / "out"
    assert etl.run(["--config", str(cfg)]) == 0
    expected = tree(out)
    shutil.rmtree(out)
    python, sources = clean_worker.launcher_python, clean_worker.sources
    where, paths = _imports_from(python, sources, "pipelines")
    assert where.startswith(str(python.parent.parent))
    assert str(ROOT) not in paths and str(sources) not in paths  # the libraries only: site-packages
    launcher = sources / "deploy" / "dataflow" / "launcher.py"
    services = clean_worker.services
    env = clean_env.minimal_env(
        python,
        FLEX_TEMPLATE_PYTHON_PY_FILE=str(launcher),
        FLEX_TEMPLATE_PYTHON_SETUP_FILE=str(sources / "setup.py"),
    )
    before = services.workers_started()
    done = subprocess.run(
        [str(python), str(launcher), f"--config={cfg}", "--overwrite=false",
         *(f"{k}={v}" for k, v in zip(services.flags()[::2], services.flags()[1::2])),
         f"--setup_file={sources / 'setup.py'}"],
        cwd=sources, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "with the PortableRunner" in done.stdout
    assert services.workers_started() > before
    assert tree(out) == expected
