"""manage_context_budget: guard the global prompt budget with code-aware compaction."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from runtime.action import Action, Outcome, Problem, StepContext

_RULE = {
    "type": "object",
    "required": ["language", "policy"],
    "additionalProperties": False,
    "properties": {
        "language": {"enum": ["sql", "dotnet"]},
        "policy": {"enum": ["always", "threshold", "demand"]},
        "threshold": {"type": "number", "description": "Fraction of max_context_tokens in (0, 1]."},
        "inbox_key": {"type": "string", "minLength": 1, "description": "Demand topic."},
    },
}


class ManageContextBudget(Action):
    """Append node_texts to context_blocks all-or-nothing; on_ok or on_over."""

    name = "manage_context_budget"
    summary = "Keep context_blocks + node_texts within max_context_tokens, compacting code."
    fields = {
        "on_ok": {"type": "string", "description": "Step when everything fits."},
        "on_over": {"type": "string", "description": "Step when it does not (nothing appended)."},
        "divide_new_content": {
            "type": "string",
            "description": "Marker line before each appended batch.",
        },
        "compact_code": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "rules": {
                    "type": "array",
                    "items": _RULE,
                    "description": "First rule whose language matches applies.",
                }
            },
        },
    }
    required = ("on_ok", "on_over")
    outcomes = ("ok", "over")
    reads = ("context_blocks", "node_texts")
    writes = ("context_blocks", "node_texts")

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Rules complete and in range; the global budget is set."""
        if not isinstance(settings.get("max_context_tokens"), int):
            yield Problem(
                "BUDGET_SETTING_MISSING",
                "manage_context_budget needs settings.max_context_tokens",
                ("action",),
            )
        rules = (
            (step.get("compact_code") or {}).get("rules")
            if isinstance(step.get("compact_code"), Mapping)
            else None
        )
        for i, rule in enumerate(rules if isinstance(rules, list) else []):
            if not isinstance(rule, Mapping):
                continue
            path = ("compact_code", "rules", i)
            policy = rule.get("policy")
            threshold = rule.get("threshold")
            if policy == "threshold":
                if threshold is None:
                    yield Problem(
                        "COMPACTION_RULE_INVALID", "policy threshold needs `threshold`", path
                    )
                elif not isinstance(threshold, int | float) or not 0 < threshold <= 1:
                    yield Problem(
                        "COMPACTION_RULE_INVALID",
                        f"threshold must be in (0, 1], got {threshold!r}",
                        (*path, "threshold"),
                    )
            if policy == "demand" and not rule.get("inbox_key"):
                yield Problem("COMPACTION_RULE_INVALID", "policy demand needs `inbox_key`", path)

    def run(self, ctx: StepContext) -> Outcome | None:
        """Not runnable yet."""
        raise NotImplementedError
