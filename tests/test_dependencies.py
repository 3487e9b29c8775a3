"""Every runtime dependency in pyproject.toml is imported by the code that ships."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("runtime", "actions", "classifiers")


def imported_top_level_modules() -> set[str]:
    """Top-level names of every import in the shipped packages (inside functions too)."""
    found: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    found.add(node.module.split(".")[0])
    return found


def test_every_runtime_dependency_is_imported():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in declared]
    provides: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            provides.setdefault(re.sub(r"[-_.]+", "-", dist.lower()), set()).add(module)
    used = imported_top_level_modules()
    unused = sorted(n for n in names if not provides.get(re.sub(r"[-_.]+", "-", n), set()) & used)
    assert unused == []
