"""prefix_router: route on the prefix of a text (e.g. `SQL:` / `CODE:` from a classifier prompt)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from runtime.contract.action import Action, Outcome, StepContext, Transition, VariableRead
from runtime.format.transitions import target_schema


class PrefixRouter(Action):
    """The first route whose prefix starts the text (case-insensitive) wins, else on_other."""

    name = "prefix_router"
    summary = "Route on the prefix of a text."
    fields = {
        "routes": {
            "type": "object",
            "minProperties": 1,
            "description": "Name -> {prefix, next}; checked in order.",
            "additionalProperties": {
                "type": "object",
                "required": ["prefix", "next"],
                "additionalProperties": False,
                "properties": {
                    "prefix": {"type": "string", "minLength": 1},
                    "next": target_schema(pattern=False),
                },
            },
        },
        "on_other": {"type": "string", "description": "Step when no prefix matches."},
        "source": {
            "type": "string",
            "description": "Variable to read (default last_model_response).",
        },
    }
    required = ("routes", "on_other")
    outcomes = ("other",)
    reads = ("last_model_response",)
    runnable = True

    @classmethod
    def targets(cls, step: Mapping[str, Any]) -> Iterator[Transition]:
        """Each route's next and on_other."""
        yield from super().targets(step)
        routes = step.get("routes")
        for name, route in routes.items() if isinstance(routes, Mapping) else []:
            if isinstance(route, Mapping) and isinstance(route.get("next"), str):
                yield Transition(f"route {name}", ("routes", name, "next"), route["next"])

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """`source` (default last_model_response): unset, every run goes to on_other."""
        yield VariableRead.named(step, "source", "last_model_response")

    def run(self, ctx: StepContext) -> Outcome | None:
        """Match prefixes in declaration order."""
        text = ctx.get(ctx.step.get("source", "last_model_response"), None)
        body = text.lstrip().lower() if isinstance(text, str) else ""
        for name, route in ctx.step["routes"].items():
            if body.startswith(route["prefix"].lower()):
                return Outcome.goto(route["next"], f"route {name}")
        return Outcome.to_branch("other")
