"""A chat-completions server on 127.0.0.1 for tests that need a model to answer and fail.

It answers streamed and plain requests alike, so a test holds whichever way the provider
asks. Used in-process (CliRunner, the embedding API) and by tests that start `runtime`
as a child process.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and reads a request's JSON body."""

    def log_message(self, *args: Any) -> None:
        pass

    def json_body(self) -> Any:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))


class LocalServer:
    """An HTTP server on 127.0.0.1 (a free port), served from a daemon thread."""

    httpd: ThreadingHTTPServer
    thread: threading.Thread

    def listen(self, handler: type[BaseHTTPRequestHandler]) -> None:
        """Bind the port; `start` serves it."""
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Server(LocalServer):
    """Answers chat completions from a script: a string is a reply, an int an HTTP status."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.bodies: list[dict[str, Any]] = []
        # "hang" in the script: the request is held (hung set) until release is set.
        self.hung = threading.Event()
        self.release = threading.Event()
        server = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.json_body()
                server.bodies.append(body)
                step = server.script.pop(0) if server.script else "default"
                if step == "hang":
                    server.hung.set()
                    server.release.wait(60)
                    step = 503
                if isinstance(step, int):
                    self.send_response(step)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "scripted failure"}}')
                    return
                usage = {"prompt_tokens": 11, "completion_tokens": 3}
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for event in (
                        {"choices": [{"index": 0, "delta": {"content": step}}]},
                        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                        {"choices": [], "usage": usage},
                    ):
                        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                reply = {
                    "choices": [
                        {"message": {"role": "assistant", "content": step}, "finish_reason": "stop"}
                    ],
                    "usage": usage,
                }
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps(reply).encode())

        self.listen(Handler)
        self.start()

    def close(self) -> None:
        self.release.set()
        super().close()
