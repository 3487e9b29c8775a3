"""Cassettes: record model calls to JSONL, replay them per step id in order.

One line per call: `{"step_id": ..., "response": "...", "request": {...}}`. The
request holds messages and parameters only: providers never put keys in it.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

from runtime.errors import ModelError
from runtime.models.base import ChunkCallback, ModelConfig, ModelRequest, ModelResponse


def load(path: str) -> dict[str, deque[str]]:
    """step id -> recorded responses, in order."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ModelError(
            f"cannot read cassette {path}: {exc.strerror}", code="CASSETTE_INVALID"
        ) from exc
    out: dict[str, deque[str]] = defaultdict(deque)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            step, response = entry["step_id"], entry["response"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelError(
                f"cassette {path} line {number}: not a {{step_id, response}} object",
                code="CASSETTE_INVALID",
            ) from exc
        if not isinstance(response, str):
            raise ModelError(
                f"cassette {path} line {number}: response must be text", code="CASSETTE_INVALID"
            )
        out[str(step)].append(response)
    return out


class ReplayProvider:
    """Answers each step with its next recorded response."""

    def __init__(self, config: ModelConfig, path: str) -> None:
        self.config = config
        self.path = path
        self._responses = load(path)
        self._lock = threading.Lock()

    def complete(
        self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None
    ) -> ModelResponse:
        """The next recorded response for request.step_id."""
        with self._lock:
            queue = self._responses.get(request.step_id)
            if not queue:
                raise ModelError(
                    f"cassette {self.path} has no more responses for step {request.step_id!r}",
                    code="CASSETTE_EXHAUSTED",
                )
            text = queue.popleft()
        if on_chunk:
            on_chunk(text)
        return ModelResponse(text, 0, 0, 0.0, "replay", "replay")


class RecordingProvider:
    """Wraps any provider and appends each call to a cassette."""

    def __init__(self, inner: Any, path: str) -> None:
        self.inner = inner
        self.config = inner.config
        self.path = path
        self._lock = threading.Lock()
        Path(path).parent.mkdir(parents=True, exist_ok=True)

    def complete(
        self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None
    ) -> ModelResponse:
        """Call the inner provider, then record the exchange."""
        response = self.inner.complete(request, on_chunk=on_chunk)
        line = json.dumps(
            {"step_id": request.step_id, "response": response.text, "request": request.to_dict()},
            ensure_ascii=False,
        )
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
        return response
