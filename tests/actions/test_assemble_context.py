"""assemble_context through the engine: the indexed sample, a real SQLite memory store."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runtime.context.tokens import get_counter
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.errors import PipelineInvalidError, StoreError
from runtime.format.pipeline import Pipeline
from runtime.format.validation import load_pipeline
from runtime.retrieval.memories import SqliteMemoryStore

END = {"id": "end", "action": "finalize", "source": "assembled_context_markdown"}
SCOPE = {"repository": "eshop", "snapshot": "main"}
NOW = datetime(2026, 11, 1, tzinfo=UTC)


def memory(text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "semantic", "text": text, "labels": [], **extra}


def experience(goal: str, **extra: Any) -> dict[str, Any]:
    return {
        "domain": "orders",
        "strategy": "retry",
        "goal": goal,
        "outcome_status": "failure",
        "labels": [],
        **extra,
    }


@pytest.fixture
def memories(tmp_path: Path) -> SqliteMemoryStore:
    store = SqliteMemoryStore(str(tmp_path / "m.db"), create=True, embedder=None)
    store.remember(
        [
            memory("Orders are cancelled by usp_CancelOrder, never deleted.", id="m-cancel"),
            memory(
                "Payment capture details are confidential.", id="m-secret", labels=["confidential"]
            ),
            memory(
                "Order totals in the other shop are computed in cents.",
                id="m-other",
                scope={"repository": "other"},
            ),
            memory("An old note about orders that expired.", id="m-expired", ttl_seconds=60),
        ],
        now=NOW - timedelta(days=1),
    )
    store.record_experiences(
        [
            experience("Cancel orders in bulk", id="e-bulk", lesson="Lock the order rows first."),
            experience("Refund orders", id="e-refund", outcome_status="success", strategy="queue"),
        ],
        now=NOW,
    )
    return store


def run(index, steps, inputs=None, memory_store=None, **settings: Any):
    settings = {"entry_step_id": steps[0]["id"], **settings}
    p = Pipeline.from_dict({"settings": settings, "steps": [*steps, END]})
    services = Services(settings=settings, node_store=index, memory_store=memory_store)
    return Engine(p, services=services).run(
        {"question": "cancel orders", **(inputs or {})}, run_id="t"
    )


def step(**kw: Any) -> dict[str, Any]:
    return {"id": "a", "action": "assemble_context", "max_tokens": 1500, "next": "end", **kw}


ALL = [
    {"name": "code", "kind": "code", "weight": 2},
    {"name": "docs", "kind": "docs"},
    {"name": "decisions", "kind": "memories"},
    {"name": "earlier", "kind": "experiences", "axis": "full"},
]


def test_one_pack_from_several_kinds_with_its_record_and_event(sample_index, memories):
    r = run(sample_index, [step(sources=ALL)], SCOPE, memories)
    rec = r.state["assembled_context"]
    md = r.state["assembled_context_markdown"]
    assert rec["markdown"] == md and rec["token_count"] == get_counter().count(md) <= 1500
    assert {"code", "decisions", "earlier"} <= set(rec["sources_used"])
    kinds = {i["kind"] for i in rec["items"]}
    assert {"code", "memory", "experience"} <= kinds
    assert "## decisions (memories)" in md and "usp_CancelOrder, never deleted" in md
    [ev] = [e for e in r.events if e["type"] == "ASSEMBLE_CONTEXT"]
    assert ev["token_count"] == rec["token_count"] and ev["items"] == len(rec["items"])
    assert ev["dropped"] == len(rec["dropped"]) and ev["sources_used"] == rec["sources_used"]
    for item in rec["items"]:
        assert set(item) >= {"id", "source", "score", "tokens", "truncated", "location"}


def test_scope_and_labels_hold_for_every_source(sample_index, memories):
    sources = [
        {
            "name": "code",
            "kind": "code",
            "query": "usp_CapturePayment payment capture",
            "max_items": 20,
        },
        {"name": "decisions", "kind": "memories", "query": "payment orders confidential"},
    ]
    plain = run(sample_index, [step(sources=sources)], SCOPE, memories)["state"] if False else None
    r = run(sample_index, [step(sources=sources, max_tokens=6000)], SCOPE, memories)
    ids = [i["id"] for i in r.state["assembled_context"]["items"]]
    assert "eshop::main::procedure::dbo.usp_CapturePayment" not in ids
    assert "memory:m-secret" not in ids and "memory:m-other" not in ids
    allowed = run(
        sample_index,
        [step(sources=sources, max_tokens=6000)],
        {**SCOPE, "allowed_labels": ["confidential"]},
        memories,
    )
    ids = [i["id"] for i in allowed.state["assembled_context"]["items"]]
    assert "eshop::main::procedure::dbo.usp_CapturePayment" in ids and "memory:m-secret" in ids
    other = run(sample_index, [step(sources=sources)], {"repository": "other"}, memories)
    ids = [i["id"] for i in other.state["assembled_context"]["items"]]
    assert not any(i.startswith("eshop::") for i in ids)
    del plain


def test_expired_memories_never_come_back(sample_index, memories):
    r = run(
        sample_index,
        [step(sources=[{"name": "m", "kind": "memories", "query": "old note orders"}])],
        SCOPE,
        memories,
    )
    assert "memory:m-expired" not in [i["id"] for i in r.state["assembled_context"]["items"]]


def test_filters_narrow_and_never_widen(sample_index, memories):
    src = [
        {
            "name": "code",
            "kind": "code",
            "query": "orders",
            "filters": {"language": ["sql", "python"]},
            "max_items": 20,
        }
    ]
    r = run(sample_index, [step(sources=src, max_tokens=8000)], SCOPE, memories)
    nodes = sample_index.get_nodes(
        [i["id"] for i in r.state["assembled_context"]["items"]],
        scope=__import__("runtime.retrieval.node", fromlist=["Scope"]).Scope(
            allowed_labels=("confidential",)
        ),
    )
    assert nodes and {n.language for n in nodes.values()} == {"sql"}
    docs = [{"name": "d", "kind": "docs", "query": "orders", "filters": {"kind": "procedure"}}]
    r = run(sample_index, [step(sources=docs)], SCOPE, memories)
    assert r.state["assembled_context"]["items"] == []  # docs ∩ procedure: nothing


def test_a_state_source_and_dedup_against_the_index(sample_index, memories):
    earlier = [
        {
            "id": "eshop::main::procedure::dbo.usp_CancelOrder",
            "text": "the proc",
            "score": 9,
            "metadata": {},
        },
        {
            "id": "note-1",
            "text": "Orders are cancelled by usp_CancelOrder, never deleted!",
            "score": 1,
            "metadata": {},
        },
    ]
    sources = [
        {"name": "code", "kind": "code", "query": "usp_CancelOrder"},
        {"name": "decisions", "kind": "memories", "query": "cancelled orders"},
        {"name": "mine", "kind": "state", "from": "earlier_items", "weight": 0.5},
    ]
    r = run(
        sample_index,
        [step(sources=sources, max_tokens=4000)],
        {**SCOPE, "earlier_items": earlier},
        memories,
    )
    rec = r.state["assembled_context"]
    ids = [(i["id"], i["source"]) for i in rec["items"]]
    assert len({i for i, _ in ids}) == len(ids)
    reasons = {d["id"]: d["reason"] for d in rec["dropped"]}
    assert (
        "same id" in reasons["eshop::main::procedure::dbo.usp_CancelOrder"]
        or ("eshop::main::procedure::dbo.usp_CancelOrder", "mine") in ids
    )
    assert "text similarity" in reasons.get("note-1", reasons.get("memory:m-cancel", ""))


class Failing:
    def search_memories(self, *a: Any, **k: Any) -> list[Any]:
        raise StoreError("memories.db is damaged", code="MEMORY_STORE_ERROR")

    search_experiences = search_values = search_memories


class Slow:
    def __init__(self) -> None:
        self.release = threading.Event()

    def search_memories(self, *a: Any, **k: Any) -> list[Any]:
        self.release.wait(30)
        return []

    search_experiences = search_values = search_memories


@pytest.mark.parametrize("kind", ["failing", "slow"])
def test_a_failing_or_slow_source_is_a_warning_and_the_others_assemble(sample_index, kind):
    store = Failing() if kind == "failing" else Slow()
    try:
        r = run(sample_index, [step(sources=ALL, timeout_seconds=0.5)], SCOPE, store)
    finally:
        if isinstance(store, Slow):
            store.release.set()
    rec = r.state["assembled_context"]
    assert "code" in rec["sources_used"] and "decisions" not in rec["sources_used"]
    warned = [e for e in r.events if e["type"] == "ASSEMBLY_SOURCE_FAILED"]
    assert {e["source"] for e in warned} == {"decisions", "earlier"}
    code = "MEMORY_STORE_ERROR" if kind == "failing" else "ASSEMBLY_SOURCE_TIMEOUT"
    assert {e["code"] for e in warned} == {code}
    assert {w["source"] for w in rec["warnings"]} == {"decisions", "earlier"}
    statuses = {s["name"]: s["status"] for s in rec["sources"]}
    assert statuses["code"] == "ok" and statuses["decisions"] == (
        "failed" if kind == "failing" else "timeout"
    )


def test_all_sources_empty_is_an_empty_pack_not_an_error(sample_index, memories):
    src = [
        {"name": "m", "kind": "memories", "query": "zzqqxx"},
        {"name": "c", "kind": "code", "query": "zzqqxx"},
    ]
    r = run(sample_index, [step(sources=src)], SCOPE, memories)
    rec = r.state["assembled_context"]
    assert r.status == "completed" and rec["markdown"] == "" and rec["items"] == []


def test_the_same_run_twice_gives_the_same_pack(sample_index, memories):
    a = run(sample_index, [step(sources=ALL)], SCOPE, memories, assembly_now="2026-11-02T00:00:00Z")
    b = run(sample_index, [step(sources=ALL)], SCOPE, memories, assembly_now="2026-11-02T00:00:00Z")
    assert a.state["assembled_context"] == b.state["assembled_context"]


def test_premortem_gathers_the_five_sections(sample_index, memories):
    memories.record_experiences(
        [
            experience(
                "Cancel with a long transaction",
                id="e-long",
                strategy="single transaction",
                prediction="no deadlocks",
                surprise="deadlocks with the payment capture job",
                outcome_result="timeouts under load",
                error_code="MODEL_TIMEOUT",
                lesson="Keep cancellation transactions short.",
                confidence_tier="gold",
            )
        ],
        now=NOW,
    )
    memories.replace_values(
        [
            {
                "id": "v-short",
                "axis": "lesson",
                "text": "Keep order transactions short.",
                "cluster_size": 2,
                "similarity_to_centroid": 0.9,
                "members": ["e-long", "e-bulk"],
                "labels": [],
            }
        ]
    )
    pm = step(mode="premortem", domain="orders", max_tokens=3000)
    r = run(sample_index, [pm], SCOPE, memories)
    md = r.state["assembled_context_markdown"]
    for title in (
        "Common failures",
        "How each strategy performed",
        "Unexpected outcomes",
        "Root causes to watch",
        "Relevant values",
    ):
        assert f"## {title} (" in md, title
    assert "deadlocks with the payment capture job" in md and "strategy single transaction" in md
    ids = [i["id"] for i in r.state["assembled_context"]["items"]]
    assert len(ids) == len(set(ids))


# --- validation ----------------------------------------------------------------------------


BAD = """\
settings: {entry_step_id: a}
steps:
  - id: a
    action: assemble_context
    max_tokens: 100
    sources:
      - {name: c, kind: code}
      - {name: x, kind: gossip}
      - {name: e, kind: experiences, axis: sideways}
      - {name: c, kind: memories}
      - {name: s, kind: state}
    next: end
  - {id: end, action: finalize, source: assembled_context_markdown}
