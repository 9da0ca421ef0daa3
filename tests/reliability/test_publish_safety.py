"""Publishing never destroys what it should not: one test per case, each running the real ETL in
process on tiny CSV files written here (gs:// ones on the emulator), and checking the exit code,
the one-line message and that nothing it must not touch changed.

Policies (also listed in tests/reliability/README.md):
- OUTPUT that is a symbolic link (to a dataset, to a folder, dangling) is refused before any work,
  with or without `--overwrite`: exit 2 naming `output.path` and the link's target; the link and
  its target stay as they are. A link put at OUTPUT while the run runs is not followed at
  publication either (exit 1, nothing published). A link among OUTPUT's parents is fine.
- A folder is a dataset only when its manifest.json is a shardflow manifest (a JSON object with
  `format_version` 1 and `name`, `features`, `sources`, `splits`). Anything else is never
  replaced, even with `--overwrite`, and is not "complete" for `--skip-complete`: exit 2 naming
  why, nothing in it touched (local and gs://).
- What a run may replace is what OUTPUT held when it started (nothing; with `--overwrite`, that
  dataset), checked again at publication while the run holds OUTPUT alone (a flock on OUTPUT's
  parent folder; on gs:// the publishing marker, created with a generation precondition). A
  dataset that another run published meanwhile stays: the later run exits 1 naming it, publishes
  nothing and leaves no staging folder.
- OUTPUT inside the input of a source (inside a source folder, or matched by a source glob, also
  through a symbolic link) is refused before any work: exit 2, else every rerun would read the
  previous dataset back.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import uuid
from pathlib import Path

import pytest
import yaml
from apache_beam.io.filesystems import FileSystems

from pipelines.etl import run
from tests.services.pause import pause_on
from transforms.contract.layout import MANIFEST
from transforms.sink.output import PUBLISHING, PublishConflict, expect, holds_dataset
from transforms.sink.publish import publish
from transforms.sink.storage import staging_path

BUCKET = "shardflow-test"
ROWS = "id,name\n1,a\n2,b\n3,c\n"
OTHER_ROWS = "id,name\n7,x\n8,y\n"  # another run's data: a dataset distinct from ROWS's


def _config(folder: Path, source: str = "data/*.csv", fmt: str = "csv", name: str = "c") -> Path:
    features = {"image": {"type": "image"}} if fmt == "images" else {
        "id": {"type": "int"}, "name": {"type": "string"}
    }  # fmt: skip
    config = {
        "name": "safety",
        "sources": [{"name": "a", "format": fmt, "path": source}],
        "features": features,
        "splits": {"train": 1.0},
        "output": {"path": "out"},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def work(tmp_path) -> Path:
    """tmp_path with data/a.csv and c.yaml (source `data/*.csv`), and w.yaml: another config
    (`other/*.csv`) whose datasets stand for those of another run."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.csv").write_text(ROWS)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "b.csv").write_text(OTHER_ROWS)
    _config(tmp_path)
    _config(tmp_path, "other/*.csv", name="w")
    return tmp_path


def etl(folder: Path, output, *args: str, config: str = "c") -> int:
    return run(["--config", str(folder / f"{config}.yaml"), "--output", str(output), *args])


def snapshot(folder: Path) -> dict[str, object]:
    """Every entry under `folder`, links not followed: a link's target, a file's bytes."""
    entries: dict[str, object] = {}
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(parent) / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                entries[rel] = ("link", os.readlink(path))
            else:
                entries[rel] = ("folder",) if path.is_dir() else path.read_bytes()
    return entries


def created(dataset: Path) -> str:
    return json.loads((dataset / MANIFEST).read_bytes())["created"]


def error_lines(capsys) -> list[str]:
    """stderr's lines, a failed job's " (details: LOG; ...)" pointer left out."""
    return [line.split(" (details: ")[0] for line in capsys.readouterr().err.splitlines()]


def leftovers(folder: Path) -> list[str]:
    return sorted(p for p in os.listdir(folder) if ".incomplete-" in p or ".replaced-" in p)


