"""Faults: `shardflow etl` killed with SIGKILL at several points leaves nothing at OUTPUT that
looks like a dataset, and a rerun then gives the bytes of a clean run; the output is also the
same with 1 worker and with 2 worker processes.

Kill points:
- `start`: as soon as the run announces what it reads (the job is starting, nothing written);
- `write`: as soon as the staging folder `.NAME.incomplete-RUNID` appears next to OUTPUT (the
  first shard or rejected file is being written);
- `publish`: every file of the dataset staged, just before publication; reached through the
  test-only hook `before_publish` of `pipelines.etl.run` (see tests/services/pause.py).
The whole process group is killed, workers included.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
pytestmark = pytest.mark.slow


def write_inputs(folder: Path) -> Path:
    """300 CSV rows in 3 files (a few bad ones) and a config with small shards; returns it."""
    (folder / "in").mkdir()
    for part in range(3):
        rows = ["id,name,score"]
        for i in range(part * 100, part * 100 + 100):
            rows.append(f"{i},name-{i}-{'x' * (i % 37)},{i * 0.25}")
        rows.append(f"{part}000x,bad id,1.0")  # rejected: not an integer
        rows.append("7,too,many,fields")  # rejected: wrong field count
        (folder / "in" / f"part-{part}.csv").write_text("\n".join(rows) + "\n")
    cfg = folder / "c.yaml"
    cfg.write_text(
        "name: faults\n"
        "sources: [{name: a, format: csv, path: 'in/*.csv'}]\n"
        "key: id\n"
        "features: {id: {type: int}, name: {type: string}, score: {type: float}}\n"
        "splits: {train: 0.8, eval: 0.2}\n"
        "output: {path: out, shard_size_mb: 0.002}\n"
    )
    return cfg


def etl(cfg: Path, *args: str, pause: Path | None = None, env: dict | None = None):
    """`shardflow etl --config CFG ARGS` as a subprocess; with `pause`, it stops just before
    publishing, creates that file and waits until it is removed (tests/services/pause.py)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    shardflow = ["tests.services.pause", str(pause)] if pause else ["pipelines.cli"]
    return subprocess.Popen(
        [sys.executable, "-m", *shardflow, "etl", "--config", str(cfg), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: killed with its workers
    )


def finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    return out


def tree(folder: Path) -> dict[str, bytes]:
    """Relative path → bytes of every file; the manifest without its `created` time, and without
    report.html (it records the run's own times)."""
    files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    files.pop("report.html", None)
    manifest = json.loads(files["manifest.json"])
    del manifest["created"]
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return files


def wait_for(condition, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert proc.poll() is None, "the run ended before the kill point: " + proc.stderr.read()
        assert time.monotonic() < deadline, "kill point never reached"
        time.sleep(0.005)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """The one folder of every run (rejected records name their input files' full paths)."""
    folder = tmp_path_factory.mktemp("faults")
    write_inputs(folder)
    return folder


@pytest.fixture(scope="module")
def clean(work) -> dict[str, bytes]:
    """The dataset of an uninterrupted run."""
    finish(etl(work / "c.yaml"))
    files = tree(work / "out")
    assert json.loads((work / "out" / "manifest.json").read_text())["rejected"]["records"] == 6
    assert len([f for f in files if f.startswith("train/")]) > 1  # several shards
    shutil.rmtree(work / "out")
    return files


@pytest.fixture
def fresh(work, clean) -> Path:
    """`work` without any OUTPUT or staging folder, before and after the test."""
    yield work
    for name in os.listdir(work):
        if name == "out" or name.startswith(".out.") or name == "publishing":
            path = work / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()


@pytest.mark.parametrize("point", ["start", "write", "publish"])
def test_a_killed_run_leaves_no_dataset_and_a_rerun_gives_the_clean_bytes(point, clean, fresh):
    cfg, out, flag = fresh / "c.yaml", fresh / "out", fresh / "publishing"
    proc = etl(cfg, pause=flag if point == "publish" else None)
    if point == "start":
        assert "reading" in proc.stdout.readline()
    elif point == "write":
        wait_for(lambda: any(".out.incomplete-" in p for p in os.listdir(fresh)), proc)
    else:
        wait_for(flag.exists, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    assert not out.exists()  # nothing at OUTPUT, least of all a manifest
    assert not list(fresh.rglob("manifest.json"))  # not even in the staging folder
    leftovers = [p for p in os.listdir(fresh) if p not in ("in", "c.yaml", "publishing")]
    assert all(p.startswith(".out.incomplete-") for p in leftovers), leftovers

    finish(etl(cfg))
    assert tree(out) == clean


def test_one_worker_and_two_worker_processes_write_the_same_bytes(clean, fresh):
    cfg = fresh / "c.yaml"
    finish(etl(cfg, "--direct_num_workers", "2", "--direct_running_mode", "multi_processing"))
    assert tree(fresh / "out") == clean
    finish(etl(cfg, "--direct_num_workers", "1", "--overwrite"))
    assert tree(fresh / "out") == clean


def test_a_run_killed_before_replacing_a_dataset_leaves_the_old_one_intact(clean, fresh):
    cfg, out, flag = fresh / "c.yaml", fresh / "out", fresh / "publishing"
    finish(etl(cfg))
    before = tree(out)
    proc = etl(cfg, "--overwrite", pause=flag)
    wait_for(flag.exists, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert tree(out) == before == clean
    assert [p.parent for p in fresh.rglob("manifest.json")] == [out]


def test_a_full_disk_names_the_file_being_written_and_leaves_nothing(tmp_path, capsys):
    """A file system that fills up mid-run: the one line names the file that could not be
    written (which says on which device), and the staging folder is removed."""
    from pipelines.etl import run
    from tests.reliability.mounts import tmpfs

    with tmpfs(tmp_path / "small", "size=256k") as mount:
        rows = "".join(f"{i},{i * 7919 % 10007}.{i % 97},n{i * 31 % 1009}\n" for i in range(60000))
        (tmp_path / "big.csv").write_text("id,x,name\n" + rows)
        (tmp_path / "c.yaml").write_text(
            "name: t\nsources: [{name: s, format: csv, path: big.csv}]\n"
            "features: {id: {type: int}, x: {type: float}, name: {type: string}}\n"
            f"splits: {{train: 1.0}}\noutput: {{path: {mount / 'out'}}}\n"
        )
        assert run(["--config", str(tmp_path / "c.yaml")]) == 1
        err = capsys.readouterr().err.splitlines()[-1]
        assert err.startswith(
            "shardflow etl: job failed: OSError: [Errno 28] No space left on device (writing "
            f"{mount}/.out.incomplete-"
        ), err
        assert os.listdir(mount) == []
