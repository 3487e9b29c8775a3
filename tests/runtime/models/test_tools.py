"""Tool calling in the models layer: the wire format, a real server on 127.0.0.1, cassettes."""

from __future__ import annotations

import json

import pytest

from runtime.errors import ModelError, ModelProviderError
from runtime.models import ModelRequest, resolve_provider, wire
from runtime.models.base import ToolCall

TOOL = {
    "type": "function",
    "function": {
        "name": "rehydrate",
        "description": "Fetch the original behind a pointer.",
        "parameters": {"type": "object", "properties": {"pointer_id": {"type": "string"}}},
    },
}
ARGS = json.dumps({"pointer_id": "p-1", "slice": "lines 3-4"})


def tool_reply(*calls: tuple[str, str, str], content=None) -> str:
    """An OpenAI chat completion whose message asks for tools."""
    return json.dumps(
        {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": content,
                        "tool_calls": [
                            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                            for i, n, a in calls
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 9},
        }
    )


def test_tools_go_into_the_request_body_only_when_offered():
    plain = wire.request_body(ModelRequest([{"role": "user", "content": "q"}]), "m", False)
    assert "tools" not in plain
    body = wire.request_body(ModelRequest([], tools=[TOOL]), "m", False)
    assert body["tools"] == [TOOL]


def test_a_reply_with_tool_calls_and_no_content_parses():
    reply = wire.parse_body(tool_reply(("c1", "rehydrate", ARGS)))
    assert reply.text == "" and reply.finish_reason == "tool_calls"
    assert reply.tool_calls == [ToolCall("c1", "rehydrate", ARGS)]


@pytest.mark.parametrize(
    "calls",
    [
        "not a list",
        [{"id": 1, "function": {"name": "rehydrate", "arguments": "{}"}}],
        [{"id": "c1", "function": {"arguments": "{}"}}],
        [{"id": "c1", "function": {"name": "rehydrate", "arguments": {"a": 1}}}],
        [{"id": "c1"}],
    ],
)
def test_a_malformed_tool_call_is_a_provider_error(calls):
    body = {"choices": [{"message": {"content": None, "tool_calls": calls}}]}
    with pytest.raises(ModelProviderError, match=r"tool[ _]call"):
        wire.parse_body(json.dumps(body))


def test_streamed_tool_call_deltas_are_joined_by_index():
    def event(delta, finish=None):
        return "data: " + json.dumps({"choices": [{"delta": delta, "finish_reason": finish}]})

    lines = [
        # The second call starts first: calls are ordered by index, not by arrival.
        event({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "rehydrate"}}]}),
        event({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "rehydrate"}}]}),
        event({"tool_calls": [{"index": 0, "function": {"arguments": ARGS[:10]}}]}),
        event({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
        event({"tool_calls": [{"index": 0, "function": {"arguments": ARGS[10:]}}]}, "tool_calls"),
        "data: [DONE]",
    ]
    reply = wire.parse_stream(lines, lambda piece: None)
    assert reply.tool_calls == [
        ToolCall("c1", "rehydrate", ARGS),
        ToolCall("c2", "rehydrate", "{}"),
    ]
    assert reply.text == "" and reply.finish_reason == "tool_calls"


def test_a_server_on_localhost_asks_for_a_tool_and_gets_the_result_back(chat_server):
    chat_server.script = [{"raw": tool_reply(("c1", "rehydrate", ARGS))}, {"reply": "done"}]
    provider = resolve_provider(None, settings={}, cli_spec=f"openai:m@{chat_server.url}")
    messages = [{"role": "user", "content": "q"}]
    first = provider.complete(ModelRequest(messages, tools=[TOOL]))
    assert first.tool_calls == [ToolCall("c1", "rehydrate", ARGS)]
    assert (first.tokens_in, first.tokens_out) == (20, 9)
    follow = [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [first.tool_calls[0].to_message()]},
        {"role": "tool", "tool_call_id": "c1", "content": "line three\nline four"},
    ]
    second = provider.complete(ModelRequest(follow, tools=[TOOL]))
    assert second.text == "done" and second.tool_calls == []
    sent = [r["body"] for r in chat_server.requests]
    assert sent[0]["tools"] == [TOOL] and sent[1]["messages"] == follow


def test_tool_calls_are_recorded_and_replayed_in_order(tmp_path, chat_server):
    cassette = tmp_path / "tools.jsonl"
    chat_server.script = [{"raw": tool_reply(("c1", "rehydrate", ARGS))}, {"reply": "done"}]
    rec = resolve_provider(
        None, settings={}, cli_spec=f"openai:m@{chat_server.url}", record_path=str(cassette)
    )
    request = ModelRequest([{"role": "user", "content": "q"}], step_id="ask", tools=[TOOL])
    live = [rec.complete(request), rec.complete(request)]
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert lines[0]["tool_calls"] == [{"id": "c1", "name": "rehydrate", "arguments": ARGS}]
    assert lines[0]["request"]["tools"] == [TOOL] and "tool_calls" not in lines[1]
    replay = resolve_provider(None, settings={}, cli_spec=f"replay:{cassette}")
    again = [replay.complete(request), replay.complete(request)]
    assert [(r.text, r.tool_calls) for r in again] == [(r.text, r.tool_calls) for r in live]


