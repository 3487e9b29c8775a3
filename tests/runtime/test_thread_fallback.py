"""A `full` step that names no thread joins the previous step's id (docs/fidelity.md): when
no other model step joins that thread, the step starts an empty conversation. `validate`
warns at the step (THREAD_FALLBACK_EMPTY) and the run's trace says so (issue 24 item 8)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import runtime
from runtime.format.validation import validate_paths

HEAD = """\
name: chain
settings:
  entry_step_id: a
  models: {m: {provider: extractive}}
  {settings}
steps:
"""


def step(sid: str, nxt: str, extra: str = "") -> str:
    """A model step (full unless extra says otherwise) going on to nxt."""
    return textwrap.indent(
        f"- id: {sid}\n  action: call_model\n  model: m\n  prompt_key: p\n"
        f"  user_parts: {{q: {{source: question}}}}\n{extra}  next: {nxt}\n",
        "  ",
    )


END = "  - id: end\n    action: finalize\n    source: last_model_response\n"


def write(tmp_path: Path, body: str, settings: str = "") -> Path:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "p.md").write_text("You answer.\n")
    path = tmp_path / "chain.yaml"
    path.write_text(HEAD.replace("{settings}", settings) + body + END)
    return path


def warnings(path: Path) -> list[tuple[int, int, str]]:
    found = validate_paths([str(path)]).diagnostics
    return [(d.line, d.column, d.message) for d in found if d.code == "THREAD_FALLBACK_EMPTY"]


FULL = "  fidelity: full\n"
CHAIN = step("a", "b", FULL) + step("b", "c", FULL) + step("c", "end", FULL)


def test_the_third_step_of_an_unnamed_full_chain_is_warned_at_its_fidelity(tmp_path):
    path = write(tmp_path, CHAIN)
    # a starts thread a (the entry step's own id), b joins it (the previous step's id);
    # c joins thread b, which only c itself joins.
    [(line, column, message)] = warnings(path)
    lines = path.read_text().splitlines()
    assert lines[line - 1].strip() == "fidelity: full" and "- id: c" in lines[line - 6]
    assert column == lines[line - 1].index("full") + 1  # at the value, as every warning
    assert "step 'c'" in message and "thread 'b'" in message and "empty conversation" in message


@pytest.mark.parametrize(
    ("settings", "extra_c"),
    [
        ("default_thread: main", ""),  # every unnamed full step joins main
        ("", "  thread_id: a\n"),  # c names the thread it continues
        ("", "  group: a\n"),  # c's group is a's thread
    ],
)
def test_a_named_thread_is_not_warned(tmp_path, settings, extra_c):
    body = step("a", "b", FULL) + step("b", "c", FULL) + step("c", "end", FULL + extra_c)
    assert warnings(write(tmp_path, body, settings)) == []


def test_a_full_arrival_by_a_transition_is_warned_at_the_transition(tmp_path):
    body = step("a", "b") + step("b", "{step: c, fidelity: full}") + step("c", "end")
    [(line, column, message)] = warnings(write(tmp_path, body))
    text = (tmp_path / "chain.yaml").read_text().splitlines()[line - 1]
    assert "next: {step: c, fidelity: full}" in text and text[column - 1 :].startswith("full")
    assert "thread 'b'" in message


def test_a_full_default_fidelity_warns_at_the_step_id(tmp_path):
    body = step("a", "b") + step("b", "end")
    found = warnings(write(tmp_path, body, "default_fidelity: full"))
    # a is the entry step (its own thread, a new conversation by design); b joins thread a.
    assert found == []
    body = step("a", "r") + (
        "  - id: r\n    action: set_variables\n    rules: [{set: x, value: 1}]\n    next: b\n"
    )
    body += step("b", "end")
    [(line, _, message)] = warnings(write(tmp_path, body, "default_fidelity: full"))
    assert (tmp_path / "chain.yaml").read_text().splitlines()[line - 1].strip() == "- id: b"
    assert "thread 'r'" in message  # r calls no model: no one ever joins thread r


def test_the_run_traces_the_empty_fallback_and_only_there(tmp_path):
    path = write(tmp_path, CHAIN)
    result = runtime.Runner(runtime.load(str(path))).run({"question": "q"}, run_id="t")
    assert result.status == "completed", result.error
    events = [e for e in result.events if e["type"] == "THREAD_FALLBACK_EMPTY"]
    assert [(e["step_id"], e["thread"], e["previous"]) for e in events] == [("c", "b", "b")]
    calls = {e["step_id"]: e for e in result.events if e["type"] == "MODEL_CALL"}
    assert [calls[s]["thread_messages"] for s in "abc"] == [0, 3, 0]
    assert calls["c"]["thread_from"] == "previous step"
