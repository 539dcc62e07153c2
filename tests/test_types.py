"""mypy over askcards and project as pyproject.toml configures it: every module under mypy's
defaults, services/, tools/ and surfaces/ as ``--strict``. Here so the README's one test command
(and CI) checks types too.

The cache (``.mypy_cache`` in the checkout, mypy's own default) makes a rerun take seconds; a
fresh checkout's first run builds it (Django's and DRF's stubs included).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_reports_no_errors():
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"mypy found type errors:\n{result.stdout}{result.stderr}"
