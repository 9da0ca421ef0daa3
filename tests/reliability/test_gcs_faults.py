"""GCS faults: a storage service that fails some requests still yields the complete, correct
dataset, through retries; one that stays down fails the run cleanly and soon.

`shardflow etl` runs as a subprocess on the inputs of tests/e2e/test_gcs.py (a gzip CSV and a
JSON Lines file on gs://, bad records and a duplicate), once straight against the GCS emulator
and once through tests/services/flaky_gcs.py, a proxy that answers a fixed share of the
requests with an error instead of passing them on: a quarter of the uploads (session starts
and data) get 503, one in six of the server-side copies of the publication get 429, every other
batched delete has its connection dropped without an answer, and a quarter of the data reads
get 503. The two datasets must be the same bytes (manifest.json but for `created`), with no
staging or publishing-marker object left.

Who retries what (Beam 2.77's gcsio on google-cloud-storage 3.x): every call of Beam's gs://
filesystem passes gcsio's own `google.api_core.retry.Retry` (google-cloud-storage's
`_should_retry` predicate: 408, 429, 5xx, dropped connections; backoff from 1 s, 120 s deadline
per call), so uploads are retried too (google-cloud-storage alone retries them only with
`if_generation_match`), as are copies (`copyTo`), reads, listings and lookups; batched deletes
are retried by gcsio's `_batch_with_retry`, whole batch and sub-requests alike.

When uploads never succeed, the run fails after one retry deadline (shortened here to 5 s),
exits 1 with one `job failed` line and publishes nothing: a failed shard cancels the shard
writes not yet started, and failed uploads are cancelled rather than left to be retried when
their writers are garbage-collected at exit (transforms/files.py `abandon`).
"""

from __future__ import annotations

import gc
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e import test_gcs as e2e
from tests.services.flaky_gcs import BATCH, COPY, DOWNLOADS, DROP, UPLOADS, Rule, flaky_gcs

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent.parent
BUCKET = e2e.BUCKET
CSV_NAME, JSONL_NAME = "faults/in/people.csv.gz", "faults/in/more.jsonl"
CONFIG = e2e.CONFIG.replace(e2e.CSV_URI, f"gs://{BUCKET}/{CSV_NAME}").replace(
    f"gs://{BUCKET}/in/*.jsonl", f"gs://{BUCKET}/faults/in/*.jsonl"
)

# A quarter of the uploads, one copy in six, every other batch, a quarter of the reads; the same
# request never fails more than twice in a row (Rule's default), so that retries get through.
# (Copies run one after another, each retry waits up to a second or two: few copy faults.)
FLAKY = (
    Rule("upload", UPLOADS, every=4),
    Rule("copy", COPY, every=6, status=429),
    Rule("batch", BATCH, every=2, status=DROP),
    Rule("download", DOWNLOADS, every=4),
)
DOWN = (Rule("upload", UPLOADS, every=1, max_in_a_row=None),)  # no upload ever succeeds

# gcsio retries each call for up to 120 s; a run against a GCS that stays down is given a 5 s
# retry deadline instead (gcsio's retry object, replaced before the CLI starts).
DEADLINE_S = 5.0
SHORT_DEADLINE = f"""
from apache_beam.io.gcp import gcsio_retry
for name in ("DEFAULT_RETRY", "DEFAULT_RETRY_WITH_THROTTLING_COUNTER"):
    setattr(gcsio_retry, name, getattr(gcsio_retry, name).with_timeout({DEADLINE_S}))
from pipelines.cli import main
main()
"""


def output(name: str) -> str:
    return f"gs://{BUCKET}/faults/{name}/people"


def upload_inputs(client) -> None:
    bucket = client.bucket(BUCKET)
    bucket.blob(CSV_NAME).upload_from_string(e2e.csv_bytes())
    bucket.blob(JSONL_NAME).upload_from_string(e2e.jsonl_bytes())


