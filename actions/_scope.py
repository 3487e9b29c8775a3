"""Security scope of a run: repository, snapshot and allowed labels.

The pipeline's settings may pin each of them; the run's inputs may then only narrow
what is pinned, never widen or replace it:

- `repository` / `snapshot`: an input equal to the pinned value, or absent (None), is
  accepted; any other value is SCOPE_WIDENED. Unpinned, the input decides, and absent
  means every repository (snapshot).
- `allowed_labels`: an input must be a subset of the pinned list (SCOPE_WIDENED names
  the extra labels); `[]` narrows to unlabelled nodes only. Unpinned, the input decides.

Every value, from inputs or settings, must be a non-blank string without surrounding
whitespace (SCOPE_INVALID): `""` must never reach a read, where it would mean "all".
Values are compared exactly: a case variant, a look-alike character, a wildcard or SQL
syntax is a different name, not a pattern. Model output never reaches this: the scope
comes only from what the caller passed in (run inputs) and what the pipeline author
configured (settings).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from runtime.errors import RunError, StateError
from runtime.governance.subject import TENANT_PREFIX

if TYPE_CHECKING:
    from runtime.governance.access_policy import AccessEngine, Ledger, Resource
    from runtime.governance.subject import Subject
    from runtime.retrieval.node import Scope
    from runtime.retrieval.policed import AccessView


def _given(value: Any, where: str) -> str:
    from runtime.retrieval.node import scope_value_problem

    problem = scope_value_problem(value)
    if problem is not None:
        if not isinstance(value, str):
            raise StateError(f"{where} must be a string", code="VARIABLE_TYPE")
        raise RunError(f"{where} {problem}", code="SCOPE_INVALID")
    return str(value)


def _name(ctx: Any, name: str) -> str | None:
    """A repository or snapshot: the input when it repeats the pinned value or none is pinned."""
    pinned = ctx.settings.get(name)
    if pinned is not None:
        pinned = _given(pinned, f"settings.{name}")
    value = ctx.inputs.get(name)
    if value is None:
        return pinned
    value = _given(value, f"input {name}")
    if pinned is not None and value != pinned:
        # The pinned value is not quoted: the caller need not learn what the author pinned.
        raise RunError(
            f"input {name} {value!r} is not the {name} pinned in settings; "
            "inputs may only narrow the scope",
            code="SCOPE_WIDENED",
        )
    return value


def _labels(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    if not (isinstance(value, list) and all(isinstance(x, str) for x in value)):
        raise StateError(f"{where} must be a list of strings", code="VARIABLE_TYPE")
    return [_given(label, f"{where} label") for label in value]


def pinned_labels(ctx: Any) -> tuple[str, ...] | None:
    """The labels settings pin, narrowed by the `allowed_labels` input; None: neither names any."""
    pinned = _labels(ctx.settings.get("allowed_labels"), "settings.allowed_labels")
    labels = _labels(ctx.inputs.get("allowed_labels"), "allowed_labels")
    if labels is None:
        labels = pinned
    elif pinned is not None:
        extra = sorted(set(labels) - set(pinned))
        if extra:
            raise RunError(
                f"input allowed_labels adds {', '.join(map(repr, extra))}, not allowed by "
                "settings.allowed_labels; inputs may only narrow the labels",
                code="SCOPE_WIDENED",
            )
    if labels is None:
        return None
    tenants = sorted({x for x in labels if x.startswith(TENANT_PREFIX)})
    if tenants:
        # A tenant label is granted only by the subject's tenant (docs/access.md).
        raise RunError(
            f"allowed_labels names tenant label(s) {', '.join(map(repr, tenants))}; a tenant "
            "is granted only by the subject's `tenant`",
            code="SCOPE_WIDENED",
        )
    return tuple(labels)


def run_subject(ctx: Any, *, reading: bool = False) -> Subject:
    """Who the run answers: the `subject` input (never a variable a step wrote).

    A run without one whose inputs give `allowed_labels` is, as before subjects, a caller
    cleared for exactly those labels (no tenant); a run with neither is anonymous. Its
    clearance holds the labels a governed exception lifts for the step (reading=True: a
    read that uses them, traced as EXCEPTION_USED).
    """
    from runtime.governance.subject import Subject, subject_of

    subject = subject_of(ctx.inputs)
    if subject.anonymous and ctx.inputs.get("allowed_labels") is not None:
        subject = Subject(clearance=tuple(pinned_labels(ctx) or ()))
    return _lifted(ctx, subject, reading)


def _lifted(ctx: Any, subject: Subject, trace: bool) -> Subject:
    """The subject as the step reads: its clearance and the labels an unexpired governed
    exception (rule `access_labels`, runtime/governance/exceptions.py) lifts for this
    step, from the settings only; trace: this is a read, traced as EXCEPTION_USED."""
    import dataclasses

    from runtime.governance.exceptions import active_exception

    step_id = getattr(ctx, "step_id", None)
    settings = getattr(ctx, "settings", None)
    if not isinstance(step_id, str) or not isinstance(settings, Mapping):
        return subject
    lifted = active_exception(settings, "access_labels", step_id)
    if lifted is None:
        return subject
    if trace:
        ctx.trace("EXCEPTION_USED", **lifted.trace_data(), step=step_id)
    clearance = tuple(sorted(set(subject.clearance) | set(lifted.labels)))
    return dataclasses.replace(subject, clearance=clearance)


def run_scope(ctx: Any) -> Scope:
    """The scope the default rule gives this run: repository and snapshot from the inputs
    within what settings pin; the labels the subject may see (access_policy.visible_labels)."""
    from runtime.governance.access_policy import visible_labels
    from runtime.retrieval.node import Scope  # loaded with the first search, not at validation

    pinned = pinned_labels(ctx)
    return Scope(
        _name(ctx, "repository"),
        _name(ctx, "snapshot"),
        visible_labels(run_subject(ctx), pinned),
    )


def access_engine(ctx: Any) -> AccessEngine:
    """The engine settings.access names, loaded once per services and configuration."""
    from runtime.governance.access_policy import canonical
    from runtime.governance.engines import load_engine

    config = ctx.settings.get("access") or {}
    base = str(getattr(ctx.pipeline, "base_dir", "."))
    key = canonical([config, base])
    cache = getattr(ctx.services, "_access_engines", None)
    if cache is None:
        cache = {}
        with contextlib.suppress(AttributeError):  # a services object without a __dict__
            ctx.services._access_engines = cache
    if key not in cache:
        cache[key] = load_engine(config, base)
    engine: AccessEngine = cache[key]
    return engine


def access_view(ctx: Any) -> AccessView:
    """The node store as this run's subject may read it (runtime/retrieval/policed.py)."""
    from runtime.retrieval.policed import DEFAULT_OVERFETCH, AccessView

    scope = run_scope(ctx)
    config = ctx.settings.get("access") or {}
    return AccessView(
        ctx.services.node_store,
        access_engine(ctx),
        run_subject(ctx, reading=True),
        pinned_labels(ctx),
        scope,
        overfetch=int(config.get("overfetch", DEFAULT_OVERFETCH)),
    )


