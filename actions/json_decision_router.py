"""json_decision_router: route on a decision read tolerantly from a model's JSON reply."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from actions import _jsonish
from runtime.contract.action import Action, Outcome, StepContext, Transition, VariableRead
from runtime.format.transitions import target_schema

DECISION_KEYS = ("decision", "route", "mode")


class JsonDecisionRouter(Action):
    """Read `decision` (else `route`, else `mode`) and go to the matching route."""

    name = "json_decision_router"
    summary = "Route on a decision in a model's JSON reply (tolerant parsing)."
    fields = {
        "routes": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": target_schema(pattern=False),
            "description": "Decision value -> step id or {step, fidelity, thread_id} (matched "
            "case-insensitively).",
        },
        "on_other": {"type": "string", "description": "Step for unknown or unparsable decisions."},
        "source": {
            "type": "string",
            "description": "Variable to read (default last_model_response).",
        },
    }
    required = ("routes", "on_other")
    outcomes = ("other",)
    reads = ("last_model_response",)
    writes = ("last_model_response",)
    runnable = True

    @classmethod
    def targets(cls, step: Mapping[str, Any]) -> Iterator[Transition]:
        """Every route target and on_other."""
        yield from super().targets(step)
        routes = step.get("routes")
        for key, target in routes.items() if isinstance(routes, Mapping) else []:
            if isinstance(target, str):
                yield Transition(f"route {key}", ("routes", key), target)

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """`source` (default last_model_response): unset, every run goes to on_other."""
        yield VariableRead.named(step, "source", "last_model_response")

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """Nothing new: `source` is written back (without its decision) only when it is set."""
        return iter(())

    def run(self, ctx: StepContext) -> Outcome | None:
        """Parse, match, write the rest back, route."""
        source = ctx.step.get("source", "last_model_response")
        parsed = _jsonish.parse_object(ctx.get(source, None))
        if parsed is None:
            ctx.trace("ROUTE", decision=None, reason="unparsable")
            return Outcome.to_branch("other")
        key = next((k for k in DECISION_KEYS if k in parsed), None)
        decision = parsed.get(key) if key else None
        rest = {k: v for k, v in parsed.items() if k != key}
        ctx.set(source, json.dumps(rest, separators=(",", ":"), ensure_ascii=False))
        routes = {str(k).lower(): (k, v) for k, v in ctx.step["routes"].items()}
        match = routes.get(str(decision).strip().lower()) if isinstance(decision, str) else None
        ctx.trace("ROUTE", decision=decision, matched=match[0] if match else None)
        if match is None:
            return Outcome.to_branch("other")
        return Outcome.goto(match[1], f"route {match[0]}")
