"""Property: a tool round never sends a prompt over its budget; a result is exact or refused.

A scripted model asks for random line slices of a pointer's original, several per round,
for a random number of rounds, against random windows; every request it receives is
counted with the real tokenizer, as call_model counts a prompt.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from actions import _tools
from actions.call_model import MESSAGE_OVERHEAD
from runtime.context.pointers import MemoryPointerStore, line_slice, make_pointer
from runtime.context.tokens import get_counter
from runtime.errors import ContextOverflowError
from runtime.models.base import ModelConfig, ModelRequest, ModelResponse, ToolCall

COUNT = get_counter("cl100k_base").count
TEXT = "".join(f"{n}: {'word ' * (n % 17)}end\n" for n in range(1, 401))
RESERVE = 50


def tokens(messages: list[dict[str, Any]]) -> int:
    """A prompt's size as the tool rounds measure it: content, tool calls, framing."""
    return sum(
        COUNT(m.get("content") or "")
        + sum(
            COUNT(c["function"]["name"] + c["function"]["arguments"])
            for c in m.get("tool_calls") or ()
        )
        + MESSAGE_OVERHEAD
        for m in messages
    )


class Scripted:
    """Asks for the given slices, one list per round, then answers; records each request."""

    def __init__(self, rounds: list[list[tuple[int, int]]], pointer_id: str) -> None:
        self.config = ModelConfig("m", "extractive", model="m", context_window=0)
        self.rounds, self.pointer_id, self.seen = rounds, pointer_id, []

    def complete(self, request: ModelRequest, *, on_chunk: Any = None) -> ModelResponse:
        self.seen.append(request)
        n = len(self.seen) - 1
        if n >= len(self.rounds) or not request.tools:
            return ModelResponse("done")
        calls = [
            ToolCall(
                f"c{n}-{i}",
                "rehydrate",
                json.dumps({"pointer_id": self.pointer_id, "slice": f"lines {a}-{b}"}),
            )
            for i, (a, b) in enumerate(self.rounds[n])
        ]
        return ModelResponse("", tool_calls=calls)


line_range = st.tuples(st.integers(1, 400), st.integers(0, 60)).map(
    lambda p: (p[0], min(400, p[0] + p[1]))
)


ROUNDS = {
    "window": st.integers(200, 4000),
    "rounds": st.lists(st.lists(line_range, min_size=1, max_size=3), min_size=1, max_size=3),
}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**ROUNDS)
def test_no_tool_round_goes_over_the_budget(window, rounds):
    check_rounds(window, rounds)


@pytest.mark.slow
@pytest.mark.pins
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**ROUNDS)
def test_no_tool_round_goes_over_the_budget_over_more_examples(window, rounds):
    check_rounds(window, rounds)


def check_rounds(window: int, rounds: list[list[tuple[int, int]]]) -> None:
    """Tool rounds asking for these line ranges, in a window this big: never over budget."""
    store = MemoryPointerStore()
    pointer = make_pointer(store, "r", TEXT, "text", "(summary)", 400)
    events: list[tuple[str, dict[str, Any]]] = []
    ctx = SimpleNamespace(
        services=SimpleNamespace(pointers=store),
        run_id="r",
        step_id="s",
        trace=lambda event, **data: events.append((event, data)),
    )
    model = Scripted(rounds, pointer.pointer_id)
    limit = window - RESERVE
    first = [{"role": "user", "content": f"Question? {pointer.display_text}"}]
    assume(tokens(first) <= limit)  # the first prompt is the policy's to fit
    request = ModelRequest(first, max_output_tokens=RESERVE)
    try:
        response, final = _tools.complete(
            ctx,
            model,
            request,
            tools=["rehydrate"],
            rounds=len(rounds),
            spare=lambda messages: limit - tokens(messages),
            overhead=MESSAGE_OVERHEAD,
            count=COUNT,
        )
    except ContextOverflowError:
        final = None  # the calls and refusals alone left no room: nothing more was sent
    for sent in model.seen:
        assert tokens(sent.messages) <= limit  # never a request over the budget
    if final is None:
        return
    assert response.text == "done" and final == model.seen[-1].messages
    delivered = 0
    for message in final:
        if message["role"] != "tool":
            continue
        if message["content"].startswith("error CONTEXT_OVERFLOW"):
            continue
        assert message["content"] == line_slice(TEXT, *_asked(final, message["tool_call_id"]))
        delivered += 1  # exact, never cut
    assert delivered == sum(1 for e, d in events if e == "MODEL_TOOL_CALL" and d["error"] is None)


def _asked(messages: list[dict[str, Any]], call_id: str) -> tuple[int, int]:
    for m in messages:
        for c in m.get("tool_calls") or ():
            if c["id"] == call_id:
                part = json.loads(c["function"]["arguments"])["slice"]
                a, b = part.removeprefix("lines ").split("-")
                return int(a), int(b)
    raise AssertionError(f"no call {call_id}")