def run_interrupted(folder: Path, action, *args: str, config: str = "c") -> int:
    """Runs the ETL (`args` after --config) and calls `action` once the run has staged its whole
    dataset and is about to publish (the hook `before_publish`); its exit code."""
    flag = folder / "paused"
    done, failures = threading.Event(), []

    def interfere() -> None:
        while not flag.exists():
            if done.wait(0.005):
                failures.append("the run ended before it published")
                return
        try:
            action()
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            failures.append(e)
        finally:
            flag.unlink()

    helper = threading.Thread(target=interfere, daemon=True)
    helper.start()
    try:
        code = run(["--config", str(folder / f"{config}.yaml"), *args], pause_on(flag))
    finally:
        done.set()
        helper.join(timeout=60)
    assert not failures, failures
    return code


# --- 1. OUTPUT is a symbolic link -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("target", ["dataset", "folder", "dangling"])
def test_an_output_that_is_a_symbolic_link_is_refused_and_nothing_is_touched(work, target, capsys):
    aim = work / "real"
    if target == "dataset":
        assert etl(work, aim) == 0
    elif target == "folder":
        aim.mkdir()
        (aim / "notes.txt").write_text("keep")
    link = work / "out"
    link.symlink_to(aim, target_is_directory=True)
    before = snapshot(work)
    for flags in ([], ["--overwrite"], ["--skip-complete"]):
        capsys.readouterr()
        assert etl(work, link, *flags) == 2
        assert error_lines(capsys) == [
            f"shardflow etl: error: output.path: {str(link)!r} is a symbolic link (to "
            f"{str(aim)!r}); give the real folder: a link is never followed nor replaced"
        ]
        assert snapshot(work) == before  # link, target, no staging sibling


@pytest.mark.slow
@pytest.mark.parametrize("start", ["dataset", "nothing"])
def test_a_symbolic_link_put_at_output_during_the_run_is_not_followed(work, start, capsys):
    out, aim = work / "out", work / "elsewhere"
    if start == "dataset":
        assert etl(work, out) == 0

    def make_link() -> None:
        if out.exists():
            out.rename(aim)  # the dataset moves; a link to it takes its place
        out.symlink_to(aim, target_is_directory=True)

    dataset = snapshot(out) if start == "dataset" else None  # what moves to `aim`
    capsys.readouterr()
    code = run_interrupted(work, make_link, "--output", str(out), "--overwrite")
    assert code == 1
    assert error_lines(capsys)[-1] == (
        f"shardflow etl: job failed: output.path: {str(out)!r} is a symbolic link (to "
        f"{str(aim)!r}); give the real folder: a link is never followed nor replaced; "
        "nothing published"
    )
    assert out.is_symlink() and os.readlink(out) == str(aim)
    if start == "dataset":
        assert snapshot(aim) == dataset  # its manifest too
    else:
        assert not aim.exists()  # the dangling link was not replaced, nor followed
    assert leftovers(work) == []


@pytest.mark.slow
def test_an_output_under_a_symbolic_link_folder_is_published_and_replaced(work):
    (work / "real").mkdir()
    (work / "via").symlink_to(work / "real", target_is_directory=True)
    out = work / "via" / "out"
    assert etl(work, out) == 0
    first = created(out)
    assert etl(work, out, "--overwrite") == 0
    assert sorted(os.listdir(work / "real")) == ["out"]  # no staging sibling left
    assert (work / "via").is_symlink()
    assert json.loads((out / MANIFEST).read_bytes())["sources"]["a"]["records"] == 3
    assert created(out) >= first


# --- 2. a folder is a dataset only with a shardflow manifest --------------------------------------

FULL = {
    "format_version": 1,
    "name": "x",
    "features": {"v": {"type": "int"}},
    "sources": {},
    "splits": {},
}


