"""A model call shown an assemble_context pack: its memory section holds the pack's
memories, experiences and values (source, score, labels, reason), its knowledge section the
pack's code and docs, and what the assembly left out or cut is in the drop report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runtime.context.tokens import get_counter
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline
from runtime.retrieval.memories import SqliteMemoryStore

NOW = datetime(2026, 11, 1, tzinfo=UTC)
FILLER = " ".join(f"word{i}" for i in range(400))  # long enough to be cut to the item cap


@pytest.fixture
def memories(tmp_path: Path) -> SqliteMemoryStore:
    store = SqliteMemoryStore(str(tmp_path / "m.db"), create=True, embedder=None)
    store.remember(
        [
            {
                "id": "m-cancel",
                "type": "semantic",
                "labels": [],
                "importance": 0.9,
                "text": "Orders are cancelled by usp_CancelOrder, never deleted.",
            },
            {
                "id": "m-audit",
                "type": "procedural",
                "labels": ["internal"],
                "text": "Cancelled orders keep their lines; the audit trigger writes two rows.",
            },
            {
                "id": "m-long",
                "type": "episodic",
                "labels": [],
                "text": "A long note about cancelling orders: " + FILLER,
            },
        ],
        now=NOW - timedelta(days=1),
    )
    store.record_experiences(
        [
            {
                "id": "e-bulk",
                "domain": "orders",
                "strategy": "retry",
                "labels": [],
                "goal": "Cancel orders in bulk",
                "outcome_status": "failure",
                "lesson": "Lock the order rows first.",
            },
        ],
        now=NOW,
    )
    return store


BUDGET = 500  # small enough that items go over budget and long ones are cut
SOURCES = [
    {"name": "code", "kind": "code", "query_from": "question", "max_items": 2, "item_cap": 0.9},
    {"name": "decisions", "kind": "memories", "query_from": "question", "weight": 2},
    {"name": "earlier", "kind": "experiences", "axis": "full", "query_from": "question"},
    {"name": "mine", "kind": "state", "from": "notes", "max_items": 1},
    # short notes that each fit the cap but not all the budget: some go over budget
    {"name": "bulk", "kind": "state", "from": "bulk", "max_items": 8, "item_cap": 1.0},
]
BULK = [
    {
        "id": f"b{i}",
        "text": f"Bulk note {i} on cancelling: " + " ".join(["orders"] * 20),
        "score": 1 - i / 10,
        "metadata": {},
    }
    for i in range(8)
]
NOTES = [
    # the same fact as m-cancel: a duplicate, dropped (the memory ranks first)
    {
        "id": "n1",
        "text": "Orders are cancelled by usp_CancelOrder, never deleted.",
        "score": 1.0,
        "metadata": {"labels": ["internal"]},
    },
    {"id": "n2", "text": "A second note past max_items.", "score": 0.5, "metadata": {}},
]


def run(tmp_path, index, memory_store, *, max_tokens: int = 1200, part: str | None = None):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer from the context.\n")
    settings = {
        "entry_step_id": "a",
        "models": {"small": {"provider": "extractive", "context_window": 8192}},
    }
    steps = [
        {
            "id": "a",
            "action": "assemble_context",
            "max_tokens": max_tokens,
            "sources": SOURCES,
            "next": "ask",
        },
        {
            "id": "ask",
            "action": "call_model",
            "prompt_key": "sys",
            "model": "small",
            "user_parts": {
                "q": {"source": "question", "template": "Question: {}"},
                "context": {"source": part or "assembled_context_markdown"},
            },
            "next": "f",
        },
        {"id": "f", "action": "finalize", "source": "last_model_response"},
    ]
    p = Pipeline.from_dict({"settings": settings, "steps": steps}, file=str(tmp_path / "p.yaml"))
    services = Services(
        settings=p.settings, base_dir=str(tmp_path), node_store=index, memory_store=memory_store
    )
    inputs: dict[str, Any] = {
        "question": "cancel orders usp_CancelOrder",
        "notes": NOTES,
        "bulk": BULK,
        "repository": "eshop",
        "allowed_labels": ["internal"],
        "notes_markdown": "Notes written by hand.",
        # a record's shape, but not the markdown the part reads: not an assembly's
        "other": {
            "markdown": "else",
            "items": [{"id": "memory:x", "kind": "memory"}],
            "dropped": [],
        },
        "other_markdown": "Notes written by hand.",
    }
    r = Engine(p, services=services).run(inputs, run_id="t")
    assert r.status == "completed", r.error
    return r


def section(pack: dict[str, Any], kind: str) -> dict[str, Any]:
    [s] = [s for s in pack["sections"] if s["type"] == kind]
    return s


def test_the_memory_section_holds_the_packs_memories_with_source_score_labels_reason(
    tmp_path, sample_index, memories
):
    r = run(tmp_path, sample_index, memories)
    record = r.state["assembled_context"]
    [pack] = r.packs
    memory = section(pack, "memory")
    by_id = {i["id"]: i for i in memory["items"]}
    wanted = {i["id"]: i for i in record["items"] if i["kind"] in ("memory", "experience")}
    assert set(by_id) == set(wanted) and {"memory:m-cancel", "experience:e-bulk"} <= set(by_id)
    audit = by_id.get("memory:m-audit")
    assert audit is not None and audit["labels"] == ["internal"]  # read from the store
    for iid, item in by_id.items():
        assert item["source"] == f"assembly:{wanted[iid]['source']}"
        assert item["score"] == wanted[iid]["score"] and item["tokens"] == wanted[iid]["tokens"]
        assert item["reason"].startswith(f"assembled from source {wanted[iid]['source']!r}")
        assert item["location"] == wanted[iid]["location"]
    assert by_id["memory:m-cancel"]["labels"] == []
    # Code and state items go to knowledge; the headings and footer count with the memory.
    knowledge = section(pack, "knowledge")
    others = {i["id"]: i for i in record["items"] if i["kind"] not in ("memory", "experience")}
    assert {"code", "state"} <= {i["kind"] for i in others.values()}
    assert {i["id"] for i in knowledge["items"]} == set(others)
    for item in knowledge["items"]:
        assert item["source"] == f"assembly:{others[item['id']]['source']}"
    code = [i for i in knowledge["items"] if others[i["id"]]["kind"] == "code"]
    assert all(i["labels"] == [] for i in code)  # the nodes' labels, read with them
    total = get_counter().count(record["markdown"])
    assert memory["tokens"] + knowledge["tokens"] == total
    assert memory["tokens"] > sum(i["tokens"] for i in memory["items"])  # headings, footer
    assert memory["reason"] == "the assembled context in assembled_context_markdown"


def test_the_assemblys_drops_are_in_the_packs_drop_report(tmp_path, sample_index, memories):
    r = run(tmp_path, sample_index, memories, max_tokens=BUDGET)
    record = r.state["assembled_context"]
    assert {d["reason"] for d in record["dropped"]} >= {"over budget", "max_items"}
    [pack] = r.packs
    drops = {d["id"]: d for d in pack["drops"]["items"] if d.get("by") == "assemble_context"}
    reasons = {d["reason"] for d in drops.values()}
    assert {"duplicate", "budget_skip", "per_item_cap"} <= reasons, drops
    dup = drops["n1"]
    assert dup["reason"] == "duplicate" and dup["source"] == "mine"
    assert dup["note"].startswith("duplicate of memory:m-cancel (decisions)")
    assert drops["n2"]["reason"] == "budget_skip" and drops["n2"]["note"] == "max_items"
    for d in record["dropped"]:
        assert d["id"] in drops and drops[d["id"]]["tokens_saved"] == d["tokens"]
        if d["reason"] == "over budget":
            assert drops[d["id"]]["reason"] == "budget_skip"
    cut = [i for i in record["items"] if i["truncated"]]
    assert cut and all(drops[i["id"]]["shortened"] is True for i in cut)
    assert all(drops[i["id"]]["reason"] == "per_item_cap" for i in cut)
    item = {i["id"]: i for s in pack["sections"] for i in s["items"]}
    assert all(item[i["id"]]["truncated"] is True for i in cut)


@pytest.mark.parametrize("part", ["notes_markdown", "other_markdown"])
def test_a_part_that_is_not_an_assemblys_markdown_is_not_read_as_one(
    tmp_path, sample_index, memories, part
):
    r = run(tmp_path, sample_index, memories, part=part)
    [pack] = r.packs
    assert section(pack, "memory")["items"] == []
    assert not [d for d in pack["drops"]["items"] if d.get("by") == "assemble_context"]
    assert "user_parts.context" in {i["id"] for i in section(pack, "user")["items"]}
