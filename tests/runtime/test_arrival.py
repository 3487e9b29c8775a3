"""The transition taken into a step: `ctx.arrival` and `ctx.arrival_from`.

The engine records the long-form attributes (fidelity, thread_id) of the transition
it takes, whichever kind it is (next, on_*, a router's route, catch), and hands
them to the next step; the entry step and a short-form transition give `{}`. A
checkpoint holds them, so a resumed run gives the next step the same arrival as
an uninterrupted one. Crashes are simulated as in test_resume_edges.py: an action
raises a BaseException the engine never catches, leaving the store as at a kill.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import runtime
from actions.json_decision_router import JsonDecisionRouter
from actions.prefix_router import PrefixRouter
from runtime.engine import Engine

CALLS: list[str] = []
CRASH_AT: dict[str, int] = {}  # step id -> its execution (1-based) that crashes


class Crash(BaseException):
    """Stands for SIGKILL: nothing in the engine catches it."""


class Note(runtime.Action):
    """Appends [step, arrival_from, arrival] to `arrivals`; `say` sets last_model_response.

    `fail: CODE` raises that code until attempt `ok_at` (never, without it); `to` picks a
    branch; `count` loops: branch `again` while its counter stays under `limit`.
    """

    name = "note"
    runnable = True
    outcomes = ("again", "done")

    def run(self, ctx: Any) -> runtime.Outcome | None:
        CALLS.append(ctx.step_id)
        if CRASH_AT.get(ctx.step_id) == CALLS.count(ctx.step_id):
            del CRASH_AT[ctx.step_id]
            raise Crash(ctx.step_id)
        seen = [ctx.step_id, ctx.arrival_from, dict(ctx.arrival), ctx.attempt]
        ctx.set("arrivals", [*ctx.get("arrivals", []), seen])
        step = ctx.step
        if "say" in step:
            ctx.set("last_model_response", step["say"])
        if "fail" in step and ctx.attempt < step.get("ok_at", 10**6):
            raise runtime.RunError("injected", code=step["fail"])
        if "count" in step:
            n = ctx.increment(step["count"])
            return runtime.Outcome.to_branch("again" if n < step["limit"] else "done")
        if "to" in step:
            return runtime.Outcome.to_branch(step["to"])
        return None


REG = runtime.Registry.from_classes(Note, JsonDecisionRouter, PrefixRouter)


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    CALLS.clear()
    CRASH_AT.clear()
    yield
    CRASH_AT.clear()


def pipeline(steps: list[dict[str, Any]], **settings: Any) -> runtime.Pipeline:
    return runtime.Pipeline.from_dict(
        {
            "name": "arrival",
            "settings": {"entry_step_id": steps[0]["id"], **settings},
            "steps": steps,
        }
    )


def arrivals(p: runtime.Pipeline) -> list[list[Any]]:
    result = Engine(p, registry=REG, sleep=lambda _: None).run({}, run_id="a")
    assert result.status == "completed", result.error
    return result.state["arrivals"]


def end(step_id: str) -> dict[str, Any]:
    return {"id": step_id, "action": "note", "end": True}


# --- each kind of transition ---------------------------------------------------------------


def test_next_in_both_forms():
    p = pipeline(
        [
            {
                "id": "a",
                "action": "note",
                "next": {"step": "b", "fidelity": "full", "thread_id": "t"},
            },
            {"id": "b", "action": "note", "next": "c"},
            end("c"),
        ]
    )
    assert arrivals(p) == [
        ["a", None, {}, 1],  # the entry step: no transition
        ["b", "a", {"fidelity": "full", "thread_id": "t"}, 1],
        ["c", "b", {}, 1],  # a short form sets nothing, and nothing is left over from a -> b
    ]


def test_a_long_form_sets_only_what_it_names():
    p = pipeline(
        [
            {"id": "a", "action": "note", "next": {"step": "b", "thread_id": "coding"}},
            {"id": "b", "action": "note", "next": {"step": "c"}},
            end("c"),
        ]
    )
    assert arrivals(p) == [
        ["a", None, {}, 1],
        ["b", "a", {"thread_id": "coding"}, 1],
        ["c", "b", {}, 1],
    ]


def test_branches_carry_their_own_attributes():
    p = pipeline(
        [
            {
                "id": "loop",
                "action": "note",
                "count": "n",
                "limit": 3,
                "on_again": {"step": "loop", "fidelity": "summary:low"},
                "on_done": {"step": "z", "fidelity": "full", "thread_id": "final"},
            },
            end("z"),
        ]
    )
    assert arrivals(p) == [
        ["loop", None, {}, 1],
        ["loop", "loop", {"fidelity": "summary:low"}, 1],
        ["loop", "loop", {"fidelity": "summary:low"}, 1],
        ["z", "loop", {"fidelity": "full", "thread_id": "final"}, 1],
    ]


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ('{"decision": "fix"}', ["f", "r", {"fidelity": "full", "thread_id": "coding"}, 1]),
        ('{"decision": "done"}', ["d", "r", {}, 1]),
        ("no json", ["o", "r", {"fidelity": "truncate"}, 1]),
    ],
)
def test_json_router_routes(said, expected):
    p = pipeline(
        [
            {"id": "s", "action": "note", "say": said, "next": "r"},
            {
                "id": "r",
                "action": "json_decision_router",
                "routes": {
                    "fix": {"step": "f", "fidelity": "full", "thread_id": "coding"},
                    "done": "d",
                },
                "on_other": {"step": "o", "fidelity": "truncate"},
            },
            end("f"),
            end("d"),
            end("o"),
        ]
    )
    assert arrivals(p)[-1] == expected


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("SQL: select", ["q", "r", {"fidelity": "summary:high"}, 1]),
        ("CODE: x", ["c", "r", {}, 1]),
        ("other", ["o", "r", {"thread_id": "misc"}, 1]),
    ],
)
def test_prefix_router_routes(said, expected):
    p = pipeline(
        [
            {"id": "s", "action": "note", "say": said, "next": "r"},
            {
                "id": "r",
                "action": "prefix_router",
                "routes": {
                    "sql": {"prefix": "SQL:", "next": {"step": "q", "fidelity": "summary:high"}},
                    "code": {"prefix": "CODE:", "next": "c"},
                },
                "on_other": {"step": "o", "thread_id": "misc"},
            },
            end("q"),
            end("c"),
            end("o"),
        ]
    )
    assert arrivals(p)[-1] == expected


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("MODEL_TIMEOUT", ["t", "a", {"fidelity": "compact"}, 1]),  # its own code wins
        ("ACTION_FAILED", ["h", "a", {"fidelity": "truncate", "thread_id": "err"}, 1]),
    ],
)
def test_catch_targets(code, expected):
    p = pipeline(
        [
            {
                "id": "a",
                "action": "note",
                "fail": code,
                "next": "t",
                "catch": {
                    "MODEL_TIMEOUT": {"step": "t", "fidelity": "compact"},
                    "ALL": {"step": "h", "fidelity": "truncate", "thread_id": "err"},
                },
            },
            end("t"),
            end("h"),
        ]
    )
    assert arrivals(p) == [expected]  # a's failed attempt wrote nothing


def test_a_short_catch_after_a_long_arrival_resets_it():
    p = pipeline(
        [
            {"id": "a", "action": "note", "next": {"step": "b", "fidelity": "full"}},
            {"id": "b", "action": "note", "fail": "ACTION_FAILED", "catch": {"ALL": "h"}},
            end("h"),
        ]
    )
    assert arrivals(p)[-1] == ["h", "b", {}, 1]


def test_every_attempt_of_a_retried_step_sees_the_same_arrival():
    p = pipeline(
        [
            {"id": "a", "action": "note", "next": {"step": "b", "fidelity": "summary:medium"}},
            {
                "id": "b",
                "action": "note",
                "fail": "MODEL_TIMEOUT",
                "ok_at": 3,
                "retry": {"max_attempts": 3, "on": ["MODEL_TIMEOUT"]},
                "next": "z",
            },
            end("z"),
        ]
    )
    assert arrivals(p)[1:] == [["b", "a", {"fidelity": "summary:medium"}, 3], ["z", "b", {}, 1]]


def test_actions_see_short_form_targets_and_cannot_change_an_arrival():
    class Peek(runtime.Action):
        name = "peek"
        runnable = True

        def run(self, ctx: Any) -> runtime.Outcome | None:
            ctx.set("next_seen", ctx.step["next"])
            with pytest.raises(TypeError):
                ctx.arrival["fidelity"] = "full"  # type: ignore[index]
            return None

    p = pipeline(
        [
            {"id": "a", "action": "note", "next": {"step": "b", "fidelity": "truncate"}},
            {"id": "b", "action": "peek", "next": {"step": "c", "fidelity": "compact"}},
            end("c"),
        ]
    )
    registry = runtime.Registry.from_classes(Note, Peek)
    result = Engine(p, registry=registry).run({}, run_id="p")
    assert result.status == "completed", result.error
    assert result.state["next_seen"] == "c"
    assert result.state["arrivals"][-1] == ["c", "b", {"fidelity": "compact"}, 1]


# --- resume --------------------------------------------------------------------------------

RESUMABLE = [
    {"id": "a", "action": "note", "next": {"step": "b", "fidelity": "full", "thread_id": "t"}},
    {
        "id": "b",
        "action": "note",
        "count": "n",
        "limit": 2,
        "on_again": {"step": "b", "fidelity": "summary:low"},
        "on_done": "c",
    },
    {"id": "c", "action": "note", "next": "e"},
    {
        "id": "e",
        "action": "note",
        "fail": "ACTION_FAILED",
        "catch": {"ALL": {"step": "d", "thread_id": "x"}},
    },
    end("d"),
]


@pytest.mark.parametrize(
    ("crash_at", "nth"),
    [
        ("a", 1),  # before the first checkpoint: the entry again, with no arrival
        ("b", 1),  # arrived by a's long `next`
        ("b", 2),  # arrived by b's own long branch
        ("c", 1),  # arrived by a short branch after long ones
        ("d", 1),  # arrived by a long catch
    ],
)
def test_resume_gives_the_next_step_the_same_arrival(tmp_path, crash_at, nth):
    p = pipeline(RESUMABLE)
    reference = arrivals(p)
    CALLS.clear()
    db = str(tmp_path / "runs.db")
    CRASH_AT[crash_at] = nth
    with pytest.raises(Crash):
        Engine(p, registry=REG, store=runtime.SqliteRunStore(db)).run({}, run_id="k")
    resumed = Engine(p, registry=REG, store=runtime.SqliteRunStore(db)).resume("k")
    assert resumed.status == "completed", resumed.error
    assert resumed.state["arrivals"] == reference


def test_the_checkpoint_holds_the_arrival(tmp_path):
    db = str(tmp_path / "runs.db")
    CRASH_AT["b"] = 1
    with pytest.raises(Crash):
        Engine(pipeline(RESUMABLE), registry=REG, store=runtime.SqliteRunStore(db)).run(
            {}, run_id="k"
        )
    saved = runtime.SqliteRunStore(db).load("k")
    assert saved["position"] == "b"
    assert saved["engine"]["arrival"] == {
        "from": "a",
        "attrs": {"fidelity": "full", "thread_id": "t"},
    }
