"""The access policy: may this subject do this action on this resource (docs/access.md).

One protocol, `AccessEngine`, decides per (subject, action, resource) for every read of
indexed or stored content: `search`, `expand`, `fetch`, `rehydrate`, `assemble`,
`memory`, `inspect`. Engines are chosen in `settings.access.engine`: `builtin` (the
default rule, below), `cedar` (cedarpy, embedded), `opa` (OPA's data API over HTTP), or
a third-party engine registered in the `step_runtime.access_engines` entry-point group
(a class taking the `settings.access` mapping and the pipeline's folder).

The default rule (`builtin`): a resource's labels must all be in the subject's
clearance, within the labels the settings pin (and the run's `allowed_labels` input
narrows); a resource labelled `tenant:X` is visible only to a subject of tenant X.
Deny by default: a resource with a label no rule grants is denied. The built-in engine
is `per_resource = False`: its rule is a set of visible labels (`visible_labels`) that
the node store applies inside its SQL and FTS5 query, so a denied node is never read.
A per-resource engine (Cedar, OPA) is asked about each candidate by the store layer
before anything leaves it (runtime/retrieval/policed.py).

An engine that fails (unreachable, an error, an answer of the wrong shape) denies every
resource it was asked about, with ACCESS_ENGINE_FAILED in the decision; it never
allows. Every decision has an id (stable: the same run decides the same ids) and a
reason; reasons name labels and rules, never a resource's text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.governance.subject import TENANT_PREFIX, Subject, tenant_label

ACTIONS = ("search", "expand", "fetch", "rehydrate", "assemble", "memory", "inspect")
ENTRY_POINT_GROUP = "step_runtime.access_engines"
BUILTIN_ENGINES = ("builtin", "cedar", "opa")


@dataclass(frozen=True)
class Resource:
    """Something a subject may read: a node, a stored original, a memory."""

    id: str
    type: str = "node"
    repository: str | None = None
    snapshot: str | None = None
    path: str | None = None
    kind: str | None = None
    labels: tuple[str, ...] = ()

    @property
    def tenants(self) -> tuple[str, ...]:
        """The tenants its labels name (normally none or one)."""
        return tuple(
            sorted(x[len(TENANT_PREFIX) :] for x in self.labels if x.startswith(TENANT_PREFIX))
        )

    def to_dict(self) -> dict[str, Any]:
        """The attributes a policy sees (no text, ever)."""
        tenants = self.tenants
        return {
            "id": self.id,
            "type": self.type,
            "repository": self.repository,
            "snapshot": self.snapshot,
            "path": self.path,
            "kind": self.kind,
            "labels": sorted(x for x in self.labels if not x.startswith(TENANT_PREFIX)),
            "tenant": tenants[0] if len(tenants) == 1 else None,
            "tenants": list(tenants),
        }


@dataclass(frozen=True)
class Decision:
    """One access decision: its id, the engine, allow or deny, and why."""

    id: str
    engine: str
    action: str
    allowed: bool
    reason: str
    resource: str | None = None  # None: a decision applied in the store query as a whole
    code: str | None = None  # ACCESS_ENGINE_FAILED when the engine could not decide

    def to_dict(self) -> dict[str, Any]:
        """The record written to the trace, the context pack and the ledger."""
        out: dict[str, Any] = {
            "id": self.id,
            "engine": self.engine,
            "action": self.action,
            "effect": "allow" if self.allowed else "deny",
            "reason": self.reason,
        }
        if self.resource is not None:
            out["resource"] = self.resource
        if self.code is not None:
            out["code"] = self.code
        return out


def decision_id(engine: str, subject: Subject | str, action: str, key: str, allowed: bool) -> str:
    """A stable id: the same subject, action, resource and effect give the same id
    (subject: the Subject, or its digest computed once for a batch)."""
    digest = subject if isinstance(subject, str) else subject.digest()
    text = "\x1f".join((engine, digest, action, key, "allow" if allowed else "deny"))
    return "acc-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def visible_labels(subject: Subject, pinned: Iterable[str] | None) -> tuple[str, ...]:
    """The labels the default rule lets the subject see: its clearance within the pins,
    plus its own tenant's label (a tenant label is never granted by a pin or clearance)."""
    clearance = set(subject.clearance)
    if pinned is not None:
        clearance &= set(pinned)
    clearance = {x for x in clearance if not x.startswith(TENANT_PREFIX)}
    if subject.tenant:
        clearance.add(tenant_label(subject.tenant))
    return tuple(sorted(clearance))


def default_rule(
    subject: Subject, resource: Resource, pinned: Iterable[str] | None
) -> tuple[bool, str]:
    """(allowed, reason) of the default rule for one resource."""
    pins = None if pinned is None else set(pinned)
    seen = set(visible_labels(subject, pins))
    for label in sorted(resource.labels):
        if label in seen:
            continue
        if label.startswith(TENANT_PREFIX):
            who = f"tenant {subject.tenant!r}" if subject.tenant else "no tenant"
            return False, f"labelled for another tenant; the subject has {who}"
        if pins is not None and label not in pins:
            return False, f"label {label!r} is not within the labels the settings pin"
        return False, f"label {label!r} is not in the subject's clearance"
    return True, "every label is in the subject's clearance" if resource.labels else "unlabelled"


