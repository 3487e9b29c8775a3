"""A pipeline that validates clean must not overflow on its own thread (issue 25 item 6).

A `full` thread keeps each step's whole user message. Three `full` steps in one thread,
each sent a document near the window, under a context policy: `validate` finds nothing
wrong, so the run must fit too. The policy compacts the thread's earlier user turns (the
step-assembled prompts, evidence and all) as it compacts the model's turns; the
conversation's own user turns (`conversation_history`) are never summarised.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

import runtime
from runtime.format.validation import validate_paths

# About 2,500 tokens each: two in the thread already exceed a 4,096-token window.
DOCS = [
    "".join(f"part {n} line {i}: the report of quarter {i % 4} says {i * n}.\n" for i in range(200))
    for n in range(1, 4)
]


def write(tmp_path: Path, policy: str = "context_policy: {enabled: true}") -> Path:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "read.md").write_text("Read the document and say what it holds.\n")
    steps = "".join(
        f"""\
  - id: read{n}
    action: call_model
    prompt_key: read
    model: small
    fidelity: full
    thread_id: review
    max_output_tokens: 200
    user_parts:
      doc: {{source: doc{n}, template: "Document {n}:\\n{{}}"}}
    {"end: true" if n == 3 else f"next: read{n + 1}"}
"""
        for n in (1, 2, 3)
    )
    text = textwrap.dedent(
        f"""\
        name: threads
        settings:
          entry_step_id: read1
          models:
            small: {{provider: extractive, context_window: 4096}}
          {policy}
        inputs:
          doc1: {{type: string, maxLength: 20000}}
          doc2: {{type: string, maxLength: 20000}}
          doc3: {{type: string, maxLength: 20000}}
        steps:
        """
    )
    path = tmp_path / "threads.yaml"
    path.write_text(text + steps, encoding="utf-8")
    return path


def run(path: Path) -> Any:
    pipeline = runtime.load(str(path))
    return runtime.Runner(pipeline).run({f"doc{n}": DOCS[n - 1] for n in (1, 2, 3)})


def test_a_thread_of_full_steps_that_validates_clean_fits_at_run_time(tmp_path):
    path = write(tmp_path)
    report = validate_paths([str(path)])
    assert [d for d in report.diagnostics if d.severity == "error"] == []
    result = run(path)
    assert result.status == "completed", result.error
    decisions = [e for e in result.events if e["type"] == "CONTEXT_BUDGET_DECISION"]
    assert [d["decision"] for d in decisions] == ["ok", "needs_summary", "needs_summary"]
    # The third call sends the two earlier documents behind pointers (oldest first).
    last = decisions[-1]
    ids = [s["id"] for s in last["summaries"]]
    assert ids[0] == "user[1]" and "user[4]" in ids
    assert all(d["prompt_tokens"] <= d["budget"] for d in decisions)
    calls = [e for e in result.events if e["type"] == "MODEL_CALL"]
    sent = "".join(m["content"] for m in calls[-1]["messages"])
    assert DOCS[0] not in sent and DOCS[1] not in sent
    done = result.events[-1]
    assert done["type"] == "RUN_COMPLETED"
    assert done.get("counters", {}).get("context_budget_violations", 0) == 0


@pytest.mark.parametrize("n", [1, 2])
def test_an_earlier_document_goes_behind_a_pointer_to_its_whole_user_turn(tmp_path, n):
    result = run(write(tmp_path))
    last = [e for e in result.events if e["type"] == "CONTEXT_BUDGET_DECISION"][-1]
    [pointer] = [s for s in last["summaries"] if s["id"] == f"user[{3 * n - 2}]"]
    from runtime.context.pointers import pointer_id_of

    assert pointer["pointer_id"] == pointer_id_of(f"Document {n}:\n{DOCS[n - 1]}")[0]


def test_only_the_threads_user_turns_are_summarisable_not_the_conversations():
    from types import SimpleNamespace

    from actions._budget import prompt_of

    messages = [
        {"role": "system", "content": "earlier step's system prompt"},
        {"role": "user", "content": "earlier step's document"},
        {"role": "assistant", "content": "earlier reply"},
        {"role": "system", "content": "this step's system prompt"},
        {"role": "user", "content": "what the person asked (conversation_history)"},
        {"role": "assistant", "content": "an answer in the history"},
        {"role": "user", "content": "this step's own message"},
    ]
    prompt = prompt_of(SimpleNamespace(step={}), messages, [], thread_turns=3)
    flags = [m.segments()[0].summarizable for m in prompt]
    assert flags == [False, True, True, False, False, True, False]
