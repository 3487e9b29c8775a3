"""Engine behaviours in one table (pipeline, inputs, final state, step order), plus the edges.

The engine is exercised with tiny test-only actions, never the real ones.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from runtime.contract.action import Action, Outcome
from runtime.contract.registry import Registry
from runtime.engine import Engine
from runtime.errors import ModelTimeoutError, RunError
from runtime.format.pipeline import Pipeline


class Put(Action):
    """Set `name` to `value`; optionally send a message; branch `to` if given."""

    name = "put"
    runnable = True
    outcomes = ("a", "b")

    def run(self, ctx: Any) -> Outcome | None:
        if "name" in ctx.step:
            ctx.set(ctx.step["name"], ctx.step.get("value"))
        if "send_to" in ctx.step:
            ctx.enqueue(ctx.step["send_to"], "t", {"n": ctx.get("n", 0)})
        if "to" in ctx.step:
            return Outcome.to_branch(ctx.step["to"])
        return None


class Inc(Action):
    """n += 1; record the messages it received."""

    name = "inc"
    runnable = True
    outcomes = ("again", "done")

    def run(self, ctx: Any) -> Outcome | None:
        n = ctx.get("n", 0) + 1
        ctx.set("n", n)
        got = ctx.get("got", [])
        ctx.set("got", [*got, *[(m.topic, m.payload, m.attempt) for m in ctx.messages]])
        return Outcome.to_branch("again" if n < ctx.step.get("until", 3) else "done")


class Flaky(Action):
    """Fails with the step's `code` until the attempt reaches `ok_at`."""

    name = "flaky"
    runnable = True
    calls: list[int] = []

    def run(self, ctx: Any) -> Outcome | None:
        Flaky.calls.append(ctx.attempt)
        ctx.set("partial", ctx.attempt)  # staged: dropped when the attempt fails
        if ctx.attempt < ctx.step.get("ok_at", 99):
            if ctx.step.get("code") == "BUG":
                raise ValueError("boom")
            raise (
                ModelTimeoutError("slow")
                if ctx.step.get("code") == "MODEL_TIMEOUT"
                else RunError("bad", code=ctx.step.get("code", "VARIABLE_MISSING"))
            )
        return None


class Protect(Action):
    name = "protect"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        ctx.set("last_error", "overwritten")
        return None


class Requeue(Action):
    """Requeue every consumed message once (attempt 1 only)."""

    name = "requeue"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        for m in ctx.messages:
            if m.attempt == 1:
                ctx.requeue(m)
        ctx.set("seen", ctx.get("seen", []) + [m.attempt for m in ctx.messages])
        return None


REG = Registry.from_classes(Put, Inc, Flaky, Protect, Requeue)


def make(steps: list[dict[str, Any]], **extra: Any) -> Pipeline:
    data = {
        "settings": {"entry_step_id": steps[0]["id"], **extra.pop("settings", {})},
        "steps": steps,
        **extra,
    }
    return Pipeline.from_dict(data)


def run(p: Pipeline, inputs: dict[str, Any] | None = None, **kw: Any):
    return Engine(p, registry=REG, sleep=lambda s: None).run(inputs, run_id="r1", **kw)


TABLE = [
    (
        "next chain",
        [
            {"id": "a", "action": "put", "name": "x", "value": 1, "next": "b"},
            {"id": "b", "action": "put", "name": "y", "value": 2, "end": True},
        ],
        {},
        {"x": 1, "y": 2},
        ["a", "b"],
    ),
    (
        "branch beats next",
        [
            {"id": "a", "action": "put", "to": "b", "on_b": "c", "next": "d"},
            {"id": "c", "action": "put", "name": "via", "value": "branch", "end": True},
            {"id": "d", "action": "put", "name": "via", "value": "next", "end": True},
        ],
        {},
        {"via": "branch"},
        ["a", "c"],
    ),
    (
        "end beats branch",
        [
            {"id": "a", "action": "put", "to": "a", "on_a": "b", "end": True},
            {"id": "b", "action": "put", "end": True},
        ],
        {},
        {},
        ["a"],
    ),
    (
        "branch without field falls back to next",
        [
            {"id": "a", "action": "put", "to": "b", "next": "c"},
            {"id": "c", "action": "put", "end": True},
        ],
        {},
        {},
        ["a", "c"],
    ),
    (
        "loop until done",
        [
            {"id": "a", "action": "inc", "on_again": "a", "on_done": "z"},
            {"id": "z", "action": "put", "end": True},
        ],
        {"n": 0},
        {"n": 3, "got": []},
        ["a", "a", "a", "z"],
    ),
    (
        "inbox FIFO, consumed once, on entry to the target",
        [
            {"id": "s1", "action": "put", "send_to": "t", "next": "s2"},
            {"id": "s2", "action": "put", "name": "n", "value": 7, "send_to": "t", "next": "t"},
            {"id": "t", "action": "inc", "until": 1, "on_again": "t", "on_done": "z"},
            {"id": "z", "action": "inc", "until": 1, "on_done": "end2", "on_again": "end2"},
            {"id": "end2", "action": "put", "end": True},
        ],
        {},
        {"n": 9, "got": [("t", {"n": 0}, 1), ("t", {"n": 7}, 1)]},
        ["s1", "s2", "t", "z", "end2"],
    ),
    (
        "catch records last_error and routes",
        [
            {
                "id": "a",
                "action": "flaky",
                "code": "VARIABLE_MISSING",
                "next": "z",
                "catch": {"VARIABLE_MISSING": "h", "ALL": "z"},
            },
            {"id": "h", "action": "put", "name": "handled", "value": True, "end": True},
            {"id": "z", "action": "put", "end": True},
        ],
        {},
        {
            "handled": True,
            "last_error": {"code": "VARIABLE_MISSING", "message": "bad", "step_id": "a"},
        },
        ["a", "h"],
    ),
    (
        "catch ALL",
        [
            {"id": "a", "action": "flaky", "code": "BUG", "next": "z", "catch": {"ALL": "h"}},
            {"id": "h", "action": "put", "end": True},
            {"id": "z", "action": "put", "end": True},
        ],
        {},
        {
            "last_error": {
                "code": "ACTION_FAILED",
                "message": "action 'flaky' raised ValueError: boom",
                "step_id": "a",
            }
        },
        ["a", "h"],
    ),
    (
        "retry then success keeps only the successful attempt's writes",
        [
            {
                "id": "a",
                "action": "flaky",
                "code": "MODEL_TIMEOUT",
                "ok_at": 3,
                "end": True,
                "retry": {"max_attempts": 3},
            }
        ],
        {},
        {"partial": 3},
        ["a"],
    ),
]


