"""Start-up stays light and layering holds: checked in a fresh interpreter."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = (
    "httpx",
    "tiktoken",
    "tree_sitter",
    "rich",
    "jsonschema",
    "sqlite3",
    "actions",
    "classifiers",
    "opentelemetry",
)


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_help_loads_no_heavy_module():
    code = (
        "from runtime.cli import cli\n"
        "try:\n    cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass"
    )
    loaded = _modules_after(code)
    bad = sorted(m for m in loaded if m.split(".")[0] in HEAVY)
    assert bad == []


def test_runtime_never_imports_actions_or_classifiers():
    offenders = []
    for path in (ROOT / "runtime").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "actions"]
    assert offenders == []
