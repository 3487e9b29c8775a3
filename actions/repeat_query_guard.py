"""repeat_query_guard: stop a retrieval loop that would ask the same question again."""

from __future__ import annotations

import re
from typing import Any

from actions import _jsonish
from runtime.contract.action import Action, Outcome, StepContext

_NON_WORD = re.compile(r"[^\w]+")


def normalize_query(text: str) -> str:
    """Lower case, punctuation to spaces, single spaces."""
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


def read_query(value: Any) -> str:
    """The query in a value: a JSON-ish `{query: ...}`, else the raw text."""
    parsed = _jsonish.parse_object(value)
    if parsed is not None and isinstance(parsed.get("query"), str):
        return parsed["query"]
    return value if isinstance(value, str) else ""


class RepeatQueryGuard(Action):
    """`on_repeat` when the normalized query is in `retrieval_queries_asked`, else `on_ok`."""

    name = "repeat_query_guard"
    summary = "Detect a repeated retrieval query."
    fields = {
        "on_ok": {"type": "string", "description": "Step for a new query."},
        "on_repeat": {"type": "string", "description": "Step when the query was already asked."},
        "query_from": {
            "type": "string",
            "description": "Variable with the query (default last_model_response).",
        },
    }
    required = ("on_ok", "on_repeat")
    outcomes = ("ok", "repeat")
    reads = ("last_model_response", "retrieval_queries_asked")
    runnable = True

    def run(self, ctx: StepContext) -> Outcome | None:
        """Compare the normalized query with those asked so far."""
        query = normalize_query(
            read_query(ctx.get(ctx.step.get("query_from", "last_model_response"), None))
        )
        asked = {
            normalize_query(q) for q in ctx.get("retrieval_queries_asked", []) if isinstance(q, str)
        }
        repeat = not query or query in asked
        ctx.trace("REPEAT_QUERY_GUARD", query=query, repeat=repeat)
        return Outcome.to_branch("repeat" if repeat else "ok")
