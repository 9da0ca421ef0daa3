"""Environments as production has them, built from the package registry for the tests.

- `build_sdist`: the package exactly as Beam's stager builds it for `--setup_file` (its own
  `Stager._build_setup_package`: `python -m build --sdist`, else `setup.py sdist`).
- `worker_env`: a Dataflow worker's Python: a fresh virtual environment holding only
  `apache-beam[gcp]` at the version setup.py pins (what the SDK worker image has) and that sdist
  with its `install_requires`, nothing else of this repository.
- `launcher_env`: the flex template's Python: the sdist installed on its own (`--no-deps`), its
  dependencies those of the project's environment (a `.pth` line naming its site-packages, which
  adds the folder without running the editable install's hooks there), so the code imported is the
  sdist's and the libraries are the pinned ones, without installing TensorFlow a second time.

Each returns the environment's `python`; `minimal_env` is the environment variables a container
starts a process with (no PYTHONPATH, the environment's bin/ first on PATH).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_INSTALL_TIMEOUT_S = 900


def pinned(name: str) -> str:
    """The requirement setup.py pins for `name` (e.g. "apache-beam[gcp]==2.77.0")."""
    text = (ROOT / "setup.py").read_text()
    found = re.search(rf'"({re.escape(name)}(?:\[[^\]]*\])?==[^"]+)"', text)
    if found is None:
        raise LookupError(f"setup.py pins no {name}")
    return found.group(1)


def build_sdist(folder: Path) -> Path:
    """The sdist of setup.py, built in `folder` by Beam's stager as `--setup_file` builds it."""
    from apache_beam.runners.portability.stager import Stager

    folder.mkdir(parents=True, exist_ok=True)
    return Path(Stager._build_setup_package(str(ROOT / "setup.py"), str(folder)))


def new_env(folder: Path) -> Path:
    """A fresh virtual environment of this Python's base interpreter; its `python`."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(folder)], check=True, timeout=120)
    return folder / "bin" / "python"


def pip_install(python: Path, *args: str, cwd: Path | None = None) -> None:
    """`pip install ARGS` into the environment of `python` (from `cwd`)."""
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-compile", *args],
        capture_output=True,
        text=True,
        timeout=_INSTALL_TIMEOUT_S,
        env=minimal_env(python),
        cwd=cwd,
    )
    if done.returncode != 0:
        lines = [x for x in done.stderr.splitlines() if "is ignored: it is neither" not in x]
        raise RuntimeError(f"pip install {' '.join(args)} failed:\n" + "\n".join(lines[-30:]))


def worker_env(folder: Path, sdist: Path) -> Path:
    """A fresh environment with only the pinned Beam and the sdist with its install_requires."""
    python = new_env(folder)
    pip_install(python, pinned("apache-beam"), str(sdist))
    return python


def launcher_env(folder: Path, sdist: Path) -> Path:
    """A fresh environment with the sdist alone, the project environment's libraries under it."""
    python = new_env(folder)
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    (site / "project-libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip_install(python, "--no-deps", "--no-build-isolation", str(sdist))
    return python


def minimal_env(python: Path, **extra: str) -> dict[str, str]:
    """What a container gives a process: HOME, a PATH with the environment's bin/ first, the
    locale; no PYTHONPATH, nothing of this test process's environment but those."""
    env = {
        "HOME": os.environ.get("HOME", "/root"),
        "PATH": os.pathsep.join([str(python.parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "LANG": "C.UTF-8",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    for name, value in os.environ.items():
        if name.startswith("PIP_"):  # the registry this machine installs from
            env[name] = value
    return env | extra
