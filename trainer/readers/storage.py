"""The bytes of a dataset's files, local or on Cloud Storage, without TensorFlow.

A local path is opened with `open`; a `gs://bucket/object` URI with google-cloud-storage (its
client is made once per process, on the first remote read). Both give a binary stream read in
large pieces. Locations are joined and made absolute by the trainer's one rule (trainer.paths).
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import IO, Any

from trainer.paths import join, normalize_root

__all__ = ["exists", "is_remote", "join", "normalize_root", "open_read", "read_bytes"]

GCS = "gs://"


def is_remote(path: str) -> bool:
    """True for a gs:// URI."""
    return path.startswith(GCS)


def exists(path: str) -> bool:
    """True when the file exists."""
    if is_remote(path):
        return _blob(path).exists()
    return os.path.isfile(path)


def open_read(path: str) -> IO[bytes]:
    """A binary stream of the file's bytes."""
    if is_remote(path):
        return _blob(path).open("rb")
    return open(path, "rb")


def read_bytes(path: str) -> bytes:
    """The whole file."""
    with open_read(path) as f:
        return f.read()


def _blob(uri: str) -> Any:
    bucket, _, name = uri[len(GCS) :].partition("/")
    return _client().bucket(bucket).blob(name)


@functools.cache
def _client() -> Any:
    # imported for gs:// datasets only
    return importlib.import_module("google.cloud.storage").Client()
