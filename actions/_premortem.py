"""assemble_context's premortem mode: what went wrong before in a domain, in five sections.

1. common failures: experiences, axis full, failed outcomes in the domain;
2. how each strategy performed: the domain's experiences grouped by strategy;
3. unexpected outcomes: experiences, axis surprise (what was predicted, what happened);
4. root causes to watch: experiences, axis root_cause (the outcome, the error, the lesson);
5. relevant values: values, and semantic or procedural memories, for the domain.

One experience may stand in several sections, each time as a different facet (its whole
story, its surprise, its root cause): the ids carry the facet (`experience:ID#surprise`),
so deduplication merges repeats of one facet, never two facets of one experience.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from actions._assembly_sources import Request, experiences, memories, values
from runtime.context.assembly import Candidate, Source

FAILED = "failure"  # the outcome_status of a failed attempt (record_experience's enum)
SECTIONS = ("failures", "strategies", "surprises", "root_causes", "principles")
TITLES = {
    "failures": "Common failures",
    "strategies": "How each strategy performed",
    "surprises": "Unexpected outcomes",
    "root_causes": "Root causes to watch",
    "principles": "Relevant values",
}
Fetch = Callable[[Any], list[Candidate]]


def _facet(c: Candidate, facet: str, rows: list[tuple[str, Any]]) -> Candidate:
    shown = [(k, v) for k, v in rows if v not in (None, "")]
    return Candidate(
        id=f"{c.id}#{facet}",
        source=c.source,
        kind="facet",
        text="\n".join(f"{k}: {v}" for k, v in shown),
        score=c.score,
        location=c.location,
        fields={**c.fields, "rows": shown, "title": c.id},
        labels=c.labels,
    )


def _surprise(c: Candidate) -> Candidate:
    f = c.fields
    return _facet(
        c,
        "surprise",
        [
            ("strategy", f.get("strategy")),
            ("prediction", f.get("prediction")),
            ("outcome", f.get("outcome_result") or f.get("outcome_status")),
            ("surprise", f.get("surprise")),
        ],
    )


def _root_cause(c: Candidate) -> Candidate:
    f = c.fields
    return _facet(
        c,
        "root_cause",
        [
            ("strategy", f.get("strategy")),
            ("outcome", f"{f.get('outcome_status') or '?'}: {f.get('outcome_result') or ''}"),
            ("error code", f.get("error_code")),
            ("lesson", f.get("lesson")),
        ],
    )


def strategy_table(found: list[Candidate], source: str, wanted: str | None) -> list[Candidate]:
    """One item per strategy: how often it was tried, how it turned out, its best tier."""
    groups: dict[str, list[Candidate]] = {}
    for c in found:
        groups.setdefault(str(c.fields.get("strategy") or "unnamed"), []).append(c)
    out = []
    order = ("gold", "silver", "bronze", "abandoned")
    for name, items in sorted(groups.items()):
        outcomes: dict[str, int] = {}
        for c in items:
            key = str(c.fields.get("outcome_status") or "unknown")
            outcomes[key] = outcomes.get(key, 0) + 1
        tiers = [str(c.fields.get("confidence_tier")) for c in items]
        best = next((t for t in order if t in tiers), "none")
        latest = max(items, key=lambda c: str(c.fields.get("created_at") or ""))
        failed = outcomes.get(FAILED, 0)
        rows: list[tuple[str, Any]] = [
            ("tried", f"{len(items)} time{'s' if len(items) != 1 else ''}"),
            ("outcomes", ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))),
            ("best tier", best),
            ("latest lesson", latest.fields.get("lesson")),
            ("experiences", ", ".join(sorted(c.id.split(":", 1)[1] for c in items))),
        ]
        # The strategy asked about first, then the most tried; failures lower the rank.
        score = (2.0 if name == wanted else 1.0) * len(items) / (1 + failed)
        out.append(
            Candidate(
                id=f"strategy:{name}",
                source=source,
                kind="facet",
                text="\n".join(f"{k}: {v}" for k, v in rows if v),
                score=score,
                location="experiences " + ", ".join(sorted(c.id for c in items)),
                fields={"rows": [(k, v) for k, v in rows if v], "title": f"strategy {name}"},
                labels=tuple(sorted({x for c in items for x in c.labels or ()})),
            )
        )
    return out


def _axis_then_domain(
    axis_hits: list[Candidate], domain: list[Candidate], keep: Callable[[Candidate], bool]
) -> list[Candidate]:
    """The axis search's hits first, then the domain's other experiences that have the
    facet (ranked below every hit), so a facet no query word names is still found."""
    seen = {c.id for c in axis_hits}
    top = max((c.score for c in axis_hits), default=1.0) or 1.0
    rest = [c for c in domain if c.id not in seen and keep(c)]
    floor = top / 2
    for i, c in enumerate(rest):
        c.score = floor * (1 - i / (len(rest) + 1))  # the domain's order, below the hits
    return axis_hits + rest


def plan(
    domain: str, strategy: str | None, limit: int, weights: Mapping[str, float], extra: str = ""
) -> list[tuple[Source, Callable[[Any, Any], list[Candidate]]]]:
    """The five sections as sources, each with its fetch(scope, store) function.

    The query is the domain, the strategy and any extra text (the step's query_from).
    """
    query = " ".join(x for x in (domain, strategy, extra) if x)
    in_domain = {"domain": domain}

    def ask(name: str, axis: str, filters: Mapping[str, str], n: int, q: str = query) -> Request:
        return Request(name, "experiences", q, {"axis": axis, "filters": dict(filters)}, None, n)

    def fetch(store: Any, scope: Any, r: Request) -> list[Candidate]:
        return experiences(Request(r.name, r.kind, r.query, r.spec, scope, r.limit), store)

    def everything(scope: Any, store: Any, name: str) -> list[Candidate]:
        return fetch(store, scope, ask(name, "full", in_domain, 50, domain))

    def failures(scope: Any, store: Any) -> list[Candidate]:
        return fetch(store, scope, ask("failures", "full", {**in_domain, "outcome": FAILED}, limit))

    def strategies(scope: Any, store: Any) -> list[Candidate]:
        return strategy_table(everything(scope, store, "strategies"), "strategies", strategy)

    def surprises(scope: Any, store: Any) -> list[Candidate]:
        hits = fetch(store, scope, ask("surprises", "surprise", in_domain, limit))
        found = _axis_then_domain(
            hits, everything(scope, store, "surprises"), lambda c: bool(c.fields.get("surprise"))
        )
        return [_surprise(c) for c in found if c.fields.get("surprise")]

    def root_causes(scope: Any, store: Any) -> list[Candidate]:
        hits = fetch(store, scope, ask("root_causes", "root_cause", in_domain, limit))
        found = _axis_then_domain(
            hits,
            everything(scope, store, "root_causes"),
            lambda c: (
                c.fields.get("outcome_status") != "success"
                and bool(c.fields.get("lesson") or c.fields.get("outcome_result"))
            ),
        )
        return [_root_cause(c) for c in found]

    def principles(scope: Any, store: Any) -> list[Candidate]:
        found = values(Request("principles", "values", query, {}, scope, limit), store)
        m = Request(
            "principles",
            "memories",
            query,
            {"filters": {"type": ["semantic", "procedural"]}},
            scope,
            limit,
        )
        return found + memories(m, store)

    fetchers = {
        "failures": failures,
        "strategies": strategies,
        "surprises": surprises,
        "root_causes": root_causes,
        "principles": principles,
    }
    return [
        (
            Source(
                name=name,
                kind=name,
                weight=float(weights.get(name, 1.0)),
                max_items=limit,
                title=TITLES[name],
                boosts={"tiers": True} if name != "strategies" else {},
            ),
            fetchers[name],
        )
        for name in SECTIONS
    ]
