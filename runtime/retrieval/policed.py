"""The node store as one subject may read it: the access policy applied in the store layer.

`AccessView(store, engine, subject, pinned, base)` has the store's reads (`search`,
`get_nodes`, `edges`) without a scope argument of the caller's choosing:

- the built-in engine's rule is a set of visible labels (access_policy.visible_labels),
  applied inside the store's SQL and FTS5 query: a denied node is never read out of
  SQLite, never ranked, never counted in what is returned. The view counts what the
  rule hid for the trace with SQL counts under the wider scope (a number, no rows);
- a per-resource engine (Cedar, OPA, a plugin) is asked about every candidate before it
  leaves this layer; search over-fetches (`overfetch` times top_k, growing until top_k
  allowed hits are found or the ranking runs out), so top_k stays full. The store query
  still applies repository, snapshot and the labels the settings pin.

Each read appends a `Ledger` (allowed decisions by id, denied ones counted) to `ledgers`;
the caller writes them to the trace (actions/_scope.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.governance.access_policy import (
    AccessEngine,
    Ledger,
    Resource,
    query_decision,
    visible_labels,
)
from runtime.governance.subject import TENANT_PREFIX, Subject
from runtime.retrieval.node import Node, Scope

DEFAULT_OVERFETCH = 4
MAX_WINDOW = 4096  # candidates asked for at most in one search (then the ranking is cut)


def resource_of(node: Node) -> Resource:
    """The attributes of a node a policy decides on (never its text)."""
    return Resource(
        id=node.id,
        type="node",
        repository=node.repository,
        snapshot=node.snapshot,
        path=node.path,
        kind=node.kind,
        labels=tuple(sorted(node.labels or ())),
    )


class AccessView:
    """Reads of a node store under one subject and engine; see the module docstring."""

    def __init__(
        self,
        store: Any,
        engine: AccessEngine,
        subject: Subject,
        pinned: tuple[str, ...] | None,
        base: Scope,
        *,
        overfetch: int = DEFAULT_OVERFETCH,
    ) -> None:
        self.store, self.engine, self.subject, self.pinned = store, engine, subject, pinned
        self.overfetch = max(1, overfetch)
        self.ledgers: list[Ledger] = []
        held = self._held_labels()
        # What the store query itself may return: the pins hold under every engine.
        wide = held if pinned is None else {x for x in held if x in pinned}
        wide |= {x for x in held if x.startswith(TENANT_PREFIX)}
        self.candidates = Scope(base.repository, base.snapshot, tuple(sorted(wide)))
        if engine.per_resource:
            self.scope = self.candidates
        else:
            self.scope = Scope(base.repository, base.snapshot, visible_labels(subject, pinned))

    def _held_labels(self) -> set[str]:
        labels = getattr(self.store, "index_labels", None)
        return set(labels()) if labels is not None else set()

    def _ledger(self, action: str) -> Ledger:
        ledger = Ledger(self.engine.name, action)
        if not self.engine.per_resource:
            ledger.query = query_decision(
                self.engine.name, self.subject, action, self.scope.allowed_labels or ()
            )
        self.ledgers.append(ledger)
        return ledger

    def _hidden(self, ledger: Ledger, count: Any) -> None:
        """The built-in rule's denied count: the wider scope's count minus the visible one."""
        if self.candidates == self.scope:
            return
        self._denied(ledger, max(0, int(count(self.candidates)) - int(count(self.scope))))

    @staticmethod
    def _denied(ledger: Ledger, hidden: int) -> None:
        """Count `hidden` nodes in as denied by the default rule in the store query."""
        if hidden:
            ledger.denied += hidden
            reason = "hidden in the store query by the default rule"
            ledger.denied_reasons[reason] = ledger.denied_reasons.get(reason, 0) + hidden

    def _allowed_nodes(
        self, action: str, nodes: dict[str, Node], ledger: Ledger
    ) -> dict[str, Node]:
        decisions = self.engine.decide(
            self.subject, action, [resource_of(n) for n in nodes.values()], self.pinned
        )
        ledger.add(decisions)
        ok = {d.resource for d in decisions if d.allowed}
        return {nid: n for nid, n in nodes.items() if nid in ok}

    # --- the store's reads ----------------------------------------------------------
    def search(self, query: str, *, top_k: int, **kw: Any) -> list[dict[str, Any]]:
        """Ranked hits the subject may see, top_k of them while the ranking has them."""
        ledger = self._ledger("search")
        if not self.engine.per_resource:
            hits = self.store.search(query, scope=self.scope, top_k=top_k, **kw)
            hidden = getattr(self.store, "count_hidden", None)
            count = getattr(self.store, "count_matches", None)
            if hidden is not None and self.candidates != self.scope:
                # One count of the label sets only the wider scope admits (nodestore).
                self._denied(ledger, hidden(query, wide=self.candidates, narrow=self.scope))
            elif count is not None:
                self._hidden(ledger, lambda s: count(query, scope=s))
            ledger.by_query = [h["id"] for h in hits]
            return list(hits)
        window = max(top_k, top_k * self.overfetch)
        decided: dict[str, bool] = {}
        while True:
            hits = self.store.search(query, scope=self.scope, top_k=window, **kw)
            fresh = [h["id"] for h in hits if h["id"] not in decided]
            fresh += [
                c
                for h in hits
                for c in h.get("children") or ()
                if c not in decided and c not in fresh
            ]
            if fresh:
                nodes = self.store.get_nodes(fresh, scope=self.scope)
                allowed = self._allowed_nodes("search", nodes, ledger)
                decided.update({nid: nid in allowed for nid in fresh})
            kept = [h for h in hits if decided.get(h["id"])]
            if len(kept) >= top_k or len(hits) < window or window >= MAX_WINDOW:
                break
            window = min(MAX_WINDOW, window * 4)
        out = []
        for rank, h in enumerate(kept[:top_k], 1):
            hit = {**h, "rank": rank}
            if h.get("children"):
                hit["children"] = [c for c in h["children"] if decided.get(c)]
                if not hit["children"]:
                    del hit["children"]
            out.append(hit)
        return out

    def get_nodes(self, ids: Sequence[str], *, action: str = "fetch") -> dict[str, Node]:
        """The nodes among ids the subject may see."""
        ledger = self._ledger(action)
        if not self.engine.per_resource:
            nodes = self.store.get_nodes(ids, scope=self.scope)
            count = getattr(self.store, "count_nodes", None)
            if count is not None:
                self._hidden(ledger, lambda s: count(ids, scope=s))
            ledger.by_query = list(nodes)
            return dict(nodes)
        nodes = self.store.get_nodes(ids, scope=self.scope)
        return self._allowed_nodes(action, nodes, ledger)

    def edges(
        self,
        ids: Sequence[str],
        *,
        direction: str = "out",
        edge_types: Sequence[str] | None = None,
    ) -> list[tuple[str, str, str]]:
        """Edges around ids the subject may see whose far end it may see too (a denied node
        is never walked through, nor from: its edges would say what it reads and writes)."""
        # The stores check only the far end: the near ends are read (and decided) first, so a
        # denied id named by a caller (state a model wrote, an inbox payload) yields nothing.
        seen = self.get_nodes(list(dict.fromkeys(ids)), action="expand")
        ids = [i for i in dict.fromkeys(ids) if i in seen]
        if not ids:
            return []
        ledger = self._ledger("expand")
        found = self.store.edges(ids, scope=self.scope, direction=direction, edge_types=edge_types)
        if not self.engine.per_resource:
            count = getattr(self.store, "count_edges", None)
            if count is not None:
                self._hidden(
                    ledger,
                    lambda s: count(ids, scope=s, direction=direction, edge_types=edge_types),
                )
            near = set(ids)
            ledger.by_query = sorted({t if f in near else f for f, t, _ in found} - near)
            return list(found)
        near = set(ids)
        far = sorted({t if f in near else f for f, t, _ in found} - near)
        nodes = self.store.get_nodes(far, scope=self.scope)
        allowed = set(self._allowed_nodes("expand", nodes, ledger)) | near
        return [e for e in found if e[0] in allowed and e[1] in allowed]
