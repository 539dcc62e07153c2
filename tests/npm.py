"""Node packages the tests run, installed from a directory's package-lock.json on first use.

``ci(directory, ready)`` runs ``npm ci --prefix <directory> --ignore-scripts`` (bounded; one install
at a time across test workers, by a lock file in the directory) unless ``ready()`` already holds,
and says why not when it cannot: npm missing, the install failing or taking too long. A test turns
that reason into a skip, or a failure under ASKCARDS_REQUIRE_SERVICES=1, with
``tests.conftest.require``. ``.ci/run`` installs the same directories up front.

``--ignore-scripts``: no package the tests use may need an install script (one that downloads a
binary would fail offline); each ships what it runs in the package itself.
"""
from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
INSTALL_TIMEOUT = 300  # seconds for one npm ci


def ci(directory: Path, ready: Callable[[], bool], *, what: str, timeout: int = INSTALL_TIMEOUT) -> str:
    """"" once ``ready()`` holds, installing ``directory``'s lock file first if it did not; else
    why not (``what`` names what was to be installed)."""
    if ready():
        return ""
    where = directory.relative_to(ROOT)
    npm = shutil.which("npm")
    if npm is None:
        return f"npm is not installed, so {what} ({where}/package.json) cannot be installed"
    with open(directory / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test worker may be installing it right now
        if ready():
            return ""
        try:
            done = subprocess.run(
                [npm, "ci", "--prefix", str(directory), "--ignore-scripts", "--engine-strict=false",
                 "--no-audit", "--no-fund", "--loglevel=error"],
                capture_output=True, text=True, timeout=timeout, cwd=directory,
            )
        except subprocess.TimeoutExpired:
            return f"npm ci --prefix {where} did not finish within {timeout} s"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            return f"npm ci --prefix {where} failed ({done.returncode}): {' | '.join(tail)}"
    return ""
