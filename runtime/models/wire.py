"""The OpenAI chat-completions wire format: request body, reply body, server-sent events.

Pure functions over plain data, so the format is testable without a server. Every
malformed reply is a `ModelProviderError`; none is retried except a stream that
ends early (the connection was cut).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import ModelProviderError
from runtime.models.base import ModelRequest, ToolCall

# OpenAI's rule for a response_format name: letters, digits, _ and -, at most 64.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass
class Reply:
    """What one exchange produced: text, the server's token counts when given, why it stopped."""

    text: str
    tokens_in: int | None = None
    tokens_out: int | None = None
    finish_reason: str = "stop"
    tool_calls: list[ToolCall] = field(default_factory=list)
    cached_tokens: int | None = None  # prompt tokens the server took from its cache


SYSTEM_NOTE = "Instructions for this step:"


def request_body(
    request: ModelRequest,
    model: str,
    stream: bool,
    *,
    structured_output: str = "json_schema",
    later_system: str = "keep",
) -> dict[str, Any]:
    """The JSON body for POST /chat/completions.

    structured_output: how a step's json_schema is sent (`json_schema`, `json_object`,
    `none`); later_system: `user` folds system messages after the first into user turns.
    """
    messages = request.messages
    if later_system == "user":
        messages = fold_later_system(messages)
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": request.max_output_tokens,
        "stream": stream,
    }
    if stream:
        # The server's own counts arrive in the last event (OpenAI, vLLM, llama.cpp, Ollama).
        body["stream_options"] = {"include_usage": True}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    fmt = response_format(request, structured_output)
    if fmt is not None:
        body["response_format"] = fmt
    if request.tools:
        body["tools"] = request.tools
    return body


def response_format(request: ModelRequest, structured_output: str) -> dict[str, Any] | None:
    """The `response_format` for a JSON step: its schema when the server takes one."""
    if not request.json_mode or structured_output == "none":
        return None
    if structured_output == "json_schema" and request.json_schema is not None:
        name = request.step_id if _NAME.match(request.step_id or "") else "reply"
        return {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": request.json_schema, "strict": False},
        }
    return {"type": "json_object"}


def fold_later_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One leading system message at most: each later one becomes a note in a user turn.

    A later system message is prefixed to the user turn that follows it (or becomes a user
    turn of its own when an assistant turn or the end follows), so the roles still
    alternate as strict chat templates require. The first system message stays first.
    """
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for i, message in enumerate(messages):
        if message.get("role") == "system" and i > 0:
            pending.append(str(message.get("content") or ""))
            continue
        if pending and message.get("role") == "user" and isinstance(message.get("content"), str):
            message = {**message, "content": f"{_note(pending)}\n\n{message['content']}"}
            pending = []
        elif pending:
            _note_after(out, pending)
            pending = []
        out.append(message)
    if pending:
        _note_after(out, pending)
    return out


def _note(pending: list[str]) -> str:
    """Later system messages as one note for a user turn."""
    return SYSTEM_NOTE + "\n" + "\n\n".join(pending)


def _note_after(out: list[dict[str, Any]], pending: list[str]) -> None:
    """The notes appended to a user turn just before them, else as a user turn of their own."""
    text = _note(pending)
    last = out[-1] if out else None
    if last is not None and last.get("role") == "user" and isinstance(last.get("content"), str):
        out[-1] = {**last, "content": f"{last['content']}\n\n{text}"}
    else:
        out.append({"role": "user", "content": text})


def _tool_calls(raw: Any, quote: Callable[[str], str]) -> list[ToolCall]:
    """`message.tool_calls` as ToolCalls; a malformed entry is a provider error, not skipped."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ModelProviderError(f"tool_calls is not a list: {quote(json.dumps(raw))}")
    out = []
    for call in raw:
        function = call.get("function") if isinstance(call, dict) else None
        if not (
            isinstance(function, dict)
            and isinstance(call.get("id"), str)
            and isinstance(function.get("name"), str)
            and isinstance(function.get("arguments", ""), str)
        ):
            raise ModelProviderError(f"malformed tool call: {quote(json.dumps(call))}")
        out.append(ToolCall(call["id"], function["name"], function.get("arguments") or ""))
    return out


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _usage(data: dict[str, Any]) -> tuple[int | None, int | None]:
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return None, None
    return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def _cached(data: dict[str, Any]) -> int | None:
    """Prompt tokens served from the server's cache: OpenAI/vLLM usage details, llama.cpp timings."""
    usage = data.get("usage")
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    timings = data.get("timings")
    if cached is None and isinstance(timings, dict):
        cached = _count(timings.get("cache_n"))
    return cached


