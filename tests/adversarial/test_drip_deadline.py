"""A server that drips one byte at a time cannot hold a model call past its deadline.

httpx's timeouts are per read: a byte every 0.2 s never trips a 2 s read timeout. The
dripping server here is a raw socket on 127.0.0.1 that drips the status line and headers,
a JSON body, or SSE `: keep-alive` comments, and completes a valid reply only after
`GIVE_UP` seconds (so code without a whole-call deadline gets a reply and the test fails
instead of hanging). A call must fail with MODEL_TIMEOUT and cut the connection, which
the server sees as the client hanging up; no elapsed time is asserted.
"""

from __future__ import annotations

import json
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runtime
from runtime.engine.services import Services
from runtime.errors import ModelTimeoutError
from runtime.retrieval.embeddings import OpenAIEmbedder

TICK = 0.05  # seconds between dripped bytes
GIVE_UP = 8.0  # the server completes its reply after this long (only code without a deadline waits)
DEADLINE = 0.25
HANG_UP_WAIT = 10.0  # a generous cap on waiting for the server to notice the cut connection

REPLY = json.dumps(
    {"choices": [{"message": {"role": "assistant", "content": "late"}, "finish_reason": "stop"}]}
)
EVENT = json.dumps({"choices": [{"delta": {"content": "late"}, "finish_reason": "stop"}]})
EMBEDDING = json.dumps({"data": [{"index": 0, "embedding": [1.0, 0.0]}]})


class DripServer:
    """Answers every connection by dripping `mode`'s reply a byte per TICK.

    modes: `headers` (the status line and headers themselves), `json` (a JSON body of
    spaces, then the reply), `sse` (`: keep-alive` comments, then one event and [DONE]),
    `embeddings` (like json, with an /embeddings reply).
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.connections = 0
        self.hung_up = threading.Semaphore(0)  # released once per connection the client cut
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.threads: list[threading.Thread] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for t in self.threads:
            t.join()
        self.sock.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _parts(self) -> tuple[bytes, bytes, bytes]:
        """(sent at once, dripped repeatedly, sent after GIVE_UP)."""
        if self.mode == "headers":
            head = f"Content-Type: application/json\r\nContent-Length: {len(REPLY)}\r\n\r\n"
            return b"HTTP/1.1 200 OK\r\nX-Drip: ", b"a", ("\r\n" + head + REPLY).encode()
        if self.mode == "sse":
            head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            done = f"data: {EVENT}\n\ndata: [DONE]\n\n"
            return head.encode(), b": keep-alive\n\n", done.encode()
        body = EMBEDDING if self.mode == "embeddings" else REPLY
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
        return head.encode(), b" ", body.encode()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                piece = conn.recv(65536)
                if not piece:  # the client gave up before its request was whole (a busy
                    self.hung_up.release()  # machine: the deadline came first); not a spin
                    return
                request += piece
            first, drip, last = self._parts()
            waited = 0.0
            try:
                conn.sendall(first)
                while waited < GIVE_UP and not self.stop.is_set():
                    for byte in drip:
                        if self.stop.wait(TICK):
                            return
                        waited += TICK
                        readable, _, _ = select.select([conn], [], [], 0)
                        if readable and conn.recv(65536) == b"":
                            raise ConnectionResetError("the client closed the connection")
                        conn.sendall(bytes([byte]))
                conn.sendall(last)
            except OSError:  # BrokenPipe, ConnectionReset: the client hung up
                self.hung_up.release()


@pytest.fixture
def drip() -> Iterator[Any]:
    servers: list[DripServer] = []

    def start(mode: str) -> DripServer:
        server = DripServer(mode)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Answer.\n")
    path = tmp_path / "p.yaml"
    path.write_text(
        "settings:\n"
        "  entry_step_id: ask\n"
        "steps:\n"
        "  - {id: ask, action: call_model, prompt_key: sys, next: done,\n"
        "     user_parts: {q: {source: question}}}\n"
        "  - {id: done, action: finalize, source: last_model_response}\n"
    )
    return path


def run(pipeline: Path, server: DripServer, *, retries: int = 0, stream: bool = False) -> Any:
    loaded = runtime.load(str(pipeline))
    settings = {
        **loaded.settings,
        "models": {
            "drip": {
                "provider": "openai",
                "model": "m",
                "base_url": server.url,
                # Per read: a byte every TICK never trips it, and a longer gap would start
                # after the request did, so the deadline always comes first.
                "timeout_seconds": DEADLINE,
                "connect_timeout_seconds": DEADLINE,
                "deadline_seconds": DEADLINE,
                "max_retries": retries,
            }
        },
    }
    pieces: list[str] = []
    services = Services(
        settings=settings,
        model_spec="drip",
        base_dir=str(pipeline.parent),
        on_model_chunk=pieces.append if stream else None,
    )
    result = runtime.Runner(loaded, services=services).run({"question": "q?"}, run_id="drip")
    return result, pieces


@pytest.mark.parametrize("mode,stream", [("headers", False), ("json", False), ("sse", True)])
def test_a_dripping_model_server_fails_the_call_at_its_deadline(drip, pipeline, mode, stream):
    server = drip(mode)
    result, pieces = run(pipeline, server, stream=stream)
    assert result.status == "failed"
    assert (result.error.code, result.error.step_id) == ("MODEL_TIMEOUT", "ask")
    assert f"did not finish within deadline_seconds={DEADLINE:g}" in result.error.message
    assert pieces == []
    assert server.hung_up.acquire(timeout=HANG_UP_WAIT), "the connection was left open"
    assert server.connections == 1


def test_a_call_cut_at_its_deadline_is_retried_like_any_timeout(drip, pipeline):
    server = drip("json")
    result, _ = run(pipeline, server, retries=1)
    assert result.error.code == "MODEL_TIMEOUT"
    assert result.error.message.endswith("(gave up after 2 attempts)")
    for _ in range(2):
        assert server.hung_up.acquire(timeout=HANG_UP_WAIT)
    assert server.connections == 2


def test_the_embeddings_endpoint_has_the_same_deadline(drip):
    server = drip("embeddings")
    embedder = OpenAIEmbedder("e", server.url, deadline_seconds=DEADLINE)
    with pytest.raises(ModelTimeoutError) as info:
        embedder.embed(["basket"])
    assert info.value.code == "MODEL_TIMEOUT"
    assert server.hung_up.acquire(timeout=HANG_UP_WAIT)
    assert server.connections == 1
