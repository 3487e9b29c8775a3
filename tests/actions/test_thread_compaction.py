"""THREAD_COMPACTED names the thread the step resolved (docs/fidelity.md, docs/budget.md).

A `full` step joins the thread `fid.resolve_thread` picks (its thread_id, the transition's,
settings.default_thread, its group, the previous step); past trace_threshold_tokens the
context policy compacts that thread's oldest model turns and the trace says which thread.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline

LONG = "".join(f"line {i}: the draft changes parse_port to check its range.\n" for i in range(120))


def run(tmp_path, url: str, settings: dict[str, Any], both: dict[str, Any]):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("You improve the draft.\n")
    model = {"provider": "openai", "model": "m", "base_url": url, "context_window": 16000}
    ask = {"action": "call_model", "prompt_key": "sys", "model": "m1", "max_output_tokens": 50}
    data = {
        "settings": {
            "entry_step_id": "draft",
            "models": {"m1": model},
            "context_policy": {"enabled": True, "trace_threshold_tokens": 300},
            **settings,
        },
        "steps": [
            {"id": "draft", **ask, **both, "fidelity": "full", "next": "review"},
            {"id": "review", **ask, **both, "fidelity": "full", "next": "f"},
            {"id": "f", "action": "finalize", "source": "last_model_response"},
        ],
    }
    pipeline = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    services = Services(settings=pipeline.settings, base_dir=str(tmp_path))
    return Engine(pipeline, services=services).run({}, run_id="t")


@pytest.mark.parametrize(
    ("settings", "both", "thread"),
    [
        # No thread named anywhere: review joins the previous step's, draft's own id.
        ({}, {}, "draft"),
        ({"default_thread": "coding"}, {}, "coding"),
        ({}, {"group": "edits"}, "edits"),
    ],
)
def test_thread_compacted_names_the_resolved_thread(tmp_path, chat_server, settings, both, thread):
    # draft's long reply is the thread's model turn that review's call compacts.
    chat_server.script = [{"reply": LONG}, {"reply": "Looks right."}]
    r = run(tmp_path, chat_server.url, settings, both)
    assert r.status == "completed", r.error
    [call] = [e for e in r.events if e["type"] == "MODEL_CALL" and e["step_id"] == "review"]
    # draft's system prompt and reply (it has no user parts).
    assert (call["thread_id"], call["thread_messages"]) == (thread, 2)
    [compacted] = [e for e in r.events if e["type"] == "THREAD_COMPACTED"]
    assert compacted["step_id"] == "review" and compacted["thread"] == thread
    assert [m["role"] for m in compacted["map"]] == ["assistant"]
