"""search_nodes: query the node store within the run's security scope."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from actions import _jsonish
from actions._scope import access_view, record_access
from actions.repeat_query_guard import QUERY_PARSER_FIELD, check_query_parser, normalize_query
from runtime.contract.action import Action, Outcome, Problem, StepContext, VariableRead
from runtime.contract.tool import ToolFace
from runtime.errors import RunError

CLEARED = {
    "retrieval_seed_nodes": [],
    "retrieval_hits": [],
    "graph_seed_nodes": [],
    "graph_expanded_nodes": [],
    "graph_edges": [],
    "graph_debug": {},
    "node_texts": [],
}
_NARROWING = ("kind", "language", "path_prefix")

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
        "fallback_query_from": {
            "type": "string",
            "minLength": 1,
            "description": "Variable to search with when query_from holds no usable query "
            "(unset, not JSON with a `query` string, or blank), e.g. `question`; traced as "
            "QUERY_FALLBACK. Unset: such a query is QUERY_EMPTY.",
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
            "description": "Reciprocal rank fusion constant (hybrid; default 5).",
        },
        "per_file": {
            "type": "integer",
            "minimum": 0,
            "description": "Hits of one file before its further hits are ranked down "
            "(default 2; 0: no cap).",
        },
        "query_parser": QUERY_PARSER_FIELD,
    }
    tool = ToolFace(
        name="search_nodes",
        description="Search the indexed code (tables, procedures, views, classes, methods, "
        "docs) for a query; returns the ids of the best matching nodes with their scores. "
        "Call it again with other words to search more.",
        parameters={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 500,
                    "description": "What to search for: names, identifiers or key words.",
                },
                "top_k": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 50,
                    "description": "At most this many results (never more than the step allows).",
                },
                "filters": {
                    "type": "object",
                    "properties": {
                        "kind": {"type": ["string", "array"], "items": {"type": "string"}},
                        "language": {"type": ["string", "array"], "items": {"type": "string"}},
                        "path_prefix": {"type": "string"},
                    },
                    "additionalProperties": False,
                    "description": "Narrow to node kinds, languages or a path prefix.",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        # The arguments reach the action as a search request (a payload), whose filters may
        # only narrow the step's and whose top_k may only lower it (SearchNodes._narrow).
        inputs={"query": "tool_request", "top_k": "tool_request", "filters": "tool_request"},
        base={"query_from": "tool_request", "allow_top_k_from_payload": True},
        result=("retrieval_query", "retrieval_hits"),
        items="retrieval_hits",
        accumulate=("retrieval_seed_nodes", "retrieval_hits"),
        safety=("read_only", "scoped"),
        access="search",
    )
    reads = ("last_model_response", "retrieval_queries_asked")
    defaults = {"retrieval_queries_asked": []}
    runnable = True
    writes = (
        "retrieval_seed_nodes",
        "retrieval_hits",
        "retrieval_query",
        "retrieval_mode",
        "retrieval_queries_asked",
    )

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """top_k given once; an older engine query_parser this action cannot honour."""
        if "top_k" in step and "top_k_from_settings" in step:
            yield Problem(
                "BUDGET_OPTIONS_EXCLUSIVE",
                "give top_k or top_k_from_settings, not both",
                ("top_k_from_settings",),
                key=True,
            )
        yield from check_query_parser(step)

    @staticmethod
    def _narrow(static: dict[str, Any], model: Any) -> tuple[dict[str, Any], list[str]]:
        """Model filters may only narrow the step's filters; anything else is ignored."""
        out = dict(static)
        ignored: list[str] = []
        if not isinstance(model, dict):
            return out, ignored
        for key, value in model.items():
            if key not in _NARROWING:
                ignored.append(key)  # repository, snapshot, labels, ...: never from a model
                continue
            if key == "path_prefix":
                base = static.get("path_prefix", "")
                if isinstance(value, str) and value.startswith(base):
                    out[key] = value
                else:
                    ignored.append(key)
                continue
            wanted = (
                {value}
                if isinstance(value, str)
                else {v for v in value if isinstance(v, str)}  # a model may send anything
                if isinstance(value, list)
                else set()
            )
            if key in static:
                have = {static[key]} if isinstance(static[key], str) else set(static[key])
                wanted &= have
            if not wanted:
                ignored.append(key)
                continue
            out[key] = sorted(wanted)
        return out, ignored

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """`query_from` (default last_model_response): unset, the query is empty; the fallback."""
        yield VariableRead.named(step, "query_from", "last_model_response")
        if isinstance(step.get("fallback_query_from"), str):
            yield VariableRead((step["fallback_query_from"],), ("fallback_query_from",))

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """The retrieval variables, and those a new search clears."""
        return iter(dict.fromkeys([*cls.writes, *CLEARED]))

    def run(self, ctx: StepContext) -> Outcome | None:
        """Search within the caller's scope; write the retrieval variables."""
        step, settings = ctx.step, ctx.settings
        source = step.get("query_from", "last_model_response")
        fallback = step.get("fallback_query_from")
        strict = "query_from" in step and fallback is None
        raw = ctx.get(source) if strict else ctx.get(source, None)
        payload = _jsonish.parse_object(raw) if isinstance(raw, str | dict) else None
        if payload is not None:
            query = payload.get("query") if isinstance(payload.get("query"), str) else ""
        else:
            query = raw if isinstance(raw, str) else ""
        if not query.strip() and fallback is not None:
            # A model that answered without a usable query: search with what the step names
            # (the user's question), never silently (QUERY_FALLBACK names why).
            why = (
                "unset"
                if raw is None
                else "no query field"
                if payload is not None and "query" not in payload
                else "blank or not a string"
            )
            ctx.trace("QUERY_FALLBACK", source=source, fallback=fallback, reason=why)
            value = ctx.get(fallback)
            query = value if isinstance(value, str) else ""
            source = fallback
        if not query.strip():
            raise RunError(f"empty search query (from {source!r})", code="QUERY_EMPTY")
        payload = payload or {}
        mode = step.get("search_type") or settings.get("search_type") or "bm25"
        if mode == "auto":
            mode = (
                payload.get("search_type")
                if payload.get("search_type") in ("bm25", "semantic", "hybrid")
                else None
            )
            # default_search_method: the older engine's name for the same fallback.
            mode = mode or settings.get("search_type") or settings.get("default_search_method")
            if mode not in ("bm25", "semantic", "hybrid"):
                raise RunError(
                    "search_type auto: neither the payload nor settings name a search type",
                    code="SEARCH_TYPE_UNRESOLVED",
                )
        top_k = int(
            step.get("top_k")
            or settings.get(step.get("top_k_from_settings", ""), 0)
            or settings.get("top_k")
            or 8
        )
        asked_k = payload.get("top_k")
        if (
            step.get("allow_top_k_from_payload")
            and isinstance(asked_k, int)
            and 1 <= asked_k < top_k
        ):
            top_k = asked_k  # a payload may lower top_k, never raise it
        filters, ignored = self._narrow(dict(step.get("filters") or {}), payload.get("filters"))
        view = access_view(ctx)  # the subject's reads under the run's access policy
        scope = view.scope
        for name, empty in CLEARED.items():
            ctx.set(name, empty)
        hits = view.search(
            query,
            top_k=top_k,
            search_type=mode,
            filters=filters,
            # Unset: the store's own defaults (rrf_k 5, per_file 2; docs/retrieval.md).
            **{k: int(step[k]) for k in ("rrf_k", "per_file") if k in step},
        )
        admitted = record_access(ctx, view)
        ctx.set("retrieval_seed_nodes", [h["id"] for h in hits])
        ctx.set(
            "retrieval_hits",
            [
                {
                    "id": h["id"],
                    "score": h["score"],
                    "rank": h["rank"],
                    # The access decision that admitted it (docs/access.md).
                    "decision": admitted.get(h["id"]),
                }
                # Child nodes folded into a hit (a table's indexes that matched).
                | ({"children": list(h["children"])} if h.get("children") else {})
                for h in hits
            ],
        )
        ctx.set("retrieval_query", query)
        ctx.set("retrieval_mode", mode)
        asked = list(ctx.get("retrieval_queries_asked", []))
        if normalize_query(query) not in {normalize_query(q) for q in asked}:
            asked.append(query)
        ctx.set("retrieval_queries_asked", asked)
        ctx.trace(
            "SEARCH",
            query=query,
            mode=mode,
            top_k=top_k,
            filters=filters,
            ignored_model_filters=ignored,
            hits=len(hits),
            scope={
                "repository": scope.repository,
                "snapshot": scope.snapshot,
                "allowed_labels": list(scope.allowed_labels or []),
            },
        )
        return None
