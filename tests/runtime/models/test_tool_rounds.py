"""call_model with `tools: [rehydrate]`: bounded rounds against a server on 127.0.0.1.

The server issues the tool call; the step runs it and sends the result back as a
`tool` message; the model's next reply is the step's answer. Recorded to a cassette,
the same run replays offline with the same tool message. The novel sits in the run's
pointer store (runtime/context/pointers.py) as the context policy leaves an elided payload.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from actions import _tools
from actions.call_model import MESSAGE_OVERHEAD
from runtime.context import fidelity as fid
from runtime.context.pointers import make_pointer, pointer_id_of
from runtime.context.tokens import get_counter
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline

COUNT = get_counter("cl100k_base").count
NOVEL = "".join(f"line {n}: It is a truth universally acknowledged.\n" for n in range(1, 41))
SYSTEM = "Answer from the text; fetch elided parts with the rehydrate tool."


def _services(pipeline: Pipeline, tmp_path, **extra: Any) -> Services:
    """Services whose pointer store holds the novel for run "t", as the policy leaves it."""
    services = Services(settings=pipeline.settings, base_dir=str(tmp_path), **extra)
    make_pointer(services.pointers, "t", NOVEL, "text", "(summary)", NOVEL.count("\n"))
    return services


def call(call_id: str, name: str, arguments: str) -> str:
    """A chat completion asking for one tool."""
    return json.dumps(
        {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": arguments},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ]
        }
    )


def run(tmp_path, url: str, window: int = 8192, **step: Any):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text(SYSTEM)
    model = {"provider": "openai", "model": "m", "base_url": url, "context_window": window}
    data = {
        "settings": {"entry_step_id": "ask", "models": {"small": model}},
        "steps": [
            {
                "id": "ask",
                "action": "call_model",
                "prompt_key": "sys",
                "model": "small",
                "max_output_tokens": 100,
                "tools": ["rehydrate"],
                "user_parts": {"q": {"source": "question"}},
                "next": "done",
                **step,
            },
            {"id": "done", "action": "finalize", "source": "last_model_response"},
        ],
    }
    pipeline = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    services = _services(pipeline, tmp_path)
    return Engine(pipeline, services=services).run({"question": "Who?"}, run_id="t")


POINTER = pointer_id_of(NOVEL)[0]
ARGS = json.dumps({"pointer_id": POINTER, "slice": "lines 3-5"})
SLICE = "".join(NOVEL.splitlines(keepends=True)[2:5])


def test_the_model_gets_the_exact_slice_it_asked_for(tmp_path, chat_server):
    chat_server.script = [{"raw": call("c1", "rehydrate", ARGS)}, {"reply": "Mr. Bennet."}]
    result = run(tmp_path, chat_server.url)
    assert result.status == "completed", result.error
    assert result.state["last_model_response"] == "Mr. Bennet."
    first, second = (r["body"] for r in chat_server.requests)
    assert first["tools"] == [_tools.REHYDRATE_SPEC] and "tool_calls" not in str(first["messages"])
    assert first["messages"][0] == {"role": "system", "content": sent_system()}
    tool = second["messages"][-1]
    assert tool == {"role": "tool", "tool_call_id": "c1", "content": SLICE}
    assert second["messages"][-2]["tool_calls"][0]["function"]["arguments"] == ARGS
    (event,) = [e for e in result.events if e["type"] == "MODEL_TOOL_CALL"]
    assert (event["pointer_id"], event["slice"], event["error"]) == (POINTER, "lines 3-5", None)
    assert event["tokens"] == COUNT(SLICE)
    (model_call,) = [e for e in result.events if e["type"] == "MODEL_CALL"]
    assert model_call["messages"][-1]["content"] == SLICE  # the trace shows what was sent


def test_rounds_are_bounded_and_the_last_request_offers_no_tools(tmp_path, chat_server):
    chat_server.script = [{"raw": call(f"c{n}", "rehydrate", ARGS)} for n in range(2)]
    chat_server.script.append({"reply": "answered"})
    result = run(tmp_path, chat_server.url, max_tool_rounds=2)
    assert result.status == "completed" and result.state["last_model_response"] == "answered"
    bodies = [r["body"] for r in chat_server.requests]
    assert ["tools" in b for b in bodies] == [True, True, False]


def test_a_model_that_keeps_calling_tools_fails_the_step(tmp_path, chat_server):
    chat_server.script = [{"raw": call(f"c{n}", "rehydrate", ARGS)} for n in range(3)]
    result = run(tmp_path, chat_server.url, max_tool_rounds=2)
    assert result.status == "failed"
    assert result.error.code == "MODEL_TOOL_ROUNDS_EXCEEDED"
    assert len(chat_server.requests) == 3
    # The calls of the request that offered no tools are not run.
    assert len([e for e in result.events if e["type"] == "MODEL_TOOL_CALL"]) == 2


def sent_system() -> str:
    """The system message run() sends: the step's compact preamble, a blank line, SYSTEM.

    Every fresh model call starts with its fidelity preamble (compact by default,
    docs/fidelity.md): for ask, the entry step of p.yaml's 2 steps in run t, the head lines.
    """
    view = fid.RunView("p", "", "t", "ask", 2, history=(), variables={}, written=())
    return f"{SYSTEM}\n\n{fid.build_preamble('compact', view, get_counter('cl100k_base')).text}"


def _room_window(slice_tokens: int) -> int:
    """The window in which a tool result of slice_tokens exactly fits (one round)."""
    prompt = COUNT(sent_system()) + COUNT("Who?") + 2 * MESSAGE_OVERHEAD
    assistant = COUNT("rehydrate" + ARGS) + MESSAGE_OVERHEAD
    # The rehydrate spec goes with the request and counts against the budget too.
    spec = COUNT(json.dumps(_tools.REHYDRATE_SPEC, sort_keys=True))
    return 100 + prompt + assistant + MESSAGE_OVERHEAD + slice_tokens + spec


def test_a_slice_that_exactly_fits_is_sent(tmp_path, chat_server):
    chat_server.script = [{"raw": call("c1", "rehydrate", ARGS)}, {"reply": "ok"}]
    run(tmp_path, chat_server.url, window=_room_window(COUNT(SLICE)))
    assert chat_server.requests[1]["body"]["messages"][-1]["content"] == SLICE


def test_a_slice_one_token_too_big_is_refused_never_cut(tmp_path, chat_server):
    chat_server.script = [{"raw": call("c1", "rehydrate", ARGS)}, {"reply": "ok"}]
    result = run(tmp_path, chat_server.url, window=_room_window(COUNT(SLICE)) - 1)
    assert result.status == "completed"
    sent = chat_server.requests[1]["body"]["messages"][-1]["content"]
    assert sent.startswith("error CONTEXT_OVERFLOW: the result is ")
    assert f"{COUNT(SLICE)} tokens and {COUNT(SLICE) - 1} fit" in sent
    (event,) = [e for e in result.events if e["type"] == "MODEL_TOOL_CALL"]
    assert event["error"] == "CONTEXT_OVERFLOW"


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [
        ("search_web", ARGS, "TOOL_UNKNOWN"),
        ("rehydrate", "[1, 2]", "TOOL_ARGUMENTS_INVALID"),
        ("rehydrate", "{not json", "TOOL_ARGUMENTS_INVALID"),
        ("rehydrate", json.dumps({"pointer_id": "ptr-0123456789abcdef"}), "POINTER_UNKNOWN"),
        ("rehydrate", json.dumps({"pointer_id": POINTER, "slice": "lines 40-41"}), "SLICE_INVALID"),
        ("rehydrate", json.dumps({"pointer_id": 7}), "TOOL_ARGUMENTS_INVALID"),
    ],
)
def test_a_bad_call_is_answered_with_its_error_and_traced(
    tmp_path, chat_server, name, arguments, code
):
    chat_server.script = [{"raw": call("c1", name, arguments)}, {"reply": "sorry"}]
    result = run(tmp_path, chat_server.url)
    assert result.status == "completed" and result.state["last_model_response"] == "sorry"
    assert chat_server.requests[1]["body"]["messages"][-1]["content"].startswith(f"error {code}:")
    (event,) = [e for e in result.events if e["type"] == "MODEL_TOOL_CALL"]
    assert event["error"] == code


def test_the_tool_round_trip_replays_from_a_cassette(tmp_path, chat_server):
    chat_server.script = [{"raw": call("c1", "rehydrate", ARGS)}, {"reply": "Mr. Bennet."}]
    cassette = tmp_path / "tools.jsonl"
    live = run_recorded(tmp_path, chat_server.url, cassette)
    lines = [json.loads(x) for x in cassette.read_text().splitlines()]
    assert [len(x.get("tool_calls", [])) for x in lines] == [1, 0]
    assert lines[1]["request"]["messages"][-1]["content"] == SLICE
    replayed = run_replayed(tmp_path, cassette)
    assert replayed.state["last_model_response"] == live.state["last_model_response"]
    (event,) = [e for e in replayed.events if e["type"] == "MODEL_TOOL_CALL"]
    assert event["tokens"] == COUNT(SLICE)
    live_call = next(e for e in live.events if e["type"] == "MODEL_CALL")["messages"]
    again = next(e for e in replayed.events if e["type"] == "MODEL_CALL")["messages"]
    assert again == live_call


def run_recorded(tmp_path, url: str, cassette):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text(SYSTEM)
    return _engine(tmp_path, f"openai:m@{url}", record_path=str(cassette))


def run_replayed(tmp_path, cassette):
    return _engine(tmp_path, f"replay:{cassette}")


def _engine(tmp_path, spec: str, **services: Any):
    data = {
        "settings": {"entry_step_id": "ask"},
        "steps": [
            {
                "id": "ask",
                "action": "call_model",
                "prompt_key": "sys",
                "tools": ["rehydrate"],
                "user_parts": {"q": {"source": "question"}},
                "next": "done",
            },
            {"id": "done", "action": "finalize", "source": "last_model_response"},
        ],
    }
    pipeline = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    svc = _services(pipeline, tmp_path, model_spec=spec, **services)
    result = Engine(pipeline, services=svc).run({"question": "Who?"}, run_id="t")
    assert result.status == "completed", result.error
    return result


def test_a_prompt_budget_under_the_window_bounds_the_tool_result(tmp_path, chat_server):
    # prompt_budget replaces "window less the reserve": the slice fits at it, not one under.
    at = _room_window(COUNT(SLICE)) - 100
    for budget, refused in ((at, False), (at - 1, True)):
        chat_server.requests.clear()
        chat_server.script = [{"raw": call("c1", "rehydrate", ARGS)}, {"reply": "ok"}]
        result = run(tmp_path, chat_server.url, context_policy={"prompt_budget": budget})
        assert result.status == "completed", result.error
        sent = chat_server.requests[1]["body"]["messages"][-1]["content"]
        assert sent.startswith("error CONTEXT_OVERFLOW") is refused
        (done,) = [e for e in result.events if e["type"] == "RUN_COMPLETED"]
        assert done.get("counters", {}).get("context_budget_violations", 0) == 0
