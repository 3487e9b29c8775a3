"""remember and record_experience: run through the engine against a real SQLite memory store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.contract.registry import default_registry
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline
from runtime.format.source import SourceMap
from runtime.format.validation import check_pipeline
from runtime.retrieval.memories import SqliteMemoryStore

END = {"id": "end", "action": "finalize", "source": "out"}


def run(
    tmp_path: Path,
    steps: list[dict[str, Any]],
    inputs: dict[str, Any] | None = None,
    **settings: Any,
) -> Any:
    settings = {"entry_step_id": steps[0]["id"], "memory_store": str(tmp_path / "m.db"), **settings}
    p = Pipeline.from_dict({"settings": settings, "steps": [*steps, END]})
    return Engine(p, services=Services(settings=settings)).run(
        {"out": "", **(inputs or {})}, run_id="run-1"
    )


def store(tmp_path: Path) -> SqliteMemoryStore:
    return SqliteMemoryStore(str(tmp_path / "m.db"), embedder=None)


def remember(**kw: Any) -> dict[str, Any]:
    return {"id": "r", "action": "remember", "next": "end", **kw}


def record(**kw: Any) -> dict[str, Any]:
    base = {"id": "x", "action": "record_experience", "next": "end", "domain": "orders"}
    return base | {"strategy": "code_qa"} | kw


def test_remember_stores_the_items_with_the_step_labels_and_the_run_scope(tmp_path: Path) -> None:
    items = [
        "Orders are never deleted, only cancelled",
        {"text": "usp_CancelOrder restores stock", "type": "procedural", "labels": ["ops"]},
    ]
    r = run(
        tmp_path,
        [remember(**{"from": "notes"}, labels=["internal"], importance=0.8, session_from="chat")],
        {"notes": items, "chat": "s-9"},
        repository="eshop",
    )
    assert r.status == "completed", r.error
    ids = r.state["remembered"]
    assert len(ids) == 2
    hits = store(tmp_path).search_memories(
        "orders cancel stock",
        limit=5,
        scope={"repository": "eshop", "session": "s-9"},
        labels=frozenset({"internal", "ops"}),
    )
    by_text = {h.text: h for h in hits}
    first = by_text["Orders are never deleted, only cancelled"]
    assert first.labels == {"internal"} and first.fields["type"] == "semantic"
    assert first.fields["importance"] == 0.8
    assert first.fields["scope"] == {"repository": "eshop", "session": "s-9"}
    assert first.fields["provenance"]["source"] == "run:run-1"
    assert by_text["usp_CancelOrder restores stock"].labels == {"internal", "ops"}
    # Not visible to a caller without every label, nor in another session.
    assert store(tmp_path).search_memories("orders", limit=5, labels=frozenset({"ops"})) == []
    assert (
        store(tmp_path).search_memories(
            "orders", limit=5, scope={"session": "s-1"}, labels=frozenset({"internal"})
        )
        == []
    )
    [event] = [e for e in r.events if e["type"] == "REMEMBERED"]
    assert event["count"] == 2 and "Orders are never" not in str(event)


def test_an_item_may_add_labels_but_never_drop_the_steps(tmp_path: Path) -> None:
    r = run(
        tmp_path,
        [remember(**{"from": "notes"}, labels=["internal"])],
        {"notes": {"text": "keys rotate monthly", "labels": []}},
    )
    assert r.status == "completed"
    [hit] = store(tmp_path).search_memories("keys", limit=3, labels=frozenset({"internal"}))
    assert hit.labels == {"internal"}
    assert store(tmp_path).search_memories("keys", limit=3) == []


def test_an_item_naming_another_repository_is_refused(tmp_path: Path) -> None:
    r = run(
        tmp_path,
        [remember(**{"from": "notes"}, labels=[])],
        {"notes": {"text": "x", "scope": {"repository": "crm"}}},
        repository="eshop",
    )
    assert r.status == "failed" and r.error.code == "SCOPE_WIDENED"
    assert not (tmp_path / "m.db").exists() or store(tmp_path).counts()["memory"] == 0


def test_a_malformed_item_fails_the_step_and_stores_nothing(tmp_path: Path) -> None:
    r = run(
        tmp_path,
        [remember(**{"from": "notes"}, labels=[])],
        {"notes": ["a good one", {"text": "bad", "importance": 7}]},
    )
    assert r.status == "failed" and r.error.code == "MEMORY_INVALID"
    assert "step 'r': notes: memory 2 field 'importance'" in r.error.message
    assert store(tmp_path).counts()["memory"] == 0
    r = run(tmp_path, [remember(**{"from": "notes"}, labels=[])], {"notes": 42})
    assert r.error.code == "MEMORY_INVALID"


def test_record_experience_from_a_parsed_reply(tmp_path: Path) -> None:
    reply = {
        "goal": "find every table usp_PlaceOrder writes",
        "hypothesis": "the procedure body lists them",
        "action": "read the procedure and its trigger",
        "prediction": "Orders and OrderLines",
        "outcome_status": "partial",
        "outcome_result": "missed OrderAudit",
        "surprise": "the audit trigger writes a table too",
        "lesson": "follow triggers",
    }
    r = run(
        tmp_path,
        [record(**{"from": "reply"}, labels=[], pipeline="code_qa", confidence_tier="silver")],
        {"reply": reply},
    )
    assert r.status == "completed", r.error
    [eid] = r.state["recorded"]
    assert eid == "run-run-1"
    [hit] = store(tmp_path).search_experiences("trigger", axis="surprise", limit=3)
    assert hit.fields["domain"] == "orders" and hit.fields["strategy"] == "code_qa"
    assert hit.fields["confidence_tier"] == "silver" and hit.fields["run_id"] == "run-1"
    assert "Lesson: follow triggers" in hit.text


def test_record_experience_from_the_question(tmp_path: Path) -> None:
    r = run(
        tmp_path,
        [record(goal_from="question", outcome_status="success", labels=["internal"])],
        {"question": "Which procedure cancels orders?"},
    )
    assert r.status == "completed", r.error
    hits = store(tmp_path).search_experiences(
        "cancels orders", limit=3, labels=frozenset({"internal"})
    )
    assert [h.fields["goal"] for h in hits] == ["Which procedure cancels orders?"]


def test_an_item_may_not_change_the_steps_domain(tmp_path: Path) -> None:
    r = run(
        tmp_path,
        [record(**{"from": "reply"}, labels=[])],
        {"reply": {"goal": "g", "outcome_status": "success", "domain": "payments"}},
    )
    assert r.status == "failed" and r.error.code == "MEMORY_INVALID"
    assert "'domain'" in r.error.message


@pytest.mark.parametrize(
    ("step", "path"),
    [
        (remember(labels=[]), "action"),
        (remember(text="x", **{"from": "v"}, labels=[]), "text"),
        (record(labels=[]), "action"),
    ],
)
def test_validation_names_the_field(step: dict[str, Any], path: str) -> None:
    doc = {"settings": {"entry_step_id": step["id"]}, "steps": [step, END]}
    diags = check_pipeline(doc, SourceMap(doc, "p.yaml"), default_registry())
    assert any(d.code == "SCHEMA_INVALID" and d.path == f"$.steps[0].{path}" for d in diags), diags


def test_labels_are_required_by_the_schema() -> None:
    step = {"id": "r", "action": "remember", "text": "x", "next": "end"}
    doc = {"settings": {"entry_step_id": "r"}, "steps": [step, END]}
    diags = check_pipeline(doc, SourceMap(doc, "p.yaml"), default_registry())
    assert any("labels" in d.message for d in diags), diags
