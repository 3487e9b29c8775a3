"""Cassettes: record model calls to JSONL, replay them per step id in order.

Several calls of one step can be in flight at once (the branches of a map or parallel step
run the same steps concurrently, and record in whatever order they finish): a replayed
call takes the first recorded response of its step whose recorded messages (all but the
system message, which names the run) are exactly its own, and only when none is, the step's next one in order (as a cassette recorded
before requests were kept, or a prompt changed since, is replayed).

One line per call::

    {"step_id": "...", "response": "...", "request": {messages and parameters},
     "model": "...", "tokens_in": N, "tokens_out": N, "finish_reason": "...",
     "tool_calls": [{"id": "...", "name": "...", "arguments": "<JSON text>"}],
     "context_window": N, "tokenizer": "..."}

`context_window`, `tokenizer` and `token_margin` are the recording model's: a replay budgets
its prompts against them (the first line's), so a replayed run decides exactly as the live
one did. `usage_from`, `cached_tokens`, `response_format` and `retries` (the provider's
retries on the wire) are replayed into the trace as recorded.

A step that calls tools records one line per round, in order: the rounds that asked
for tools, then the answer; replay plays them back in the same order.

`step_id` and `response` are required; the other keys are optional on replay,
which returns them as recorded so a replayed run's trace matches the live one.
The request holds messages and parameters only: providers never put keys in it,
and no header is recorded. Every configured secret is scrubbed from the whole line
before it is written (a server may echo the key, a prompt may quote one).
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime.errors import ModelError
from runtime.models.base import (
    ChunkCallback,
    ModelConfig,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ToolCall,
)


def recorded_profile(path: str | Path) -> dict[str, Any]:
    """The recording model's window and tokenizer from a cassette's first line ({} if absent)."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline()
    except OSError:
        return {}  # a missing cassette is CASSETTE_INVALID when the provider opens it
    try:
        entry = json.loads(first.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is one
        return {}  # reported with its line number when the provider reads the file
    if not isinstance(entry, dict):
        return {}
    out: dict[str, Any] = {}
    window = entry.get("context_window")
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        out["context_window"] = window
    if isinstance(entry.get("tokenizer"), str) and entry["tokenizer"]:
        out["tokenizer"] = entry["tokenizer"]
    margin = entry.get("token_margin")
    if isinstance(margin, int | float) and not isinstance(margin, bool) and 0 <= margin <= 1:
        out["token_margin"] = float(margin)
    return out


def _invalid(path: str, number: int, message: str) -> ModelError:
    return ModelError(f"cassette {path} line {number}: {message}", code="CASSETTE_INVALID")


def request_key(request: Any) -> str | None:
    """What identifies a recorded call among its step's: its messages but the system
    message (which names the run), canonical; None when none were recorded."""
    messages = request.get("messages") if isinstance(request, dict) else None
    if not isinstance(messages, list):
        return None
    kept = [m for m in messages if not (isinstance(m, dict) and m.get("role") == "system")]
    return json.dumps(kept, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _entry(path: str, number: int, line: str) -> tuple[str, str | None, ModelResponse]:
    try:
        entry = json.loads(line)
    except ValueError as exc:
        raise _invalid(path, number, "not JSON") from exc
    if not isinstance(entry, dict):
        raise _invalid(path, number, "not a JSON object")
    step, text = entry.get("step_id"), entry.get("response")
    if not isinstance(step, str):
        raise _invalid(path, number, "`step_id` must be a string")
    if not isinstance(text, str):
        raise _invalid(path, number, "`response` must be a string")
    counts = []
    for key in ("tokens_in", "tokens_out"):
        value = entry.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _invalid(path, number, f"`{key}` must be a non-negative integer")
        counts.append(value)
    model, finish = entry.get("model", "replay"), entry.get("finish_reason", "stop")
    if not isinstance(model, str) or not isinstance(finish, str):
        raise _invalid(path, number, "`model` and `finish_reason` must be strings")
    calls = entry.get("tool_calls", [])
    if not isinstance(calls, list) or not all(
        isinstance(c, dict)
        and set(c) == {"id", "name", "arguments"}
        and all(isinstance(v, str) for v in c.values())
        for c in calls
    ):
        raise _invalid(path, number, "`tool_calls` must be a list of {id, name, arguments}")
    tools = [ToolCall(c["id"], c["name"], c["arguments"]) for c in calls]
    usage_from = entry.get("usage_from", "tokenizer")
    cached = entry.get("cached_tokens")
    fmt = entry.get("response_format")
    if not isinstance(usage_from, str):
        raise _invalid(path, number, "`usage_from` must be a string")
    if cached is not None and (
        isinstance(cached, bool) or not isinstance(cached, int) or cached < 0
    ):
        raise _invalid(path, number, "`cached_tokens` must be a non-negative integer")
    if fmt is not None and not isinstance(fmt, dict):
        raise _invalid(path, number, "`response_format` must be an object")
    retries = entry.get("retries", [])
    if not isinstance(retries, list) or not all(isinstance(r, dict) for r in retries):
        raise _invalid(path, number, "`retries` must be a list of objects")
    response = ModelResponse(
        text,
        counts[0],
        counts[1],
        0.0,
        model,
        "replay",
        finish,
        tools,
        usage_from=usage_from,
        cached_tokens=cached,
        response_format=fmt,
        retries=retries,
    )
    return step, request_key(entry.get("request")), response


def load(path: str) -> dict[str, deque[tuple[str | None, ModelResponse]]]:
    """step id -> (request key, recorded response), in order; CASSETTE_INVALID names the
    bad line."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise ModelError(f"cassette {path} does not exist", code="CASSETTE_INVALID") from exc
    except OSError as exc:
        raise ModelError(
            f"cannot read cassette {path}: {exc.strerror or exc}", code="CASSETTE_INVALID"
        ) from exc
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(path, data[: exc.start].count(b"\n") + 1, "not UTF-8") from exc
    out: dict[str, deque[tuple[str | None, ModelResponse]]] = defaultdict(deque)
    # split("\n"), not splitlines(): a response may hold U+2028, which JSON leaves unescaped.
    for number, line in enumerate(content.split("\n"), start=1):
        if line.strip():
            step, key, response = _entry(path, number, line)
            out[step].append((key, response))
    return out


class ReplayProvider:
    """Answers each step with its next recorded response; thread-safe."""

    restorable_state = True  # every request carries its whole conversation

    def __init__(self, config: ModelConfig, path: str) -> None:
        self.config = config
        self.path = path
        self._responses = load(path)
        self._lock = threading.Lock()

    def remaining(self, step_id: str) -> int:
        """How many recorded responses are left for a step."""
        with self._lock:
            return len(self._responses.get(step_id, ()))

    def complete(
        self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None
    ) -> ModelResponse:
        """The next recorded response for request.step_id, else CASSETTE_EXHAUSTED."""
        with self._lock:
            queue = self._responses.get(request.step_id)
            if not queue:
                raise ModelError(
                    f"cassette {self.path} has no more responses for step {request.step_id!r}",
                    code="CASSETTE_EXHAUSTED",
                    step_id=request.step_id or None,
                )
            key = request_key(request.to_dict()) if len(queue) > 1 else None
            for i, (recorded_key, candidate) in enumerate(queue):
                if key is not None and recorded_key == key:
                    recorded = candidate
                    del queue[i]
                    break
            else:
                recorded = queue.popleft()[1]
        if on_chunk is not None:
            on_chunk(recorded.text)
        return ModelResponse(
            recorded.text,
            recorded.tokens_in,
            recorded.tokens_out,
            0.0,
            recorded.model,
            "replay",
            recorded.finish_reason,
            list(recorded.tool_calls),
            # As the live call reported them, so the replayed trace is the recorded one.
            usage_from=recorded.usage_from,
            cached_tokens=recorded.cached_tokens,
            response_format=recorded.response_format,
            retries=[dict(r) for r in recorded.retries],
        )


class RecordingProvider:
    """Wraps any provider and appends one cassette line per successful call."""

    def __init__(
        self, inner: ModelProvider, path: str, settings: Mapping[str, Any] | None = None
    ) -> None:
        self.inner = inner
        self.config = inner.config
        self.restorable_state = inner.restorable_state
        self.path = path
        self.settings: Mapping[str, Any] = settings or {}  # names the keys to scrub
        self._lock = threading.Lock()
        Path(path).parent.mkdir(parents=True, exist_ok=True)

    def complete(
        self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None
    ) -> ModelResponse:
        """Call the inner provider, then append the exchange (flushed before returning)."""
        response = self.inner.complete(request, on_chunk=on_chunk)
        entry: dict[str, Any] = {
            "step_id": request.step_id,
            "response": response.text,
            "request": request.to_dict(),
            "model": response.model,
            "tokens_in": response.tokens_in,
            "tokens_out": response.tokens_out,
            "finish_reason": response.finish_reason,
            "usage_from": response.usage_from,
            "context_window": self.config.context_window,
            "tokenizer": self.config.tokenizer,
        }
        if self.config.token_margin:  # the replay budgets with the same margin
            entry["token_margin"] = self.config.token_margin
        if response.tool_calls:
            entry["tool_calls"] = [c.to_dict() for c in response.tool_calls]
        for key in ("cached_tokens", "response_format"):
            if getattr(response, key) is not None:
                entry[key] = getattr(response, key)
        if response.retries:  # the provider's retries on the wire, replayed into the trace
            entry["retries"] = response.retries
        from runtime.models.guard import scrubber_for

        line = json.dumps(scrubber_for(self.settings, self.config).data(entry), ensure_ascii=False)
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
        return response

    def close(self) -> None:
        """Close the wrapped provider when it holds connections."""
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()
