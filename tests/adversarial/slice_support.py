"""Helpers of the slice and tool-argument attacks: a pointer in a store, a tool-calling run."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from runtime.context import pointers as ptr
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline


def ctx_of(store: Any, run_id: str = "r") -> SimpleNamespace:
    """The little of a step context that rehydrate reads."""
    return SimpleNamespace(services=SimpleNamespace(pointers=store), run_id=run_id, step_id="s")


def put(store: Any, text: str, kind: str, run_id: str = "r") -> str:
    """Store text as the run's original of this kind; its pointer id."""
    pid, sha = ptr.pointer_id_of(text)
    store.put_original(run_id, pid, sha, kind, text)
    return pid


def tool_reply(*calls: tuple[str, str, str]) -> str:
    """A chat completion asking for these (id, name, arguments) tool calls."""
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ],
    }
    return json.dumps({"choices": [{"message": message, "finish_reason": "tool_calls"}]})


def tool_run(tmp_path: Any, url: str, text: str, kind: str = "text", window: int = 16384) -> Any:
    """A call_model step offering rehydrate, its run's pointer store holding text."""
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer; fetch elided parts with rehydrate.")
    model = {"provider": "openai", "model": "m", "base_url": url, "context_window": window}
    data = {
        "settings": {"entry_step_id": "ask", "models": {"small": model}},
        "steps": [
            {
                "id": "ask",
                "action": "call_model",
                "prompt_key": "sys",
                "model": "small",
                "max_output_tokens": 100,
                "tools": ["rehydrate"],
                "user_parts": {"q": {"source": "question"}},
                "next": "done",
            },
            {"id": "done", "action": "finalize", "source": "last_model_response"},
        ],
    }
    pipeline = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    services = Services(settings=pipeline.settings, base_dir=str(tmp_path))
    put(services.pointers, text, kind, run_id="t")
    return Engine(pipeline, services=services).run({"question": "Who?"}, run_id="t")


def rehydrate_run(tmp_path: Any, text: str, kind: str, **step: Any) -> Any:
    """A rehydrate step over text stored as the run's original; `part` goes in as a variable."""
    pid = ptr.pointer_id_of(text)[0]
    part = step.pop("part", None)
    data = {
        "settings": {"entry_step_id": "back"},
        "steps": [
            {
                "id": "back",
                "action": "rehydrate",
                "pointer_id": pid,
                "target": "out",
                "next": "f",
                **({"slice_from": "part"} if part is not None else {}),
                **step,
            },
            {"id": "f", "action": "finalize", "source": "out"},
        ],
    }
    pipeline = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    services = Services(settings=pipeline.settings, base_dir=str(tmp_path))
    put(services.pointers, text, kind, run_id="t")
    inputs = {"part": part} if part is not None else {}
    return Engine(pipeline, services=services).run(inputs, run_id="t")
