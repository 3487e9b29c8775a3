"""A model as the summariser of a part (`summary_kind: model:NAME`, issue 24 item 11).

The summarising model is a real OpenAI-compatible server on 127.0.0.1 (the scripted chat
server) or the offline extractive responder. Its summary goes into the pointer block, the
pointer keeps the exact original; when the model fails (an error status, a timeout, an
empty reply) the deterministic summariser is used and the trace says so, coded.
"""

from __future__ import annotations

from typing import Any

import pytest

from actions._model_summary import INSTRUCTION
from runtime.context.pointers import OPEN, pointer_id_of
from runtime.context.tokens import get_counter
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline

COUNTER = get_counter()
DOC = "".join(f"line {i}: the quick brown fox number {i} jumps over the dog.\n" for i in range(600))
SUMMARY = "Six hundred numbered lines, each about a fox jumping over a dog."


def run(tmp_path, summariser: dict[str, Any], *, policy: dict[str, Any] | None = None):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer from the document.\n")
    data = {
        "settings": {
            "entry_step_id": "ask",
            "models": {
                "small": {"provider": "extractive", "context_window": 2048},
                "summ": summariser,
            },
            "context_policy": policy or {"enabled": True},
        },
        "steps": [
            {
                "id": "ask",
                "action": "call_model",
                "prompt_key": "sys",
                "model": "small",
                "max_output_tokens": 256,
                "tools": ["rehydrate"],
                "user_parts": {
                    "q": {"source": "question"},
                    "doc": {
                        "source": "doc",
                        "summary_kind": "model:summ",
                        "pointer_to": "doc_pointer",
                    },
                },
                "next": "quote",
            },
            {
                "id": "quote",
                "action": "rehydrate",
                "pointer_id_from": "doc_pointer",
                "slice": "lines 2-3",
                "target": "quoted",
                "next": "f",
            },
            {"id": "f", "action": "finalize", "source": "last_model_response"},
        ],
    }
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    engine = Engine(p, services=Services(settings=p.settings, base_dir=str(tmp_path)))
    return engine.run({"question": "which fox?", "doc": DOC}, run_id="t")


def served(url: str, window: int = 32000, **extra: Any) -> dict[str, Any]:
    return {
        "provider": "openai",
        "model": "m",
        "base_url": url,
        "context_window": window,
        "max_retries": 0,
        **extra,
    }


def events(r, kind: str) -> list[dict[str, Any]]:
    return [e for e in r.events if e["type"] == kind]


def block(r) -> str:
    """The pointer block of the doc, in the user message of the step's first request."""
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    user = events(r, "MODEL_CALL")[0]["messages"][1]["content"]
    assert d["summarised"] and user.count(OPEN) == 1
    return user[user.index(OPEN) :]


def test_a_model_on_a_server_summarises_the_part_and_the_pointer_keeps_the_original(
    tmp_path, chat_server
):
    chat_server.script = [{"reply": SUMMARY}]
    r = run(tmp_path, served(chat_server.url))
    assert r.status == "completed", r.error
    [request] = chat_server.requests
    body = request["body"]
    assert body["messages"] == [
        {"role": "system", "content": INSTRUCTION},
        {"role": "user", "content": DOC},  # the text is data, in the user role
    ]
    assert body.get("max_tokens", body.get("max_completion_tokens")) == 200
    pid = pointer_id_of(DOC)[0]
    assert block(r).startswith(f"{OPEN} {pid}: text, ")
    assert f"summary by model summ:\n{SUMMARY}\n" in block(r)
    [call] = events(r, "SUMMARY_MODEL_CALL")
    assert (call["segment"], call["model"], call["input"], call["cut"]) == (
        "user_parts.doc",
        "summ",
        "original",
        False,
    )
    assert events(r, "SUMMARY_MODEL_FALLBACK") == []
    assert r.state["doc_pointer"]["pointer_id"] == pid
    assert r.state["quoted"] == "".join(DOC.splitlines(keepends=True)[1:3])


