"""assemble_context: one budgeted, deduplicated context from code, docs, memories,
experiences, values, commits and state (docs/assembly.md).

The sources are queried concurrently, each in its own thread under the run's scope; one
that fails (a store error) or is slow (past `timeout_seconds`) is an
ASSEMBLY_SOURCE_FAILED event and the others still assemble. The budget, the per-item
cap, the ranking, the deduplication and the rendering are runtime/context/assembly.py's.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from actions import _assembly_sources as src
from actions import _jsonish
from runtime.context import assembly
from runtime.contract.action import (
    VARIABLE_PATTERN,
    Action,
    Outcome,
    Problem,
    StepContext,
    VariableRead,
)
from runtime.contract.tool import ToolFace
from runtime.errors import RunError, StepRuntimeError

_VARIABLE = {"type": "string", "pattern": VARIABLE_PATTERN}
_FRACTION = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
DEFAULT_OUTPUT = "assembled_context"
DEFAULT_TIMEOUT = 10.0
EXPERIENCE_FILTERS = ("domain", "strategy", "outcome", "pipeline", "confidence_tier")
_SOURCE = {
    "type": "object",
    "required": ["name", "kind"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": VARIABLE_PATTERN, "description": "Section name."},
        "kind": {
            "type": "string",
            "description": "code, docs, memories, experiences, values, commits or state.",
        },
        "title": {"type": "string", "minLength": 1, "description": "Section heading."},
        "weight": {"type": "number", "minimum": 0, "description": "Share of the budget (1)."},
        "max_items": {"type": "integer", "minimum": 1, "description": "Items asked for (10)."},
        "query_from": {**_VARIABLE, "description": "Variable with the query (question)."},
        "query": {"type": "string", "minLength": 1, "description": "A fixed query."},
        "from": {**_VARIABLE, "description": "state: the list of {id, text, score, metadata}."},
        "axis": {
            "type": "string",
            "description": "experiences: full, strategy, surprise, root_cause.",
        },
        "search_type": {
            "type": "string",
            "description": "code, docs, commits: bm25, semantic, hybrid.",
        },
        "per_file": {"type": "integer", "minimum": 0},
        "filters": {"type": "object", "description": "Narrowing filters of the kind."},
        "item_cap": {**_FRACTION, "description": "Most of the source's share one item takes."},
        "boosts": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "importance": _FRACTION,
                "confidence": _FRACTION,
                "recency_half_life_days": {"type": "number", "exclusiveMinimum": 0},
                "tiers": {
                    "oneOf": [
                        {"type": "boolean"},
                        {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                t: {"type": "number", "minimum": 0} for t in assembly.TIERS
                            },
                        },
                    ]
                },
            },
        },
    },
}


class AssembleContext(Action):
    """Query the sources concurrently; write the assembled pack and its markdown."""

    name = "assemble_context"
    summary = "Assemble one budgeted, deduplicated context from code, docs, memories, experiences, values, commits and state."
    fields = {
        "sources": {
            "type": "array",
            "items": _SOURCE,
            "description": "The sources, in section order.",
        },
        "max_tokens": {"type": "integer", "minimum": 1, "description": "The pack's budget."},
        "max_tokens_from_settings": {"type": "string", "minLength": 1},
        "soft": {"type": "boolean", "description": "Allow going over (recorded as exceeded)."},
        "item_cap": {
            **_FRACTION,
            "description": "Most of its source's share one item takes (0.25).",
        },
        "dedup_threshold": {
            **_FRACTION,
            "description": "Text similarity that makes a duplicate (0.93).",
        },
        "pointer_over_tokens": {
            "type": "integer",
            "minimum": 1,
            "description": "A cut item longer than this gets a rehydrate pointer (1000).",
        },
        "timeout_seconds": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "Per run of the sources (10).",
        },
        "mode": {"enum": ["premortem"], "description": "premortem: the five premortem sections."},
        "domain": {"type": "string", "minLength": 1},
        "domain_from": _VARIABLE,
        "strategy": {"type": "string", "minLength": 1},
        "strategy_from": _VARIABLE,
        "query_from": {
            **_VARIABLE,
            "description": "premortem: variable with more query text (the task).",
        },
        "output_to": {**_VARIABLE, "description": f"Variable for the record ({DEFAULT_OUTPUT})."},
        "markdown_to": {
            **_VARIABLE,
            "description": "Variable for the markdown (<output_to>_markdown).",
        },
        "report_to": {
            **_VARIABLE,
            "description": "Variable for a readable report: the markdown, then what was dropped "
            "and why, and the warnings (outside the budget; for people, not a prompt).",
        },
    }
    reads_settings = ("tokenizer",)
    runnable = True
    tool = ToolFace(
        name="assemble_context",
        description="Assemble one budgeted, deduplicated context for a task from the sources "
        "the step configures (code, docs, memories, experiences, values, commits, state); "
        "returns it as markdown with its items' ids.",
        parameters={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 1000,
                    "description": "The task or question the context is for.",
                },
                "max_tokens": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The pack's budget (never more than the step allows).",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        # The query is what the sources read as `question` (their default query_from),
        # within this call only.
        inputs={"query": "question"},
        base={"output_to": "tool_context", "markdown_to": "tool_context_markdown"},
        ceilings=("max_tokens",),
        result=("tool_context_markdown",),
        safety=("read_only", "scoped"),
        access="assemble",
    )

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Known kinds and axes, unique names, a budget, what each kind needs."""
        from runtime.retrieval.memory_store import AXES

        if "max_tokens" in step and "max_tokens_from_settings" in step:
            yield Problem(
                "BUDGET_OPTIONS_EXCLUSIVE",
                "give max_tokens or max_tokens_from_settings, not both",
                ("max_tokens_from_settings",),
                key=True,
            )
        elif "max_tokens" not in step and "max_tokens_from_settings" not in step:
            yield Problem(
                "ASSEMBLY_BUDGET_MISSING",
                "assemble_context needs max_tokens or max_tokens_from_settings",
                ("action",),
            )
        elif "max_tokens_from_settings" in step:
            value = settings.get(step["max_tokens_from_settings"])
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                yield Problem(
                    "ASSEMBLY_BUDGET_MISSING",
                    f"settings.{step['max_tokens_from_settings']} is not a positive integer",
                    ("max_tokens_from_settings",),
                )
        premortem = step.get("mode") == "premortem"
        if premortem and not (("domain" in step) ^ ("domain_from" in step)):
            yield Problem(
                "ASSEMBLY_PREMORTEM_INVALID",
                "premortem needs exactly one of domain and domain_from",
                ("mode",),
            )
        if "strategy" in step and "strategy_from" in step:
            yield Problem(
                "ASSEMBLY_PREMORTEM_INVALID",
                "give strategy or strategy_from, not both",
                ("strategy_from",),
                key=True,
            )
        sources = step.get("sources")
        if not premortem and not sources:
            yield Problem("ASSEMBLY_SOURCE_INVALID", "assemble_context needs sources", ("action",))
        seen: set[str] = set()
        reserved = set(_premortem_names()) if premortem else set()
        for i, s in enumerate(sources if isinstance(sources, list) else []):
            if not isinstance(s, Mapping):
                continue
            yield from _check_source(i, s, seen, reserved, AXES)

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """Each source's query variable (default question) and state list."""
        for i, s in enumerate(step.get("sources") or ()):
            if not isinstance(s, Mapping):
                continue
            if s.get("kind") == "state":
                if isinstance(s.get("from"), str):
                    yield VariableRead((s["from"],), ("sources", i, "from"))
            elif isinstance(s.get("query_from"), str):
                yield VariableRead((s["query_from"],), ("sources", i, "query_from"))
            elif "query" not in s:
                yield VariableRead(
                    ("question",), ("sources", i), "question, as no query_from is given"
                )
        for key in ("domain_from", "strategy_from", "query_from"):
            if isinstance(step.get(key), str):
                yield VariableRead((step[key],), (key,))

    @classmethod
    def output_bounds(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, int]:
        """The markdown never exceeds max_tokens (unless soft: it may go over)."""
        limit = step.get("max_tokens")
        if limit is None and isinstance(step.get("max_tokens_from_settings"), str):
            limit = settings.get(step["max_tokens_from_settings"])
        if step.get("soft") or not isinstance(limit, int) or isinstance(limit, bool):
            return {}
        out = step.get("output_to") or DEFAULT_OUTPUT
        return {step.get("markdown_to") or f"{out}_markdown": limit}

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """output_to and markdown_to."""
        out = step.get("output_to") or DEFAULT_OUTPUT
        yield out
        yield step.get("markdown_to") or f"{out}_markdown"
        if isinstance(step.get("report_to"), str):
            yield step["report_to"]

    def run(self, ctx: StepContext) -> Outcome | None:
        """Fetch every source concurrently, assemble, write the record and the markdown."""
        from actions._scope import filter_candidates, run_scope

        step, settings = ctx.step, ctx.settings
        max_tokens = int(step.get("max_tokens") or settings[step["max_tokens_from_settings"]])
        scope = run_scope(ctx)
        counter = ctx.services.tokens()
        jobs = self._jobs(ctx, scope)
        found, warnings, stats = _gather(
            jobs, float(step.get("timeout_seconds") or DEFAULT_TIMEOUT)
        )
        for w in warnings:
            ctx.trace("ASSEMBLY_SOURCE_FAILED", **w)
        # The run's access policy decides every item (docs/access.md).
        found = filter_candidates(ctx, found)
        opts = assembly.Options(
            max_tokens=max_tokens,
            soft=bool(step.get("soft", False)),
            item_cap=float(step.get("item_cap", assembly.DEFAULT_CAP)),
            threshold=float(step.get("dedup_threshold", assembly.DEFAULT_THRESHOLD)),
            pointer_over=int(step.get("pointer_over_tokens", assembly.DEFAULT_POINTER_OVER)),
        )
        record = assembly.assemble(
            [s for s, _ in jobs],
            found,
            counter,
            opts,
            kind_titles=src.TITLES,
            compact=_compactor(counter),
            make_pointer=_pointer_maker(ctx),
            now=_now(settings),
        )
        record["warnings"] = warnings
        record["sources"] = stats
        out = step.get("output_to") or DEFAULT_OUTPUT
        ctx.set(out, record)
        ctx.set(step.get("markdown_to") or f"{out}_markdown", record["markdown"])
        if step.get("report_to"):
            ctx.set(step["report_to"], report(record))
        ctx.trace(
            "ASSEMBLE_CONTEXT",
            mode=step.get("mode") or "sources",
            max_tokens=max_tokens,
            token_count=record["token_count"],
            exceeded=record["exceeded"],
            items=len(record["items"]),
            sources_used=record["sources_used"],
            dropped=len(record["dropped"]),
            truncated=sum(1 for i in record["items"] if i["truncated"]),
            sources=stats,
            scope={
                "repository": scope.repository,
                "snapshot": scope.snapshot,
                "allowed_labels": list(scope.allowed_labels or []),
            },
        )
        return None

    def _jobs(
        self, ctx: StepContext, scope: Any
    ) -> list[tuple[assembly.Source, Callable[[], list[assembly.Candidate]]]]:
        """(source, fetch) per section, in section order; fetch runs in a worker thread."""
        step = ctx.step
        jobs: list[tuple[assembly.Source, Callable[[], list[assembly.Candidate]]]] = []
        services = ctx.services
        if step.get("mode") == "premortem":
            from actions import _premortem

            domain = _text(ctx, step, "domain")
            strategy = step.get("strategy")
            if "strategy_from" in step:  # optional: unset or blank asks about every strategy
                value = ctx.get(step["strategy_from"], None)
                strategy = value.strip() if isinstance(value, str) and value.strip() else None
            extra = _query(ctx, step) if "query_from" in step else ""
            for source, fetch in _premortem.plan(domain or "", strategy, 5, {}, extra):
                jobs.append((source, _bind(fetch, scope, services)))
        for s in step.get("sources") or ():
            spec = _source(s)
            kind = s["kind"]
            if kind == "state":
                items = src.state_items(s["name"], s["from"], ctx.get(s["from"]))
                jobs.append((spec, _const(items)))
                continue
            query = _query(ctx, s)
            req = src.Request(s["name"], kind, query, dict(s), scope, spec.max_items)
            jobs.append((spec, _fetcher(req, services)))
        return jobs


