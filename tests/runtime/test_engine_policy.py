"""Engine policy: which errors retry, how many times and how long apart; catch and max_steps;
one execution per visit; the inbox (FIFO, once, requeue) and its leftover policy.

Sleeps go through the engine's `sleep` hook, so backoff delays are captured, never slept.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import runtime
from runtime.engine import Engine
from runtime.errors import (
    ContextOverflowError,
    InvalidStructuredOutputError,
    ModelAuthError,
    ModelProviderError,
    ModelRateLimitedError,
    ModelTimeoutError,
)

MODEL_ERRORS = {
    "MODEL_RATE_LIMITED": ModelRateLimitedError,
    "MODEL_TIMEOUT": ModelTimeoutError,
    "MODEL_PROVIDER_ERROR": ModelProviderError,
    "INVALID_STRUCTURED_OUTPUT": InvalidStructuredOutputError,
    "CONTEXT_OVERFLOW": ContextOverflowError,
    "MODEL_AUTH_ERROR": ModelAuthError,
}

CALLS: list[tuple[str, int]] = []  # (step id, attempt), one per execution of an action
SEEN: list[list[str]] = []  # ids of the messages each execution of `fail` was handed


class Fail(runtime.Action):
    """Fails with the step's `code` while the attempt is below `ok_at` and the step has run
    fewer than `ok_after_calls` times; `BUG` raises a plain exception. Writes `wrote` and
    sends to `send_to` before failing (staged, so dropped with the attempt)."""

    name = "fail"
    runnable = True

    def run(self, ctx: Any) -> runtime.Outcome | None:
        CALLS.append((ctx.step_id, ctx.attempt))
        ctx.set("wrote", ctx.attempt)
        if "send_to" in ctx.step:
            ctx.enqueue(ctx.step["send_to"], "from-fail", {"attempt": ctx.attempt})
        SEEN.append([m.id for m in ctx.messages])
        runs = sum(1 for s, _ in CALLS if s == ctx.step_id)
        if ctx.attempt < ctx.step.get("ok_at", 10**6) and runs < ctx.step.get(
            "ok_after_calls", 10**6
        ):
            code = ctx.step["code"]
            if code == "BUG":
                raise ZeroDivisionError("bug")
            if code in MODEL_ERRORS:
                raise MODEL_ERRORS[code](f"{code} at {ctx.attempt}")
            raise runtime.RunError(f"{code} at {ctx.attempt}", code=code)
        return None


class Mail(runtime.Action):
    """Records what it received in `inbox_log`; sends `send: [[target, topic], ...]` with
    payload {"n": index}; requeues each received message while its attempt is below
    `requeue_below`; jumps to `loop_to` until it has run `loops` times, then ends the run."""

    name = "mail"
    runnable = True

    def run(self, ctx: Any) -> runtime.Outcome | None:
        CALLS.append((ctx.step_id, ctx.attempt))
        log = [
            [ctx.step_id, m.id, m.topic, m.attempt, m.sender_step_id, m.payload]
            for m in ctx.messages
        ]
        ctx.set("inbox_log", [*ctx.get("inbox_log", []), *log])
        for n, (target, topic) in enumerate(ctx.step.get("send") or []):
            ctx.enqueue(target, topic, {"n": n})
        for m in ctx.messages:
            if m.attempt < ctx.step.get("requeue_below", 0):
                ctx.requeue(m)
        visits = sum(1 for s, _ in CALLS if s == ctx.step_id)
        if "loop_to" in ctx.step:
            if visits < ctx.step["loops"]:
                return runtime.Outcome.goto(ctx.step["loop_to"], "loop")
            return runtime.Outcome.end()
        return None


REG = runtime.Registry.from_classes(Fail, Mail)


@pytest.fixture(autouse=True)
def _calls() -> Iterator[None]:
    CALLS.clear()
    SEEN.clear()
    yield
    CALLS.clear()
    SEEN.clear()


def pipeline(steps: list[dict[str, Any]], **extra: Any) -> runtime.Pipeline:
    settings = {"entry_step_id": steps[0]["id"], **extra.pop("settings", {})}
    return runtime.Pipeline.from_dict({"settings": settings, "steps": steps, **extra})


def run(
    p: runtime.Pipeline, run_id: str = "r1", **kw: Any
) -> tuple[runtime.RunResult, list[float]]:
    """Run on a private engine; return the result and the backoff delays it asked to sleep."""
    delays: list[float] = []
    result = Engine(p, registry=REG, sleep=delays.append).run({}, run_id=run_id, **kw)
    return result, delays


def one_step(code: str, retry: dict[str, Any] | None = None, **step: Any) -> runtime.Pipeline:
    config = {"id": "a", "action": "fail", "code": code, "end": True, **step}
    if retry is not None:
        config["retry"] = retry
    return pipeline([config])


def events(result: runtime.RunResult, type_: str) -> list[dict[str, Any]]:
    return [e for e in result.events if e["type"] == type_]


# --- which errors retry ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "code,retried",
    [
        ("MODEL_RATE_LIMITED", True),
        ("MODEL_TIMEOUT", True),
        ("MODEL_PROVIDER_ERROR", True),
        ("INVALID_STRUCTURED_OUTPUT", True),
        ("CONTEXT_OVERFLOW", False),  # the same prompt overflows again
        ("MODEL_AUTH_ERROR", False),  # a wrong key stays wrong
        ("VARIABLE_MISSING", False),
        ("BUG", False),
    ],
)
def test_default_retry_set_is_the_transient_model_errors(code, retried):
    result, delays = run(one_step(code, {"max_attempts": 3}))
    expected_code = "ACTION_FAILED" if code == "BUG" else code
    assert (result.status, result.error.code, result.error.step_id) == (
        "failed",
        expected_code,
        "a",
    )
    if retried:
        assert CALLS == [("a", 1), ("a", 2), ("a", 3)]
        assert result.error.attempt == 3
        assert len(delays) == 2
        assert [(e["code"], e["attempt"]) for e in events(result, "RETRY")] == [
            (code, 1),
            (code, 2),
        ]
    else:
        assert CALLS == [("a", 1)]
        assert result.error.attempt == 1
        assert delays == [] and events(result, "RETRY") == []


@pytest.mark.parametrize("code", ["VARIABLE_MISSING", "BUG", "CONTEXT_OVERFLOW", "MODEL_TIMEOUT"])
def test_retry_on_all_retries_every_code(code):
    result, delays = run(one_step(code, {"max_attempts": 4, "on": ["ALL"]}))
    assert CALLS == [("a", 1), ("a", 2), ("a", 3), ("a", 4)]
    assert result.error.attempt == 4 and len(delays) == 3


def test_retry_on_a_list_replaces_the_default_set():
    listed, _ = run(one_step("VARIABLE_MISSING", {"max_attempts": 3, "on": ["VARIABLE_MISSING"]}))
    assert listed.error.attempt == 3 and len(CALLS) == 3
    CALLS.clear()
    unlisted, delays = run(
        one_step("MODEL_TIMEOUT", {"max_attempts": 3, "on": ["VARIABLE_MISSING"]})
    )
    assert unlisted.error.code == "MODEL_TIMEOUT" and CALLS == [("a", 1)] and delays == []
    CALLS.clear()
    nothing, delays = run(one_step("MODEL_TIMEOUT", {"max_attempts": 3, "on": []}))
    assert nothing.error.code == "MODEL_TIMEOUT" and CALLS == [("a", 1)] and delays == []


@pytest.mark.parametrize("attempts", [1, 2, 5])
def test_max_attempts_is_the_exact_number_of_executions(attempts):
    result, delays = run(one_step("MODEL_TIMEOUT", {"max_attempts": attempts}))
    expected = [("a", n) for n in range(1, attempts + 1)]
    assert list(CALLS) == expected
    assert result.error.attempt == attempts
    assert len(delays) == attempts - 1
    assert result.steps == []  # a failed visit is no step


def test_a_retry_that_succeeds_runs_no_further_attempt_and_keeps_only_its_writes():
    p = pipeline(
        [
            {
                "id": "a",
                "action": "fail",
                "code": "MODEL_TIMEOUT",
                "ok_at": 2,
                "send_to": "b",
                "retry": {"max_attempts": 5},
                "next": "b",
            },
            {"id": "b", "action": "mail", "end": True},
        ]
    )
    result, delays = run(p)
    assert result.status == "completed", result.error
    assert CALLS == [("a", 1), ("a", 2), ("b", 1)]
    assert len(delays) == 1
    assert result.state["wrote"] == 2
    # only the successful attempt's message was sent
    assert result.state["inbox_log"] == [["b", "m1", "from-fail", 1, "a", {"attempt": 2}]]
    [step] = [e for e in events(result, "STEP") if e["step_id"] == "a"]
    assert step["attempt"] == 2


def test_every_attempt_of_a_visit_sees_the_same_messages():
    p = pipeline(
        [
            {"id": "s", "action": "mail", "send": [["a", "x"], ["a", "y"]], "next": "a"},
            {
                "id": "a",
                "action": "fail",
                "code": "MODEL_TIMEOUT",
                "ok_at": 3,
                "retry": {"max_attempts": 3},
                "end": True,
            },
        ]
    )
    result, _ = run(p)
    assert result.status == "completed", result.error
    assert SEEN == [["m1", "m2"]] * 3
    assert [e["message"]["id"] for e in events(result, "INBOX_CONSUME")] == ["m1", "m2"]


# --- backoff -------------------------------------------------------------------------------


def test_default_backoff_doubles_from_half_a_second_up_to_thirty():
    result, delays = run(
        one_step("MODEL_TIMEOUT", {"max_attempts": 9, "backoff": {"jitter": False}})
    )
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert [e["delay_s"] for e in events(result, "RETRY")] == delays


def test_backoff_settings_and_the_cap():
    backoff = {"initial_seconds": 3, "multiplier": 3, "max_seconds": 20, "jitter": False}
    _, delays = run(one_step("MODEL_TIMEOUT", {"max_attempts": 5, "backoff": backoff}))
    assert delays == [3.0, 9.0, 20.0, 20.0]
    flat = {"initial_seconds": 0.25, "multiplier": 1, "jitter": False}
    _, delays = run(one_step("MODEL_TIMEOUT", {"max_attempts": 4, "backoff": flat}))
    assert delays == [0.25, 0.25, 0.25]


def test_jitter_is_on_by_default_bounded_by_the_cap_and_seeded_by_the_run_id():
    p = one_step(
        "MODEL_TIMEOUT",
        {"max_attempts": 6, "backoff": {"initial_seconds": 100, "multiplier": 1, "max_seconds": 2}},
    )
    _, first = run(p, run_id="alpha")
    _, again = run(p, run_id="alpha")
    _, other = run(p, run_id="beta")
    assert first == again
    assert first != other
    assert len(first) == 5 and len(set(first)) == 5  # jittered, not the flat 2.0
    assert all(0 <= d < 2 for d in first + other)
    none = {"initial_seconds": 5, "max_seconds": 0}
    _, zero = run(one_step("MODEL_TIMEOUT", {"max_attempts": 3, "backoff": none}))
    assert zero == [0.0, 0.0]


# --- catch and max_steps ---------------------------------------------------------------------


def test_a_catch_looping_to_the_failing_step_ends_in_max_steps_exceeded():
    p = pipeline(
        [
            {
                "id": "a",
                "action": "fail",
                "code": "VARIABLE_MISSING",
                "ok_after_calls": 50,  # would end the loop, far beyond the limit
                "catch": {"VARIABLE_MISSING": "a"},
                "end": True,
            }
        ],
        settings={"max_steps": 5},
    )
    result, _ = run(p)
    assert (result.status, result.error.code, result.error.step_id) == (
        "failed",
        "MAX_STEPS_EXCEEDED",
        "a",
    )
    assert result.steps == ["a"] * 5
    assert len(CALLS) == 5
    assert len(events(result, "CATCH")) == 5


def test_max_steps_counts_steps_not_attempts_and_allows_exactly_the_limit():
    steps = [
        {
            "id": "a",
            "action": "fail",
            "code": "MODEL_TIMEOUT",
            "ok_at": 3,
            "retry": {"max_attempts": 3},
            "next": "b",
        },
        {"id": "b", "action": "mail", "next": "c"},
        {"id": "c", "action": "mail", "end": True},
    ]
    done, _ = run(pipeline(steps, settings={"max_steps": 3}))
    assert done.status == "completed", done.error
    assert done.steps == ["a", "b", "c"]
    CALLS.clear()
    short, _ = run(pipeline(steps), max_steps=2)
    assert (short.error.code, short.error.step_id, short.steps) == (
        "MAX_STEPS_EXCEEDED",
        "c",
        ["a", "b"],
    )
    assert CALLS == [("a", 1), ("a", 2), ("a", 3), ("b", 1)]


def test_caught_and_retried_failure_runs_the_handler_once():
    p = pipeline(
        [
            {
                "id": "a",
                "action": "fail",
                "code": "MODEL_RATE_LIMITED",
                "retry": {"max_attempts": 2, "backoff": {"jitter": False}},
                "catch": {"ALL": "h", "MODEL_RATE_LIMITED": "r"},
                "next": "h",
            },
            {"id": "h", "action": "mail", "end": True},
            {"id": "r", "action": "mail", "end": True},
        ]
    )
    result, delays = run(p)
    assert result.status == "completed", result.error
    assert CALLS == [("a", 1), ("a", 2), ("r", 1)]
    assert delays == [0.5]
    assert result.steps == ["a", "r"]
    assert result.state["last_error"] == {
        "code": "MODEL_RATE_LIMITED",
        "message": "MODEL_RATE_LIMITED at 2",
        "step_id": "a",
    }
    assert "wrote" not in result.state  # the failed attempts' writes were dropped
    [catch] = events(result, "CATCH")
    assert (catch["code"], catch["next"]) == ("MODEL_RATE_LIMITED", "r")


def test_uncaught_code_fails_even_with_other_catches():
    p = pipeline(
        [
            {
                "id": "a",
                "action": "fail",
                "code": "VARIABLE_MISSING",
                "catch": {"MODEL_TIMEOUT": "h"},
                "next": "h",
            },
            {"id": "h", "action": "mail", "end": True},
        ]
    )
    result, _ = run(p)
    assert (result.status, result.error.code) == ("failed", "VARIABLE_MISSING")
    assert result.steps == [] and "last_error" not in result.state


# --- one execution per visit -----------------------------------------------------------------


def test_each_visit_executes_its_action_once():
    p = pipeline(
        [
            {"id": "a", "action": "mail", "send": [["c", "x"]], "next": "b"},
            {"id": "b", "action": "fail", "code": "VARIABLE_MISSING", "catch": {"ALL": "c"}},
            {"id": "c", "action": "mail", "next": "d"},
            {"id": "d", "action": "mail", "end": True},
        ]
    )
    result, _ = run(p)
    assert result.status == "completed", result.error
    assert result.steps == ["a", "b", "c", "d"]
    assert CALLS == [("a", 1), ("b", 1), ("c", 1), ("d", 1)]
    assert [e["step_id"] for e in events(result, "STEP")] == ["a", "c", "d"]


# --- the inbox -------------------------------------------------------------------------------


def test_inbox_is_fifo_per_target_and_consumed_once_on_entry():
    p = pipeline(
        [
            {"id": "s1", "action": "mail", "send": [["t", "1"], ["u", "2"]], "next": "s2"},
            {
                "id": "s2",
                "action": "mail",
                "send": [["t", "3"], ["t", "4"], ["u", "5"]],
                "next": "t",
            },
            {"id": "t", "action": "mail", "send": [["u", "6"]], "next": "u"},
            {"id": "u", "action": "mail", "next": "v"},
            # v sends to t and goes back to it, then sends again and ends the run
            {"id": "v", "action": "mail", "send": [["t", "7"]], "loop_to": "t", "loops": 2},
        ],
        inbox={"on_leftover": "warn"},
    )
    result, _ = run(p)
    assert result.status == "completed", result.error
    assert result.steps == ["s1", "s2", "t", "u", "v", "t", "u", "v"]
    assert result.state["inbox_log"] == [
        ["t", "m1", "1", 1, "s1", {"n": 0}],
        ["t", "m3", "3", 1, "s2", {"n": 0}],
        ["t", "m4", "4", 1, "s2", {"n": 1}],
        ["u", "m2", "2", 1, "s1", {"n": 1}],
        ["u", "m5", "5", 1, "s2", {"n": 2}],
        ["u", "m6", "6", 1, "t", {"n": 0}],
        ["t", "m7", "7", 1, "v", {"n": 0}],
        ["u", "m8", "6", 1, "t", {"n": 0}],
    ]
    consumed = [(e["step_id"], e["message"]["id"]) for e in events(result, "INBOX_CONSUME")]
    assert consumed == [("t", "m1"), ("t", "m3"), ("t", "m4"), ("u", "m2"), ("u", "m5"),
                        ("u", "m6"), ("t", "m7"), ("u", "m8")]  # fmt: skip
    enqueued = [e["message"]["id"] for e in events(result, "INBOX_ENQUEUE")]
    assert enqueued == ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"]
    [left] = events(result, "INBOX_LEFTOVER")
    assert [m["id"] for m in left["messages"]] == ["m9"]


def test_a_message_sent_to_the_running_step_waits_for_its_next_visit():
    p = pipeline(
        [
            {"id": "a", "action": "mail", "send": [["a", "self"]], "loop_to": "a", "loops": 2},
        ],
        inbox={"on_leftover": "warn"},
    )
    result, _ = run(p)
    assert result.status == "completed", result.error
    assert result.state["inbox_log"] == [["a", "m1", "self", 1, "a", {"n": 0}]]
    [left] = events(result, "INBOX_LEFTOVER")
    assert [m["id"] for m in left["messages"]] == ["m2"]


def test_requeue_returns_the_message_with_attempt_plus_one():
    p = pipeline(
        [
            {"id": "s", "action": "mail", "send": [["q", "job"]], "next": "q"},
            {"id": "q", "action": "mail", "requeue_below": 3, "loop_to": "q", "loops": 3},
        ],
        inbox={"on_leftover": "error"},
    )
    result, _ = run(p)
    assert result.status == "completed", result.error
    assert result.state["inbox_log"] == [
        ["q", "m1", "job", 1, "s", {"n": 0}],
        ["q", "m2", "job", 2, "q", {"n": 0}],
        ["q", "m3", "job", 3, "q", {"n": 0}],
    ]


LEFTOVER_STEPS = [
    {"id": "a", "action": "mail", "send": [["b", "x"], ["c", "y"], ["a", "z"]], "next": "c"},
    {"id": "b", "action": "mail", "end": True},
    {"id": "c", "action": "mail", "end": True},
]
LEFT = [
    {
        "id": "m1",
        "sender_step_id": "a",
        "target_step_id": "b",
        "topic": "x",
        "payload": {"n": 0},
        "attempt": 1,
    },
    {
        "id": "m3",
        "sender_step_id": "a",
        "target_step_id": "a",
        "topic": "z",
        "payload": {"n": 2},
        "attempt": 1,
    },
]


def test_leftover_error_fails_the_run_listing_the_messages():
    result, _ = run(pipeline(LEFTOVER_STEPS, inbox={"on_leftover": "error"}))
    assert (result.status, result.error.code) == ("failed", "INBOX_LEFTOVER")
    assert result.error.message == "2 inbox message(s) never consumed: m1->b:x, m3->a:z"
    assert result.error.details["messages"] == LEFT
    assert result.steps == ["a", "c"]  # every step ran; the run fails at the end
    assert events(result, "INBOX_LEFTOVER") == []
    [failed] = events(result, "RUN_FAILED")
    assert failed["code"] == "INBOX_LEFTOVER"


@pytest.mark.parametrize("inbox", [{"on_leftover": "warn"}, {}])
def test_leftover_warn_is_the_default_and_completes_with_one_event(inbox):
    result, _ = run(pipeline(LEFTOVER_STEPS, inbox=inbox))
    assert (result.status, result.error) == ("completed", None)
    [warned] = events(result, "INBOX_LEFTOVER")
    assert warned["messages"] == LEFT
    assert [e["type"] for e in result.events][-2:] == ["INBOX_LEFTOVER", "RUN_COMPLETED"]


def test_leftover_ignore_completes_silently():
    result, _ = run(pipeline(LEFTOVER_STEPS, inbox={"on_leftover": "ignore"}))
    assert (result.status, result.error) == ("completed", None)
    assert events(result, "INBOX_LEFTOVER") == []


@pytest.mark.parametrize("policy", ["error", "warn"])
def test_no_leftover_no_complaint(policy):
    steps = [
        {"id": "a", "action": "mail", "send": [["b", "x"]], "next": "b"},
        {"id": "b", "action": "mail", "end": True},
    ]
    result, _ = run(pipeline(steps, inbox={"on_leftover": policy}))
    assert (result.status, result.error) == ("completed", None)
    assert events(result, "INBOX_LEFTOVER") == []
