"""The manifests and statistics a test session wrote, read back (the session check of
tests/conftest.py)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from transforms.contract.layout import MANIFEST
from transforms.contract.manifest import Manifest, ManifestError, manifest_problem
from transforms.contract.statistics import Statistics, StatisticsError


def unreadable_manifests(folder: Path) -> tuple[int, list[str]]:
    """(manifests read, problems) for every manifest.json under `folder` that claims to be a
    shardflow manifest (`manifest_problem`): each must parse as a `Manifest`, and the
    statistics.json it lists, where still the file it lists (its sha256), as `Statistics` that
    writes back the same bytes. Files that claim nothing (tests of other tools' files),
    symbolic links and what is no regular file (a FIFO) are not read."""
    read, problems = 0, []
    for root, _, files in os.walk(folder):
        path = os.path.join(root, MANIFEST)
        if MANIFEST not in files or os.path.islink(path) or not os.path.isfile(path):
            continue  # a link, or a FIFO or device a test made: never opened
        try:
            data = Path(path).read_bytes()
        except OSError:  # removed or made unreadable by its test
            continue
        if manifest_problem(data) is not None:
            continue
        read += 1
        try:
            manifest = Manifest.from_json(data)
        except (ManifestError, ValueError) as e:
            problems.append(f"{os.path.relpath(path, folder)}: {e}")
            continue
        problem = _statistics_problem(root, manifest)
        if problem is not None:
            problems.append(f"{os.path.relpath(root, folder)}: {problem}")
    return read, problems


def _statistics_problem(root: str, manifest: Manifest) -> str | None:
    """Why the dataset's statistics.json, as the ETL wrote it, does not read back the same."""
    entry = manifest.statistics
    if entry is None:
        return None
    if not os.path.isfile(Path(root, entry.path)):  # removed by its test, or a FIFO it made
        return None
    try:
        data = Path(root, entry.path).read_bytes()
    except OSError:  # removed by its test
        return None
    if hashlib.sha256(data).hexdigest() != entry.sha256:  # edited by its test
        return None
    try:
        statistics = Statistics.loads(data, entry.path)
    except StatisticsError as e:
        return str(e)
    if statistics.dumps().encode("utf-8") != data:
        return f"{entry.path} does not write back the same bytes"
    return None