@pytest.mark.parametrize(
    "calls",
    [
        "x",
        [{"id": "c1", "name": "rehydrate"}],
        [{"id": "c1", "name": "rehydrate", "arguments": {}}],
        [{"id": "c1", "name": "rehydrate", "arguments": "{}", "extra": "x"}],
    ],
)
def test_a_bad_recorded_tool_call_is_cassette_invalid(tmp_path, calls):
    cassette = tmp_path / "bad.jsonl"
    entry = {"step_id": "ask", "response": "", "tool_calls": calls}
    cassette.write_text(json.dumps(entry) + "\n")
    with pytest.raises(ModelError) as info:
        resolve_provider(None, settings={}, cli_spec=f"replay:{cassette}")
    assert info.value.code == "CASSETTE_INVALID" and "line 1" in info.value.message


def test_a_key_echoed_into_tool_arguments_is_scrubbed(chat_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-in-args-1234")
    leaked = json.dumps({"pointer_id": "sk-secret-in-args-1234"})
    chat_server.script = [{"raw": tool_reply(("c1", "rehydrate", leaked))}]
    provider = resolve_provider(None, settings={}, cli_spec=f"openai:m@{chat_server.url}")
    (call,) = provider.complete(ModelRequest([{"role": "user", "content": "q"}])).tool_calls
    assert "sk-secret-in-args-1234" not in call.arguments and call.id == "c1"


def _block(pointer_id: str, kind: str, summary: str) -> str:
    from runtime.context.pointers import render

    return render(pointer_id, kind, 1000, 40, summary)


def test_the_extractive_responder_calls_rehydrate_once_per_pointer_then_answers():
    from runtime.models.base import ModelConfig
    from runtime.models.extractive import ExtractiveProvider

    provider = ExtractiveProvider(ModelConfig("x", "extractive", model="extractive"))
    text = _block("ptr-00000000000000aa", "text", "Chapter I.")
    data = _block("ptr-00000000000000bb", "json", "$.items: array[3]\n$.items[0]: object{2}")
    diff = _block("ptr-00000000000000cc", "diff", "a.py: 1 hunk")
    prompt = [{"role": "user", "content": f"Question: who?\n{text}\n{data}\n{diff}"}]
    asked = provider.complete(ModelRequest(prompt, tools=[TOOL]))
    assert asked.finish_reason == "tool_calls" and asked.text == ""
    assert [json.loads(c.arguments) for c in asked.tool_calls] == [
        {"pointer_id": "ptr-00000000000000aa", "slice": "lines 1-20"},
        {"pointer_id": "ptr-00000000000000bb", "slice": "$.items[0]"},
        {"pointer_id": "ptr-00000000000000cc", "slice": "hunk 1"},
    ]
    # Without the tool offered it answers; with the results back it answers and says so.
    assert provider.complete(ModelRequest(prompt)).tool_calls == []
    follow = [
        *prompt,
        {"role": "assistant", "content": None, "tool_calls": [asked.tool_calls[0].to_message()]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Chapter I.\n"},
    ]
    answer = provider.complete(ModelRequest(follow, tools=[TOOL]))
    assert answer.tool_calls == [] and answer.finish_reason == "stop"
    assert "Read through rehydrate: ptr-00000000000000aa lines 1-20 (11 characters)." in answer.text


def test_the_extractive_responder_claims_only_the_rehydrations_that_succeeded():
    from runtime.models.base import ModelConfig, ToolCall
    from runtime.models.extractive import ExtractiveProvider

    provider = ExtractiveProvider(ModelConfig("x", "extractive", model="extractive"))
    text = _block("ptr-00000000000000aa", "text", "Chapter I.")
    other = _block("ptr-00000000000000bb", "text", "Chapter II.")
    prompt = [{"role": "user", "content": f"Question: who?\n{text}\n{other}"}]
    calls = [
        ToolCall("call_1", "rehydrate", '{"pointer_id": "ptr-00000000000000aa", "slice": "x"}'),
        ToolCall("call_2", "rehydrate", '{"pointer_id": "ptr-00000000000000bb"}'),
    ]
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [c.to_message() for c in calls],
    }
    # The results come back in the other order; the first call failed.
    failed = "error SLICE_INVALID: x is no slice"
    follow = [
        *prompt,
        assistant,
        {"role": "tool", "tool_call_id": "call_2", "content": "Chapter II, whole.\n"},
        {"role": "tool", "tool_call_id": "call_1", "content": failed},
    ]
    answer = provider.complete(ModelRequest(follow, tools=[TOOL])).text
    lines = answer.split("\n")
    assert "Read through rehydrate: ptr-00000000000000bb whole (19 characters)." in lines
    assert "Rehydrate failed: ptr-00000000000000aa x (SLICE_INVALID)." in lines
    # Every call failed: no claim of a read at all.
    only_failed = [
        *prompt,
        assistant,
        {"role": "tool", "tool_call_id": "call_1", "content": failed},
    ]
    answer = provider.complete(ModelRequest(only_failed, tools=[TOOL])).text
    assert "Read through rehydrate" not in answer
    assert "Rehydrate failed: ptr-00000000000000aa x (SLICE_INVALID)." in answer
