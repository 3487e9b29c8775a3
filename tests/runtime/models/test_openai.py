"""The OpenAI-compatible provider against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import pytest

from runtime.errors import ModelError
from runtime.models import ModelConfig, ModelRequest
from runtime.models.openai import OpenAIProvider

KEY = "sk-test-secret-123"


def provider(server, monkeypatch, **kw):
    monkeypatch.setenv("TEST_KEY", KEY)
    delays: list[float] = []
    cfg = ModelConfig(
        "local",
        "openai",
        model="m",
        base_url=server.url,
        api_key_env="TEST_KEY",
        timeout_seconds=kw.pop("timeout", 5.0),
        max_retries=kw.pop("retries", 2),
    )
    p = OpenAIProvider(cfg, sleep=delays.append, count_tokens=len)
    return p, delays


def req(**kw):
    return ModelRequest(messages=[{"role": "user", "content": "hi"}], step_id="s", **kw)


def test_plain_reply_with_usage_and_bearer_key(chat_server, monkeypatch):
    chat_server.script = [{"reply": "hello"}]
    p, _ = provider(chat_server, monkeypatch)
    r = p.complete(req(json_mode=True, temperature=0.1))
    assert (r.text, r.tokens_in, r.tokens_out, r.provider) == ("hello", 11, 3, "openai")
    sent = chat_server.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["Authorization"] == f"Bearer {KEY}"
    assert (
        sent["body"]["response_format"] == {"type": "json_object"}
        and sent["body"]["temperature"] == 0.1
    )


def test_streamed_reply_calls_back_per_chunk(chat_server, monkeypatch):
    chat_server.script = [{"chunks": ["Hel", "lo", " world"]}]
    p, _ = provider(chat_server, monkeypatch)
    seen: list[str] = []
    r = p.complete(req(), on_chunk=seen.append)
    assert seen == ["Hel", "lo", " world"] and r.text == "Hello world"
    assert (r.tokens_in, r.tokens_out) == (2, 11)  # no usage in the stream: counted


def test_429_retry_after_is_honoured(chat_server, monkeypatch):
    chat_server.script = [{"status": 429, "headers": {"Retry-After": "3"}}, {"reply": "ok"}]
    p, delays = provider(chat_server, monkeypatch)
    assert p.complete(req()).text == "ok"
    assert p.attempts == 2 and delays[0] >= 3


@pytest.mark.parametrize(
    "status,code", [(429, "MODEL_RATE_LIMITED"), (500, "MODEL_PROVIDER_ERROR")]
)
def test_retries_exhausted(chat_server, monkeypatch, status, code):
    chat_server.script = [{"status": status}] * 5
    p, delays = provider(chat_server, monkeypatch)
    with pytest.raises(ModelError) as info:
        p.complete(req())
    assert info.value.code == code and p.attempts == 3 and len(delays) == 2


def test_500_then_success(chat_server, monkeypatch):
    chat_server.script = [{"status": 503}, {"reply": "fine"}]
    p, _ = provider(chat_server, monkeypatch)
    assert p.complete(req()).text == "fine" and p.attempts == 2


def test_slow_reply_times_out(chat_server, monkeypatch):
    chat_server.script = [{"sleep": 1.0, "reply": "late"}] * 2
    p, _ = provider(chat_server, monkeypatch, timeout=0.2, retries=1)
    with pytest.raises(ModelError) as info:
        p.complete(req())
    assert info.value.code == "MODEL_TIMEOUT"


def test_malformed_json_is_a_provider_error(chat_server, monkeypatch):
    chat_server.script = [{"raw": "{not json"}]
    p, _ = provider(chat_server, monkeypatch)
    with pytest.raises(ModelError) as info:
        p.complete(req())
    assert info.value.code == "MODEL_PROVIDER_ERROR" and p.attempts == 1


def test_auth_failure_is_not_retried_and_never_leaks_the_key(chat_server, monkeypatch):
    chat_server.script = [{"status": 401}]
    p, _ = provider(chat_server, monkeypatch)
    with pytest.raises(ModelError) as info:
        p.complete(req())
    assert info.value.code == "MODEL_AUTH_ERROR" and p.attempts == 1
    assert KEY not in str(info.value) and KEY not in repr(info.value.__dict__)


def test_unreachable_server(monkeypatch):
    cfg = ModelConfig(
        "x",
        "openai",
        model="m",
        base_url="http://127.0.0.1:9/v1",
        max_retries=1,
        connect_timeout_seconds=0.5,
    )
    p = OpenAIProvider(cfg, sleep=lambda s: None)
    with pytest.raises(ModelError) as info:
        p.complete(req())
    assert info.value.code in ("MODEL_PROVIDER_ERROR", "MODEL_TIMEOUT")
