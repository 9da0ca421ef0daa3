"""Locations the trainer reads and writes: local paths or URIs (gs://), joined and made absolute
by one rule, and date ranges in braces expanded to one location per day (`--data`,
trainer.dataset.union). No TensorFlow here: the flag parser, the config and the readers use it
too."""

from __future__ import annotations

import datetime
import os
import posixpath
import re
from collections.abc import Sequence

from transforms.contract.manifest import ManifestError

_RANGE = re.compile(r"\{(\d{4})([-/]?)(\d{2})\2(\d{2})\.\.(\d{4})([-/]?)(\d{2})\6(\d{2})\}")
MAX_DAYS = 3660  # days a range may span


def join(root: str, relative: str) -> str:
    """Joins a relative path to a folder location (local path or URI)."""
    return posixpath.join(root, relative) if "://" in root else os.path.join(root, relative)


def normalize_root(uri: str) -> str:
    """An absolute folder location (local path or URI) without a trailing slash."""
    uri = uri.rstrip("/") or "/"
    return uri if "://" in uri else os.path.abspath(uri)


def expand(uris: Sequence[str]) -> list[str]:
    """The URIs with each date range in braces replaced by one URI per day."""
    out = []
    for uri in uris:
        found = _RANGE.search(uri)
        if found is None:
            out.append(uri)
            continue
        y1, sep, m1, d1, y2, sep2, m2, d2 = found.groups()
        try:
            first = datetime.date(int(y1), int(m1), int(d1))
            last = datetime.date(int(y2), int(m2), int(d2))
        except ValueError as e:
            raise ManifestError(f"--data {uri}: {found.group(0)}: {e}") from None
        if sep != sep2 or last < first or (last - first).days >= MAX_DAYS:
            raise ManifestError(
                f"--data {uri}: {found.group(0)} is not a range FIRST..LAST of dates written "
                "alike, FIRST not after LAST (e.g. {2026-11-01..2026-11-26})"
            )
        day = first
        while day <= last:
            text = sep.join((f"{day.year:04d}", f"{day.month:02d}", f"{day.day:02d}"))
            out += expand([uri[: found.start()] + text + uri[found.end() :]])
            day += datetime.timedelta(days=1)
    return out
