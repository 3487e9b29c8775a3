"""The OpenAI-compatible provider against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from runtime.errors import ModelError
from runtime.models import ModelConfig, ModelRequest
from runtime.models.openai import MAX_RETRY_AFTER, OpenAIProvider, retry_after_seconds

KEY = "sk-test-secret-123"


@pytest.fixture
def make(chat_server, monkeypatch):
    """Build providers against the scripted server; sleeps are recorded, never waited."""
    monkeypatch.setenv("TEST_KEY", KEY)
    made: list[OpenAIProvider] = []

    def build(**kw):
        delays: list[float] = []
        cfg = ModelConfig(
            "local",
            "openai",
            model="m",
            base_url=kw.pop("base_url", chat_server.url),
            api_key_env="TEST_KEY",
            timeout_seconds=kw.pop("timeout", 5.0),
            max_retries=kw.pop("retries", 2),
            headers=kw.pop("headers", {}),
            # These tests pin the non-streamed exchange; the default (streamed) has its own.
            stream=kw.pop("stream", False),
            structured_output=kw.pop("structured_output", "json_schema"),
            later_system=kw.pop("later_system", "user"),
        )
        p = OpenAIProvider(cfg, sleep=delays.append, rng=random.Random(7), count_tokens=len, **kw)
        made.append(p)
        return p, delays

    yield build
    for p in made:
        p.close()


def req(**kw):
    return ModelRequest(messages=[{"role": "user", "content": "hi"}], step_id="s", **kw)


def failure(provider, request=None, **kw) -> ModelError:
    with pytest.raises(ModelError) as info:
        provider.complete(request or req(), **kw)
    return info.value


def test_plain_reply_uses_server_usage_and_sends_the_key_as_bearer(chat_server, make):
    chat_server.script = [{"reply": "hello"}]
    p, _ = make(headers={"X-Team": "docs"})
    r = p.complete(req(json_mode=True, temperature=0.1, top_p=0.9, max_output_tokens=77))
    assert (r.text, r.tokens_in, r.tokens_out) == ("hello", 11, 3)
    assert (r.provider, r.model, r.finish_reason) == ("openai", "m", "stop")
    sent = chat_server.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["Authorization"] == f"Bearer {KEY}"
    assert sent["headers"]["X-Team"] == "docs"
    assert sent["body"] == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 77,
        "stream": False,
        "temperature": 0.1,
        "top_p": 0.9,
        "response_format": {"type": "json_object"},
    }


def test_without_usage_tokens_are_counted_and_without_a_key_no_header(
    chat_server, make, monkeypatch
):
    chat_server.script = [{"reply": "hello there", "usage": None}]
    p, _ = make()
    monkeypatch.delenv("TEST_KEY")
    r = p.complete(req(model="other"))
    assert (r.tokens_in, r.tokens_out, r.model) == (2, 11, "other")  # count_tokens=len
    sent = chat_server.requests[0]
    assert "Authorization" not in sent["headers"] and sent["body"]["model"] == "other"
    assert "response_format" not in sent["body"]


def test_streamed_reply_calls_back_per_chunk(chat_server, make):
    chat_server.script = [{"chunks": ["Hel", "lo", " world"]}]
    p, _ = make()
    seen: list[str] = []
    r = p.complete(req(), on_chunk=seen.append)
    assert seen == ["Hel", "lo", " world"] and r.text == "Hello world"
    assert (r.tokens_in, r.tokens_out) == (2, 11)  # no usage in the stream: counted
    assert chat_server.requests[0]["body"]["stream"] is True


def test_stream_usage_and_stream_flag_without_callback(chat_server, make):
    chat_server.script = [
        {"chunks": ["a", "b"], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    ]
    p, _ = make()
    r = p.complete(req(stream=True))
    assert (r.text, r.tokens_in, r.tokens_out) == ("ab", 5, 2)


def test_a_server_that_ignores_stream_still_reaches_the_callback(chat_server, make):
    chat_server.script = [{"raw": '{"choices": [{"message": {"content": "whole"}}]}'}]
    p, _ = make()
    seen: list[str] = []
    assert p.complete(req(), on_chunk=seen.append).text == "whole" and seen == ["whole"]


def test_429_retry_after_is_honoured_and_capped(chat_server, make):
    chat_server.script = [
        {"status": 429, "headers": {"Retry-After": "3"}},
        {"status": 429, "headers": {"Retry-After": "3600"}},
        {"reply": "ok"},
    ]
    p, delays = make()
    assert p.complete(req()).text == "ok"
    assert p.attempts == 3 and delays == [3.0, MAX_RETRY_AFTER]


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (429, "MODEL_RATE_LIMITED", "ModelRateLimitedError"),
        (500, "MODEL_PROVIDER_ERROR", "ModelProviderError"),
    ],
)
def test_retries_exhausted(chat_server, make, status, code, cls):
    chat_server.script = [{"status": status}] * 5
    p, delays = make()
    error = failure(p)
    assert error.code == code and type(error).__name__ == cls
    assert p.attempts == 3 and len(delays) == 2 and "after 3 attempts" in error.message
    assert type(error.__cause__) is type(error)  # the last attempt's error, chained


def test_500_then_success(chat_server, make):
    chat_server.script = [{"status": 503}, {"reply": "fine"}]
    p, delays = make()
    assert p.complete(req()).text == "fine" and p.attempts == 2 and len(delays) == 1


def test_backoff_is_exponential_full_jitter_and_capped(make):
    p, _ = make(backoff_base=1.0, backoff_cap=4.0)
    p.rng = random.Random(1)
    reference = random.Random(1)
    got = [p.delay(n) for n in range(5)]
    assert got == [reference.uniform(0, min(4.0, 2**n)) for n in range(5)]
    assert all(0 <= d <= 4.0 for d in got)


def test_slow_reply_times_out_and_is_retried(chat_server, make):
    import httpx

    chat_server.script = [{"hang": True}, {"hang": True}]
    p, delays = make(timeout=0.1, retries=1)
    error = failure(p)
    assert error.code == "MODEL_TIMEOUT" and p.attempts == 2 and len(delays) == 1
    assert isinstance(error.__cause__.__cause__, httpx.ReadTimeout)


@pytest.mark.parametrize(
    "raw,words",
    [
        ("{not json", "not JSON"),
        ('{"choices": []}', "no choices"),
        ('{"object": "chat.completion"}', "no choices"),
        ('{"choices": [{"message": {"content": null}, "finish_reason": "tool_calls"}]}', "no text"),
        ('{"error": {"message": "model not loaded"}}', "model not loaded"),
    ],
)
def test_malformed_replies_are_provider_errors_and_not_retried(chat_server, make, raw, words):
    chat_server.script = [{"raw": raw}]
    p, _ = make()
    error = failure(p)
    assert error.code == "MODEL_PROVIDER_ERROR" and words in error.message and p.attempts == 1


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failure_is_not_retried_and_never_leaks_the_key(chat_server, make, status):
    chat_server.script = [{"status": status, "echo_key": True}]
    p, delays = make()
    error = failure(p)
    assert error.code == "MODEL_AUTH_ERROR" and p.attempts == 1 and delays == []
    assert "TEST_KEY" in error.message
    assert KEY not in str(error) and KEY not in repr(error.__dict__) and KEY not in repr(error.args)


@pytest.mark.parametrize("status", [400, 500])
def test_a_server_echoing_the_key_is_scrubbed(chat_server, make, status):
    chat_server.script = [{"status": status, "echo_key": True}] * 3
    p, _ = make()
    error = failure(p)
    assert "[redacted]" in error.message and KEY not in str(error)
    cause = error.__cause__
    while cause is not None:
        assert KEY not in str(cause)
        cause = cause.__cause__


def test_a_4xx_is_not_retried(chat_server, make):
    chat_server.script = [{"status": 400}]
    p, _ = make()
    error = failure(p)
    assert error.code == "MODEL_PROVIDER_ERROR" and "(400)" in error.message and p.attempts == 1


def test_stream_cut_before_anything_arrived_is_retried(chat_server, make):
    chat_server.script = [{"chunks": [], "cut": True}, {"chunks": ["ok"]}]
    p, _ = make()
    seen: list[str] = []
    assert p.complete(req(), on_chunk=seen.append).text == "ok" and seen == ["ok"]
    assert p.attempts == 2


@pytest.mark.parametrize("step", [{"cut": True}, {"error": "overloaded"}])
def test_a_stream_failing_after_pieces_were_passed_on_is_not_retried(chat_server, make, step):
    chat_server.script = [{"chunks": ["par", "tial"], **step}, {"chunks": ["again"]}]
    p, _ = make()
    seen: list[str] = []
    error = failure(p, on_chunk=seen.append)
    assert error.code == "MODEL_PROVIDER_ERROR" and p.attempts == 1 and seen == ["par", "tial"]


def test_unreachable_server_is_retried_then_a_provider_error(make, closed_port):
    p, delays = make(base_url=f"http://127.0.0.1:{closed_port}/v1", retries=1)
    error = failure(p)
    assert error.code == "MODEL_PROVIDER_ERROR" and "cannot reach" in error.message
    assert p.attempts == 2 and len(delays) == 1


@pytest.mark.parametrize(
    "value,seconds",
    [("3", 3.0), ("0.5", 0.5), ("-2", 0.0), ("soon", None), (None, None), ("nan", None)],
)
def test_retry_after_values(value, seconds):
    assert retry_after_seconds(value) == seconds


def test_retry_after_as_an_http_date():
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0


def test_importing_the_models_package_loads_no_http_client():
    code = (
        "import sys, runtime.models\n"
        "from runtime.models import resolve_provider\n"
        "resolve_provider(None, settings={}, cli_spec='openai:m@http://127.0.0.1:1/v1')\n"
        "print('httpx' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
