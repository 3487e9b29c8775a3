"""What reaches an OpenAI-compatible server (issue 23): the schema as structured output,
a streamed exchange with the server's usage, provider retries reported, one leading
system message for strict chat templates. Against real HTTP servers on 127.0.0.1.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
from chat_support import LocalServer, QuietHandler

from runtime.errors import ModelError
from runtime.models import ModelConfig, ModelRequest, wire
from runtime.models.config import config_from_settings
from runtime.models.openai import OpenAIProvider

SCHEMA = {
    "type": "object",
    "properties": {"decision": {"enum": ["retrieve", "answer"]}, "query": {"type": "string"}},
    "required": ["decision", "query"],
}


def provider(url: str, **kw: Any) -> OpenAIProvider:
    cfg = ModelConfig("local", "openai", model="m", base_url=url, **{"max_retries": 2, **kw})
    return OpenAIProvider(cfg, sleep=lambda s: None, rng=random.Random(1), count_tokens=len)


def json_request(**kw: Any) -> ModelRequest:
    return ModelRequest(
        messages=[{"role": "user", "content": "route?"}],
        step_id="route",
        json_mode=True,
        json_schema=SCHEMA,
        **kw,
    )


# --- the body, as pure data -----------------------------------------------------------


def test_a_step_schema_is_sent_as_json_schema_by_default():
    body = wire.request_body(json_request(), "m", False)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "route", "schema": SCHEMA, "strict": False},
    }


def test_json_object_and_none_are_provider_options():
    assert wire.request_body(json_request(), "m", False, structured_output="json_object")[
        "response_format"
    ] == {"type": "json_object"}
    assert "response_format" not in wire.request_body(
        json_request(), "m", False, structured_output="none"
    )


def test_json_without_a_schema_asks_for_a_json_object_and_plain_steps_for_nothing():
    plain = ModelRequest(messages=[{"role": "user", "content": "x"}], step_id="s")
    assert "response_format" not in wire.request_body(plain, "m", False)
    no_schema = ModelRequest(messages=plain.messages, step_id="s", json_mode=True)
    assert wire.request_body(no_schema, "m", False)["response_format"] == {"type": "json_object"}


def test_a_step_id_that_is_no_valid_schema_name_is_sent_as_reply():
    body = wire.request_body(
        ModelRequest(messages=[], step_id="a step!", json_mode=True, json_schema=SCHEMA), "m", False
    )
    assert body["response_format"]["json_schema"]["name"] == "reply"


def test_a_streamed_request_asks_for_usage_and_a_plain_one_does_not():
    assert wire.request_body(json_request(), "m", True)["stream_options"] == {"include_usage": True}
    assert "stream_options" not in wire.request_body(json_request(), "m", False)


def test_later_system_messages_fold_into_the_next_user_turn():
    thread = [
        {"role": "system", "content": "S1"},
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A1"},
        {"role": "system", "content": "S2"},
        {"role": "user", "content": "U2"},
    ]
    folded = wire.fold_later_system(thread)
    assert [m["role"] for m in folded] == ["system", "user", "assistant", "user"]
    assert folded[0] == {"role": "system", "content": "S1"}
    assert folded[3]["content"] == f"{wire.SYSTEM_NOTE}\nS2\n\nU2"
    assert thread[4] == {"role": "user", "content": "U2"}  # the caller's list is not changed


def test_a_later_system_message_with_no_user_turn_after_it_joins_the_last_user_turn():
    folded = wire.fold_later_system(
        [
            {"role": "system", "content": "S1"},
            {"role": "user", "content": "U1"},
            {"role": "system", "content": "S2"},
        ]
    )
    assert folded == [
        {"role": "system", "content": "S1"},
        {"role": "user", "content": f"U1\n\n{wire.SYSTEM_NOTE}\nS2"},
    ]
    # Before an assistant turn with no user turn to join: a user turn of its own.
    alone = wire.fold_later_system(
        [
            {"role": "system", "content": "S1"},
            {"role": "assistant", "content": "A"},
            {"role": "system", "content": "S2"},
            {"role": "assistant", "content": "B"},
        ]
    )
    assert [m["role"] for m in alone] == ["system", "assistant", "user", "assistant"]


def test_keep_sends_the_messages_as_they_are():
    thread = [{"role": "system", "content": "S1"}, {"role": "system", "content": "S2"}]
    assert wire.request_body(ModelRequest(messages=thread), "m", False)["messages"] == thread
    folded = wire.request_body(ModelRequest(messages=thread), "m", False, later_system="user")
    assert [m["role"] for m in folded["messages"]] == ["system", "user"]


# --- a real server -----------------------------------------------------------------------


class StrictServer(LocalServer):
    """llama.cpp-like: streams SSE with usage and cache counts, refuses a system message that
    is not first (as strict chat templates do), fails the first `fail` requests with 503."""

    def __init__(
        self, reply: str, *, fail: int = 0, finish: str = "stop", think: float = 0.0
    ) -> None:
        self.reply, self.fail, self.finish, self.think = reply, fail, finish, think
        self.bodies: list[dict[str, Any]] = []
        server = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.json_body()
                server.bodies.append(body)
                roles = [m["role"] for m in body["messages"]]
                if server.fail > 0 or "system" in roles[1:]:
                    server.fail -= 1
                    status = 503 if "system" not in roles[1:] else 500
                    message = (
                        "System message must be at the beginning." if status == 500 else "busy"
                    )
                    data = json.dumps({"error": {"message": message}}).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                time.sleep(server.think)  # reading the prompt: not a byte before the reply
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for n, piece in enumerate([server.reply[:3], server.reply[3:]]):
                    choice: dict[str, Any] = {"delta": {"content": piece}, "index": 0}
                    if n == 1:
                        choice["finish_reason"] = server.finish
                    self.wfile.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
                if (body.get("stream_options") or {}).get("include_usage"):
                    usage = {
                        "prompt_tokens": 40,
                        "completion_tokens": 7,
                        "prompt_tokens_details": {"cached_tokens": 32},
                    }
                    event = {"choices": [], "usage": usage, "timings": {"cache_n": 32}}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

        self.listen(Handler)
        # A client that gave up (the timeout test) leaves a broken pipe: expected, not news.
        self.httpd.handle_error = lambda *args: None  # type: ignore[method-assign]
        self.start()


@pytest.fixture
def strict():
    made: list[StrictServer] = []

    def start(reply: str = '{"decision": "retrieve", "query": "x"}', **kw: Any) -> StrictServer:
        made.append(StrictServer(reply, **kw))
        return made[-1]

    yield start
    for s in made:
        s.close()


def test_every_reply_is_streamed_from_the_server_with_its_usage(strict):
    server = strict()
    r = provider(server.url).complete(json_request())
    body = server.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["response_format"]["type"] == "json_schema"
    assert r.text == '{"decision": "retrieve", "query": "x"}'
    assert (r.tokens_in, r.tokens_out, r.usage_from, r.cached_tokens) == (40, 7, "server", 32)
    assert r.response_format == body["response_format"]


def test_stream_false_is_a_plain_exchange(strict, chat_server):
    chat_server.script = [{"reply": "ok"}]
    r = provider(chat_server.url, stream=False).complete(json_request())
    assert chat_server.requests[0]["body"]["stream"] is False and r.text == "ok"


def test_counts_the_server_did_not_send_are_estimates(chat_server):
    chat_server.script = [{"reply": "four", "usage": None}]
    r = provider(chat_server.url, stream=False).complete(json_request())
    assert (r.usage_from, r.tokens_out) == ("estimate", 4)  # count_tokens=len in these tests


def test_provider_retries_are_reported_with_reason_and_wait(strict):
    server = strict(fail=2)
    r = provider(server.url).complete(json_request())
    assert [(x["retry"], x["code"]) for x in r.retries] == [
        (1, "MODEL_PROVIDER_ERROR"),
        (2, "MODEL_PROVIDER_ERROR"),
    ]
    assert all("503" in x["reason"] and x["wait_s"] >= 0 for x in r.retries)


def test_retries_before_a_final_failure_travel_with_the_error(strict):
    server = strict(fail=5)
    with pytest.raises(ModelError) as info:
        provider(server.url).complete(json_request())
    assert [x["retry"] for x in info.value.details["retries"]] == [1, 2]


def test_a_strict_template_server_accepts_a_full_thread_by_default(strict):
    server = strict(reply="fine")
    thread = [
        {"role": "system", "content": "route"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "system", "content": "answer"},
        {"role": "user", "content": "q2"},
    ]
    assert provider(server.url).complete(ModelRequest(messages=thread)).text == "fine"
    with pytest.raises(ModelError) as info:
        provider(server.url, later_system="keep", max_retries=0).complete(
            ModelRequest(messages=thread)
        )
    assert "System message must be at the beginning" in info.value.message


def test_provider_options_are_validated_in_settings():
    entry = {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:1/v1"}
    cfg = config_from_settings(
        "x", {**entry, "structured_output": "json_object", "stream": False, "later_system": "keep"}
    )
    assert (cfg.structured_output, cfg.stream, cfg.later_system) == ("json_object", False, "keep")
    defaults = config_from_settings("x", entry)
    assert (defaults.structured_output, defaults.stream, defaults.later_system) == (
        "json_schema",
        True,
        "user",
    )
    for bad in (
        {"structured_output": "grammar"},
        {"stream": "yes"},
        {"later_system": "merge"},
    ):
        with pytest.raises(ModelError) as info:
            config_from_settings("x", {**entry, **bad})
        assert info.value.code == "MODEL_CONFIG_INVALID" and next(iter(bad)) in info.value.message
    with pytest.raises(ModelError):
        config_from_settings("x", {"provider": "extractive", "structured_output": "none"})


def test_a_server_silent_while_it_reads_the_prompt_is_bounded_by_the_deadline_only(strict):
    server = strict(reply="a long answer", think=0.4)
    assert ModelConfig("x", "openai").timeout_seconds is None  # no per-read cap by default
    r = provider(server.url, deadline_seconds=5.0).complete(json_request())
    assert r.text == "a long answer"
    # A per-read timeout, when one is set, still ends the wait (and is retried, then coded).
    with pytest.raises(ModelError) as info:
        provider(server.url, deadline_seconds=5.0, timeout_seconds=0.1, max_retries=0).complete(
            json_request()
        )
    assert info.value.code == "MODEL_TIMEOUT"


def test_a_count_half_given_by_the_server_is_still_an_estimate(chat_server):
    # Usage without prompt_tokens: the prompt is counted here, so the pair is no server count.
    chat_server.script = [{"reply": "four", "usage": {"completion_tokens": 9}}]
    r = provider(chat_server.url, stream=False).complete(json_request())
    assert (r.usage_from, r.tokens_out) == ("estimate", 9)
    chat_server.script = [{"reply": "four", "usage": {"prompt_tokens": 5}}]
    r = provider(chat_server.url, stream=False).complete(json_request())
    assert (r.usage_from, r.tokens_in) == ("estimate", 5)
