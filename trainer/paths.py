"""Locations the trainer reads and writes: local paths or URIs (gs://), joined and made absolute
by one rule. No TensorFlow here: the flag parser and the config use it too."""

from __future__ import annotations

import os
import posixpath


def join(root: str, relative: str) -> str:
    """Joins a relative path to a folder location (local path or URI)."""
    return posixpath.join(root, relative) if "://" in root else os.path.join(root, relative)


def normalize_root(uri: str) -> str:
    """An absolute folder location (local path or URI) without a trailing slash."""
    uri = uri.rstrip("/") or "/"
    return uri if "://" in uri else os.path.abspath(uri)
