"""One tolerant reader of model JSON, everywhere: the reply shapes of
tests/data/model_replies/replies.yaml through call_model (`json: true`, replayed from a
cassette), json_decision_router, inbox_dispatcher and search_nodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline

REPLIES = yaml.safe_load(
    (Path(__file__).resolve().parent.parent / "data" / "model_replies" / "replies.yaml").read_text(
        encoding="utf-8"
    )
)
BY_NAME = {r["name"]: r for r in REPLIES}


def _run(
    tmp_path: Path,
    steps: list[dict[str, Any]],
    inputs: dict[str, Any],
    store: Any = None,
    **settings: Any,
):
    data = {"settings": {"entry_step_id": steps[0]["id"], **settings}, "steps": steps}
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    services = Services(settings=p.settings, base_dir=str(tmp_path), node_store=store)
    return Engine(p, services=services).run(inputs, run_id="t")


def _call_model(tmp_path: Path, reply: str):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer in JSON.\n")
    cassette = tmp_path / "c.jsonl"
    cassette.write_text(json.dumps({"step_id": "m", "response": reply}) + "\n")
    steps = [
        {"id": "m", "action": "call_model", "prompt_key": "sys", "json": True, "next": "f"},
        {"id": "f", "action": "finalize", "source": "last_model_response"},
    ]
    models = {"rec": {"provider": "replay", "cassette": str(cassette)}}
    return _run(tmp_path, steps, {"x": 1}, models=models, default_model="rec")


@pytest.mark.parametrize("case", REPLIES, ids=lambda r: r["name"])
def test_call_model_json_mode_reads_each_reply_shape(tmp_path, case):
    result = _call_model(tmp_path, case["reply"])
    repaired = [e for e in result.events if e["type"] == "JSON_REPLY_REPAIRED"]
    if "error" in case:
        assert result.status == "failed"
        assert (result.error.code, result.error.step_id) == ("INVALID_STRUCTURED_OUTPUT", "m")
        assert result.error.message == (
            f"the model's reply is not JSON ({case['error']}): {case['reply'][:120]!r}"
        )
        return
    assert result.status == "completed", result.error
    written = result.state["last_model_response"]
    assert json.loads(written) == case["value"]
    if case["notes"]:
        # The next step reads clean JSON; the trace keeps what was done and the raw reply.
        assert written == json.dumps(case["value"], ensure_ascii=False)
        assert [(e["notes"], e["reply"]) for e in repaired] == [(case["notes"], case["reply"])]
    else:
        assert written == case["reply"] and repaired == []  # strict JSON is kept as written


ROUTER = [
    {
        "id": "r",
        "action": "json_decision_router",
        "routes": {"retrieve": "to_retrieve", "answer": "to_answer"},
        "on_other": "other",
    },
    {"id": "to_retrieve", "action": "finalize", "source": "x"},
    {"id": "to_answer", "action": "finalize", "source": "x"},
    {"id": "other", "action": "finalize", "source": "x"},
]


@pytest.mark.parametrize("case", REPLIES, ids=lambda r: r["name"])
def test_the_router_reads_each_reply_shape_the_same_way(tmp_path, case):
    value = case.get("value")
    decision = value.get("decision") if isinstance(value, dict) else None
    expected = f"to_{decision}" if decision in ("retrieve", "answer") else "other"
    result = _run(tmp_path, ROUTER, {"last_model_response": case["reply"], "x": 1})
    assert result.steps == ["r", expected]
    if isinstance(value, dict):  # the rest of the object is written back for the next step
        rest = {k: v for k, v in value.items() if k != "decision"}
        assert json.loads(result.state["last_model_response"]) == rest


def test_the_dispatcher_reads_directives_behind_a_think_block(tmp_path):
    # A draft directive inside the reasoning, the real one after it with a trailing comma.
    reply = (
        '<think>Send {"dispatch": [{"target": "end", "payload": {"reason": "x"}}]}? '
        "No: the budget step compacts.</think>\n"
        '{"dispatch": [{"target": "budget", "payload": {"reason": "over_budget", "n": 1}}],}'
    )
    steps = [
        {
            "id": "d",
            "action": "inbox_dispatcher",
            "rules": {"budget": {"topic": "compact_code", "allow_keys": ["reason"]}},
            "next": "end",
        },
        {"id": "end", "action": "finalize", "source": "x"},
        {"id": "budget", "action": "finalize", "source": "x"},
    ]
    result = _run(tmp_path, steps, {"last_model_response": reply, "x": 1})
    [sent] = [e for e in result.events if e["type"] == "INBOX_DISPATCH"]
    assert (sent["sent"], sent["dropped"]) == (1, [])
    [enqueued] = [e["message"] for e in result.events if e["type"] == "INBOX_ENQUEUE"]
    assert (enqueued["target_step_id"], enqueued["topic"], enqueued["payload"]) == (
        "budget",
        "compact_code",
        {"reason": "over_budget"},
    )


def test_search_reads_the_query_of_a_reasoning_model(tmp_path, sample_index):
    reply = BY_NAME["think block before the object (DeepSeek-R1)"]["reply"].replace(
        '{"decision": "answer"}', "```json\n{'query': 'usp_CancelOrder', // exact name\n}\n```"
    )
    steps = [
        {"id": "s", "action": "search_nodes", "top_k": 1, "next": "end"},
        {"id": "end", "action": "finalize", "source": "retrieval_query"},
    ]
    result = _run(
        tmp_path,
        steps,
        {"last_model_response": reply, "repository": "eshop", "snapshot": "main"},
        store=sample_index,
    )
    assert result.status == "completed", result.error
    assert result.state["retrieval_query"] == "usp_CancelOrder"
    assert result.state["retrieval_seed_nodes"] == ["eshop::main::procedure::dbo.usp_CancelOrder"]
