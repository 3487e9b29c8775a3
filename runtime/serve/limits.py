"""The server's limits: request body size, a bounded pool of concurrent runs, a run deadline."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runtime.serve.errors import ServeError

if TYPE_CHECKING:
    from starlette.requests import Request


@dataclass(frozen=True)
class Limits:
    """max_body_bytes per request, max_runs at once, deadline seconds per run, Retry-After."""

    max_body_bytes: int = 1_000_000
    max_runs: int = 8
    deadline: float = 300.0
    retry_after: int = 1


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The request's JSON object body, read up to `limit` bytes (over it: 413, coded)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    data = bytearray()
    async for chunk in request.stream():  # a body sent chunked is counted as it arrives
        data += chunk
        if len(data) > limit:
            raise _too_large(limit)
    if not data:
        return {}
    try:
        value = json.loads(bytes(data))
    except (ValueError, RecursionError) as exc:
        raise ServeError("SERVE_BAD_REQUEST", f"the body is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ServeError("SERVE_BAD_REQUEST", "the body must be a JSON object")
    return value


def _too_large(limit: int) -> ServeError:
    return ServeError("SERVE_BODY_TOO_LARGE", f"the request body is over {limit} bytes")


class Pool:
    """At most `size` runs at once; one more is refused at once (429 + Retry-After)."""

    def __init__(self, size: int, retry_after: int) -> None:
        self.size = size
        self.retry_after = retry_after
        self.active = 0

    def acquire(self) -> None:
        """Take a slot or raise SERVE_BUSY (called on the event loop: no lock needed)."""
        if self.active >= self.size:
            raise ServeError(
                "SERVE_BUSY",
                f"all {self.size} run slots are taken; retry in {self.retry_after} s",
                headers={"Retry-After": str(self.retry_after)},
            )
        self.active += 1

    def release(self) -> None:
        """Give a slot back."""
        self.active -= 1
