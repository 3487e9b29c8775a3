"""The store layer under a per-resource engine (runtime/retrieval/policed.py): candidates
over-fetched so top_k stays full, nothing denied returned, fetched or walked to; and a
third-party engine loaded from the entry-point group."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from runtime.errors import RunError
from runtime.governance import engines
from runtime.governance.access_policy import Decision, Resource, decision_id
from runtime.governance.engines import load_engine
from runtime.governance.subject import Subject, parse_subject
from runtime.retrieval.node import Node, Scope
from runtime.retrieval.nodestore import open_store
from runtime.retrieval.policed import AccessView

ACCESS = Path(__file__).resolve().parents[2] / "pipelines" / "access"
SUBJECT = parse_subject({"tenant": "a", "clearance": ["public"]})


def node(name: str, text: str, labels: list[str]) -> Node:
    return Node(
        f"r::main::procedure::{name}",
        "r",
        "main",
        "procedure",
        name,
        name,
        f"{name}.sql",
        "tsql",
        1,
        2,
        text,
        labels=labels,
    )


@pytest.fixture
def store(tmp_path):
    s = open_store(str(tmp_path / "i.db"), create=True)
    # Ten tenant b nodes say "refund" three times; three tenant a nodes once: the denied
    # ones rank first.
    for i in range(10):
        n = node(f"ShipB{i}", "refund refund refund invoice", ["public", "tenant:b"])
        s.replace_file("r", "main", n.path, str(i), [n], {"symbols": [], "deps": []})
    for i in range(3):
        n = node(f"ShipA{i}", f"refund and other words number {i}", ["public", "tenant:a"])
        s.replace_file("r", "main", n.path, f"a{i}", [n], {"symbols": [], "deps": []})
    s.replace_edges(
        "r",
        "main",
        [("r::main::procedure::ShipA0", f"r::main::procedure::ShipB{i}", "Calls") for i in range(3)]
        + [("r::main::procedure::ShipA0", "r::main::procedure::ShipA1", "Calls")],
    )
    return s


def cedar():
    return load_engine(
        {"engine": "cedar", "policies": "policy.cedar", "schema": "schema.cedarschema"}, str(ACCESS)
    )


def test_top_k_stays_full_when_the_denied_candidates_rank_first(store):
    view = AccessView(store, cedar(), SUBJECT, None, Scope("r", "main"), overfetch=1)
    hits = view.search("refund", top_k=3, per_file=0)
    assert [h["id"].rsplit("::", 1)[1] for h in hits] == ["ShipA0", "ShipA1", "ShipA2"]
    assert [h["rank"] for h in hits] == [1, 2, 3]
    [ledger] = view.ledgers
    assert ledger.denied == 10 and len(ledger.allowed) == 3
    assert "ShipB" not in str(ledger.event())


def test_fetch_and_expansion_under_a_per_resource_engine(store):
    view = AccessView(store, cedar(), SUBJECT, None, Scope("r", "main"))
    ids = ["r::main::procedure::ShipA0", "r::main::procedure::ShipB1"]
    assert list(view.get_nodes(ids)) == ["r::main::procedure::ShipA0"]
    edges = view.edges(["r::main::procedure::ShipA0"])
    assert edges == [("r::main::procedure::ShipA0", "r::main::procedure::ShipA1", "Calls")]
    # the near end is read (and decided) first: ShipA0 allowed, then 3 far ends denied
    assert [lg.denied for lg in view.ledgers] == [1, 0, 3]


@pytest.mark.parametrize("engine", ["builtin", "cedar"])
def test_edges_from_a_denied_node_a_caller_names_are_none(store, engine):
    """A denied id in state (a model's reply, an inbox payload) walks nowhere: its edges
    would say what it calls, and that it exists."""
    chosen = cedar() if engine == "cedar" else load_engine(None)
    view = AccessView(store, chosen, SUBJECT, None, Scope("r", "main"))
    denied = "r::main::procedure::ShipB1"
    store.replace_edges("r", "main", [(denied, "r::main::procedure::ShipA2", "Calls")])
    for direction in ("out", "in", "both"):
        assert view.edges([denied], direction=direction) == []
    assert view.ledgers[0].denied == 1


def test_the_builtin_view_counts_what_its_query_hid(store):
    builtin = load_engine(None)
    view = AccessView(store, builtin, SUBJECT, None, Scope("r", "main"))
    hits = view.search("refund", top_k=8, per_file=0)
    assert {h["id"].rsplit("::", 1)[1] for h in hits} == {"ShipA0", "ShipA1", "ShipA2"}
    assert view.ledgers[0].denied == 10
    assert {h["id"] for h in hits} == set(view.ledgers[0].admitted())


class AllowNone:
    """A third-party engine: allows nothing, says why."""

    name = "allow_none"
    per_resource = True

    def __init__(self, config: Any, base_dir: str = ".") -> None:
        self.config = config

    def decide(self, subject: Subject, action: str, resources: Any, pinned: Any) -> list[Decision]:
        return [
            Decision(
                decision_id(self.name, subject, action, r.id, False),
                self.name,
                action,
                False,
                "closed",
                r.id,
            )
            for r in resources
        ]


def test_a_third_party_engine_loads_from_the_entry_point_group(monkeypatch, store):
    found = [EntryPoint("allow_none", f"{__name__}:AllowNone", engines.ENTRY_POINT_GROUP)]
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: found)
    engine = load_engine({"engine": "allow_none"})
    assert engine.name == "allow_none"
    view = AccessView(store, engine, SUBJECT, None, Scope("r", "main"))
    assert view.search("refund", top_k=3) == []
    assert engine.decide(SUBJECT, "fetch", [Resource("x")], None)[0].reason == "closed"
    broken = [EntryPoint("broken", "no_such_module:Engine", engines.ENTRY_POINT_GROUP)]
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: broken)
    with pytest.raises(RunError) as info:
        load_engine({"engine": "broken"})
    assert info.value.code == "ACCESS_POLICY_INVALID" and "broken" in info.value.message
