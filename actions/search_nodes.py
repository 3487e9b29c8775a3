"""search_nodes: query the node store within the run's security scope."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from runtime.action import Action, Outcome, Problem, StepContext

SEARCH_TYPES = ("bm25", "semantic", "hybrid", "auto")


class SearchNodes(Action):
    """Search; write retrieval_seed_nodes, retrieval_hits, retrieval_query, retrieval_mode."""

    name = "search_nodes"
    summary = "Search the code index (BM25, semantic or hybrid) within the caller's scope."
    fields = {
        "search_type": {
            "enum": list(SEARCH_TYPES),
            "description": "Search kind (auto: from the payload).",
        },
        "top_k": {
            "type": "integer",
            "minimum": 1,
            "description": "Results (default settings.top_k, else 8).",
        },
        "top_k_from_settings": {"type": "string", "minLength": 1},
        "query_from": {
            "type": "string",
            "description": "Variable with the query (default last_model_response, JSON-ish or text).",
        },
        "filters": {
            "type": "object",
            "description": "Static narrowing: kind, language, path_prefix.",
            "properties": {
                "kind": {"type": ["string", "array"]},
                "language": {"type": ["string", "array"]},
                "path_prefix": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "allow_top_k_from_payload": {
            "type": "boolean",
            "description": "A model payload may lower top_k (never raise it).",
        },
        "rrf_k": {
            "type": "integer",
            "minimum": 1,
            "description": "Reciprocal rank fusion constant (hybrid).",
        },
    }
    reads = ("last_model_response", "retrieval_queries_asked")
    writes = (
        "retrieval_seed_nodes",
        "retrieval_hits",
        "retrieval_query",
        "retrieval_mode",
        "retrieval_queries_asked",
    )

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """top_k given once."""
        if "top_k" in step and "top_k_from_settings" in step:
            yield Problem(
                "BUDGET_OPTIONS_EXCLUSIVE",
                "give top_k or top_k_from_settings, not both",
                ("top_k_from_settings",),
                key=True,
            )

    def run(self, ctx: StepContext) -> Outcome | None:
        """Not runnable yet."""
        raise NotImplementedError
