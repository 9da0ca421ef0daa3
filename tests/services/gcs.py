"""A Google Cloud Storage emulator on 127.0.0.1 for tests: `gs://` without a cloud.

`gcp-storage-emulator` (pure Python, in-memory) answers the JSON API that google-cloud-storage
and Beam's `gs://` filesystem speak, including the batch copy Beam's file sinks use. Clients find
it through `STORAGE_EMULATOR_HOST`. Beam still asks `google.auth.default()` for credentials, and
without any it retries with backoff for ~25 s per process; so the emulator comes with a fake
authorized-user credentials file holding a static token that expires far in the future (nothing
ever refreshes it), and with the settings that keep the auth libraries from probing a metadata
server.

`gcs_emulator` is a session fixture: it starts one emulator, creates the buckets in `BUCKETS`, and
sets the environment of the test process (and so of every subprocess it starts) while it lives.
`tests/conftest.py` makes it available to every test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Iterator

import pytest

BUCKETS = ("shardflow-test",)
PROJECT = "shardflow-test-project"
_START_TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True)
class GcsEmulator:
    """A running emulator: its endpoint, the environment that points clients at it, its PID."""

    endpoint: str
    env: dict[str, str]
    pid: int
    buckets: tuple[str, ...]

    def client(self):
        """A google-cloud-storage client talking to the emulator."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=PROJECT,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.endpoint},
        )


def emulator_env(endpoint: str, credentials_file: str) -> dict[str, str]:
    """The settings that send google-cloud-storage and Beam to `endpoint`, offline and fast."""
    return {
        "STORAGE_EMULATOR_HOST": endpoint,
        "GOOGLE_APPLICATION_CREDENTIALS": credentials_file,
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        # never probe a metadata server (the auth libraries do on GCE-like hosts)
        "NO_GCE_CHECK": "true",
        "GCE_METADATA_HOST": "127.0.0.1:1",
        "GCE_METADATA_IP": "127.0.0.1:1",
    }


def write_fake_credentials(path: str) -> None:
    """An authorized-user credentials file whose access token is valid until 2099."""
    info = {
        "type": "authorized_user",
        "client_id": "shardflow-test.apps.googleusercontent.com",
        "client_secret": "not-a-secret",
        "refresh_token": "not-a-refresh-token",
        "token": "shardflow-test-token",
        "expiry": "2099-01-01T00:00:00Z",
        "quota_project_id": PROJECT,
    }
    with open(path, "w") as f:
        json.dump(info, f)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_listening(proc: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the GCS emulator exited with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the GCS emulator is not listening on port {port}") from None
            time.sleep(0.05)  # a readiness poll, bounded by the deadline


@contextlib.contextmanager
def running_emulator(buckets: tuple[str, ...] = BUCKETS) -> Iterator[GcsEmulator]:
    """Starts an in-memory emulator on a free port with `buckets`; stops it (by PID) after."""
    with tempfile.TemporaryDirectory(prefix="gcs-emulator-") as tmp:
        credentials = os.path.join(tmp, "credentials.json")
        write_fake_credentials(credentials)
        port = _free_port()
        endpoint = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gcp_storage_emulator",
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--in-memory",
                "--quiet",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_until_listening(proc, port)
            emulator = GcsEmulator(endpoint, emulator_env(endpoint, credentials), proc.pid, buckets)
            client = emulator.client()
            for bucket in buckets:
                client.create_bucket(bucket)
            yield emulator
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[GcsEmulator]:
    """A running GCS emulator; the test process and its children are pointed at it."""
    with running_emulator() as emulator, pytest.MonkeyPatch.context() as patch:
        for name, value in emulator.env.items():
            patch.setenv(name, value)
        yield emulator
