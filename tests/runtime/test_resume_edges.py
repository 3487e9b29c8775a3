"""Run store and resume edges: crashes at awkward moments, caught errors, deletions, ids, listing.

A crash is simulated in-process by an action raising `Crash` (a BaseException the engine
does not catch, so the store is left exactly as at the last checkpoint, as after a kill),
and once for real by SIGKILL of a child process. Every resumed run must end in exactly
the state of the same run left uninterrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

import runtime
from runtime.cli import cli
from runtime.engine import Engine
from runtime.errors import ContextOverflowError

CALLS: list[str] = []  # step ids, one per action execution
CRASH_AT: dict[str, int] = {}  # step id -> its execution (1-based) that crashes the process
FAIL_AT: set[str] = set()  # step ids whose action fails with an uncaught error


class Crash(BaseException):
    """Stands for SIGKILL: nothing in the engine catches it."""


class Act(runtime.Action):
    """Configurable test step.

    `set: {name: value}`, `delete: [names]`, `send: [[target, topic], ...]`,
    `fail: CODE` (raise a RunError with that code; `CONTEXT_OVERFLOW` raises the model error),
    `loop: {counter, limit}` (branch `again` while the counter stays under the limit).
    Every message received is appended to the `got` variable as [step, id, topic, attempt, payload].
    """

    name = "act"
    runnable = True
    outcomes = ("again", "done")

    def run(self, ctx: Any) -> runtime.Outcome | None:
        CALLS.append(ctx.step_id)
        if CRASH_AT.get(ctx.step_id) == CALLS.count(ctx.step_id):
            del CRASH_AT[ctx.step_id]
            raise Crash(ctx.step_id)
        if ctx.step_id in FAIL_AT:
            raise runtime.RunError("injected", code="ACTION_FAILED")
        step = ctx.step
        if ctx.messages:
            got = [[ctx.step_id, m.id, m.topic, m.attempt, m.payload] for m in ctx.messages]
            ctx.set("got", [*ctx.get("got", []), *got])
        for name, value in (step.get("set") or {}).items():
            ctx.set(name, value)
        for name in step.get("delete") or []:
            ctx.delete(name)
        for target, topic in step.get("send") or []:
            ctx.enqueue(target, topic, {"from": ctx.step_id})
        if "fail" in step:
            if step["fail"] == "CONTEXT_OVERFLOW":
                raise ContextOverflowError("too long")
            raise runtime.RunError(f"{ctx.step_id} failed", code=step["fail"])
        if "loop" in step:
            n = ctx.increment(step["loop"]["counter"])
            ctx.set("loops", ctx.get("loops", 0) + 1)
            return runtime.Outcome.to_branch("again" if n < step["loop"]["limit"] else "done")
        return None


REG = runtime.Registry.from_classes(Act)


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    CALLS.clear()
    CRASH_AT.clear()
    FAIL_AT.clear()
    yield
    CRASH_AT.clear()
    FAIL_AT.clear()


def pipeline(steps: list[dict[str, Any]], **extra: Any) -> runtime.Pipeline:
    settings = {"entry_step_id": steps[0]["id"], **extra.pop("settings", {})}
    return runtime.Pipeline.from_dict(
        {"name": "edges", "settings": settings, "steps": steps, **extra}
    )


def reference(p: runtime.Pipeline, inputs: dict[str, Any] | None = None) -> runtime.RunResult:
    """The same run, uninterrupted and without a store."""
    result = Engine(p, registry=REG).run(inputs or {}, run_id="ref")
    assert result.status == "completed", result.error
    CALLS.clear()
    return result


def crash_then_resume(
    p: runtime.Pipeline,
    db: str,
    crash_at: str,
    inputs: dict[str, Any] | None = None,
    nth: int = 1,
) -> tuple[dict[str, Any], runtime.RunResult]:
    """Crash in the nth execution of `crash_at`; return the stored checkpoint and the resumed result."""
    CRASH_AT[crash_at] = nth
    with pytest.raises(Crash):
        Engine(p, registry=REG, store=runtime.SqliteRunStore(db)).run(inputs or {}, run_id="k")
    saved = runtime.SqliteRunStore(db).load("k")
    resumed = Engine(p, registry=REG, store=runtime.SqliteRunStore(db)).resume("k")
    return saved, resumed


def assert_same_run(resumed: runtime.RunResult, ref: runtime.RunResult) -> None:
    assert resumed.status == "completed", resumed.error
    assert resumed.state == ref.state
    assert resumed.steps == ref.steps
    assert resumed.output == ref.output


# --- a crash before the first checkpoint -------------------------------------------------

CHILD_MODULE = textwrap.dedent("""
    import os, pathlib, time
    from runtime.contract.action import Action, Outcome
    from runtime.format.pipeline import Pipeline
    from runtime.contract.registry import Registry

    class Stall(Action):
        name = "stall"
        runnable = True
        def run(self, ctx):
            ctx.set(ctx.step_id, ctx.get("greeting") + "/" + str(ctx.get("times")))
            if ctx.step_id == "first" and os.environ.get("STALL_FILE"):
                pathlib.Path(os.environ["STALL_FILE"]).write_text("entered")
                time.sleep(120)
            return None

    REG = Registry.from_classes(Stall)
    PIPELINE = Pipeline.from_dict({
        "name": "stalls", "settings": {"entry_step_id": "first"},
        "inputs": {"greeting": {"type": "string"}, "times": {"type": "integer", "default": 2}},
        "steps": [{"id": "first", "action": "stall", "next": "second"},
                  {"id": "second", "action": "stall", "end": True}]})