@pytest.mark.parametrize(
    ("script", "extra", "cause"),
    [
        ([{"status": 500}], {}, "MODEL_PROVIDER_ERROR"),
        ([{"status": 400}], {}, "MODEL_PROVIDER_ERROR"),
        ([{"reply": "   "}], {}, "MODEL_PROVIDER_ERROR"),
        ([{"sleep": 3, "reply": SUMMARY}], {"deadline_seconds": 0.3}, "MODEL_TIMEOUT"),
    ],
)
def test_a_failing_model_falls_back_to_the_deterministic_summary_traced(
    tmp_path, chat_server, script, extra, cause
):
    chat_server.script = list(script)
    r = run(tmp_path, served(chat_server.url, **extra))
    assert r.status == "completed", r.error
    [fallback] = events(r, "SUMMARY_MODEL_FALLBACK")
    assert (fallback["code"], fallback["cause"], fallback["model"]) == (
        "SUMMARY_MODEL_FAILED",
        cause,
        "summ",
    )
    assert events(r, "SUMMARY_MODEL_CALL") == []
    assert "summary by model" not in block(r)
    assert "text: 36,380 characters, 600 lines" in block(r)  # the deterministic one
    assert r.state["quoted"] == "".join(DOC.splitlines(keepends=True)[1:3])


def test_an_original_over_the_models_window_is_sent_as_its_deterministic_summary(
    tmp_path, chat_server
):
    chat_server.script = [{"reply": SUMMARY}]
    r = run(tmp_path, served(chat_server.url, window=1200))
    assert r.status == "completed", r.error
    sent = chat_server.requests[0]["body"]["messages"][1]["content"]
    assert sent.startswith("text: 36,380 characters") and COUNTER.count(sent) < 1200
    [call] = events(r, "SUMMARY_MODEL_CALL")
    assert call["input"] == "deterministic summary"


def test_a_reply_longer_than_the_summary_budget_is_cut_to_it(tmp_path, chat_server):
    chat_server.script = [{"reply": "fox " * 2000}]
    r = run(tmp_path, served(chat_server.url), policy={"enabled": True, "summary_tokens": 50})
    assert r.status == "completed", r.error
    [call] = events(r, "SUMMARY_MODEL_CALL")
    assert call["cut"] is True
    summary = block(r).split("summary by model summ:\n", 1)[1].split("\n[/ELIDED", 1)[0]
    assert COUNTER.count(summary) <= 50


def test_an_offline_provider_summarises_too(tmp_path):
    r = run(tmp_path, {"provider": "extractive", "context_window": 32000})
    assert r.status == "completed", r.error
    [call] = events(r, "SUMMARY_MODEL_CALL")
    assert call["model"] == "summ" and "summary by model summ:" in block(r)


def test_a_dry_run_asks_no_model(tmp_path, chat_server):
    r = run(
        tmp_path,
        served(chat_server.url),
        policy={"enabled": True, "dry_run": True, "prompt_budget": 1500},
    )
    assert chat_server.requests == [] and events(r, "SUMMARY_MODEL_CALL") == []


def test_a_summary_model_not_in_settings_is_a_validation_error(tmp_path):
    from runtime.format.validation import validate_paths

    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("x\n")
    (tmp_path / "p.yaml").write_text(
        "settings: {entry_step_id: ask}\n"
        "steps:\n"
        "  - id: ask\n"
        "    action: call_model\n"
        "    prompt_key: sys\n"
        "    user_parts:\n"
        "      doc: {source: doc, summary_kind: 'model:nope'}\n"
        "    end: true\n"
    )
    report = validate_paths([str(tmp_path / "p.yaml")])
    [diag] = [d for d in report.diagnostics if d.code == "MODEL_CONFIG_INVALID"]
    assert "no model 'nope' in settings.models" in diag.message and diag.line == 7