@pytest.mark.parametrize("name,steps,inputs,state,order", TABLE, ids=[t[0] for t in TABLE])
def test_engine_behaviour(name, steps, inputs, state, order):
    result = run(make(steps), inputs)
    assert result.status == "completed", result.error
    normalized = {k: ([tuple(x) for x in v] if k == "got" else v) for k, v in result.state.items()}
    assert normalized == state
    assert result.steps == order


def test_max_steps_stops_a_runaway_loop():
    p = make([{"id": "a", "action": "inc", "until": 10**9, "on_again": "a", "on_done": "a"}])
    result = run(p, max_steps=25)
    assert result.status == "failed"
    assert (result.error.code, result.error.step_id) == ("MAX_STEPS_EXCEEDED", "a")
    assert len(result.steps) == 25
    assert (
        run(
            make(
                [{"id": "a", "action": "inc", "until": 10**9, "on_again": "a", "on_done": "a"}],
                settings={"max_steps": 7},
            )
        ).steps
        == ["a"] * 7
    )


def test_retry_exhausted_fails_with_the_code_and_backoff_is_seeded():
    Flaky.calls = []
    delays: list[float] = []
    p = make(
        [
            {
                "id": "a",
                "action": "flaky",
                "code": "MODEL_TIMEOUT",
                "end": True,
                "retry": {
                    "max_attempts": 3,
                    "backoff": {"initial_seconds": 1, "multiplier": 2, "jitter": False},
                },
            }
        ]
    )
    result = Engine(p, registry=REG, sleep=delays.append).run({}, run_id="r")
    assert Flaky.calls == [1, 2, 3]
    assert delays == [1.0, 2.0]
    assert (result.error.code, result.error.step_id, result.error.attempt) == (
        "MODEL_TIMEOUT",
        "a",
        3,
    )
    events = [e for e in result.events if e["type"] == "RETRY"]
    assert [e["attempt"] for e in events] == [1, 2]
    j1, j2 = [], []
    p2 = make(
        [
            {
                "id": "a",
                "action": "flaky",
                "code": "MODEL_TIMEOUT",
                "end": True,
                "retry": {"max_attempts": 4},
            }
        ]
    )
    Engine(p2, registry=REG, sleep=j1.append).run({}, run_id="same")
    Engine(p2, registry=REG, sleep=j2.append).run({}, run_id="same")
    assert j1 == j2 and all(0 <= d <= 30 for d in j1)


def test_retry_only_on_listed_codes():
    Flaky.calls = []
    p = make(
        [
            {
                "id": "a",
                "action": "flaky",
                "code": "VARIABLE_MISSING",
                "end": True,
                "retry": {"max_attempts": 5, "on": ["MODEL_TIMEOUT"]},
            }
        ]
    )
    assert run(p).error.code == "VARIABLE_MISSING" and Flaky.calls == [1]


def test_action_bug_is_coded_and_names_the_step():
    result = run(make([{"id": "a", "action": "flaky", "code": "BUG", "end": True}]))
    assert (result.error.code, result.error.step_id) == ("ACTION_FAILED", "a")
    assert any(
        e["type"] == "ACTION_EXCEPTION" and "ValueError" in e["traceback"] for e in result.events
    )


def test_engine_owned_fields_are_protected():
    result = run(make([{"id": "a", "action": "protect", "end": True}]))
    assert result.error.code == "STATE_PROTECTED"


