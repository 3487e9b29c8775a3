"""`runtime trace --messages` on a model call with tool rounds: every turn shown, tool calls
with their name and arguments, tool results with the call they answer."""

from __future__ import annotations

import json

import pytest

from runtime.cli import cli
from runtime.engine.store import SqliteRunStore

PIPELINE = """\
settings:
  entry_step_id: ask
  models:
    small: {provider: extractive, context_window: 3000}
  context_policy: {enabled: true, summary_tokens: 100}
inputs:
  question: {type: string, maxLength: 200}
  doc: string
steps:
  - id: ask
    action: call_model
    model: small
    prompt_key: sys
    tools: [rehydrate]
    max_tool_rounds: 1
    max_output_tokens: 200
    user_parts:
      question: {source: question, template: "Question: {}", summarizable: false}
      doc: {source: doc, template: "Doc:\\n{}", summary_kind: text}
    next: done
  - id: done
    action: finalize
    source: last_model_response
"""


@pytest.fixture
def ran(runner, tmp_path):
    """A run whose model call elided the document and read it back through rehydrate."""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Answer from the document.\n")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    doc = "".join(f"Line {n}: ledger {n} is kept by clerk {n}.\n" for n in range(400))
    (tmp_path / "in.json").write_text(json.dumps({"question": "Who keeps ledger 3?", "doc": doc}))
    store = str(tmp_path / "runs.db")
    args = [str(tmp_path / "p.yaml"), "--store", store, "--run-id", "t1"]
    result = runner.invoke(cli, ["exec", *args, "--inputs", str(tmp_path / "in.json")])
    assert result.exit_code == 0, result.output
    return store


def test_trace_messages_shows_tool_call_turns_with_name_and_arguments(runner, ran):
    [call] = [e for e in SqliteRunStore(ran).events("t1") if e["type"] == "MODEL_CALL"]
    assistant, tool = call["messages"][2:4]
    [tool_call] = assistant["tool_calls"]
    arguments = tool_call["function"]["arguments"]
    assert json.loads(arguments)["slice"] == "lines 1-20"

    result = runner.invoke(cli, ["trace", "t1", "--store", ran, "--messages"])
    assert result.exit_code == 0
    out = result.stdout
    # The turn that only called a tool printed `None`.
    assert "\nNone\n" not in out
    turn = (
        "--- message 3: assistant (1 tool call) ---\n"
        f"tool call {tool_call['id']}: rehydrate {arguments}\n"
        f"--- message 4: tool (result of {tool_call['id']}: rehydrate) ---\n"
    )
    assert turn in out
    assert out.split(turn, 1)[1].startswith(tool["content"])
    assert "Line 0: ledger 0 is kept by clerk 0." in tool["content"]
