"""The shipped code_qa against a real llama.cpp server (opt-in: `-m llama`).

Runs only when a llama-server has been built (`python benchmarks/real_model.py build`
puts one under ~/.cache/step-runtime/llama, or $STEP_RUNTIME_LLAMA_HOME) and
STEP_RUNTIME_LLAMA=1 is set: the model is slow on two cores (minutes per question), so
the default suite and CI replay cassettes recorded from this server instead
(tests/test_real_model_cassettes.py). docs/models.md has the recipe.

What it checks is what issue 23 asked of the real server: questions complete as
shipped, with and without a terminal; the structured-output schema, the server's usage
and any fallback are in the trace; a run killed mid-way and resumed with no --model
continues on the same server.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOME = Path(os.environ.get("STEP_RUNTIME_LLAMA_HOME") or Path.home() / ".cache/step-runtime/llama")
BINARY = HOME / "bin" / "llama-server"
GGUF = HOME / "model" / "SmolLM2-135M-Instruct.Q4_1.gguf"

pytestmark = [
    pytest.mark.llama,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("STEP_RUNTIME_LLAMA") != "1" or not BINARY.is_file() or not GGUF.is_file(),
        reason="opt-in: set STEP_RUNTIME_LLAMA=1 after `python benchmarks/real_model.py build`",
    ),
]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                str(BINARY),
                "-m",
                str(GGUF),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "-c",
                "8192",
                "-t",
                "1",  # two threads wait on each other at every token on a busy machine
                "--no-repack",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        for _ in range(240):
            if proc.poll() is not None:
                pytest.fail(f"llama-server exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    folder = tmp_path_factory.mktemp("work")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "runtime",
            "index",
            "pipelines/sample/eshop",
            "--repository",
            "eshop",
            "--index",
            str(folder / "index.db"),
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    return folder


def env() -> dict[str, str]:
    # The command as shipped: the server's 8,192 window is the ad-hoc spec's default.
    return {k: v for k, v in os.environ.items() if not k.startswith("RUNTIME_")}


def exec_args(work: Path, url: str, question: str, run_id: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "runtime",
        "exec",
        "pipelines/code_qa.yaml",
        "--model",
        f"openai:smollm2@{url}",
        "--index",
        str(work / "index.db"),
        "--store",
        str(work / "runs.db"),
        "--run-id",
        run_id,
        "--input",
        f"question={question}",
    ]


def trace(work: Path, run_id: str, *, check: bool = True) -> list[dict]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "runtime",
            "trace",
            run_id,
            "--store",
            str(work / "runs.db"),
            "--format",
            "jsonl",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=check,
    )
    return [json.loads(x) for x in done.stdout.splitlines()] if done.returncode == 0 else []


@pytest.mark.parametrize(
    "n,question",
    [
        (1, "Which stored procedure writes the OrderLines table and who calls it?"),
        (2, "How is a payment captured?"),
    ],
)
def test_questions_complete_without_a_terminal(llama, work, n, question):
    done = subprocess.run(
        [*exec_args(work, llama, question, f"q{n}"), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env(),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    events = trace(work, f"q{n}")
    calls = [e for e in events if e["type"] == "MODEL_CALL"]
    assert calls and all(c["usage_from"] == "server" for c in calls)
    route = next(c for c in calls if c["step_id"] == "route")
    assert route["response_format"]["type"] == "json_schema"


def test_a_question_completes_on_a_terminal(llama, work):
    from tests.cli.test_terminal import run_in_pty

    raw = run_in_pty(exec_args(work, llama, "What does OrderRepository do?", "tty"), env(), ROOT)
    assert "completed in" in raw and "Traceback" not in raw


def test_a_killed_run_resumes_on_the_same_model(llama, work):
    proc = subprocess.Popen(
        exec_args(work, llama, "Which tables does usp_PlaceOrder read from?", "killed"),
        cwd=ROOT,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Kill it once its first model call is on the wire (the route step), whenever that is.
    for _ in range(600):
        events = trace(work, "killed", check=False)  # not stored yet: RUN_NOT_FOUND
        if any(e["type"] == "STEP" and e["step_id"] == "route" for e in events):
            break
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "runtime",
            "resume",
            "killed",
            "--store",
            str(work / "runs.db"),
            "--index",
            str(work / "index.db"),
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env(),
    )
    assert done.returncode == 0, done.stderr
    calls = [e for e in trace(work, "killed") if e["type"] == "MODEL_CALL"]
    assert {c["provider"] for c in calls} == {"openai"}  # never the extractive responder