def etl(folder: Path, out: str, env: dict[str, str], launcher: list[str] | None = None):
    cfg = folder / "people.yaml"
    cfg.write_text(CONFIG)
    command = launcher or ["-m", "pipelines.cli"]
    return subprocess.run(
        [sys.executable, *command, "etl", "--config", str(cfg), "--output", out],
        cwd=ROOT,
        env=dict(os.environ, **env, TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True,
        text=True,
        timeout=300,
    )


def leftovers(client) -> list[str]:
    """Objects that no finished run may leave: staging folders and publishing markers."""
    return [
        b.name
        for b in client.list_blobs(BUCKET, prefix="faults/")
        if ".incomplete-" in b.name or ".shardflow-publishing" in b.name
    ]


@pytest.fixture(scope="module")
def client(gcs_emulator):
    client = gcs_emulator.client()
    upload_inputs(client)
    return client


@pytest.fixture(scope="module")
def clean(client, tmp_path_factory):
    """The dataset of a run straight against the emulator: relative path → bytes."""
    folder = tmp_path_factory.mktemp("clean")
    result = etl(folder, output("clean"), {})
    assert result.returncode == 0, result.stderr
    return e2e.download(client, "faults/clean/people/", folder / "people")


def test_a_flaky_gcs_yields_the_same_dataset_as_a_clean_run(gcs_emulator, client, clean, tmp_path):
    with flaky_gcs(gcs_emulator, FLAKY) as proxy:
        # Objects written through the proxy are downloaded through it (their `mediaLink`):
        # the inputs, so that the run's reads meet faults too, and the dataset, unfaulted.
        with proxy.paused():
            upload_inputs(proxy.client())
        try:
            result = etl(tmp_path, output("flaky"), proxy.env)
            with proxy.paused():
                flaky = e2e.download(client, "faults/flaky/people/", tmp_path / "people")
        finally:
            upload_inputs(client)  # the inputs' download links lead to the emulator again
    assert result.returncode == 0, result.stderr
    assert f"dataset: {output('flaky')}" in result.stdout
    # every kind of fault really happened, and the requests were retried past it
    assert {r.name: proxy.injected[r.name] > 0 for r in FLAKY} == {r.name: True for r in FLAKY}
    assert proxy.injected["upload"] >= proxy.seen["upload"] // 5

    assert sorted(flaky) == sorted(clean)
    for name in clean:
        if name not in ("manifest.json", "report.html"):  # the report holds the run's times
            assert flaky[name] == clean[name], name
    manifest = e2e.without_created(flaky["manifest.json"])
    assert manifest == e2e.without_created(clean["manifest.json"])
    listed = [f for split in manifest["splits"].values() for f in split["files"]]
    listed += manifest["rejected"]["files"] + [manifest["statistics"], manifest["facts"]]
    listed += [manifest["validation"]["schema"], manifest["validation"]["statistics"]]
    unlisted = {"manifest.json", "report.html"}  # the report is written after publication
    assert sorted(f["path"] for f in listed) == sorted(set(flaky) - unlisted)
    for f in listed:
        data = flaky[f["path"]]
        assert (len(data), hashlib.sha256(data).hexdigest()) == (f["bytes"], f["sha256"])
    assert sum(s["records"] for s in manifest["splits"].values()) == len(e2e.expected_examples())
    assert leftovers(client) == []


def test_a_gcs_that_stays_down_fails_the_run_in_one_line_and_publishes_nothing(
    gcs_emulator, client, tmp_path
):
    started = time.monotonic()
    with flaky_gcs(gcs_emulator, DOWN) as proxy:
        result = etl(tmp_path, output("down"), proxy.env, ["-c", SHORT_DEADLINE])
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("shardflow etl: job failed: ") and "503" in last, result.stderr
    assert sum("job failed" in line for line in result.stderr.splitlines()) == 1
    assert proxy.injected["upload"] >= 2 and proxy.injected["upload"] == proxy.seen["upload"]
    assert list(client.list_blobs(BUCKET, prefix="faults/down/")) == []  # no manifest, nothing
    assert leftovers(client) == []
    assert elapsed < 2 * DEADLINE_S + 20  # one retry deadline, not one per shard


def test_a_failed_upload_is_cancelled_not_retried_when_its_writer_is_collected(
    gcs_emulator, client, monkeypatch
):
    from apache_beam.io.gcp import gcsio_retry
    from google.api_core.exceptions import RetryError

    from transforms.sink.framing import RecordFileWriter

    for name in ("DEFAULT_RETRY", "DEFAULT_RETRY_WITH_THROTTLING_COUNTER"):
        monkeypatch.setattr(gcsio_retry, name, getattr(gcsio_retry, name).with_timeout(2.0))
    path = f"gs://{BUCKET}/faults/abandoned/train-00000-of-00001.tfrecord"
    with flaky_gcs(gcs_emulator, DOWN) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.endpoint)  # this process's clients
        writer = RecordFileWriter(path, "none")
        writer.write([b"a record"])
        with pytest.raises(RetryError, match="503"):
            writer.close()
        tries = proxy.seen["upload"]
        del writer
        gc.collect()  # an unclosed google-cloud-storage BlobWriter uploads when collected
        assert proxy.seen["upload"] == tries
        assert tries > 1  # retried before giving up
    assert list(client.list_blobs(BUCKET, prefix="faults/abandoned/")) == []


def test_validate_only_with_an_unreachable_gcs_output_says_so_in_one_line(tmp_path):
    """No network (the endpoint refuses every connection): the client retries for minutes then
    raises a traceback; the checks before a run wait STORAGE_ANSWER_S (3 s here) and say so."""
    import subprocess
    import sys

    (tmp_path / "a.csv").write_text("id\n1\n")
    (tmp_path / "c.yaml").write_text(
        "name: t\nsources: [{name: s, format: csv, path: a.csv}]\n"
        "features: {id: {type: int}}\nsplits: {train: 1.0}\noutput: {path: gs://b/out}\n"
    )
    code = (
        "import sys; from transforms.sink import output; output.STORAGE_ANSWER_S = 3\n"
        "from pipelines.etl import run\n"
        f"sys.exit(run(['--config', {str(tmp_path / 'c.yaml')!r}, '--validate-only']))"
    )
    env = dict(os.environ, STORAGE_EMULATOR_HOST="http://127.0.0.1:9")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "shardflow etl: error: output.path: 'gs://b/out': Cloud Storage did not answer in 3 s "
        "(no network, or its endpoint is down); nothing was read or written"
    )
    assert "Traceback" not in done.stderr
