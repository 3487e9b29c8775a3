"""Tools a model step offers its model (`tools: [rehydrate]`), and the bounded call rounds.

A round: the model answers with tool calls instead of text; each call runs here and
its result goes back as a `tool` message; the model is asked again. After
`max_tool_rounds` rounds the model is asked once more with no tools offered, so it
must answer; a model that still calls a tool then fails the step with
`MODEL_TOOL_ROUNDS_EXCEEDED`.

A tool result is exact or absent, never cut: a rehydrated slice that does not fit what
is left of the prompt budget comes back as an error naming its size and the room left, so
the model can ask for a smaller slice. No request goes over the budget: when the tool
calls and the refusals alone leave the next request over it, the step fails with
`CONTEXT_OVERFLOW` (catchable) instead of sending it. Unknown tools, arguments that are not a JSON object
and failed rehydrations are answered the same way (an error the model reads) and each
is traced (`MODEL_TOOL_CALL` with its error code): the model caused them and can fix
them in the next round.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from runtime.contract.action import StepContext
from runtime.contract.text import invalid_text
from runtime.errors import ContextOverflowError, ModelError, StepRuntimeError

DEFAULT_TOOL_ROUNDS = 3
MAX_TOOL_ROUNDS = 10
# A tool call's arguments are read only up to this many characters (rehydrate's are a
# pointer id and a slice of at most 1,000 characters, escapes included): longer ones are
# refused unread, and echoed back to the model as a short note instead of whole.
MAX_TOOL_ARGUMENTS = 8_192

REHYDRATE_SPEC: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "rehydrate",
        "description": (
            "Fetch the exact original behind a pointer (a block marked as elided), whole or "
            "a slice of it."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "pointer_id": {"type": "string", "description": "The pointer's id."},
                "slice": {
                    "type": "string",
                    "description": "Optional: `lines A-B`, a JSON path such as `$.items[3]`, "
                    "or `hunk N` of a diff; omit for the whole original.",
                },
            },
            "required": ["pointer_id"],
            "additionalProperties": False,
        },
    },
}
SPECS = {"rehydrate": REHYDRATE_SPEC}


def _rehydrate(ctx: StepContext, args: dict[str, Any], room: int, token_bytes: int | None) -> str:
    """The original (or slice) behind a pointer; SliceTooLarge when over room by a bound."""
    from runtime.context.pointers import rehydrate

    pointer_id = args.get("pointer_id")
    part = args.get("slice")
    if not isinstance(pointer_id, str) or (part is not None and not isinstance(part, str)):
        raise ModelError(
            "rehydrate takes {pointer_id: string, slice?: string}", code="TOOL_ARGUMENTS_INVALID"
        )
    return str(rehydrate(ctx, pointer_id, part, max_tokens=max(room, 0), token_bytes=token_bytes))


HANDLERS: dict[str, Callable[[StepContext, dict[str, Any], int, int | None], str]] = {
    "rehydrate": _rehydrate
}


def complete(
    ctx: StepContext,
    provider: Any,
    request: Any,
    *,
    tools: list[str],
    rounds: int,
    spare: Callable[[list[dict[str, Any]]], int],
    overhead: int,
    count: Callable[[str], int],
    on_chunk: Any = None,
    on_round: Callable[[int, list[dict[str, Any]]], None] | None = None,
) -> tuple[Any, list[dict[str, Any]]]:
    """Ask the model, running the tools it calls for at most `rounds` rounds.

    Returns the final reply and the messages of the request that got it.
    `spare(messages)` is the prompt budget less the prompt `messages` make (negative when
    over); `overhead` the framing tokens of one more message; `on_round(n, messages)` is
    told of each request just before it is sent (n = 0 for the first).
    """
    offered = [SPECS[name] for name in tools]
    request = dataclasses.replace(request, tools=offered or None, messages=list(request.messages))
    for number in range(rounds + 1):
        if on_round is not None:
            on_round(number, request.messages)
        response = provider.complete(request, on_chunk=on_chunk)
        if not response.tool_calls:
            return response, request.messages
        if number == rounds:
            break
        assistant = {
            "role": "assistant",
            "content": response.text or None,
            "tool_calls": [_echoed(c) for c in response.tool_calls],
        }
        messages = [*request.messages, assistant]
        for call in response.tool_calls:
            content = _run(ctx, call, number + 1, spare(messages) - overhead, count)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        left = spare(messages)
        if left < 0:
            raise ContextOverflowError(
                f"tool round {number + 1}: the prompt with the model's tool calls and their "
                f"results is {-left} tokens over the prompt budget; nothing more fits"
            )
        last = number + 1 == rounds
        # The last round offers no tools: the model must answer with what it has.
        request = dataclasses.replace(request, messages=messages, tools=None if last else offered)
    raise ModelError(
        f"the model still called tools after {rounds} round(s) (max_tool_rounds) and a final "
        "request that offered none",
        code="MODEL_TOOL_ROUNDS_EXCEEDED",
    )


def _echoed(call: Any) -> dict[str, Any]:
    """The call as the next request repeats it: arguments over the limit as a short note."""
    size = len(call.arguments or "")
    if size <= MAX_TOOL_ARGUMENTS:
        return dict(call.to_message())
    note = json.dumps({"refused": f"{size:,} characters of arguments, not repeated"})
    return dict(dataclasses.replace(call, arguments=note).to_message())


def _cut(text: str, limit: int = 80) -> str:
    """A model-written string quoted in a message or the trace, cut when long."""
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text):,} characters)"


def _arguments(raw: str) -> dict[str, Any] | str:
    """The call's arguments as an object, or why not (short: never the arguments themselves)."""
    if len(raw) > MAX_TOOL_ARGUMENTS:
        return f"the arguments are {len(raw):,} characters, over the {MAX_TOOL_ARGUMENTS:,} limit"
    try:
        args = json.loads(raw or "{}")
    except RecursionError:  # nested thousands deep: json's C parser stops at its limit
        return "the arguments are nested too deep"
    except ValueError:
        return "the arguments are not a JSON object"
    if not isinstance(args, dict):
        return "the arguments are not a JSON object"
    # `"\ud800"` decodes to a lone surrogate, which no UTF-8 store or prompt can hold: refused
    # like any text that is not valid Unicode (runtime/contract/text.py), naming where.
    problem = invalid_text(args)
    return args if problem is None else f"the arguments are not valid Unicode text: {problem}"


