"""A wheel carries pipelines/ and schemas/ so an installed runtime finds them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# Each test builds a wheel (seconds): the whole module is slow.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: a build writes build/ and *.egg-info into its source, which the
    # editable install reads entry points from while other test workers run.
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("runtime", "actions", "classifiers", "pipelines", "schemas"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    [whl] = out.glob("*.whl")
    return zipfile.ZipFile(whl)


def test_wheel_contains_schema_and_pipelines(wheel):
    names = set(wheel.namelist())
    assert "step_runtime_data/schemas/pipeline.schema.json" in names
    shipped = {p.relative_to(ROOT).as_posix() for p in (ROOT / "pipelines").rglob("*.yaml")}
    for rel in shipped:
        assert f"step_runtime_data/{rel}" in names


def test_wheel_declares_console_script_and_builtin_actions(wheel):
    [ep] = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    text = wheel.read(ep).decode()
    assert "runtime = runtime.cli:main" in text
    assert "[step_runtime.actions]" in text and "loop_guard = actions.loop_guard:LoopGuard" in text