def record_access(ctx: Any, view: AccessView) -> dict[str, str]:
    """Write each read's decisions to the trace (ACCESS events: allowed by id, denied
    counted, never a denied resource's id or text) and to `access_decisions`; returns
    resource id -> the id of the decision that admitted it (query-level for the built-in)."""
    admitted: dict[str, str] = {}
    kept = list(ctx.get("access_decisions", None) or [])
    for ledger in view.ledgers:
        ctx.trace("ACCESS", **ledger.event())
        admitted.update(ledger.admitted())
        entry = {
            "step": ctx.step_id,
            "engine": ledger.engine,
            "action": ledger.action,
            "denied": ledger.denied,
            "decisions": [d.id for d in ledger.allowed[:200]]
            + ([ledger.query.id] if ledger.query else []),
        }
        if ledger.query is not None:
            entry["query"] = ledger.query.to_dict()
        if ledger.failures:
            entry["code"] = "ACCESS_ENGINE_FAILED"
        kept.append(entry)
    view.ledgers.clear()
    ctx.set("access_decisions", kept[-100:])
    return admitted


def run_labels(ctx: Any) -> frozenset[str]:
    """The labels this run's subject may read under the default rule (for stores that take
    allowed labels: memories). A per-resource engine also decides each item: filter_allowed."""
    return frozenset(run_scope(ctx).allowed_labels or ())


def filter_allowed(
    ctx: Any, action: str, items: list[Any], resource: Callable[[Any], Resource]
) -> tuple[list[Any], Ledger]:
    """The items the run's access engine allows (resource(item) gives its attributes):
    for reads that do not go through the node store (memories, assembly sources)."""
    from runtime.governance.access_policy import Ledger

    engine = access_engine(ctx)
    ledger = Ledger(engine.name, action)
    if not items:
        return [], ledger
    subject, pinned = run_subject(ctx, reading=True), pinned_labels(ctx)
    resources = [resource(i) for i in items]
    if engine.per_resource and pinned is not None:
        # The pins hold under every engine: what they exclude is never asked about.
        pins = set(pinned)
        outside = [
            r
            for r in resources
            if any(x not in pins and not x.startswith(TENANT_PREFIX) for x in r.labels)
        ]
        ledger.denied += len(outside)
        if outside:
            ledger.denied_reasons["outside the labels the settings pin"] = len(outside)
        resources = [r for r in resources if r not in outside]
    decisions = engine.decide(subject, action, resources, pinned)
    ledger.add(decisions)
    ok = {d.resource for d in decisions if d.allowed}
    resources = [resource(i) for i in items]
    return [i for i, r in zip(items, resources, strict=True) if r.id in ok], ledger


# facet: a premortem section's view of an experience (actions/_premortem.py).
MEMORY_KINDS = ("memory", "experience", "value", "facet")


def filter_candidates(ctx: Any, found: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Assembly candidates by source, each decided by the run's access engine (`assemble`
    for nodes, docs and commits, `memory` for memories, experiences and values; a state
    source is the run's own and passes). The stores already applied the default rule's
    labels in their queries; this is where a per-resource engine (Cedar, OPA) decides,
    and every decision is an ACCESS event."""
    from runtime.governance.access_policy import Resource

    def resource(c: Any) -> Resource:
        fields = c.fields or {}
        labels = fields.get("labels") or ()
        repo, _, snap = str(c.origin or "").partition("::")
        return Resource(
            id=str(c.id),
            type="memory" if c.kind in MEMORY_KINDS else "node",
            repository=repo or None,
            snapshot=snap or None,
            path=c.path or None,
            kind=str(fields.get("node_kind") or c.kind),
            labels=tuple(sorted(str(x) for x in labels))
            if isinstance(labels, list | tuple)
            else (),
        )

    out: dict[str, list[Any]] = {}
    for name, items in found.items():
        kept: list[Any] = []
        for action in ("assemble", "memory"):
            chosen = [
                c
                for c in items
                if c.kind != "state" and (c.kind in MEMORY_KINDS) == (action == "memory")
            ]
            if not chosen:
                continue
            allowed, ledger = filter_allowed(ctx, action, chosen, resource)
            ctx.trace("ACCESS", source=name, **ledger.event())
            kept += allowed
        ok = {id(c) for c in kept}
        passed = [c for c in items if c.kind == "state" or id(c) in ok]
        out[name] = passed
    return out
