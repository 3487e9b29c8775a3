"""The code base stays ruff-clean, ruff-formatted and mypy-clean on runtime/ (run by CI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check():
    out = _run("ruff", "check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format():
    out = _run("ruff", "format", "--check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_mypy_runtime():
    out = _run("mypy", "runtime")
    assert out.returncode == 0, out.stdout + out.stderr
