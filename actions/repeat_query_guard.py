"""repeat_query_guard: stop a retrieval loop that would ask the same question again."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from actions import _jsonish
from runtime.contract.action import Action, Outcome, Problem, StepContext, VariableRead

_NON_WORD = re.compile(r"[^\w]+")

# The older engine named the parser of a model's query payload; its JsonishQueryParser is what
# read_query and search_nodes do here (JSON-ish object with `query`, else the raw text).
HONOURED_PARSERS = ("JsonishQueryParser",)
QUERY_PARSER_FIELD: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "description": "Older engine query parser: JsonishQueryParser is honoured (it is how the "
    "query is read anyway); any other name is ignored with a warning.",
}


def check_query_parser(step: Mapping[str, Any]) -> Iterator[Problem]:
    """A FIELD_IGNORED warning for a query_parser this runtime does not have."""
    name = step.get("query_parser")
    if isinstance(name, str) and name not in HONOURED_PARSERS:
        yield Problem(
            "FIELD_IGNORED",
            f"query_parser {name!r} is not available here and is ignored: the query is read "
            "as JsonishQueryParser reads it (a JSON-ish object with `query`, else the text)",
            ("query_parser",),
            severity="warning",
        )


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
        "query_parser": QUERY_PARSER_FIELD,
    }
    required = ("on_ok", "on_repeat")
    outcomes = ("ok", "repeat")
    reads = ("last_model_response", "retrieval_queries_asked")
    defaults = {"retrieval_queries_asked": []}
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """An older engine query_parser this action cannot honour."""
        return check_query_parser(step)

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """`query_from` (default last_model_response): unset, every query is a repeat."""
        yield VariableRead.named(step, "query_from", "last_model_response")

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
