"""call_model's `redact:`: every part of the prompt built from the run reaches the model masked.

The model is a chat server on 127.0.0.1 that records every request it receives.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from runtime.context.blocks import format_block
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.engine.store import SqliteRunStore
from runtime.format.pipeline import Pipeline

CARD = "4111 1111 1111 1111"
KEY = "sk_live_4eC39HqLyjWDarjtT1zdp7dcQx"
MAIL = "jane.doe@example.com"
PLANTED = (CARD, KEY, MAIL)


@pytest.fixture
def prompts(tmp_path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("You answer from evidence.\n")
    return tmp_path


def pipeline(tmp_path, steps: list[dict[str, Any]], settings: dict[str, Any] | None = None):
    data = {"settings": {"entry_step_id": steps[0]["id"], **(settings or {})}, "steps": steps}
    return Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))


def model_step(sid: str, nxt: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": sid,
        "action": "call_model",
        "prompt_key": "sys",
        "next": nxt,
        "user_parts": {"q": {"source": "question"}, "ev": {"source": "context_blocks"}},
        **extra,
    }


FINISH = {"id": "f", "action": "finalize", "source": "last_model_response"}


def evidence() -> list[str]:
    text = f'const string Key = "{KEY}";\n// test card {CARD}, owner {MAIL}\n'
    return [format_block({"id": "n1", "path": "Pay.cs", "text": text})]


def sent_texts(server) -> list[str]:
    return [json.dumps(r["body"]["messages"]) for r in server.requests]


def run(tmp_path, server, steps, settings=None, store=None, inputs=None, run_id="t"):
    p = pipeline(tmp_path, steps, settings)
    services = Services(
        settings=p.settings, base_dir=str(tmp_path), model_spec=f"openai:m@{server.url}"
    )
    engine = Engine(p, services=services, store=store)
    given = {"question": f"who owns {MAIL}?", "context_blocks": evidence(), **(inputs or {})}
    return engine.run(given, run_id=run_id)


def test_settings_redact_masks_question_and_evidence_before_the_model(prompts, chat_server):
    chat_server.script = [{"reply": "It is [CARD_x]."}]
    r = run(prompts, chat_server, [model_step("m", "f"), FINISH], {"redact": True})
    assert r.status == "completed", r.error
    [text] = sent_texts(chat_server)
    for value in PLANTED:
        assert value not in text
    assert "[CARD_" in text and "[SECRET_" in text and "[EMAIL_" in text
    # The same address in the question and the evidence: one placeholder.
    body = chat_server.requests[0]["body"]["messages"][-1]["content"]
    tags = {t for t in body.split() if t.startswith("[EMAIL_")}
    assert len({t.strip("?.,") for t in tags}) == 1
    [event] = [e for e in r.events if e["type"] == "REDACTED"]
    assert event["kinds"] == {"card": 1, "email": 1, "secret": 1} and event["values"] == 3
    # What the trace keeps of the call is the masked prompt.
    everything = json.dumps(r.events)
    for value in PLANTED:
        assert value not in everything


def test_without_redact_the_prompt_goes_as_it_was(prompts, chat_server):
    chat_server.script = [{"reply": "ok"}]
    r = run(prompts, chat_server, [model_step("m", "f"), FINISH])
    assert r.status == "completed"
    assert CARD in sent_texts(chat_server)[0]
    assert not [e for e in r.events if e["type"] == "REDACTED"]


def test_a_step_turns_it_off_and_another_on(prompts, chat_server):
    chat_server.script = [{"reply": "a"}, {"reply": "b"}]
    steps = [
        model_step("a", "b", redact=False),
        model_step("b", "f", redact={"kinds": ["card"]}),
        FINISH,
    ]
    run(prompts, chat_server, steps, {"redact": True})
    first, second = sent_texts(chat_server)
    assert CARD in first
    assert CARD not in second and KEY in second  # only cards


def test_placeholders_are_stable_across_steps_and_threads(prompts, chat_server):
    chat_server.script = [{"reply": "first"}, {"reply": "second"}]
    steps = [
        model_step("a", "b", fidelity="full", thread_id="t1"),
        model_step("b", "f", fidelity="full", thread_id="t1"),
        FINISH,
    ]
    run(prompts, chat_server, steps, {"redact": True})
    first, second = (r["body"]["messages"] for r in chat_server.requests)
    tag = next(w for w in first[-1]["content"].split() if w.startswith("[CARD_"))
    # The second step sends the thread (the first step's prompt) and its own: one placeholder.
    assert json.dumps(second).count(tag.rstrip(",")) == 2
    assert CARD not in json.dumps(second)


def test_the_thread_and_trace_in_the_store_hold_no_planted_value(prompts, chat_server, tmp_path):
    chat_server.script = [{"reply": "first"}, {"reply": "second"}]
    steps = [
        model_step("a", "b", fidelity="full", thread_id="t1"),
        model_step("b", "f", fidelity="full", thread_id="t1"),
        FINISH,
    ]
    path = tmp_path / "runs.db"
    store = SqliteRunStore(str(path))
    r = run(prompts, chat_server, steps, {"redact": True}, store=store)
    assert r.status == "completed"
    store.close()
    db = sqlite3.connect(path)
    # Where the values are guaranteed absent: trace events, threads, context packs, ledger.
    for table in ("events", "run_threads", "run_context_packs", "run_ledger"):
        rows = json.dumps(db.execute(f"SELECT * FROM {table}").fetchall())
        assert rows != "[]" or table == "run_ledger"
        for value in PLANTED:
            assert value not in rows, (table, value)


def test_custom_patterns_from_settings(prompts, chat_server):
    chat_server.script = [{"reply": "ok"}]
    settings = {"redact": {"kinds": [], "patterns": [{"name": "employee", "regex": r"EMP-\d{6}"}]}}
    run(
        prompts,
        chat_server,
        [model_step("m", "f"), FINISH],
        settings,
        inputs={"question": "who is EMP-123456?"},
    )
    [text] = sent_texts(chat_server)
    assert "EMP-123456" not in text and "[EMPLOYEE_" in text and CARD in text


def test_a_governed_exception_turns_redaction_off_for_its_step_and_is_traced(prompts, chat_server):
    chat_server.script = [{"reply": "a"}, {"reply": "b"}]
    exception = {
        "id": "legacy-audit",
        "rule": "redaction",
        "steps": ["a"],
        "owner": "sec-team@example.org",
        "expires": "2999-12-31",
        "rollback": "any reply quoting a card number",
    }
    steps = [model_step("a", "b"), model_step("b", "f"), FINISH]
    r = run(prompts, chat_server, steps, {"redact": True, "exceptions": [exception]})
    first, second = sent_texts(chat_server)
    assert CARD in first and CARD not in second
    [used] = [e for e in r.events if e["type"] == "EXCEPTION_USED"]
    assert used["step_id"] == "a" and used["exception"] == "legacy-audit"
    assert used["owner"] == "sec-team@example.org" and used["expires"] == "2999-12-31"


def test_an_expired_exception_lifts_nothing(prompts, chat_server):
    chat_server.script = [{"reply": "a"}]
    exception = {
        "id": "old",
        "rule": "redaction",
        "steps": ["m"],
        "owner": "x",
        "expires": "2020-01-01",
        "rollback": "r",
    }
    r = run(
        prompts,
        chat_server,
        [model_step("m", "f"), FINISH],
        {"redact": True, "exceptions": [exception]},
    )
    assert CARD not in sent_texts(chat_server)[0]
    assert not [e for e in r.events if e["type"] == "EXCEPTION_USED"]


def test_each_exception_use_is_a_ledger_entry_of_its_own(prompts, chat_server, tmp_path):
    from runtime.engine.ledger import verify_run

    chat_server.script = [{"reply": "a"}]
    exception = {
        "id": "legacy-audit",
        "rule": "redaction",
        "steps": ["m"],
        "owner": "sec-team",
        "expires": "2999-12-31",
        "rollback": "r",
    }
    path = tmp_path / "runs.db"
    store = SqliteRunStore(str(path))
    settings = {"redact": True, "exceptions": [exception]}
    r = run(prompts, chat_server, [model_step("m", "f"), FINISH], settings, store=store)
    assert r.status == "completed"
    store.close()
    db = sqlite3.connect(path)
    entries = [
        json.loads(c)
        for (c,) in db.execute("SELECT content FROM run_ledger WHERE kind = 'decision'")
    ]
    [used] = [e for e in entries if e["type"] == "EXCEPTION_USED"]
    assert used["step_id"] == "m"
    assert verify_run(db, "t", None).ok


def test_a_thread_written_unmasked_is_masked_when_a_redacting_step_sends_it(prompts, chat_server):
    chat_server.script = [{"reply": "first"}, {"reply": "second"}]
    steps = [
        model_step("a", "b", fidelity="full", thread_id="t1", redact=False),
        model_step("b", "f", fidelity="full", thread_id="t1"),
        FINISH,
    ]
    run(prompts, chat_server, steps, {"redact": True})
    first, second = sent_texts(chat_server)
    assert CARD in first
    assert CARD not in second and "[CARD_" in second


def test_the_trace_counts_distinct_values_of_each_kind(prompts, chat_server):
    chat_server.script = [{"reply": "ok"}]
    other = "5555 5555 5555 4444"
    inputs = {"question": f"is {CARD} or {other} or {CARD} blocked?", "context_blocks": []}
    r = run(prompts, chat_server, [model_step("m", "f"), FINISH], {"redact": True}, inputs=inputs)
    [event] = [e for e in r.events if e["type"] == "REDACTED"]
    assert event["kinds"] == {"card": 2} and event["values"] == 2


def test_a_value_in_the_system_prompt_is_not_stored_in_the_thread(prompts, chat_server, tmp_path):
    (prompts / "prompts" / "sys.md").write_text(f"Escalate card issues to {MAIL}.\n")
    chat_server.script = [{"reply": "ok"}]
    path = tmp_path / "runs.db"
    store = SqliteRunStore(str(path))
    step = model_step("m", "f", fidelity="full", thread_id="t1")
    r = run(prompts, chat_server, [step, FINISH], {"redact": True}, store=store)
    assert r.status == "completed"
    store.close()
    assert MAIL not in sent_texts(chat_server)[0]
    rows = json.dumps(sqlite3.connect(path).execute("SELECT * FROM run_threads").fetchall())
    assert rows != "[]" and MAIL not in rows
