"""One call_model step offering tools, run by the engine with the scripted model and the
sample index (tests/conftest.py sample_index): what the tests of actions as tools share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline


def run_tools(
    tmp_path: Path,
    store: Any,
    tools: Any,
    turns: list[dict[str, Any]] | None = None,
    *,
    inputs: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    rounds: int = 4,
    window: int | None = None,
    tool_policy: Any = None,
    step: dict[str, Any] | None = None,
    prepare: Any = None,
) -> Any:
    """Run `ask` (tools offered, the question as its user part) with `turns` scripted."""
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Find the code with the tools, then answer.")
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"ask": turns or []}))
    spec = f"scripted:{script}"
    base = {"entry_step_id": "ask", **(settings or {})}
    if window is not None:
        base["models"] = {
            "m": {"provider": "replay", "cassette": "unused.jsonl", "context_window": window}
        }
    data = {
        "settings": base,
        "steps": [
            {
                "id": "ask",
                "action": "call_model",
                "prompt_key": "sys",
                "max_output_tokens": 100,
                "max_tool_rounds": rounds,
                "tools": tools,
                "user_parts": {"q": {"source": "question", "template": "Question: {}"}},
                **(step or {}),
                "next": "done",
            },
            {"id": "done", "action": "finalize", "source": "last_model_response"},
        ],
    }
    pipeline = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    services = Services(
        settings=pipeline.settings, base_dir=str(tmp_path), node_store=store, model_spec=spec
    )
    if tool_policy is not None:
        services.tool_policy = tool_policy  # type: ignore[attr-defined]
    if prepare is not None:  # e.g. a pointer's original put in the run's store
        prepare(services)
    question = {"question": "Which stored procedure writes the OrderLines table?"}
    # A fixed run id: the preamble names it, so two runs of a test count the same prompt.
    return Engine(pipeline, services=services).run(
        {**question, **(inputs or {})}, run_id="tools-run"
    )


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A scripted turn calling one tool."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def raw_call(name: str, arguments: str) -> dict[str, Any]:
    """A scripted turn calling one tool with arguments exactly as given."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def tool_events(result: Any) -> list[dict[str, Any]]:
    """The run's MODEL_TOOL_CALL events."""
    return [e for e in result.events if e["type"] == "MODEL_TOOL_CALL"]


def tool_messages(result: Any) -> list[str]:
    """The tool results the model was sent, in order (from the last MODEL_CALL)."""
    calls = [e for e in result.events if e["type"] == "MODEL_CALL"]
    messages = calls[-1]["messages"] if calls else []
    return [m["content"] for m in messages if m.get("role") == "tool"]


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