@pytest.mark.parametrize(
    "manifest, problem",
    [
        (json.dumps({"name": "x", "version": 3}).encode(), "no format_version"),
        (json.dumps({**FULL, "format_version": 2}).encode(), "format_version 2, not 1"),
        (json.dumps({**FULL, "format_version": True}).encode(), "format_version True, not 1"),
        (json.dumps({**FULL, "format_version": "1"}).encode(), "format_version '1', not 1"),
        (json.dumps({k: v for k, v in FULL.items() if k != "splits"}).encode(), "no splits"),
        (json.dumps({**FULL, "splits": []}).encode(), "splits missing or not an object"),
        (json.dumps({**FULL, "name": None}).encode(), "name missing or not a string"),
        (b"[1, 2]", "not a JSON object"),
        (b"not json", "not JSON"),
        (b"", "not JSON"),
        (b"\xff\xfe{", "not JSON"),
        ("folder", "not a file"),
        ("link", "not a file"),
    ],
    ids=["other-tool", "version-2", "version-true", "version-text", "no-splits", "splits-list",
         "name-null", "array", "not-json", "empty", "binary", "folder", "link"],
)  # fmt: skip
def test_a_folder_whose_manifest_is_not_a_shardflow_manifest_is_never_replaced(
    work, manifest, problem, capsys
):
    out = work / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    if manifest == "folder":
        (out / MANIFEST).mkdir()
    elif manifest == "link":
        (work / "elsewhere.json").write_text(json.dumps(FULL))  # even a valid one, linked
        (out / MANIFEST).symlink_to(work / "elsewhere.json")
    else:
        (out / MANIFEST).write_bytes(manifest)
    before = snapshot(work)
    assert not holds_dataset(str(out))
    for flags in (["--overwrite"], ["--skip-complete"], []):
        capsys.readouterr()
        assert etl(work, out, *flags) == 2
        assert error_lines(capsys) == [
            f"shardflow etl: error: output.path: {str(out)!r} holds a manifest.json that is not "
            f"a shardflow manifest ({problem}); refusing to replace it"
        ]
        assert snapshot(work) == before


def test_a_foreign_manifest_on_gcs_is_never_replaced(gcs_emulator, work, capsys):
    client = gcs_emulator.client()
    prefix = f"safety/{uuid.uuid4().hex[:8]}/out"
    bucket = client.bucket(BUCKET)
    bucket.blob(f"{prefix}/{MANIFEST}").upload_from_string(b'{"name": "x", "version": 3}')
    bucket.blob(f"{prefix}/notes.txt").upload_from_string(b"keep")
    before = {b.name: b.generation for b in client.list_blobs(BUCKET, prefix=prefix)}
    out = f"gs://{BUCKET}/{prefix}"
    assert not holds_dataset(out)
    for flags in (["--overwrite"], ["--skip-complete"]):
        capsys.readouterr()
        assert etl(work, out, *flags) == 2
        assert error_lines(capsys) == [
            f"shardflow etl: error: output.path: {out!r} holds a manifest.json that is not a "
            "shardflow manifest (no format_version); refusing to replace it"
        ]
    assert {b.name: b.generation for b in client.list_blobs(BUCKET, prefix=prefix)} == before


# --- 3. two runs into one OUTPUT ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--overwrite"]], ids=["new", "overwrite"])
def test_a_dataset_published_by_another_run_during_the_run_is_not_replaced(work, flags, capsys):
    """Run A starts (OUTPUT empty, or holding a dataset it may replace with --overwrite); run B
    publishes there while A runs (its staged dataset renamed to OUTPUT, as B's publication
    does); A then exits 1 naming B's dataset and publishes nothing."""
    out, theirs = work / "out", work / ".out.incomplete-otherrun"
    if flags:
        assert etl(work, out) == 0
    assert etl(work, theirs, config="w") == 0  # B's dataset, staged next to OUTPUT

    def publish_theirs() -> None:
        if out.exists():
            shutil.rmtree(out)
        theirs.rename(out)

    winner = snapshot(theirs)
    capsys.readouterr()
    assert run_interrupted(work, publish_theirs, "--output", str(out), *flags) == 1
    assert error_lines(capsys)[-1] == (
        f"shardflow etl: job failed: output.path: {str(out)!r} was published by another run "
        f"(its manifest.json created {created(out)}) while this one ran; nothing published"
    )
    assert snapshot(out) == winner
    assert leftovers(work) == []  # A's staging folder discarded