def error_message(data: Any) -> str | None:
    """The message of an OpenAI-style `{"error": ...}` object, if that is what data is."""
    error = data.get("error") if isinstance(data, dict) else None
    if error is None:
        return None
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or error)
    return str(error)


def _excerpt(text: str) -> str:
    return repr(text[:120])


def parse_body(text: str, quote: Callable[[str], str] = _excerpt) -> Reply:
    """A non-streamed reply: choices[0].message.content plus usage; quote() renders server text."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ModelProviderError(f"the reply is not JSON: {quote(text)}") from exc
    problem = error_message(data)
    if problem is not None:
        raise ModelProviderError(f"the server reported an error: {quote(problem)}")
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ModelProviderError(f"the reply has no choices: {quote(text)}")
    choice = choices[0]
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    calls = _tool_calls(message.get("tool_calls"), quote) if isinstance(message, dict) else []
    if content is None and calls:
        content = ""  # a tool call alone carries no text
    if not isinstance(content, str):
        raise ModelProviderError(
            f"the reply has no text content (finish_reason {choice.get('finish_reason')!r})"
        )
    tokens_in, tokens_out = _usage(data)
    finish = str(choice.get("finish_reason") or "stop")
    return Reply(content, tokens_in, tokens_out, finish, calls, _cached(data))


def parse_stream(
    lines: Iterable[str], on_piece: Callable[[str], None], quote: Callable[[str], str] = _excerpt
) -> Reply:
    """A streamed reply: `data:` events until `[DONE]`, each text delta passed to on_piece."""
    parts: list[str] = []
    calls: dict[int, dict[str, Any]] = {}  # index -> {id, name, arguments pieces}
    tokens_in = tokens_out = cached = None
    finish: str | None = None
    done = False
    for line in lines:
        if not line.startswith("data:"):
            continue  # blank separators, `: keep-alive` comments, `event:` and `id:` fields
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            break
        try:
            event = json.loads(payload)
        except ValueError as exc:
            raise ModelProviderError(f"malformed stream event: {quote(payload)}") from exc
        problem = error_message(event)
        if problem is not None:
            raise ModelProviderError(f"the server reported an error mid-stream: {quote(problem)}")
        if not isinstance(event, dict):
            raise ModelProviderError(f"malformed stream event: {quote(payload)}")
        got_in, got_out = _usage(event)
        tokens_in = got_in if got_in is not None else tokens_in
        tokens_out = got_out if got_out is not None else tokens_out
        got_cached = _cached(event)
        cached = got_cached if got_cached is not None else cached
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict):
                raise ModelProviderError(f"malformed stream choice: {quote(payload)}")
            delta = choice.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(piece, str) and piece:
                parts.append(piece)
                on_piece(piece)
            if isinstance(delta, dict) and delta.get("tool_calls") is not None:
                _stream_calls(delta["tool_calls"], calls, payload, quote)
            finish = choice.get("finish_reason") or finish
    if not done and finish is None:
        # The connection ended mid-reply: worth a retry if nothing was passed on yet.
        raise ModelProviderError("the stream ended before [DONE]", retryable=True)
    tool_calls = _tool_calls(
        [
            {"id": c["id"], "function": {"name": c["name"], "arguments": "".join(c["arguments"])}}
            for _, c in sorted(calls.items())
        ],
        quote,
    )
    return Reply("".join(parts), tokens_in, tokens_out, str(finish or "stop"), tool_calls, cached)


def _stream_calls(
    deltas: Any, calls: dict[int, dict[str, Any]], payload: str, quote: Callable[[str], str]
) -> None:
    """Fold streamed tool-call deltas (id and name once, arguments in pieces) by index."""
    if not isinstance(deltas, list):
        raise ModelProviderError(f"malformed tool call delta: {quote(payload)}")
    for delta in deltas:
        index = delta.get("index") if isinstance(delta, dict) else None
        if not isinstance(index, int):
            raise ModelProviderError(f"malformed tool call delta: {quote(payload)}")
        call = calls.setdefault(index, {"id": None, "name": None, "arguments": []})
        function = delta.get("function") or {}
        if isinstance(delta.get("id"), str):
            call["id"] = delta["id"]
        if isinstance(function, dict):
            if isinstance(function.get("name"), str):
                call["name"] = function["name"]
            if isinstance(function.get("arguments"), str):
                call["arguments"].append(function["arguments"])
