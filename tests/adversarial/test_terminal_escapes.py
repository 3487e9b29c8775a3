"""Terminal escapes in indexed text are shown, never obeyed, by what the CLI prints.

An indexed file can hold escape sequences (a Markdown heading becomes a node id and a
search hit's name; an answer quotes evidence). Printed raw they set the terminal's title,
clear the screen or reorder a line (bidi overrides). `runtime context` shows them escaped;
so do `runtime search` and the answer `runtime exec` prints.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.cli import cli

ROOT = Path(__file__).resolve().parents[2]
TITLE = "\x1b]0;owned\x07"
CLEAR = "\x1b[2J"
BIDI = "\u202e"


@pytest.fixture
def index(runner, tmp_path):
    tree = tmp_path / "repo"
    tree.mkdir()
    (tree / "README.md").write_text(
        f"# Payments {TITLE}guide\n\nA payment is captured by the capture job{CLEAR}.\n"
        f"The capture job retries {BIDI}three times.\n",
        encoding="utf-8",
    )
    db = tmp_path / "index.db"
    done = runner.invoke(cli, ["index", str(tree), "--repository", "r", "--index", str(db)])
    assert done.exit_code == 0, done.output
    return db


def assert_shown(text: str) -> None:
    for raw in ("\x1b", "\x07", BIDI):
        assert raw not in text
    assert "\\x1b" in text


def test_search_shows_escapes_in_names_and_paths(runner, index):
    done = runner.invoke(cli, ["search", "payment capture", "--index", str(index)])
    assert done.exit_code == 0, done.output
    assert "Payments" in done.stdout
    assert_shown(done.stdout)


def test_an_answer_quoting_evidence_shows_its_escapes(runner, index, tmp_path):
    done = runner.invoke(
        cli,
        [
            "exec",
            str(ROOT / "pipelines" / "code_qa.yaml"),
            "--index",
            str(index),
            "--store",
            str(tmp_path / "runs.db"),
            "--input",
            "question=How is a payment captured by the capture job?",
        ],
    )
    assert done.exit_code == 0, done.output
    assert "capture job" in done.stdout
    assert_shown(done.stdout)
    assert "\n" in done.stdout.strip()  # line feeds are kept: an answer stays readable


def test_json_output_is_json_not_terminal_text(runner, index, tmp_path):
    import json

    done = runner.invoke(
        cli,
        [
            "exec",
            str(ROOT / "pipelines" / "code_qa.yaml"),
            "--index",
            str(index),
            "--store",
            str(tmp_path / "runs.db"),
            "--json",
            "--input",
            "question=How is a payment captured by the capture job?",
        ],
    )
    # --json is data for tools: the answer is exact (JSON escapes its control characters).
    assert CLEAR in json.loads(done.stdout)["output"]["final_answer"]


def test_a_streamed_reply_is_shown_escaped_and_remembered_as_sent():
    import io

    from runtime.cli._progress import Progress

    out = io.StringIO()
    view = Progress({}, first_step=None, spinner=False, stream=True, out=out)
    view.on_chunk(f"part one{CLEAR}\n")
    view.on_chunk(f"{TITLE}part two")
    view.on_event({"type": "STEP", "next": None})
    assert_shown(out.getvalue())
    assert out.getvalue().startswith("part one\\x1b[2J\n\\x1b]0;owned\\x07part two")
    # What was streamed is compared with the run's output as the model sent it.
    assert view.already_shown(f"part one{CLEAR}\n{TITLE}part two")