@pytest.mark.slow
def test_an_overwrite_run_replaces_the_dataset_it_found_at_start(work):
    """The same interruption point, with OUTPUT unchanged meanwhile: --overwrite publishes."""
    out = work / "out"
    assert etl(work, out) == 0
    before = created(out)
    code = run_interrupted(work, lambda: None, "--output", str(out), "--overwrite")
    assert code == 0
    assert created(out) >= before
    assert leftovers(work) == []


def test_a_publication_waits_for_the_one_under_way_and_then_refuses_to_replace_it(tmp_path):
    """Publication holds an exclusive flock on OUTPUT's parent folder from its check to its
    rename: one that starts while another holds it waits, then finds the other's dataset."""
    out = str(tmp_path / "out")
    staging = staging_path(out, "ours")
    os.makedirs(f"{staging}/train")
    Path(f"{staging}/train/a.tfrecord").write_bytes(b"ours")
    expected = expect(out, overwrite=False)  # the start-up check: nothing at OUTPUT
    result: list[BaseException | None] = []

    def ours() -> None:
        try:
            publish(staging, out, {**FULL, "name": "ours"}, expected)
            result.append(None)
        except BaseException as e:  # noqa: BLE001 - checked below
            result.append(e)

    fd = os.open(tmp_path, os.O_RDONLY)  # the other run's publication holds the lock ...
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        thread = threading.Thread(target=ours)
        thread.start()
        thread.join(timeout=1)
        assert thread.is_alive()  # ... so ours waits
        os.makedirs(f"{out}/train")
        Path(f"{out}/train/b.tfrecord").write_bytes(b"theirs")
        Path(f"{out}/{MANIFEST}").write_text(json.dumps({**FULL, "created": "T"}))
    finally:
        os.close(fd)
    thread.join(timeout=30)
    assert isinstance(result[0], PublishConflict)
    assert str(result[0]) == (
        f"output.path: {out!r} was published by another run (its manifest.json created T) "
        "while this one ran; nothing published"
    )
    assert sorted(os.listdir(out)) == [MANIFEST, "train"]
    assert os.listdir(f"{out}/train") == ["b.tfrecord"]
    assert os.listdir(f"{staging}/train") == ["a.tfrecord"]  # ours left staged (then discarded)


def _gcs_objects(client, prefix: str) -> dict[str, bytes]:
    return {
        b.name[len(prefix) + 1 :]: b.download_as_bytes()
        for b in client.list_blobs(BUCKET, prefix=prefix + "/")
    }


@pytest.mark.slow
def test_a_dataset_published_on_gcs_by_another_run_during_the_run_is_not_replaced(
    gcs_emulator, work, capsys
):
    client = gcs_emulator.client()
    parent = f"safety/{uuid.uuid4().hex[:8]}"
    out = f"gs://{BUCKET}/{parent}/out"
    theirs = staging_path(out, "otherrun")
    theirs_manifest = {**FULL, "name": "theirs", "created": "2026-01-01T00:00:00Z"}

    def publish_theirs() -> None:
        with FileSystems.create(f"{theirs}/train/part.tfrecord") as f:
            f.write(b"theirs")
        publish(theirs, out, theirs_manifest, expect(out, overwrite=False))

    capsys.readouterr()
    assert run_interrupted(work, publish_theirs, "--output", out) == 1
    assert error_lines(capsys)[-1] == (
        f"shardflow etl: job failed: output.path: {out!r} was published by another run "
        "(its manifest.json created 2026-01-01T00:00:00Z) while this one ran; nothing published"
    )
    objects = _gcs_objects(client, parent)
    assert sorted(objects) == ["out/manifest.json", "out/train/part.tfrecord"]
    assert json.loads(objects["out/manifest.json"]) == theirs_manifest
    assert objects["out/train/part.tfrecord"] == b"theirs"


