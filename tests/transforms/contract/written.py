"""The manifests a test session wrote, read back (the session check of tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

from transforms.contract.layout import MANIFEST
from transforms.contract.manifest import Manifest, ManifestError, manifest_problem


def unreadable_manifests(folder: Path) -> tuple[int, list[str]]:
    """(manifests read, problems) for every manifest.json under `folder` that claims to be a
    shardflow manifest (`manifest_problem`): each must parse as a `Manifest`. Files that claim
    nothing (tests of other tools' files) and symbolic links are not read."""
    read, problems = 0, []
    for root, _, files in os.walk(folder):
        path = os.path.join(root, MANIFEST)
        if MANIFEST not in files or os.path.islink(path):
            continue
        try:
            data = Path(path).read_bytes()
        except OSError:  # removed or made unreadable by its test
            continue
        if manifest_problem(data) is not None:
            continue
        read += 1
        try:
            Manifest.from_json(data)
        except (ManifestError, ValueError) as e:
            problems.append(f"{os.path.relpath(path, folder)}: {e}")
    return read, problems
