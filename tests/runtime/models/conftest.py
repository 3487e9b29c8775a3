"""A scripted OpenAI-compatible chat server on 127.0.0.1 (threaded stdlib http.server).

Each request takes the next behaviour from `server.script` (a reply when the
script is empty) and is recorded in `server.requests`. Behaviours:

    {"reply": "text"}                       200 with choices and usage
    {"reply": "text", "usage": None}        200 without usage
    {"chunks": ["a", "b"]}                  streamed as SSE, then `data: [DONE]`
    {"chunks": [...], "usage": {...}}       the last event carries usage
    {"chunks": [...], "cut": True}          the connection closes before [DONE]
    {"chunks": [...], "error": "boom"}      an error event after the chunks
    {"status": 429, "headers": {...}}       an error status with a JSON error body
    {"raw": "..."}                          this exact 200 body
    {"hang": True}                          waits until the test ends (a read timeout)
    {"echo_key": True, "status": 400}       the error body quotes the Authorization header
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

USAGE = {"prompt_tokens": 11, "completion_tokens": 3}


class ChatServer:
    """Plays scripted behaviours, one per request; records what it received."""

    def __init__(self) -> None:
        self.script: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()  # ends hanging replies when the test is over
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        # A short poll interval: shutdown() waits for it at the end of every test.
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The base URL, as a model spec takes it."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def next_step(self, request: dict[str, Any]) -> dict[str, Any]:
        """Record a request and take its behaviour."""
        with self._lock:
            self.requests.append(request)
            return self.script.pop(0) if self.script else {"reply": "default"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                body = json.loads(raw)
                step = server.next_step(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                if step.get("hang"):
                    server.release.wait(10)
                    self.close_connection = True
                    return
                status = step.get("status", 200)
                json_type = {"Content-Type": "application/json"}
                if status != 200:
                    message = "scripted failure"
                    if step.get("echo_key"):
                        message += f"; you sent {self.headers.get('Authorization')}"
                    error = json.dumps({"error": {"message": message}}).encode()
                    self._send(status, error, {**json_type, **step.get("headers", {})})
                    return
                if "raw" in step:
                    self._send(200, step["raw"].encode(), json_type)
                    return
                if "chunks" in step and body.get("stream"):
                    self._stream(step)
                    return
                text = step["reply"] if "reply" in step else "".join(step["chunks"])
                reply: dict[str, Any] = {
                    "choices": [
                        {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    ]
                }
                usage = step.get("usage", USAGE)
                if usage is not None:
                    reply["usage"] = usage
                self._send(200, json.dumps(reply).encode(), json_type)

            def _stream(self, step: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                chunks = step["chunks"]
                self.wfile.write(b": keep-alive\n\n")
                for n, piece in enumerate(chunks):
                    choice: dict[str, Any] = {"delta": {"content": piece}, "index": 0}
                    if n == len(chunks) - 1 and not step.get("cut") and "error" not in step:
                        choice["finish_reason"] = "stop"
                    event: dict[str, Any] = {"choices": [choice]}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                if "error" in step:
                    event = {"error": {"message": step["error"]}}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                if step.get("cut"):
                    return
                if step.get("usage"):
                    event = {"choices": [], "usage": step["usage"]}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

        return Handler


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A started server, shut down (and any hanging reply released) after the test."""
    server = ChatServer()
    server.thread.start()
    yield server
    server.release.set()
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
