"""A hostile /tokenize server: every bad answer is TOKENIZER_UNAVAILABLE, never a traceback,
never a wrong count, and the key it was sent never appears in the error."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from runtime.context.tokens import counter_for
from runtime.errors import TokenizerError
from runtime.models.base import ModelConfig

KEY = "sk-tokenize-secret-123"

ANSWERS: dict[str, tuple[int, bytes]] = {
    "not json": (200, b"<html>tokenizer</html>"),
    "a string": (200, json.dumps({"tokens": "1 2 3"}).encode()),
    "floats": (200, json.dumps({"tokens": [1.5, 2]}).encode()),
    "booleans": (200, json.dumps({"tokens": [True, False]}).encode()),
    "pieces": (200, json.dumps({"tokens": [{"id": 1, "piece": "a"}]}).encode()),
    "no tokens": (200, json.dumps({"count": 3}).encode()),
    "a list": (200, json.dumps([1, 2, 3]).encode()),
    "echoed key, 500": (500, json.dumps({"error": f"bad key {KEY}"}).encode()),
    "echoed key, 401": (401, json.dumps({"error": f"bad key {KEY}"}).encode()),
    "echoed key, 404": (404, f"no route; you sent Bearer {KEY}".encode()),
}


@pytest.fixture
def server() -> Iterator[dict[str, Any]]:
    state: dict[str, Any] = {"answer": (200, b"{}")}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            status, body = state["answer"]
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    ).start()
    state["url"] = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield state
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("kind", sorted(ANSWERS))
def test_every_bad_answer_is_tokenizer_unavailable_without_the_key(server, monkeypatch, kind):
    monkeypatch.setenv("TOK_KEY", KEY)
    server["answer"] = ANSWERS[kind]
    config = ModelConfig(
        f"m-{kind}",
        "openai",
        model="m",
        base_url=server["url"],
        tokenizer="server",
        api_key_env="TOK_KEY",
        headers={"X-Case": kind.replace(",", "")},  # a counter of its own per case
    )
    counter = counter_for(config)
    with pytest.raises(TokenizerError) as exc:
        counter.count(f"text for {kind}")
    assert exc.value.code == "TOKENIZER_UNAVAILABLE"
    assert KEY not in exc.value.message and KEY not in (exc.value.hint or "")
    assert "/tokenize" in exc.value.message
    # Nothing was remembered from the bad answer: asked again, it fails again.
    with pytest.raises(TokenizerError):
        counter.count(f"text for {kind}")