def report(record: Mapping[str, Any]) -> str:
    """The pack, then the drop record and the warnings, as text for a person."""
    lines = [record["markdown"] or "(empty pack: no source found anything)\n"]
    budget = f"{record['token_count']} of {record['max_tokens']} tokens"
    if record["exceeded"]:
        budget += f", {record['exceeded']} over (soft)"
    lines.append(f"Budget: {budget}.\n")
    if record["dropped"]:
        lines.append("Dropped:")
        for d in record["dropped"]:
            tokens = "?" if d["tokens"] is None else d["tokens"]
            lines.append(f"- {d['id']} ({d['source']}, {tokens} tokens): {d['reason']}")
        lines.append("")
    cut = [i for i in record["items"] if i["truncated"]]
    if cut:
        lines.append("Cut to fit:")
        lines += [
            f"- {i['id']}: cut to {i['tokens']} tokens (the text alone was {i['full_tokens']}); "
            f"whole: {i.get('pointer_id') or i['location']}"
            for i in cut
        ]
        lines.append("")
    for w in record.get("warnings") or ():
        lines.append(f"Warning: {w['source']}: {w['code']}: {w['message']}")
    return "\n".join(lines).rstrip("\n") + "\n"


def _premortem_names() -> tuple[str, ...]:
    from actions._premortem import SECTIONS

    return SECTIONS