def _run(ctx: StepContext, call: Any, number: int, room: int, count: Callable[[str], int]) -> str:
    """One tool call's result message; failures become an error the model reads, traced."""
    record: dict[str, Any] = {"round": number, "tool": _cut(call.name), "call_id": _cut(call.id)}
    args = _arguments(call.arguments)
    if isinstance(args, str):
        return _refuse(ctx, record, "TOOL_ARGUMENTS_INVALID", args)
    record.update(
        {k: _cut(args[k], 200) for k in ("pointer_id", "slice") if isinstance(args.get(k), str)}
    )
    handler = HANDLERS.get(call.name)
    if handler is None:
        return _refuse(ctx, record, "TOOL_UNKNOWN", f"no tool {_cut(call.name)!r} is offered")
    from runtime.context.pointers import SliceTooLarge, max_token_bytes

    try:  # `count` is the model's counter's count: its vocabulary bounds a slice unread
        result = handler(ctx, args, room, max_token_bytes(getattr(count, "__self__", None)))
    except SliceTooLarge as exc:
        return _refuse(
            ctx,
            record,
            "CONTEXT_OVERFLOW",
            f"the result is at least {exc.tokens:,} tokens ({exc.chars:,} characters or more) "
            f"and {max(room, 0)} fit in the window: ask for a smaller slice",
        )
    except StepRuntimeError as exc:
        return _refuse(ctx, record, exc.code, exc.message)
    tokens = count(result)
    if tokens > room:
        return _refuse(
            ctx,
            record,
            "CONTEXT_OVERFLOW",
            f"the result is {tokens} tokens and {max(room, 0)} fit in the window: ask for a "
            "smaller slice",
        )
    ctx.trace("MODEL_TOOL_CALL", **record, tokens=tokens, error=None)
    return result


def _refuse(ctx: StepContext, record: dict[str, Any], code: str, message: str) -> str:
    ctx.trace("MODEL_TOOL_CALL", **record, tokens=0, error=code, message=message)
    return f"error {code}: {message}"
