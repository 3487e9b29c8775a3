"""The layering holds: import-linter's contracts pass, a violation fails by name, no circles."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
    )


def test_the_layering_contracts_are_kept():
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 2 kept, 0 broken." in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # The context layer reaching up into the engine breaks the layers contract.
        ("runtime/context/tokens.py", "import runtime.engine.state", "Layers read from the top"),
        # Any runtime module importing a concrete action breaks the forbidden contract.
        ("runtime/engine/services.py", "import actions.finalize", "runtime never imports"),
    ],
)
def test_a_violation_fails_naming_its_contract(tmp_path, module, line, contract):
    for name in ("runtime", "actions", "classifiers"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # noqa\n", encoding="utf-8")
    done = _lint(tmp_path)
    assert done.returncode == 1
    broken = done.stdout.split("Broken contracts", 1)[1]
    assert contract in broken


def test_no_import_circles_inside_runtime():
    """Strongly connected components of the module graph (grimp, import-linter's engine)."""
    import grimp

    graph = grimp.build_graph("runtime")
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v)):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    # A package importing its own submodule from __init__ (re-export) is not a circle
    # unless the submodule imports the package back for a name defined there.
    assert circles == []


def test_public_module_paths_that_moved_still_work():
    """Third-party actions import `runtime.action`; embedding docs import `runtime.services`."""
    import runtime
    import runtime.action as old_action
    import runtime.contract.action as contract
    import runtime.engine.services as engine_services
    import runtime.services as old_services

    for name in ("Action", "Outcome", "Problem", "StepContext", "Transition", "setting_ref"):
        assert getattr(old_action, name) is getattr(contract, name)
    assert old_services.Services is engine_services.Services
    assert runtime.Action is contract.Action and runtime.Services is engine_services.Services


def test_every_runtime_subpackage_ships_in_the_wheel():
    """A subpackage missing from [tool.setuptools] packages imports in a checkout only."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("runtime", "actions", "classifiers")
        for p in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    # runtime/_data ships as step_runtime_data (see [tool.setuptools.package-dir]).
    assert found - listed == {"runtime._data"}
