"""call_model and search_nodes against imperfect models (issue 23): cut replies, retries on
the wire, replies without a usable query. Every fallback leaves a trace event."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline


@pytest.fixture
def prompts(tmp_path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("You answer.\n")
    return tmp_path


def run(tmp_path, steps: list[dict[str, Any]], inputs: dict[str, Any], **services: Any):
    data = {"settings": {"entry_step_id": steps[0]["id"]}, "steps": steps}
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    engine = Engine(p, services=Services(settings=p.settings, base_dir=str(tmp_path), **services))
    return engine.run(inputs, run_id="t")


def model_step(**kw: Any) -> dict[str, Any]:
    return {
        "id": "m",
        "action": "call_model",
        "prompt_key": "sys",
        "user_parts": {"q": {"source": "question"}},
        "next": "f",
        **kw,
    }


FINISH = {"id": "f", "action": "finalize", "source": "last_model_response"}


def of(result, kind):
    return [e for e in result.events if e["type"] == kind]


@pytest.mark.parametrize(
    "policy,tokens_out,status,cause",
    [
        ("warn", 99, "completed", "window"),
        ("fail", 99, "failed", "window"),
        ("fail", 100, "completed", "max_output_tokens"),  # at the reserve: the step's own limit
        ("fail", 101, "completed", "max_output_tokens"),
    ],
)
def test_a_reply_cut_before_its_reserve_is_traced_and_fails_only_when_asked(
    prompts, chat_server, policy, tokens_out, status, cause
):
    chat_server.script = [
        {
            "reply": "cut",
            "finish_reason": "length",
            "usage": {"prompt_tokens": 5, "completion_tokens": tokens_out},
        }
    ]
    step = model_step(max_output_tokens=100, on_truncated=policy)
    r = run(prompts, [step, FINISH], {"question": "q"}, model_spec=f"openai:m@{chat_server.url}")
    assert r.status == status, r.error
    [event] = of(r, "MODEL_TRUNCATED")
    assert (event["cause"], event["tokens_out"], event["reserved"]) == (cause, tokens_out, 100)
    assert ("warning" in event) == (cause == "window")
    if status == "failed":
        assert (r.error.code, r.error.step_id) == ("MODEL_OUTPUT_TRUNCATED", "m")


def test_warn_is_the_default_and_a_finished_reply_is_not_traced(prompts, chat_server):
    chat_server.script = [
        {
            "reply": "cut",
            "finish_reason": "length",
            "usage": {"prompt_tokens": 5, "completion_tokens": 3},
        },
        {"reply": "whole"},
    ]
    spec = f"openai:m@{chat_server.url}"
    r = run(prompts, [model_step(), FINISH], {"question": "q"}, model_spec=spec)
    assert r.status == "completed" and of(r, "MODEL_TRUNCATED")[0]["policy"] == "warn"
    r = run(prompts, [model_step(), FINISH], {"question": "q"}, model_spec=spec)
    assert of(r, "MODEL_TRUNCATED") == []


def test_the_model_call_event_says_where_counts_came_from(prompts, chat_server):
    chat_server.script = [{"reply": "ok"}]
    r = run(
        prompts, [model_step(), FINISH], {"question": "q"}, model_spec=f"openai:m@{chat_server.url}"
    )
    [call] = of(r, "MODEL_CALL")
    assert (call["usage_from"], call["tokens_in"], call["tokens_out"]) == ("server", 11, 3)
    r = run(prompts, [model_step(), FINISH], {"question": "q"})  # the extractive responder
    assert of(r, "MODEL_CALL")[0]["usage_from"] == "tokenizer"


def test_the_schema_sent_is_in_the_trace(prompts, chat_server):
    schema = {"type": "object", "properties": {"decision": {"enum": ["a", "b"]}}}
    chat_server.script = [{"reply": '{"decision": "a"}'}]
    step = model_step(json=True, json_schema=schema)
    r = run(prompts, [step, FINISH], {"question": "q"}, model_spec=f"openai:m@{chat_server.url}")
    [call] = of(r, "MODEL_CALL")
    assert call["response_format"]["json_schema"]["schema"] == schema
    assert chat_server.requests[0]["body"]["response_format"] == call["response_format"]


def test_provider_retries_are_trace_events_on_success_and_on_failure(
    prompts, chat_server, monkeypatch
):
    from runtime.models.openai import OpenAIProvider

    # The provider's sleep is bound when it is built: no backoff waits in this test.
    monkeypatch.setattr(OpenAIProvider, "delay", lambda self, attempt, after=None: 0.0)
    chat_server.script = [{"status": 503}, {"reply": "ok"}]
    spec = f"openai:m@{chat_server.url}"
    r = run(prompts, [model_step(), FINISH], {"question": "q"}, model_spec=spec)
    assert [(e["retry"], e["code"]) for e in of(r, "MODEL_RETRY")] == [(1, "MODEL_PROVIDER_ERROR")]
    chat_server.script = [{"status": 503}] * 4
    r = run(prompts, [model_step(), FINISH], {"question": "q"}, model_spec=spec)
    assert r.status == "failed" and [e["retry"] for e in of(r, "MODEL_RETRY")] == [1, 2, 3]


# --- search_nodes: a reply without a usable query ------------------------------------


def search_steps(**search: Any) -> list[dict[str, Any]]:
    return [
        {"id": "s", "action": "search_nodes", "search_type": "bm25", "next": "f", **search},
        {"id": "f", "action": "finalize", "source": "retrieval_query"},
    ]


@pytest.mark.parametrize(
    "reply,reason",
    [
        (None, "unset"),
        ('{"decision": "retrieve"}', "no query field"),
        ('{"decision": "retrieve", "query": "   "}', "blank or not a string"),
        ('{"decision": "retrieve", "query": 7}', "blank or not a string"),
        ("   ", "blank or not a string"),
    ],
)
def test_a_reply_without_a_usable_query_searches_the_fallback(
    tmp_path, sample_index, reply, reason
):
    inputs = {"question": "Which procedure writes OrderLines?"}
    if reply is not None:
        inputs["last_model_response"] = reply
    r = run(tmp_path, search_steps(fallback_query_from="question"), inputs, node_store=sample_index)
    assert r.status == "completed", r.error
    assert r.state["retrieval_query"] == inputs["question"]
    [event] = of(r, "QUERY_FALLBACK")
    assert (event["reason"], event["fallback"]) == (reason, "question")


def test_a_usable_query_is_searched_as_it_is(tmp_path, sample_index):
    inputs = {"question": "q?", "last_model_response": json.dumps({"query": "OrderLines"})}
    r = run(tmp_path, search_steps(fallback_query_from="question"), inputs, node_store=sample_index)
    assert r.state["retrieval_query"] == "OrderLines" and of(r, "QUERY_FALLBACK") == []


def test_without_a_fallback_an_empty_query_is_still_query_empty(tmp_path, sample_index):
    inputs = {"question": "q?", "last_model_response": '{"decision": "retrieve"}'}
    r = run(tmp_path, search_steps(), inputs, node_store=sample_index)
    assert (r.error.code, r.error.step_id) == ("QUERY_EMPTY", "s")


def test_a_blank_fallback_is_query_empty_naming_it(tmp_path, sample_index):
    r = run(
        tmp_path,
        search_steps(fallback_query_from="question"),
        {"question": " "},
        node_store=sample_index,
    )
    assert r.error.code == "QUERY_EMPTY" and "'question'" in r.error.message


def test_an_unvalidated_fetch_without_a_budget_is_a_coded_error(tmp_path, sample_index):
    # validate says BUDGET_SETTING_MISSING; the engine run without validation says the same.
    steps = [
        {"id": "s", "action": "search_nodes", "search_type": "bm25", "next": "f"},
        {"id": "f", "action": "fetch_node_texts", "next": "e"},
        {"id": "e", "action": "finalize", "source": "node_texts"},
    ]
    r = run(tmp_path, steps, {"last_model_response": "OrderLines"}, node_store=sample_index)
    assert (r.error.code, r.error.step_id) == ("BUDGET_SETTING_MISSING", "f")
