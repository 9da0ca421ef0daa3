"""The ETL on Beam's portable runner gives the bytes of the in-process run.

`shardflow etl` runs a small mixed dataset (a CSV and a JSONL source with bad records, a key,
two splits, gzip) twice through the CLI: with the default in-process runner, and with
`--runner PortableRunner` against Beam's local job service and an external SDK worker pool,
separate processes speaking the Fn API as Dataflow Runner v2 does (tests/services/beam_portable.py).
Every file of the two datasets must be byte-identical (the manifest up to its `created` time), and
the worker pool must have started an SDK harness process for the portable run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.test_faults import tree
from tests.services.beam_portable import BeamPortableServices

ROOT = Path(__file__).resolve().parent.parent.parent
SHARDFLOW = Path(sys.executable).parent / "shardflow"
pytestmark = pytest.mark.slow


def write_inputs(folder: Path) -> Path:
    """A CSV and a JSONL source (one bad record each, a duplicate key) and their config."""
    (folder / "in").mkdir()
    rows = ["id,name,score"] + [f"{i},name-{i},{i * 0.25}" for i in range(120)]
    rows += ["12x,bad id,1.0", "5,dup,2.0"]  # rejected: not an integer; a duplicate of id 5
    (folder / "in" / "a.csv").write_text("\n".join(rows) + "\n")
    lines = [json.dumps({"id": 1000 + i, "name": f"j-{i}", "score": i * 1.5}) for i in range(80)]
    lines += ['{"id": 2000, "name": "broken"']  # rejected: invalid JSON
    (folder / "in" / "b.jsonl").write_text("\n".join(lines) + "\n")
    cfg = folder / "c.yaml"
    cfg.write_text(
        "name: portable\n"
        "sources:\n"
        "  - {name: a, format: csv, path: 'in/a.csv'}\n"
        "  - {name: b, format: jsonl, path: 'in/b.jsonl'}\n"
        "key: id\n"
        "features: {id: {type: int}, name: {type: string}, score: {type: float}}\n"
        "splits: {train: 0.8, eval: 0.2}\n"
        "output: {path: out, compression: gzip, shard_size_mb: 0.001}\n"
    )
    return cfg


def etl(cfg: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [str(SHARDFLOW), "etl", "--config", str(cfg), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_portable_runner_with_an_external_worker_pool_writes_the_in_process_bytes(
    tmp_path, beam_portable_services: BeamPortableServices
):
    services = beam_portable_services
    cfg = write_inputs(tmp_path)
    out = tmp_path / "out"

    local = etl(cfg)
    assert local.returncode == 0, local.stdout + local.stderr
    assert "with the FnApiRunner" in local.stdout
    expected = tree(out)
    shutil.rmtree(out)  # same OUTPUT for both: rejected records name their inputs' full paths

    workers_before = services.workers_started()
    portable = etl(cfg, *services.flags())
    assert portable.returncode == 0, portable.stdout + portable.stderr
    assert "with the PortableRunner" in portable.stdout

    # the work ran in an SDK harness process of the worker pool, not in the CLI process
    assert services.workers_started() > workers_before, services.pool_log.read_text()
    job_log = services.job_log.read_text()
    assert f"Requesting worker at {services.pool_endpoint}" in job_log, job_log
    assert "with state DONE" in job_log, job_log

    assert tree(out) == expected
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rejected"]["records"] == 2 and manifest["duplicates"] == 1
    assert sum(len(s["files"]) for s in manifest["splits"].values()) > 2  # several shards
    assert any(name.startswith("rejected/") for name in expected)