inputs:
  question: {type: string}
"""


def test_unknown_kind_and_axis_are_validation_errors_at_their_line(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(BAD)
    with pytest.raises(PipelineInvalidError) as err:
        load_pipeline(str(path))
    found = sorted(
        (d.line, d.message.split(";")[0])
        for d in err.value.diagnostics
        if d.code == "ASSEMBLY_SOURCE_INVALID"
    )
    assert found == [
        (8, "unknown source kind 'gossip'"),
        (9, "unknown axis 'sideways'"),
        (10, "source name 'c' is used twice"),
        (11, "a state source needs `from` (the list's variable)"),
    ]


def test_a_budget_is_required(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(BAD.replace("    max_tokens: 100\n", ""))
    with pytest.raises(PipelineInvalidError) as err:
        load_pipeline(str(path))
    assert "ASSEMBLY_BUDGET_MISSING" in {d.code for d in err.value.diagnostics}


def test_the_markdown_is_bounded_by_max_tokens_for_the_static_budget_unless_soft():
    from actions.assemble_context import AssembleContext

    bound = AssembleContext.output_bounds
    assert bound(step(max_tokens=700), {}) == {"assembled_context_markdown": 700}
    assert bound({"max_tokens_from_settings": "b", "output_to": "bg"}, {"b": 300}) == {
        "bg_markdown": 300
    }
    assert bound(step(markdown_to="md"), {}) == {"md": 1500}
    assert bound(step(soft=True), {}) == {}
