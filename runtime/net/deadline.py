"""A whole-request deadline for httpx: connect, headers, body and stream together.

httpx's timeouts bound each socket operation, not the request: a server sending one
byte every second (or an SSE `: keep-alive` comment) never trips a read timeout and
holds the caller forever. `Deadline` arms a timer for the whole request; when it fires,
the connection's socket is shut down, which wakes any blocked read at once. The socket
is learnt from httpcore's documented `trace` request extension when the connection is
opened, so the client must not reuse pooled connections (`LIMITS`): a reused connection
opens nothing the trace could see.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

# No keep-alive: every request opens its own connection, so the deadline can always cut it.
KEEPALIVE_CONNECTIONS = 0


def client_limits() -> Any:
    """httpx limits for a client whose requests run under a Deadline (no pooled connections)."""
    import httpx

    return httpx.Limits(max_keepalive_connections=KEEPALIVE_CONNECTIONS)


class Deadline:
    """One request's deadline; use as a context manager around the whole exchange.

    `expired` tells, after a failure, whether the deadline caused it (the cut connection
    surfaces as a read or protocol error, or a stream that ends early).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._ends = 0.0

    def __enter__(self) -> Deadline:
        self._ends = time.monotonic() + self.seconds
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def remaining(self) -> float:
        """Seconds left (never below a millisecond: httpx treats 0 as no timeout)."""
        return max(0.001, self._ends - time.monotonic())

    def timeout(self, read: float | None, connect: float) -> Any:
        """httpx timeouts for this request: connecting and waiting for the pool end by the deadline.

        Only those two: before a connection exists there is no socket for the timer to cut.
        Reads and writes keep their own timeout (None: none), since the timer ends them at the
        deadline.
        """
        import httpx

        left = self.remaining()
        pool = left if read is None else min(read, left)
        return httpx.Timeout(read, connect=min(connect, left), pool=pool)

    def extensions(self) -> dict[str, Any]:
        """The request extensions that let the deadline see the connection's socket."""
        return {"trace": self._trace}

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        # connect_tcp gives the plain socket; start_tls replaces it (wrapping detaches the first).
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            with self._lock:
                self._sock = sock
                late = self.expired
            if late:
                self._cut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sock = self._sock
        self._cut(sock)

    @staticmethod
    def _cut(sock: socket.socket | None) -> None:
        if sock is None:
            return
        # Shut down, not closed: that wakes a read blocked in another thread. OSError: the
        # connection is already closed, nothing is left to cut.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