class AccessEngine(Protocol):
    """Decides access per (subject, action, resource); never allows on failure."""

    name: str
    # False: the rule is the set of visible labels the store applies in its query.
    per_resource: bool

    def decide(
        self,
        subject: Subject,
        action: str,
        resources: Sequence[Resource],
        pinned: tuple[str, ...] | None,
    ) -> list[Decision]:
        """One decision per resource, in order; a failure denies each with a code."""
        ...


class BuiltinEngine:
    """The default rule; the store applies it in its query (see visible_labels)."""

    name = "builtin"
    per_resource = False

    def __init__(self, config: Mapping[str, Any] | None = None, base_dir: str = ".") -> None:
        self.config = dict(config or {})

    def decide(
        self,
        subject: Subject,
        action: str,
        resources: Sequence[Resource],
        pinned: tuple[str, ...] | None,
    ) -> list[Decision]:
        """The default rule for each resource."""
        out = []
        for r in resources:
            ok, reason = default_rule(subject, r, pinned)
            out.append(
                Decision(
                    decision_id(self.name, subject, action, r.id, ok),
                    self.name,
                    action,
                    ok,
                    reason,
                    r.id,
                )
            )
        return out


def query_decision(engine: str, subject: Subject, action: str, labels: Sequence[str]) -> Decision:
    """The decision a store query carries out: nodes whose labels are all in `labels`."""
    shown = ", ".join(labels) if labels else "none"
    return Decision(
        decision_id(engine, subject, action, "query:" + "+".join(labels), True),
        engine,
        action,
        True,
        f"default rule in the store query: labels within [{shown}]",
    )


def failed(
    engine: str, subject: Subject, action: str, resources: Sequence[Resource], why: str
) -> list[Decision]:
    """Every resource denied because the engine could not decide (never allowed)."""
    reason = f"policy engine failed: {why}"[:200]
    return [
        Decision(
            decision_id(engine, subject, action, r.id, False),
            engine,
            action,
            False,
            reason,
            r.id,
            "ACCESS_ENGINE_FAILED",
        )
        for r in resources
    ]


@dataclass
class Ledger:
    """The decisions a read made: allowed ones by id, denied ones counted, never listed
    with text (the per-read record a trace event carries)."""

    engine: str
    action: str
    allowed: list[Decision] = field(default_factory=list)
    denied: int = 0
    denied_reasons: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)  # ACCESS_ENGINE_FAILED messages
    query: Decision | None = None
    by_query: list[str] = field(default_factory=list)  # resources the query decision admitted

    def add(self, decisions: Iterable[Decision]) -> None:
        """Count decisions in."""
        for d in decisions:
            if d.allowed:
                self.allowed.append(d)
            else:
                self.denied += 1
                self.denied_reasons[d.reason] = self.denied_reasons.get(d.reason, 0) + 1
                if d.code and d.reason not in self.failures:
                    self.failures.append(d.reason)

    def admitted(self) -> dict[str, str]:
        """resource id -> the id of the decision that admitted it."""
        out = {d.resource: d.id for d in self.allowed if d.resource is not None}
        if self.query is not None:
            out.update(dict.fromkeys(self.by_query, self.query.id))
        return out

    def event(self) -> dict[str, Any]:
        """The ACCESS trace event's fields."""
        out: dict[str, Any] = {
            "engine": self.engine,
            "action": self.action,
            "allowed": len(self.allowed) + len(self.by_query),
            "denied": self.denied,
            "denied_reasons": dict(sorted(self.denied_reasons.items())),
            "decisions": [d.to_dict() for d in self.allowed[:200]]
            + ([self.query.to_dict()] if self.query else []),
        }
        if self.failures:
            out["code"] = "ACCESS_ENGINE_FAILED"
            out["failures"] = self.failures[:5]
        return out


def config_problems(config: Any) -> Iterable[tuple[str, tuple[str, ...]]]:
    """(message, path) for a `settings.access` mapping that cannot be used (shape only)."""
    if config is None:
        return
    if not isinstance(config, Mapping):
        yield "settings.access must be a mapping", ()
        return
    engine = config.get("engine", "builtin")
    if engine == "cedar" and not config.get("policies"):
        yield "the cedar engine needs `policies`: a .cedar file", ("engine",)
    if engine == "opa" and not config.get("url"):
        yield (
            "the opa engine needs `url`: OPA's data API, http://host:port/v1/data/...",
            ("engine",),
        )


def canonical(value: Any) -> str:
    """Compact sorted JSON (what an HTTP engine is sent)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
