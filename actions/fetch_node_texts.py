"""fetch_node_texts: materialise node texts into node_texts under an evidence budget."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from runtime.action import Action, Outcome, Problem, StepContext, setting_ref

MODES = ("seed_first", "graph_first", "balanced")


class FetchNodeTexts(Action):
    """Order candidates, measure each formatted block, skip what does not fit."""

    name = "fetch_node_texts"
    summary = "Materialise seed and graph node texts under an evidence budget."
    fields = {
        "prioritization_mode": {
            "enum": list(MODES),
            "description": "Order of candidates (default balanced).",
        },
        "max_chars": {"type": "integer", "minimum": 1, "description": "Budget in characters."},
        "budget_tokens": {"type": "integer", "minimum": 1, "description": "Budget in tokens."},
        "budget_tokens_from_settings": setting_ref({"type": "integer"}),
        "include_metadata_in_context": {
            "type": "boolean",
            "description": "Add metadata lines to blocks.",
        },
        "metadata_fields": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Metadata keys to include (default all).",
        },
    }
    reads = ("retrieval_seed_nodes", "graph_expanded_nodes", "graph_edges")
    writes = ("node_texts", "fetch_debug", "security_labels", "security_classification")

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Exactly one budget; the fallback setting must exist; it must fit the global budget."""
        given = [
            k for k in ("max_chars", "budget_tokens", "budget_tokens_from_settings") if k in step
        ]
        if len(given) > 1:
            yield Problem(
                "BUDGET_OPTIONS_EXCLUSIVE",
                f"{' and '.join(given)} exclude each other",
                (given[1],),
                key=True,
            )
        if not given and not isinstance(settings.get("max_context_tokens"), int):
            yield Problem(
                "BUDGET_SETTING_MISSING",
                "no budget given and settings.max_context_tokens "
                "is not set (the default budget is 70% of it)",
                ("action",),
                hint="set budget_tokens or settings.max_context_tokens",
            )
        budget = step.get("budget_tokens")
        if isinstance(step.get("budget_tokens_from_settings"), str):
            budget = settings.get(step["budget_tokens_from_settings"])
        total = settings.get("max_context_tokens")
        if isinstance(budget, int) and isinstance(total, int) and budget > total:
            path = "budget_tokens" if "budget_tokens" in step else "budget_tokens_from_settings"
            yield Problem(
                "BUDGET_CANNOT_FIT",
                f"evidence budget {budget} exceeds settings.max_context_tokens {total}",
                (path,),
            )

    def run(self, ctx: StepContext) -> Outcome | None:
        """Not runnable yet."""
        raise NotImplementedError