""")


def test_sigkill_before_the_first_checkpoint_resumes_from_the_entry(tmp_path, monkeypatch):
    (tmp_path / "stall_mod.py").write_text(CHILD_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    import stall_mod

    mod = importlib.reload(stall_mod)
    db = str(tmp_path / "runs.db")
    entered = tmp_path / "entered"
    script = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import stall_mod\nfrom runtime.engine import Engine\nfrom runtime.engine.store import SqliteRunStore\n"
        f"Engine(stall_mod.PIPELINE, registry=stall_mod.REG, store=SqliteRunStore({db!r}))"
        ".run({'greeting': 'hi'}, run_id='early')\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], env={**os.environ, "STALL_FILE": str(entered)}
    )
    try:
        deadline = time.time() + 30
        while not entered.exists() and time.time() < deadline and child.poll() is None:
            time.sleep(0.01)
        assert entered.exists(), "the child never reached its first step"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()

    store = runtime.SqliteRunStore(db)
    [row] = store.runs()
    assert (row["run_id"], row["status"], row["steps"]) == ("early", "interrupted", 0)
    # RUN_STARTED was stored with the run (issue 25: a kill before the first checkpoint lost it)
    assert [e["type"] for e in store.events("early")] == ["RUN_STARTED"]

    resumed = Engine(mod.PIPELINE, registry=mod.REG, store=store).resume("early")
    ref = Engine(mod.PIPELINE, registry=mod.REG).run({"greeting": "hi"}, run_id="ref")
    assert resumed.status == "completed", resumed.error
    # the declared default is applied again, the entry step runs first
    assert (
        resumed.state
        == ref.state
        == {
            "greeting": "hi",
            "times": 2,
            "first": "hi/2",
            "second": "hi/2",
        }
    )
    assert resumed.steps == ["first", "second"]
    events = store.events("early")
    assert [(e["seq"], e["type"]) for e in events] == [
        (1, "RUN_STARTED"),
        (2, "RUN_RESUMED"),
        (3, "STEP"),
        (4, "STEP"),
        (5, "RUN_COMPLETED"),
    ]
    assert events[1]["position"] == "first"
    [row] = store.runs()
    assert (row["status"], row["steps"]) == ("completed", 2)


def test_crash_in_the_entry_step_resumes_cleanly_in_process(tmp_path):
    p = pipeline(
        [
            {"id": "a", "action": "act", "set": {"x": 1}, "next": "b"},
            {"id": "b", "action": "act", "set": {"y": 2}, "end": True},
        ],
        inputs={"q": {"type": "string", "default": "dflt"}},
    )
    ref = reference(p)
    saved, resumed = crash_then_resume(p, str(tmp_path / "runs.db"), crash_at="a")
    assert saved["variables"] == {}  # nothing was checkpointed
    assert_same_run(resumed, ref)
    assert resumed.state == {"q": "dflt", "x": 1, "y": 2}
    assert CALLS == ["a", "a", "b"]  # the crashed attempt, then the resumed run


# --- pending inbox messages ----------------------------------------------------------------

INBOX_STEPS = [
    {"id": "s", "action": "act", "send": [["t", "one"], ["u", "other"], ["t", "two"]], "next": "w"},
    {"id": "w", "action": "act", "set": {"waited": True}, "next": "t"},
    {"id": "t", "action": "act", "send": [["u", "later"]], "next": "u"},
    {"id": "u", "action": "act", "end": True},
]


def test_messages_pending_at_a_crash_are_delivered_once_after_resume(tmp_path):
    p = pipeline(INBOX_STEPS, inbox={"on_leftover": "error"})
    ref = reference(p)
    assert ref.state["got"] == [
        ["t", "m1", "one", 1, {"from": "s"}],
        ["t", "m3", "two", 1, {"from": "s"}],
        ["u", "m2", "other", 1, {"from": "s"}],
        ["u", "m4", "later", 1, {"from": "t"}],
    ]
    db = str(tmp_path / "runs.db")
    saved, resumed = crash_then_resume(p, db, crash_at="w")
    assert [(m["id"], m["target_step_id"]) for m in saved["engine"]["inbox"]["messages"]] == [
        ("m1", "t"),
        ("m2", "u"),
        ("m3", "t"),
    ]
    assert saved["position"] == "w"
    assert_same_run(resumed, ref)  # same ids (m4 continues the sequence), each message once
    consumed = [
        e["message"]["id"]
        for e in runtime.SqliteRunStore(db).events("k")
        if e["type"] == "INBOX_CONSUME"
    ]
    assert consumed == ["m1", "m3", "m2", "m4"]


def test_messages_of_the_crashed_visit_are_delivered_again(tmp_path):
    p = pipeline(INBOX_STEPS, inbox={"on_leftover": "error"})
    ref = reference(p)
    saved, resumed = crash_then_resume(p, str(tmp_path / "runs.db"), crash_at="t")
    assert saved["position"] == "t"
    assert [m["id"] for m in saved["engine"]["inbox"]["messages"]] == ["m1", "m2", "m3"]
    assert_same_run(resumed, ref)
    assert CALLS == ["s", "w", "t", "t", "u"]


# --- caught errors, deleted and overwritten variables, counters ------------------------------


def test_caught_errors_are_checkpointed_and_survive_resume(tmp_path):
    p = pipeline(
        [
            {"id": "a", "action": "act", "fail": "VARIABLE_MISSING", "catch": {"ALL": "b"}},
            {"id": "b", "action": "act", "fail": "CONTEXT_OVERFLOW", "catch": {"ALL": "c"}},
            {"id": "c", "action": "act", "next": "d"},
            {"id": "d", "action": "act", "set": {"done": True}, "end": True},
        ]
    )
    ref = reference(p)
    second = {"code": "CONTEXT_OVERFLOW", "message": "too long", "step_id": "b"}
    assert ref.state == {"last_error": second, "done": True}
    db = str(tmp_path / "runs.db")
    saved, resumed = crash_then_resume(p, db, crash_at="d")
    assert saved["variables"] == {"last_error": second}
    assert saved["engine"]["step_trace"] == ["a", "b", "c"]
    assert_same_run(resumed, ref)
    assert runtime.SqliteRunStore(db).load("k")["variables"]["last_error"] == second


def test_a_caught_error_is_in_the_stored_state_of_a_completed_run(tmp_path):
    p = pipeline(
        [
            {"id": "a", "action": "act", "set": {"x": 1}, "next": "b"},
            {"id": "b", "action": "act", "fail": "VARIABLE_MISSING", "catch": {"ALL": "c"}},
            {"id": "c", "action": "act", "end": True},
        ]
    )
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    result = runtime.Runner(p, store=store, registry=REG).run({}, run_id="c1")
    error = {"code": "VARIABLE_MISSING", "message": "b failed", "step_id": "b"}
    assert result.state == {"x": 1, "last_error": error}
    assert store.load("c1")["variables"] == {"x": 1, "last_error": error}
    [row] = store.runs()
    assert (row["status"], row["steps"], row["error"]) == ("completed", 3, None)
    catches = [e for e in store.events("c1") if e["type"] == "CATCH"]
    assert [(c["step_id"], c["code"], c["next"]) for c in catches] == [
        ("b", "VARIABLE_MISSING", "c")
    ]


def test_deleted_and_overwritten_variables_are_checkpointed(tmp_path):
    p = pipeline(
        [
            {"id": "a", "action": "act", "set": {"tmp": "t", "x": 1, "keep": 0}, "next": "b"},
            {"id": "b", "action": "act", "delete": ["tmp"], "set": {"x": 2}, "next": "c"},
            {"id": "c", "action": "act", "next": "d"},
            {"id": "d", "action": "act", "set": {"x": 3}, "end": True},
        ]
    )
    ref = reference(p)
    assert ref.state == {"x": 3, "keep": 0}
    db = str(tmp_path / "runs.db")
    saved, resumed = crash_then_resume(p, db, crash_at="c")
    assert saved["variables"] == {"x": 2, "keep": 0}
    assert_same_run(resumed, ref)
    assert runtime.SqliteRunStore(db).load("k")["variables"] == {"x": 3, "keep": 0}


def test_an_input_deleted_in_the_first_step_stays_deleted(tmp_path):
    p = pipeline(
        [
            {"id": "a", "action": "act", "delete": ["secret"], "next": "b"},
            {"id": "b", "action": "act", "end": True},
        ]
    )
    ref = reference(p, {"secret": "s", "q": 1})
    assert ref.state == {"q": 1}
    saved, resumed = crash_then_resume(p, str(tmp_path / "runs.db"), "b", {"secret": "s", "q": 1})
    assert saved["variables"] == {"q": 1}
    assert_same_run(resumed, ref)


def test_counters_survive_resume(tmp_path):
    p = pipeline(
        [
            {
                "id": "loop",
                "action": "act",
                "loop": {"counter": "turns", "limit": 4},
                "on_again": "pause",
                "on_done": "z",
            },
            {"id": "pause", "action": "act", "next": "loop"},
            {"id": "z", "action": "act", "end": True},
        ]
    )
    ref = reference(p)
    assert ref.state == {"loops": 4}
    saved, resumed = crash_then_resume(p, str(tmp_path / "runs.db"), crash_at="pause", nth=2)
    assert saved["engine"]["counters"] == {"turns": 2}
    assert saved["variables"] == {"loops": 2}
    assert_same_run(resumed, ref)
    assert resumed.steps == ["loop", "pause"] * 3 + ["loop", "z"]


# --- failed runs, trace numbering -----------------------------------------------------------


def test_a_failed_run_resumes_at_the_failing_step(tmp_path):
    p = pipeline(
        [
            {"id": "a", "action": "act", "set": {"x": 1}, "next": "b"},
            {"id": "b", "action": "act", "set": {"y": 2}, "next": "c"},
            {"id": "c", "action": "act", "end": True},
        ]
    )
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    FAIL_AT.add("b")
    failed = Engine(p, registry=REG, store=store).run({}, run_id="f")
    assert (failed.status, failed.error.code, failed.error.step_id) == (
        "failed",
        "ACTION_FAILED",
        "b",
    )
    [row] = store.runs()
    assert (row["status"], row["steps"], row["error"]["code"]) == ("failed", 1, "ACTION_FAILED")
    FAIL_AT.clear()
    CALLS.clear()
    resumed = Engine(p, registry=REG, store=store).resume("f")
    assert resumed.status == "completed"
    assert CALLS == ["b", "c"]
    assert resumed.steps == ["a", "b", "c"]
    assert resumed.state == {"x": 1, "y": 2}
    [row] = store.runs()
    assert (row["status"], row["steps"], row["error"]) == ("completed", 3, None)
    types = [e["type"] for e in store.events("f")]
    assert types == [
        "RUN_STARTED",
        "STEP",
        "RUN_FAILED",
        "RUN_RESUMED",
        "STEP",
        "STEP",
        "RUN_COMPLETED",
    ]
    assert [e["seq"] for e in store.events("f")] == list(range(1, 8))


def test_trace_numbering_continues_after_a_crash(tmp_path):
    p = pipeline(INBOX_STEPS)
    db = str(tmp_path / "runs.db")
    _, resumed = crash_then_resume(p, db, crash_at="t")
    assert resumed.status == "completed"
    events = runtime.SqliteRunStore(db).events("k")
    # events of the crashed visit were never checkpointed; numbering resumes after the last one
    assert [(e["seq"], e["type"], e["step_id"]) for e in events] == [
        (1, "RUN_STARTED", None),
        (2, "INBOX_ENQUEUE", "s"),
        (3, "INBOX_ENQUEUE", "s"),
        (4, "INBOX_ENQUEUE", "s"),
        (5, "STEP", "s"),
        (6, "STEP", "w"),
        (7, "RUN_RESUMED", None),
        (8, "INBOX_CONSUME", "t"),
        (9, "INBOX_CONSUME", "t"),
        (10, "INBOX_ENQUEUE", "t"),
        (11, "STEP", "t"),
        (12, "INBOX_CONSUME", "u"),
        (13, "INBOX_CONSUME", "u"),
        (14, "STEP", "u"),
        (15, "RUN_COMPLETED", None),
    ]


def test_resume_needs_a_store_and_runner_passes_force(tmp_path):
    p = pipeline([{"id": "a", "action": "act", "end": True}])
    with pytest.raises(runtime.RunError) as info:
        Engine(p, registry=REG).resume("any")
    assert info.value.code == "STORE_ERROR"
    db = str(tmp_path / "runs.db")
    FAIL_AT.add("a")
    runner = runtime.Runner(p, store=runtime.SqliteRunStore(db), registry=REG)
    assert runner.run({}, run_id="f").status == "failed"
    FAIL_AT.clear()
    edited = pipeline([{"id": "a", "action": "act", "set": {"v": 2}, "end": True}])
    other = runtime.Runner(edited, store=runtime.SqliteRunStore(db), registry=REG)
    with pytest.raises(runtime.RunError) as info:
        other.resume("f")
    assert info.value.code == "PIPELINE_CHANGED"
    seen: list[str] = []
    result = other.resume("f", force=True, on_event=lambda e: seen.append(e["type"]))
    assert (result.status, result.state) == ("completed", {"v": 2})
    assert seen == ["RUN_RESUMED", "STEP", "RUN_COMPLETED"]


# --- run ids and the listing --------------------------------------------------------------


def test_a_duplicate_run_id_is_refused_and_the_first_run_is_kept(tmp_path):
    p = pipeline([{"id": "a", "action": "act", "set": {"x": 1}, "end": True}])
    db = str(tmp_path / "runs.db")
    store = runtime.SqliteRunStore(db)
    runner = runtime.Runner(p, store=store, registry=REG)
    first = runner.run({"who": "first"}, run_id="same")
    assert first.status == "completed"
    before = (store.runs(), store.load("same"), store.events("same"))
    for inputs in ({"who": "second"}, {}):
        with pytest.raises(runtime.RunError) as info:
            runner.run(inputs, run_id="same")
        assert info.value.code == "STORE_ERROR"
        assert "same" in info.value.message
    assert (store.runs(), store.load("same"), store.events("same")) == before
    assert CALLS == ["a"]
    # a crashed run's id is taken as well
    CRASH_AT["a"] = 2
    with pytest.raises(Crash):
        runner.run({}, run_id="crashed")
    with pytest.raises(runtime.RunError) as info:
        runner.run({}, run_id="crashed")
    assert info.value.code == "STORE_ERROR"
    assert runtime.SqliteRunStore(db).load("crashed")["status"] == "running"


def test_runs_are_listed_newest_first(tmp_path, runner):
    p = pipeline([{"id": "a", "action": "act", "end": True}])
    db = str(tmp_path / "runs.db")
    engine = Engine(p, registry=REG, store=runtime.SqliteRunStore(db))
    for run_id in ("m", "z", "a", "k"):
        engine.run({}, run_id=run_id)
    store = runtime.SqliteRunStore(db)
    assert [r["run_id"] for r in store.runs()] == ["k", "a", "z", "m"]
    assert [r["run_id"] for r in store.runs(limit=2)] == ["k", "a"]
    out = runner.invoke(cli, ["runs", "--store", db, "--json", "--limit", "3"])
    assert out.exit_code == 0, out.output
    assert [r["run_id"] for r in json.loads(out.output)] == ["k", "a", "z"]
    text = runner.invoke(cli, ["runs", "--store", db])
    assert text.exit_code == 0, text.output
    header, *lines = text.output.splitlines()
    assert header.split()[:2] == ["RUN", "ID"]
    assert [line.split()[0] for line in lines] == ["k", "a", "z", "m"]