@pytest.mark.slow
def test_a_publication_under_way_on_gcs_is_never_interleaved(gcs_emulator, work, capsys):
    """Another run's publication has begun (its marker is there) while this run ran: this one
    exits 1 naming that run, and leaves its marker alone."""
    client = gcs_emulator.client()
    parent = f"safety/{uuid.uuid4().hex[:8]}"
    out = f"gs://{BUCKET}/{parent}/out"
    marker = staging_path(out, "otherrun").encode()

    def start_theirs() -> None:
        client.bucket(BUCKET).blob(f"{parent}/out/{PUBLISHING}").upload_from_string(marker)

    capsys.readouterr()
    assert run_interrupted(work, start_theirs, "--output", out) == 1
    assert error_lines(capsys)[-1] == (
        f"shardflow etl: job failed: output.path: {out!r} is being published by another run "
        "(otherrun); nothing published"
    )
    assert _gcs_objects(client, parent) == {f"out/{PUBLISHING}": marker}


# --- 4. OUTPUT inside the input -------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, fmt, output",
    [
        ("data/**", "csv", "data/out"),  # a glob spanning folders
        ("data/*/*.json", "jsonl", "data/out"),  # would read manifest.json, statistics.json
        ("data/**/*.jsonl", "jsonl", "data/out"),  # would read the rejected records back
        ("data", "csv", "data"),  # a folder (its files), OUTPUT being that folder
        ("data", "images", "data/photos/out"),  # a folder tree (recursive format)
        ("link/**", "csv", "data/out"),  # the same folder, through a link
        ("data/part/b.json", "jsonl", "data/part"),  # a file of OUTPUT
    ],
    ids=["glob-spanning-folders", "glob-of-json", "glob-of-jsonl", "folder", "folder-tree",
         "through-a-link", "file-in-output"],
)  # fmt: skip
def test_an_output_inside_the_input_is_refused_before_any_work(work, source, fmt, output, capsys):
    (work / "data" / "part").mkdir()
    (work / "data" / "part" / "b.json").write_text('{"id": 5, "name": "e"}\n')
    (work / "data" / "part" / "c.jsonl").write_text('{"id": 6, "name": "f"}\n')
    (work / "link").symlink_to(work / "data", target_is_directory=True)
    _config(work, source, fmt)
    before = snapshot(work)
    for flags in ([], ["--overwrite"]):
        capsys.readouterr()
        assert etl(work, work / output, *flags) == 2
        assert error_lines(capsys) == [
            f"shardflow etl: error: output.path: {str(work / output)!r} is inside the input of "
            f"sources[0] ({str(work / source)!r}); the next run would read this dataset back"
        ]
        assert snapshot(work) == before


def test_an_output_inside_a_gcs_input_is_refused(gcs_emulator, work, capsys):
    client = gcs_emulator.client()
    prefix = f"safety/{uuid.uuid4().hex[:8]}"
    client.bucket(BUCKET).blob(f"{prefix}/data/a.csv").upload_from_string(ROWS.encode())
    _config(work, f"gs://{BUCKET}/{prefix}/data/**")
    out = f"gs://{BUCKET}/{prefix}/data/out"
    capsys.readouterr()
    assert etl(work, out) == 2
    assert error_lines(capsys) == [
        f"shardflow etl: error: output.path: {out!r} is inside the input of sources[0] "
        f"('gs://{BUCKET}/{prefix}/data/**'); the next run would read this dataset back"
    ]
    assert sorted(b.name for b in client.list_blobs(BUCKET, prefix=prefix)) == [
        f"{prefix}/data/a.csv"
    ]


@pytest.mark.slow
def test_an_output_beside_the_input_is_fine_and_a_rerun_reads_the_same_records(work):
    """`data/*` lists the files directly in data/: OUTPUT data/out is not among them, and
    neither is its staging sibling; every rerun reads the 3 input records, never the dataset."""
    _config(work, "data/*")
    out = work / "data" / "out"
    for flags in ([], ["--overwrite"], ["--overwrite"]):
        assert etl(work, out, *flags) == 0
        assert json.loads((out / MANIFEST).read_bytes())["sources"]["a"]["records"] == 3
    assert sorted(os.listdir(work / "data")) == ["a.csv", "out"]
