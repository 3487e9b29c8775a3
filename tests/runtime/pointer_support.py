"""Helpers shared by the pointer tests (JSON paths, offset and line indexes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from runtime.context import pointers as ptr

ROOT = Path(__file__).parents[2]


def paths(value: Any, path: str = "$"):
    """Every (path, value) of a JSON value, in document order."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            step = f".{k}" if k.isidentifier() else f"[{json.dumps(k)}]"
            yield from paths(v, path + step)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, f"{path}[{i}]")


def ctx_of(store: Any, run_id: str = "r") -> SimpleNamespace:
    """The little of a step context that rehydrate reads."""
    return SimpleNamespace(services=SimpleNamespace(pointers=store), run_id=run_id, step_id="s")


def put(store: Any, text: str, kind: str) -> str:
    """Store text as run r's original of this kind; its pointer id."""
    pid, sha = ptr.pointer_id_of(text)
    store.put_original("r", pid, sha, kind, text)
    return pid


_NEW_PROCESS = """
import json, sys
from types import SimpleNamespace
from runtime.context import pointers as ptr
from runtime.engine.store import SqliteRunStore
db, pid, parts = json.loads(sys.argv[1])
store = SqliteRunStore(db, create=False)
def refuse(*a):
    raise AssertionError("the whole original was loaded")
store.get_original = refuse
ctx = SimpleNamespace(services=SimpleNamespace(pointers=store), run_id="r", step_id="s")
print(json.dumps([ptr.rehydrate(ctx, pid, part) for part in parts]))
"""


def slices_in_a_new_process(db: str, pid: str, parts: list[str]) -> list[str]:
    """Each part of run r's pointer, sliced by a new process that may never load the whole
    original (nothing in memory: the index and the chunks come from the SQLite store)."""
    out = subprocess.run(
        [sys.executable, "-c", _NEW_PROCESS, json.dumps([db, pid, parts])],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    return json.loads(out)
