"""Resume keeps the model, with real `runtime` processes (issue 23 item 3).

A run started with `--model openai:m@http://127.0.0.1:PORT/v1` is killed while its model
request is in flight, or fails on a server error; `runtime resume ID`, exactly as the
failure line prints it and with no `--model`, sends the next request to the same server.
A different `--model` at resume is refused without `--force` and taken with it, and the
trace says so. The server runs in this test; `runtime` runs as child processes.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chat_support import Server

import runtime

pytestmark = pytest.mark.slow  # child processes (~1 s each); CliRunner twins run in the fast subset

PIPELINE = """\
name: two_calls
settings: {entry_step_id: first}
inputs:
  question: string
steps:
  - id: first
    action: call_model
    prompt_key: sys
    user_parts: {q: {source: question}}
    next: second
  - id: second
    action: call_model
    prompt_key: sys
    user_parts: {q: {source: question, template: "Again: {}"}}
    next: done
  - id: done
    action: finalize
    source: last_model_response
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Answer briefly.\n")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    return tmp_path


def _env() -> dict[str, str]:
    drop = {"OPENAI_BASE_URL", "RUNTIME_CONTEXT_WINDOW", "RUNTIME_INDEX", "RUNTIME_STORE"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def runtime_cmd(folder: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime", *args],
        cwd=folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def exec_args(spec: str, run_id: str) -> list[str]:
    return ["exec", "p.yaml", "--input", "question=why?", "--run-id", run_id, "--model", spec]


def test_a_killed_run_resumes_on_the_same_server(folder):
    server = Server(["one", "hang", "three"])
    try:
        spec = f"openai:m@{server.url}"
        child = subprocess.Popen(
            [sys.executable, "-m", "runtime", *exec_args(spec, "k1")],
            cwd=folder,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert server.hung.wait(60), "the second model request never arrived"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(30)
        server.release.set()
        while len(server.script) != 1:  # the held request has been answered
            time.sleep(0.01)
        done = runtime_cmd(folder, ["resume", "k1"])
        assert done.returncode == 0, done.stderr
        assert done.stdout == "final_answer: three\n"
        assert [b["model"] for b in server.bodies] == ["m", "m", "m"]
    finally:
        server.close()


def test_the_printed_resume_line_keeps_the_model_and_another_one_needs_force(folder):
    server = Server(["one", 400, "three", "one", 400, "other reply"])
    try:
        spec = f"openai:m@{server.url}"
        failed = runtime_cmd(folder, exec_args(spec, "f1"))
        assert failed.returncode == 1
        [line] = [ln for ln in failed.stderr.splitlines() if "resume with:" in ln]
        printed = shlex.split(line.split("resume with: ", 1)[1].rstrip("]"))
        assert printed == ["runtime", "resume", "f1"]
        done = runtime_cmd(folder, printed[1:])
        assert done.returncode == 0, done.stderr
        assert done.stdout == "final_answer: three\n"
        assert len(server.bodies) == 3

        failed = runtime_cmd(folder, exec_args(spec, "f2"))
        assert failed.returncode == 1
        other = f"openai:other@{server.url}"
        refused = runtime_cmd(folder, ["resume", "f2", "--model", other])
        assert refused.returncode == 2
        assert f"--model: recorded {spec!r}, given {other!r}" in refused.stderr
        assert len(server.bodies) == 5
        forced = runtime_cmd(folder, ["resume", "f2", "--model", other, "--force"])
        assert forced.returncode == 0, forced.stderr
        assert "warning: run: resumed with --force" in forced.stderr
        assert server.bodies[5]["model"] == "other"
        events = runtime.SqliteRunStore(str(folder / ".runtime" / "runs.db")).events("f2")
        [resumed] = [e for e in events if e["type"] == "RUN_RESUMED"]
        assert resumed["changed"] == [{"what": "--model", "recorded": spec, "given": other}]
    finally:
        server.close()
