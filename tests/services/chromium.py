"""Headless Chromium for tests: a local HTML file rendered to a PNG screenshot, offline.

Debian's `chromium` package (/usr/bin/chromium) is used; when it is missing, the `chromium`
session fixture installs it with apt-get (as root; about 30 s and 113 MB of downloads here).
Chromium runs with a fresh profile folder and with every background connection turned off
(this machine has no network: without those flags Chromium keeps trying to reach Google's
hosts). `distinct_colours` tells a rendered page from a blank one.

`chromium` is a session fixture; `tests/conftest.py` makes it available to every test.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from PIL import Image

from tests.services import apt

DEBIAN_CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",  # we run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
_INSTALL_TIMEOUT_S = 900
_RUN_TIMEOUT_S = 90


@dataclasses.dataclass(frozen=True)
class Chromium:
    """A Chromium executable that takes screenshots of local pages."""

    path: str

    def screenshot(self, page: Path, png: Path, width: int = 1200, height: int = 1600) -> Path:
        """Renders the local file `page` in a width x height window; writes and returns `png`."""
        page, png = Path(page).resolve(), Path(png).resolve()
        png.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
            proc = subprocess.run(
                [self.path, *FLAGS, f"--user-data-dir={profile}",
                 f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri()],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=_RUN_TIMEOUT_S,
            )  # fmt: skip
        if proc.returncode != 0 or not png.is_file():
            raise RuntimeError(
                f"chromium did not write {png} (exit {proc.returncode}): {proc.stderr[-2000:]}"
            )
        return png


def find_chromium() -> str | None:
    """The Chromium executable on this machine, or None."""
    if os.access(DEBIAN_CHROMIUM, os.X_OK):
        return DEBIAN_CHROMIUM
    return shutil.which("chromium")


def install_chromium() -> str:
    """Installs Debian's chromium package with apt-get (needs root); returns the executable."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"],
    ):
        proc = subprocess.run(
            command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=_INSTALL_TIMEOUT_S,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {proc.stderr[-2000:]}")
    found = find_chromium()
    if found is None:
        raise RuntimeError("apt-get installed chromium but there is no chromium executable")
    return found


def distinct_colours(png: Path, at_most: int = 256) -> int:
    """The number of distinct RGB colours in `png`, counted up to `at_most` (+1 beyond)."""
    with Image.open(png) as image:
        colours = image.convert("RGB").getcolors(maxcolors=at_most)
    return at_most + 1 if colours is None else len(colours)


@pytest.fixture(scope="session")
def chromium() -> Chromium:
    """Headless Chromium, installed on first use when the machine has none."""
    found = find_chromium()
    if found is None:
        with apt.installing():  # another worker process may be installing it right now
            found = find_chromium() or install_chromium()
    return Chromium(found)
