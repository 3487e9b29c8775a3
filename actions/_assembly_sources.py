"""assemble_context's sources: each kind's retrieval, as candidates for the assembly.

A fetcher is a plain function of plain values (the query, the scope, a store, the source's
fields): assemble_context runs them in threads, so none of them touches the step context.
Scope and labels go to the store with every query (the node store's and the memory
store's own filters), so no source can see more than search_nodes would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime.context.assembly import Candidate

KINDS = ("code", "docs", "memories", "experiences", "values", "commits", "state")
# Section titles by kind (a step's `title` wins).
TITLES = {
    "code": "code",
    "docs": "docs",
    "memories": "memories",
    "experiences": "experiences",
    "values": "values",
    "commits": "commits",
    "state": "state",
    "failures": "experiences, failed",
    "strategies": "experiences by strategy",
    "surprises": "experiences, surprise axis",
    "root_causes": "experiences, root-cause axis",
    "principles": "values and memories",
}
NODE_FILTERS = ("kind", "language", "path_prefix")
SEARCH_TYPES = ("bm25", "semantic", "hybrid")
# What each node kind searches unless the step narrows it further.
NODE_DEFAULTS: dict[str, dict[str, Any]] = {
    "code": {"language": ["dotnet", "sql"]},
    "docs": {"kind": ["doc"]},
    "commits": {"kind": ["commit"]},
}
MEMORY_FILTERS = ("type",)


@dataclass(frozen=True)
class Request:
    """What one source asks: the query, its fields and the run's scope (plain values)."""

    name: str
    kind: str
    query: str
    spec: Mapping[str, Any]
    scope: Any  # runtime.retrieval.node.Scope
    limit: int


