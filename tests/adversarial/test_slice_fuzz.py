"""10,000 slice expressions and 1,000 tool-argument payloads: a coded error or the exact slice.

Every answer is checked against the oracle in slice_fuzz.py, which slices the original
itself from the documented grammar: a slice it calls valid must come back exactly (a
JSON value: equal as JSON and part of the original), one it calls invalid must be
SLICE_INVALID. A tool call gets the exact slice or a short `error CODE:` message, never
a traceback. Pathological inputs are bounded by construction (1,000-character slices,
8,192-character arguments, parsers without backtracking); the time per call is measured
by benchmarks/slice_fuzz.py, not asserted here. The first chunk runs in the default
suite, the others are `slow`.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import slice_fuzz as fz
from slice_support import ctx_of, put

from actions import _tools
from runtime.context import pointers as ptr
from runtime.context.tokens import get_counter
from runtime.engine.store import SqliteRunStore
from runtime.errors import RunError
from runtime.models.base import ToolCall

SLICE_CHUNKS = [(0, 300)] + [(seed, 1940) for seed in range(1, 6)]  # 10,000 in all
TOOL_CHUNKS = [(100, 50)] + [(seed, 475) for seed in range(101, 103)]  # 1,000 in all


def stored(tmp_path) -> tuple[Any, dict[str, str]]:
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    return store, {name: put(store, text, fz.KINDS[name]) for name, text in fz.ORIGINALS.items()}


def check_slices(tmp_path, seed: int, n: int) -> None:
    store, pids = stored(tmp_path)
    ctx = ctx_of(store)
    for i, part in enumerate(fz.expressions(seed, n)):
        name = list(pids)[i % len(pids)]
        original = fz.ORIGINALS[name]
        expected = fz.oracle(original, part)
        try:
            got = ptr.rehydrate(ctx, pids[name], part)
        except RunError as exc:
            assert exc.code == "SLICE_INVALID", (name, part, exc.code, exc.message)
            assert expected is None, f"refused a valid slice: {name} {part!r}: {exc.message}"
            assert len(exc.message) < 400
            continue
        assert expected is not None, f"answered an invalid slice: {name} {part!r}"
        assert fz.same(expected, got, part, original), f"a wrong slice: {name} {part!r}"


@pytest.mark.parametrize(
    ("seed", "n"),
    [
        pytest.param(seed, n, marks=() if k == 0 else pytest.mark.slow)
        for k, (seed, n) in enumerate(SLICE_CHUNKS)
    ],
)
def test_every_slice_expression_is_the_exact_slice_or_slice_invalid(tmp_path, seed, n):
    check_slices(tmp_path, seed, n)


class _Ctx(SimpleNamespace):
    def trace(self, kind: str, **data: Any) -> None:
        self.events.append({"type": kind, **data})


def check_payloads(tmp_path, seed: int, n: int) -> None:
    store, pids = stored(tmp_path)
    ctx = _Ctx(services=SimpleNamespace(pointers=store), run_id="r", step_id="s", events=[])
    count = get_counter("cl100k_base").count
    for i, (arguments, name) in enumerate(fz.payloads(seed, n, pids)):
        call = ToolCall(f"c{i}", "rehydrate", arguments)
        answer = _tools._run(ctx, call, 1, 1_000_000, count)
        event = ctx.events[-1]
        assert event["type"] == "MODEL_TOOL_CALL" and len(json.dumps(event)) < 2_000
        if answer.startswith("error "):
            code = answer.split(":", 1)[0][len("error ") :]
            assert code in ("TOOL_ARGUMENTS_INVALID", "SLICE_INVALID", "POINTER_UNKNOWN"), answer
            assert len(answer) < 400 and event["error"] == code
            if name is not None and code == "SLICE_INVALID":
                part = json.loads(arguments).get("slice")
                assert fz.oracle(fz.ORIGINALS[name], part) is None, (name, part, answer)
            continue
        assert name is not None, f"answered junk arguments: {arguments[:80]!r}"
        part = json.loads(arguments).get("slice")
        expected = fz.oracle(fz.ORIGINALS[name], part)
        assert expected is not None and fz.same(expected, answer, part, fz.ORIGINALS[name])


@pytest.mark.parametrize(
    ("seed", "n"),
    [
        pytest.param(seed, n, marks=() if k == 0 else pytest.mark.slow)
        for k, (seed, n) in enumerate(TOOL_CHUNKS)
    ],
)
def test_every_tool_argument_payload_is_served_or_answered_with_a_code(tmp_path, seed, n):
    check_payloads(tmp_path, seed, n)