def _check_source(
    i: int, s: Mapping[str, Any], seen: set[str], reserved: set[str], axes: tuple[str, ...]
) -> Iterator[Problem]:
    at: tuple[str | int, ...] = ("sources", i)
    kind = s.get("kind")
    name = s.get("name")
    if isinstance(name, str):
        if name in seen or name in reserved:
            yield Problem(
                "ASSEMBLY_SOURCE_INVALID", f"source name {name!r} is used twice", (*at, "name")
            )
        seen.add(name)
    if kind not in src.KINDS:
        yield Problem(
            "ASSEMBLY_SOURCE_INVALID",
            f"unknown source kind {kind!r}; known: {', '.join(src.KINDS)}",
            (*at, "kind"),
        )
        return
    if "axis" in s:
        if kind != "experiences":
            yield Problem(
                "ASSEMBLY_SOURCE_INVALID",
                f"axis is for experiences, not {kind}",
                (*at, "axis"),
                key=True,
            )
        elif s["axis"] not in axes:
            yield Problem(
                "ASSEMBLY_SOURCE_INVALID",
                f"unknown axis {s['axis']!r}; known: {', '.join(axes)}",
                (*at, "axis"),
            )
    if "search_type" in s:
        if kind not in src.NODE_DEFAULTS:
            yield Problem(
                "ASSEMBLY_SOURCE_INVALID",
                f"search_type is for code, docs and commits, not {kind}",
                (*at, "search_type"),
                key=True,
            )
        elif s["search_type"] not in src.SEARCH_TYPES:
            yield Problem(
                "ASSEMBLY_SOURCE_INVALID",
                f"unknown search_type {s['search_type']!r}; known: {', '.join(src.SEARCH_TYPES)}",
                (*at, "search_type"),
            )
    if kind == "state":
        if "from" not in s:
            yield Problem(
                "ASSEMBLY_SOURCE_INVALID", "a state source needs `from` (the list's variable)", at
            )
        for key in ("query", "query_from"):
            if key in s:
                yield Problem(
                    "ASSEMBLY_SOURCE_INVALID",
                    f"a state source takes no {key}",
                    (*at, key),
                    key=True,
                )
    elif "from" in s:
        yield Problem(
            "ASSEMBLY_SOURCE_INVALID", "`from` is for state sources", (*at, "from"), key=True
        )
    if "query" in s and "query_from" in s:
        yield Problem(
            "ASSEMBLY_SOURCE_INVALID",
            "give query or query_from, not both",
            (*at, "query_from"),
            key=True,
        )
    allowed = {
        "code": src.NODE_FILTERS,
        "docs": src.NODE_FILTERS,
        "commits": src.NODE_FILTERS,
        "experiences": EXPERIENCE_FILTERS,
        "memories": src.MEMORY_FILTERS,
    }.get(kind, ())
    filters = s.get("filters")
    for key, value in filters.items() if isinstance(filters, Mapping) else ():
        if key not in allowed:
            yield Problem(
                "ASSEMBLY_SOURCE_INVALID",
                f"{kind} takes no filter {key!r}"
                + (f"; known: {', '.join(allowed)}" if allowed else ""),
                (*at, "filters", key),
                key=True,
            )
        elif not (
            (isinstance(value, str) and value)
            or (
                key != "path_prefix"
                and kind != "experiences"
                and isinstance(value, list)
                and value
                and all(isinstance(v, str) and v for v in value)
            )
        ):
            yield Problem(
                "ASSEMBLY_SOURCE_INVALID",
                f"filter {key} must be a non-empty string"
                + ("" if key == "path_prefix" or kind == "experiences" else " or list of strings"),
                (*at, "filters", key),
            )


