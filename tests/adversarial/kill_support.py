"""Helpers of the kill-and-resume tests: a pipeline folder, `runtime` in a child process
that `STEP_RUNTIME_KILL_AT` may SIGKILL, and traces compared without what a resume adds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from runtime.engine.trace import without_timing

DOC = "".join(f"line {i}: the quick brown fox number {i} jumps over the dog.\n" for i in range(600))


def long_history() -> list[dict[str, str]]:
    """Six user/assistant turns, each answer ~3,000 characters: enough to compact five."""
    turns = []
    for i in range(6):
        turns.append({"role": "user", "content": f"question {i}"})
        turns.append({"role": "assistant", "content": DOC[: 3000 + i]})
    return turns


def write_folder(root: Path, pipeline: str, prompts: dict[str, str], inputs: Any) -> Path:
    """`root` with prompts/<name>.md, p.yaml and in.json, as `runtime exec` reads them."""
    (root / "prompts").mkdir()
    for name, text in prompts.items():
        (root / "prompts" / f"{name}.md").write_text(text)
    (root / "p.yaml").write_text(pipeline)
    (root / "in.json").write_text(json.dumps(inputs))
    return root


def cli(
    folder: Path, *args: str, kill_at: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m runtime ARGS` in `folder`, SIGKILLed at `kill_at` when given."""
    env = {k: v for k, v in os.environ.items() if k != "STEP_RUNTIME_KILL_AT"}
    if kill_at:
        env["STEP_RUNTIME_KILL_AT"] = kill_at
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def comparable(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events without timing, numbering and the events a resume adds."""
    return [
        {k: v for k, v in e.items() if k != "seq"}
        for e in without_timing(events)
        if e["type"] != "RUN_RESUMED"
    ]
