"""load_conversation_history: bring earlier turns into `conversation_history`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from runtime.contract.action import Action, Outcome, StepContext, VariableRead
from runtime.errors import StateError


class LoadConversationHistory(Action):
    """Read turns `{role, content}` from the run's inputs (default variable `history`)."""

    name = "load_conversation_history"
    summary = "Load earlier conversation turns into conversation_history."
    fields = {
        "source": {"type": "string", "description": "Variable with the turns (default history)."},
        "max_turns": {
            "type": "integer",
            "minimum": 1,
            "description": "Keep only the last N turns.",
        },
    }
    reads = ("history",)
    writes = ("conversation_history",)
    runnable = True

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """A `source` the step names; the default `history` may be absent (no earlier turns)."""
        if isinstance(step.get("source"), str):
            yield VariableRead((step["source"],), ("source",))

    def run(self, ctx: StepContext) -> Outcome | None:
        """Validate and copy the turns."""
        turns = ctx.get(ctx.step.get("source", "history"), [])
        if turns is None:
            turns = []
        if not isinstance(turns, list) or not all(
            isinstance(t, Mapping)
            and t.get("role") in ("user", "assistant", "system")
            and isinstance(t.get("content"), str)
            for t in turns
        ):
            raise StateError(
                "history must be a list of {role: user|assistant|system, content: str}",
                code="VARIABLE_TYPE",
            )
        limit = ctx.step.get("max_turns")
        if isinstance(limit, int):
            turns = turns[-limit:]
        ctx.set(
            "conversation_history", [{"role": t["role"], "content": t["content"]} for t in turns]
        )
        return None