def _source(s: Mapping[str, Any]) -> assembly.Source:
    return assembly.Source(
        name=s["name"],
        kind=s["kind"],
        weight=float(s.get("weight", 1.0)),
        max_items=int(s.get("max_items", 10)),
        item_cap=float(s["item_cap"]) if "item_cap" in s else None,
        boosts=dict(s.get("boosts") or {}),
        title=str(s.get("title") or ""),
    )


def _text(ctx: StepContext, step: Mapping[str, Any], key: str) -> str:
    if key in step:
        return str(step[key])
    value = ctx.get(step[f"{key}_from"])
    if not isinstance(value, str) or not value.strip():
        raise RunError(f"{key}_from {step[f'{key}_from']!r} holds no text", code="VARIABLE_TYPE")
    return value.strip()


def _query(ctx: StepContext, s: Mapping[str, Any]) -> str:
    """The source's query: its `query`, else the variable query_from names (text, or JSON
    with a `query` string, as search_nodes reads it)."""
    if "query" in s:
        return str(s["query"])
    name = s.get("query_from") or "question"
    raw = ctx.get(name)
    payload = _jsonish.parse_object(raw) if isinstance(raw, str | dict) else None
    if payload is not None and isinstance(payload.get("query"), str):
        return str(payload["query"])
    return raw if isinstance(raw, str) else ""