def narrowed(kind: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The kind's default filters narrowed by the step's (never widened: an intersection)."""
    out: dict[str, Any] = {k: list(v) for k, v in NODE_DEFAULTS.get(kind, {}).items()}
    for key, value in (given or {}).items():
        if key == "path_prefix":
            out[key] = value
            continue
        wanted = [value] if isinstance(value, str) else list(value)
        if key in out:
            wanted = [v for v in wanted if v in out[key]]
        out[key] = wanted or ["\x00none"]  # nothing in common: a value no node has
    return out


def nodes(req: Request, node_store: Any) -> list[Candidate]:
    """code, docs, commits: a node index search under the run's scope, then the nodes."""
    filters = narrowed(req.kind, req.spec.get("filters"))
    extra = {"per_file": 0} if req.kind == "commits" else {}
    if "per_file" in req.spec:
        extra["per_file"] = int(req.spec["per_file"])
    # The run's scope here; the access engine decides each item after (filter_candidates).
    hits = node_store.search(
        req.query,
        scope=req.scope,
        top_k=req.limit,
        search_type=req.spec.get("search_type") or "bm25",
        filters=filters,
        **extra,
    )
    found = node_store.get_nodes([h["id"] for h in hits], scope=req.scope)
    out = []
    for h in hits:
        n = found.get(h["id"])
        if n is None:  # gone since the search, or not visible: never shown
            continue
        origin = f"{n.repository}::{n.snapshot}"
        if req.kind == "commits":
            meta = dict(n.metadata or {})
            sha = str(meta.get("sha") or n.qualified_name)
            out.append(
                Candidate(
                    id=n.id,
                    source=req.name,
                    kind="commit",
                    text=n.text,
                    score=float(h["score"]),
                    location=f"commit {sha}",
                    fields=meta,
                    origin=origin,
                    commit=sha,
                    labels=tuple(sorted(n.labels)),
                )
            )
            continue
        out.append(
            Candidate(
                id=n.id,
                source=req.name,
                kind="doc" if n.kind == "doc" else "code",
                text=n.text,
                score=float(h["score"]),
                location=f"node {n.id} at {n.path}:{n.start_line}-{n.end_line}",
                fields={"node_kind": n.kind, "labels": list(n.labels)},
                path=n.path,
                origin=origin,
                start_line=n.start_line,
                end_line=n.end_line,
                language=n.language,
                name=n.name,
                labels=tuple(sorted(n.labels)),
            )
        )
    return out


def _labels(scope: Any) -> frozenset[str] | None:
    allowed = scope.allowed_labels
    return frozenset(allowed) if allowed is not None else None


def _recalled(req: Request, hits: list[Any], kind: str) -> list[Candidate]:
    out = []
    for r in hits:
        fields = dict(r.fields)
        location = r.location or f"{kind}:{r.id}"
        if fields.get("run_id"):
            location += f" (run {fields['run_id']})"
        out.append(
            Candidate(
                id=f"{kind}:{r.id}",
                source=req.name,
                kind=kind,
                text=r.text,
                score=float(r.score),
                location=location,
                fields=fields,
                commit=str(fields.get("commit") or ""),
                labels=tuple(sorted(r.labels)),
            )
        )
    return out


def memories(req: Request, store: Any) -> list[Candidate]:
    """Memories in the run's scope and labels (the store drops expired ones and decays)."""
    scope = {
        k: v
        for k, v in (("repository", req.scope.repository), ("snapshot", req.scope.snapshot))
        if v is not None
    }
    hits = store.search_memories(req.query, limit=req.limit, scope=scope, labels=_labels(req.scope))
    wanted = (req.spec.get("filters") or {}).get("type")
    if wanted:
        types = {wanted} if isinstance(wanted, str) else set(wanted)
        hits = [h for h in hits if h.fields.get("type") in types]
    return _recalled(req, hits, "memory")


def experiences(req: Request, store: Any) -> list[Candidate]:
    """Experiences on the source's axis, with its filters (domain, strategy, outcome, ...)."""
    hits = store.search_experiences(
        req.query,
        axis=req.spec.get("axis") or "full",
        limit=req.limit,
        filters=dict(req.spec.get("filters") or {}) or None,
        labels=_labels(req.scope),
    )
    return _recalled(req, hits, "experience")


def values(req: Request, store: Any) -> list[Candidate]:
    """Values (the principles `runtime values rebuild` stored)."""
    hits = store.search_values(req.query, limit=req.limit, labels=_labels(req.scope))
    return _recalled(req, hits, "value")


def state_items(name: str, variable: str, value: Any) -> list[Candidate]:
    """A state list of {id, text, score, metadata} as candidates; a malformed one is a
    VARIABLE_TYPE error naming the entry."""
    from runtime.errors import StateError

    if not isinstance(value, list):
        raise StateError(
            f"state source {name!r}: {variable} must be a list of {{id, text, score, metadata}}",
            code="VARIABLE_TYPE",
        )
    out = []
    for i, e in enumerate(value):
        ok = (
            isinstance(e, Mapping)
            and isinstance(e.get("id"), str)
            and isinstance(e.get("text"), str)
            and isinstance(e.get("score", 0), int | float)
            and not isinstance(e.get("score", 0), bool)
            and isinstance(e.get("metadata", {}), Mapping)
        )
        if not ok:
            raise StateError(
                f"state source {name!r}: {variable}[{i}] is not {{id: string, text: string, "
                "score: number, metadata: object}",
                code="VARIABLE_TYPE",
            )
        meta = dict(e.get("metadata") or {})
        origin = meta.get("origin")
        if origin is None and e["id"].count("::") >= 3:  # a node id: repository::snapshot::...
            origin = "::".join(e["id"].split("::")[:2])
        out.append(
            Candidate(
                id=e["id"],
                source=name,
                kind="state",
                text=e["text"],
                score=float(e.get("score", 0)),
                location=str(meta.get("location") or f"state {variable}[{i}]"),
                fields=meta,
                path=str(meta.get("path") or ""),
                origin=str(origin or ""),
                start_line=int(meta.get("start_line") or 0),
                end_line=int(meta.get("end_line") or 0),
                commit=str(meta.get("commit") or ""),
                labels=_state_labels(meta.get("labels")),
            )
        )
    return out


def _state_labels(value: Any) -> tuple[str, ...] | None:
    """A state item's labels, when its metadata lists them."""
    if isinstance(value, list | tuple) and all(isinstance(x, str) for x in value):
        return tuple(sorted(value))
    return None
