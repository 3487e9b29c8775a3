"""What `runtime exec` shows on a real terminal: a pseudo-terminal, read back through a VT100 screen.

The run streams its answer from the scripted chat server on 127.0.0.1; the bytes the
process wrote to the terminal are replayed into `pyte`, so the assertions are about
what a person sees once the command has returned, and about every spinner label drawn.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pyte
import pytest

# Each test starts the CLI in a real pseudo-terminal (a new interpreter, seconds each).
pytestmark = pytest.mark.slow

COLUMNS, ROWS = 100, 30
SGR = re.compile(r"\x1b\[[0-9;]*m")  # select graphic rendition: colours, bold, reset
LABEL = re.compile(r"step \d+: \w+(?: \(\w+\))?")
ANSWER = ["The answer ", "is forty", "-two.\nSecond line."]

PIPELINE = """
name: demo
settings: {entry_step_id: prep}
inputs:
  question: string
OUTPUTS
steps:
  - id: prep
    action: set_variables
    rules:
      - {set: asked, from: question}
    next: answer
  - id: answer
    action: call_model
    prompt_key: system
    user_parts:
      question: {source: asked, template: "Question: {}"}
    next: finish
  - id: finish
    action: finalize
    source: last_model_response
"""


def run_in_pty(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run argv with stdin, stdout and stderr on one pseudo-terminal; everything it wrote."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    out = bytearray()
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:  # a guard against a hung child, not a timing assertion
                proc.kill()
                pytest.fail(f"no output for 60 s; so far: {bytes(out)!r}")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            out += data
    finally:
        os.close(master)
        proc.wait()
    return out.decode("utf-8")


def screen_of(raw: str) -> list[str]:
    """The lines a terminal of COLUMNS x ROWS shows after raw was written to it."""
    screen = pyte.Screen(COLUMNS, ROWS)
    pyte.Stream(screen).feed(raw)
    return [line.rstrip() for line in screen.display]


def exec_in_pty(tmp_path: Path, chat_server, outputs: str, no_color: bool) -> str:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "system.md").write_text("Answer briefly.\n")
    (tmp_path / "p.yaml").write_text(PIPELINE.replace("OUTPUTS", outputs))
    chat_server.script = [{"chunks": ANSWER}]
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env["TERM"] = "xterm-256color"
    if no_color:
        env["NO_COLOR"] = "1"
    argv = [
        sys.executable,
        "-m",
        "runtime",
        "exec",
        "p.yaml",
        "--input",
        "question=why",
        "--model",
        f"openai:demo@{chat_server.url}",
        "--store",
        str(tmp_path / "runs.db"),
        "--run-id",
        "r1",
    ]
    return run_in_pty(argv, env, tmp_path)


@pytest.mark.parametrize(
    "outputs,no_color,result_lines",
    [
        ("", False, []),  # the answer is the whole output: nothing more to print
        ("outputs: [final_answer, asked]", True, ["asked: why"]),  # other outputs still print
    ],
)
def test_streamed_answer_stays_visible_once(tmp_path, chat_server, outputs, no_color, result_lines):
    raw = exec_in_pty(tmp_path, chat_server, outputs, no_color)
    text = SGR.sub("", raw)
    # Written once, and once on the final screen, on lines of its own (not after a spinner).
    assert text.count("is forty-two.") == 1
    lines = [line for line in screen_of(raw) if line]
    assert lines == [
        "The answer is forty-two.",
        "Second line.",
        *result_lines,
        "[run r1 completed in 3 steps]",
    ]
    # The spinner names the step that is running: prep, then answer while the model
    # streams, then finish; it is cleared before the first piece of the answer.
    labels = LABEL.findall(text)
    assert list(dict.fromkeys(labels)) == [
        "step 1: prep (set_variables)",
        "step 2: answer (call_model)",
        "step 3: finish (finalize)",
    ]
    before_answer = LABEL.findall(text[: text.index("The answer ")])
    assert before_answer[-1] == "step 2: answer (call_model)"
    # Colour only without NO_COLOR (the spinner is green on a colour terminal).
    assert bool(SGR.search(raw)) is not no_color


def test_validate_honours_no_color_on_a_terminal(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("settings: {entry_step_id: nope}\nsteps:\n  - {id: a, action: finalize}\n")
    argv = [sys.executable, "-m", "runtime", "validate", "bad.yaml"]
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    coloured = run_in_pty(argv, env, tmp_path)
    plain = run_in_pty(argv, {**env, "NO_COLOR": "1"}, tmp_path)
    assert "\x1b[31merror\x1b[0m ENTRY_STEP_UNKNOWN" in coloured
    assert SGR.search(plain) is None
    assert "bad.yaml:1:27: error ENTRY_STEP_UNKNOWN" in plain
