"""Role isolation (docs/roles.md): a model call sees only the fields it declares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline
from runtime.format.validation import validate_paths

PIPE = """\
settings: {{entry_step_id: ask}}
steps:
  - id: ask
    action: call_model
    prompt_key: sys
    user_parts:
      question: {{source: question, template: "Question: {{}}"}}
      q: {{source: question, template: "{template}"}}
    next: done
  - id: done
    action: finalize
    source: last_model_response
"""


def _errors(tmp_path: Path, template: str, system: str = "Answer.") -> list[Any]:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text(system)
    path = tmp_path / "p.yaml"
    path.write_text(PIPE.format(template=template))
    return [d for d in validate_paths([str(path)]).diagnostics if d.severity == "error"]


def test_a_template_naming_an_undeclared_field_is_reported_at_the_template(tmp_path):
    (error,) = _errors(tmp_path, "Plan: {plan}")
    assert error.code == "PROMPT_FIELD_UNDECLARED" and "{plan}" in error.message
    assert (error.line, error.column) == (8, 39)


def test_a_template_naming_a_declared_field_is_fine(tmp_path):
    assert _errors(tmp_path, "Again: {question} and {}") == []


def test_a_placeholder_in_a_system_prompt_is_reported_at_the_prompt_key(tmp_path):
    (error,) = _errors(tmp_path, "{}", system="Answer.\nThe secret is {internal_note}.")
    assert error.code == "PROMPT_FIELD_UNDECLARED"
    assert "line 2" in error.message and "{internal_note}" in error.message
    assert (error.line, error.column) == (5, 17)


def _run(tmp_path: Path, parts: dict[str, Any], inputs: dict[str, Any]) -> Any:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer.")
    data = {
        "settings": {"entry_step_id": "ask", "default_fidelity": "truncate"},
        "steps": [
            {
                "id": "ask",
                "action": "call_model",
                "prompt_key": "sys",
                "user_parts": parts,
                "next": "done",
            },
            {"id": "done", "action": "finalize", "source": "last_model_response"},
        ],
    }
    pipeline = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    services = Services(settings=pipeline.settings, base_dir=str(tmp_path), model_spec="scripted")
    return Engine(pipeline, services=services).run(inputs)


def _sent(result: Any) -> str:
    (call,) = [e for e in result.events if e["type"] == "MODEL_CALL"]
    return "\n".join(m["content"] or "" for m in call["messages"])


def test_only_declared_fields_reach_the_model(tmp_path):
    inputs = {
        "question": "Which table holds orders?",
        "internal_note": "NOTE-7f3a never shown",
        "plan": '{"queries": ["orders"]}',
    }
    parts = {
        "question": {"source": "question", "template": "Question: {} (again: {question})"},
    }
    result = _run(tmp_path, parts, inputs)
    assert result.status == "completed", result.error
    sent = _sent(result)
    assert sent.count("Which table holds orders?") == 2  # {} and {question}
    assert "NOTE-7f3a" not in sent and "queries" not in sent
    # Declared, the same value does reach it: the test can tell the two apart.
    parts["note"] = {"source": "internal_note"}
    assert "NOTE-7f3a" in _sent(_run(tmp_path, parts, inputs))


def test_a_handle_sends_a_pointer_and_the_item_ids_not_the_texts(tmp_path):
    nodes = [
        {
            "id": "repo::main::table::dbo.Orders",
            "path": "Orders.sql",
            "text": "CREATE TABLE Orders",
        },
        {"id": "repo::main::view::dbo.vw_X", "path": "X.sql", "text": "CREATE VIEW vw_X"},
    ]
    parts = {"evidence": {"source": "nodes", "handle": True}}
    result = _run(tmp_path, parts, {"nodes": nodes})
    sent = _sent(result)
    assert "CREATE TABLE" not in sent and "CREATE VIEW" not in sent
    assert "2 item(s): repo::main::table::dbo.Orders, repo::main::view::dbo.vw_X" in sent
    (handle,) = [e for e in result.events if e["type"] == "CONTEXT_HANDLE"]
    assert handle["variable"] == "nodes" and handle["items"] == 2
    assert handle["pointer_id"] in sent
