"""loop_guard: bound a loop with a per-step counter in engine-owned state."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from runtime.contract.action import Action, Outcome, Problem, StepContext, setting_ref

DEFAULT_LIMIT = 4


class LoopGuard(Action):
    """Go to `on_allow` while this guard's counter is below the limit, then to `on_deny`."""

    name = "loop_guard"
    summary = "Bound a loop: allow N passes, then deny."
    fields = {
        "on_allow": {"type": "string", "description": "Step while under the limit."},
        "on_deny": {"type": "string", "description": "Step once the limit is reached."},
        "max_turn_loops": {
            "type": "integer",
            "minimum": 1,
            "description": "Passes allowed (default settings.max_turn_loops, else 4).",
        },
        "max_turn_loops_from_settings": setting_ref({"type": "integer"}),
    }
    required = ("on_allow", "on_deny")
    outcomes = ("allow", "deny")
    bounds_loops = True
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """The limit is given at most once."""
        if "max_turn_loops" in step and "max_turn_loops_from_settings" in step:
            yield Problem(
                "SCHEMA_INVALID",
                "give max_turn_loops or max_turn_loops_from_settings, not both",
                ("max_turn_loops_from_settings",),
                key=True,
            )

    @staticmethod
    def limit(ctx: StepContext) -> int:
        """The limit from the step, a named setting, settings.max_turn_loops, else 4."""
        if "max_turn_loops" in ctx.step:
            return int(ctx.step["max_turn_loops"])
        key = ctx.step.get("max_turn_loops_from_settings")
        if isinstance(key, str):
            return int(ctx.settings[key])
        return int(ctx.settings.get("max_turn_loops", DEFAULT_LIMIT))

    def run(self, ctx: StepContext) -> Outcome | None:
        """Allow and count, or deny."""
        key = f"loop_guard:{ctx.step_id}"
        limit = self.limit(ctx)
        if ctx.counter(key) < limit:
            count = ctx.increment(key)
            ctx.trace("LOOP_GUARD", count=count, limit=limit, decision="allow")
            return Outcome.to_branch("allow")
        ctx.trace("LOOP_GUARD", count=ctx.counter(key), limit=limit, decision="deny")
        return Outcome.to_branch("deny")
