"""assemble_context reads as the run's subject: the default rule in the stores' queries,
a per-resource engine (Cedar) deciding every item, each read an ACCESS event."""

from __future__ import annotations

from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline
from tests.actions.test_assemble_context import END, NOW, SCOPE, memories, memory, step  # noqa: F401

SOURCES = [{"name": "code", "kind": "code"}, {"name": "decisions", "kind": "memories"}]


def run(index, memory_store, subject, access=None):
    settings = {"entry_step_id": "a", **({"access": access} if access else {})}
    p = Pipeline.from_dict({"settings": settings, "steps": [step(sources=SOURCES), END]})
    services = Services(settings=settings, node_store=index, memory_store=memory_store)
    return Engine(p, services=services).run(
        {"question": "payment capture orders", **SCOPE}, run_id="t", subject=subject
    )


def ids(result):
    return {i["id"] for i in result.state["assembled_context"]["items"]}


def test_the_default_rule_holds_for_memories(sample_index, memories):  # noqa: F811
    cleared = run(sample_index, memories, {"clearance": ["confidential"]})
    anonymous = run(sample_index, memories, None)
    assert "memory:m-secret" in ids(cleared)
    assert "memory:m-secret" not in ids(anonymous)
    events = [e for e in anonymous.events if e["type"] == "ACCESS"]
    assert {e["action"] for e in events} == {"assemble", "memory"}


def test_a_cedar_policy_decides_every_assembled_item(sample_index, memories, tmp_path):  # noqa: F811
    # Cedar allows only memories: every code item is denied and counted.
    (tmp_path / "p.cedar").write_text('permit (principal, action == Action::"memory", resource);')
    access = {"engine": "cedar", "policies": str(tmp_path / "p.cedar")}
    result = run(sample_index, memories, {"clearance": ["confidential"]}, access)
    assert result.status == "completed", result.error
    got = ids(result)
    assert got and all(i.startswith("memory:") for i in got)
    code = [e for e in result.events if e["type"] == "ACCESS" and e["action"] == "assemble"]
    assert code and code[0]["engine"] == "cedar" and code[0]["denied"] >= 1