def _const(items: list[assembly.Candidate]) -> Callable[[], list[assembly.Candidate]]:
    return lambda: items


def _bind(
    fetch: Callable[[Any, Any], list[assembly.Candidate]], scope: Any, services: Any
) -> Callable[[], list[assembly.Candidate]]:
    return lambda: fetch(scope, services.memory_store)


def _fetcher(req: src.Request, services: Any) -> Callable[[], list[assembly.Candidate]]:
    def fetch() -> list[assembly.Candidate]:
        if not req.query.strip():
            raise RunError(f"source {req.name!r}: empty query", code="QUERY_EMPTY")
        if req.kind in src.NODE_DEFAULTS:
            return src.nodes(req, services.node_store)
        store = services.memory_store
        if req.kind == "memories":
            return src.memories(req, store)
        if req.kind == "experiences":
            return src.experiences(req, store)
        return src.values(req, store)

    return fetch


def _gather(
    jobs: list[tuple[assembly.Source, Callable[[], list[assembly.Candidate]]]], timeout: float
) -> tuple[dict[str, list[assembly.Candidate]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Run the fetches in threads: (candidates by source, warnings, per-source stats).

    A fetch that raises a coded error, or is still running at the deadline, leaves its
    source empty with a warning; any other exception is a bug and propagates.
    """
    found: dict[str, list[assembly.Candidate]] = {}
    warnings: list[dict[str, Any]] = []
    stats: list[dict[str, Any]] = []
    pool = cf.ThreadPoolExecutor(max_workers=max(1, len(jobs)), thread_name_prefix="assemble")
    try:
        futures = [pool.submit(fetch) for _, fetch in jobs]
        done, _ = cf.wait(futures, timeout=timeout)
        for (source, _), future in zip(jobs, futures, strict=True):
            status = "ok"
            if future not in done:
                future.cancel()
                status = "timeout"
                warnings.append(
                    {
                        "source": source.name,
                        "code": "ASSEMBLY_SOURCE_TIMEOUT",
                        "message": f"source {source.name!r} gave no answer within {timeout:g} s",
                    }
                )
                found[source.name] = []
            else:
                error = future.exception()
                if isinstance(error, StepRuntimeError):
                    status = "failed"
                    warnings.append(
                        {
                            "source": source.name,
                            "code": getattr(error, "code", None) or "ASSEMBLY_SOURCE_FAILED",
                            "message": str(getattr(error, "message", None) or error),
                        }
                    )
                    found[source.name] = []
                elif error is not None:
                    raise error
                else:
                    found[source.name] = future.result()
            stats.append(
                {
                    "name": source.name,
                    "kind": source.kind,
                    "status": status,
                    "candidates": len(found[source.name]),
                }
            )
    finally:
        # A slow source keeps its thread until it returns; nothing waits for it.
        pool.shutdown(wait=False, cancel_futures=True)
    return found, warnings, stats


def _compactor(counter: Any) -> assembly.Compactor:
    from classifiers.compact import compact

    return lambda text, language, budget: compact(text, language, budget, counter)


def _pointer_maker(ctx: StepContext) -> assembly.PointerMaker:
    from runtime.context import pointers

    def make(text: str, kind: str) -> str:
        store = pointers.store_of(ctx)
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        return pointers.make_pointer(
            store, ctx.run_id, text, kind, "assembled item", lines
        ).pointer_id

    return make


def _now(settings: Mapping[str, Any]) -> datetime:
    """Now, for recency boosts; settings.assembly_now (ISO 8601) pins it (tests, replays)."""
    pinned = settings.get("assembly_now")
    if isinstance(pinned, str):
        return datetime.fromisoformat(pinned.replace("Z", "+00:00"))
    return datetime.now(UTC)