def test_requeue_increments_attempt():
    p = make(
        [
            {"id": "s", "action": "put", "send_to": "q", "next": "q"},
            {"id": "q", "action": "requeue", "next": "q2"},
            {"id": "q2", "action": "requeue", "next": "q"},
        ],
        settings={"max_steps": 5},
    )
    result = run(p)
    assert result.state["seen"] == [1, 2]


@pytest.mark.parametrize(
    "policy,status", [("error", "failed"), ("warn", "completed"), ("ignore", "completed")]
)
def test_leftover_policy(policy, status):
    p = make(
        [
            {"id": "a", "action": "put", "send_to": "b", "end": True},
            {"id": "b", "action": "put", "end": True},
        ],
        inbox={"on_leftover": policy},
    )
    result = run(p)
    assert result.status == status
    warned = [e for e in result.events if e["type"] == "INBOX_LEFTOVER"]
    assert bool(warned) == (policy == "warn")
    if policy == "error":
        assert result.error.code == "INBOX_LEFTOVER" and "m1->b:t" in result.error.message


def test_inputs_declared_missing_unknown_and_defaults():
    p = make(
        [{"id": "a", "action": "put", "end": True}],
        inputs={"q": {"type": "string"}, "k": {"type": "integer", "default": 3}},
    )
    assert run(p, {"q": "x"}).state == {"q": "x", "k": 3}
    for inputs, code in (
        ({}, "INPUT_MISSING"),
        ({"q": "x", "z": 1}, "INPUT_UNKNOWN"),
        ({"q": 5}, "INPUT_TYPE"),
    ):
        with pytest.raises(RunError) as info:
            run(p, inputs)
        assert info.value.code == code


@pytest.mark.parametrize(
    ("declared", "accepted", "refused"),
    [
        ("integer", [0, -3, 10**20], [True, False, 2.5, "3", None]),
        ("number", [0, 2.5, -1e300], [True, False, "2.5", [1]]),
        ("boolean", [True, False], [0, 1, "true"]),
        ("string", ["", "x"], [1, True, ["x"]]),
    ],
)
def test_input_types_are_exact_and_a_boolean_is_no_number(declared, accepted, refused):
    # bool is an int subclass in Python; JSON keeps them apart, and so do declared inputs.
    p = make([{"id": "a", "action": "put", "end": True}], inputs={"v": {"type": declared}})
    for value in accepted:
        assert run(p, {"v": value}).state == {"v": value}
    for value in refused:
        with pytest.raises(RunError) as info:
            run(p, {"v": value})
        assert info.value.code == "INPUT_TYPE", value
        assert f"input 'v' must be {declared}, got {type(value).__name__}" in info.value.message


def test_cancel_from_another_thread():
    started = threading.Event()

    class Wait(Action):
        name = "wait"
        runnable = True

        def run(self, ctx: Any) -> Outcome | None:
            started.set()
            ctx.set("n", ctx.get("n", 0) + 1)
            return None

    cancel = threading.Event()
    p = make([{"id": "a", "action": "wait", "next": "a"}], settings={"max_steps": 10**6})
    engine = Engine(p, registry=Registry.from_classes(Wait))
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(engine.run({}, cancel=cancel)))
    t.start()
    started.wait(5)
    cancel.set()
    t.join(10)
    assert out[0].status == "failed" and out[0].error.code == "RUN_CANCELLED"


def test_same_inputs_same_trace():
    from runtime.engine.trace import without_timing

    p = make(TABLE[5][1])
    a, b = run(p), run(p)
    assert without_timing(a.events) == without_timing(b.events)


class Counted(Action):
    """Reads and bumps the engine-owned counter `c`, then fails until attempt `ok_at`."""

    name = "counted"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        seen = ctx.counter("c")
        ctx.increment("c")
        if ctx.attempt < ctx.step.get("ok_at", 99):
            raise RunError("bad", code="VARIABLE_MISSING")
        ctx.set("seen", seen)
        return None


class ReadCounter(Action):
    """Records the counter `c` as the next step sees it."""

    name = "read_counter"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        ctx.set("after", ctx.counter("c"))
        return None


COUNTING = Registry.from_classes(Counted, ReadCounter)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # Two failed attempts bumped the counter and were dropped: the third sees 0, leaves 1.
        ({"ok_at": 3, "retry": {"max_attempts": 3, "on": ["ALL"]}}, {"seen": 0, "after": 1}),
        # Every attempt failed and was caught: no increment reaches the next step.
        ({"retry": {"max_attempts": 2, "on": ["ALL"]}, "catch": {"ALL": "r"}}, {"after": 0}),
    ],
    ids=["retried", "caught"],
)
def test_a_failed_attempts_counter_increments_are_dropped(config, expected):
    p = make(
        [
            {"id": "c", "action": "counted", "next": "r", **config},
            {"id": "r", "action": "read_counter", "end": True},
        ]
    )
    result = Engine(p, registry=COUNTING, sleep=lambda s: None).run({}, run_id="r1")
    assert result.status == "completed"
    assert {k: v for k, v in result.state.items() if k in ("seen", "after")} == expected
