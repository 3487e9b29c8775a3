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
from runtime.errors import ContextOverflowError, ModelError, StepRuntimeError

DEFAULT_TOOL_ROUNDS = 3
MAX_TOOL_ROUNDS = 10

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


def _rehydrate(ctx: StepContext, args: dict[str, Any]) -> str:
    """The original (or slice) behind a pointer, from the run's pointer store."""
    from runtime.context.pointers import rehydrate

    pointer_id = args.get("pointer_id")
    part = args.get("slice")
    if not isinstance(pointer_id, str) or (part is not None and not isinstance(part, str)):
        raise ModelError(
            "rehydrate takes {pointer_id: string, slice?: string}", code="TOOL_ARGUMENTS_INVALID"
        )
    return str(rehydrate(ctx, pointer_id, part))


HANDLERS: dict[str, Callable[[StepContext, dict[str, Any]], str]] = {"rehydrate": _rehydrate}


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
            "tool_calls": [c.to_message() for c in response.tool_calls],
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


def _run(ctx: StepContext, call: Any, number: int, room: int, count: Callable[[str], int]) -> str:
    """One tool call's result message; failures become an error the model reads, traced."""
    record: dict[str, Any] = {"round": number, "tool": call.name, "call_id": call.id}
    try:
        args = json.loads(call.arguments or "{}")
        if not isinstance(args, dict):
            raise ValueError("not an object")
    except ValueError:
        return _refuse(ctx, record, "TOOL_ARGUMENTS_INVALID", "the arguments are not a JSON object")
    record.update({k: args[k] for k in ("pointer_id", "slice") if isinstance(args.get(k), str)})
    handler = HANDLERS.get(call.name)
    if handler is None:
        return _refuse(ctx, record, "TOOL_UNKNOWN", f"no tool {call.name!r} is offered")
    try:
        result = handler(ctx, args)
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
