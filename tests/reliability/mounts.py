"""Small file systems mounted for a test (a read-only one, a full one): tmpfs, which needs root;
the test is skipped where mounting is not allowed."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


def mount_tmpfs(folder: Path, options: str) -> None:
    """A tmpfs with `options` (`ro`, `size=256k`) on `folder`, created; skips the test where
    it cannot be mounted."""
    folder.mkdir(parents=True, exist_ok=True)
    if not shutil.which("mount"):
        pytest.skip("no mount command here")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a file system here (needs root)")


def unmount(folder: Path) -> None:
    """Unmounts `folder`; lazily where a process the test started still holds a file there."""
    if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)


@contextlib.contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[Path]:
    mount_tmpfs(folder, options)
    try:
        yield folder
    finally:
        unmount(folder)
