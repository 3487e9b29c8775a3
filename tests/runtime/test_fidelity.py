"""Context fidelity (docs/fidelity.md): resolution, preambles within real-token budgets,
durable `full` threads that survive a SIGKILL and `resume`, degradation once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import runtime
from runtime.context import fidelity as fid
from runtime.context.tokens import get_counter
from runtime.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
REVIEW_LOOP = ROOT / "pipelines" / "review_loop.yaml"
INPUTS = {
    "task": "Make parse_port reject ports outside 1-65535 with a clear error.",
    "code": "def parse_port(text):\n    return int(text)\n",
}
COUNTER = get_counter("cl100k_base")


# --- resolution ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arrival", "step", "settings", "expected"),
    [
        (
            {"fidelity": "full"},
            {"fidelity": "truncate"},
            {"default_fidelity": "summary:low"},
            ("full", "transition"),
        ),
        ({}, {"fidelity": "truncate"}, {"default_fidelity": "summary:low"}, ("truncate", "step")),
        (
            {"thread_id": "x"},
            {},
            {"default_fidelity": "summary:low"},
            ("summary:low", "settings.default_fidelity"),
        ),
        ({}, {}, {}, ("compact", "default")),
    ],
)
def test_fidelity_precedence(arrival, step, settings, expected):
    assert fid.resolve_mode(arrival, step, settings) == expected


def test_thread_precedence_each_case():
    full_step = {"thread_id": "s", "group": "g"}
    arrival = {"thread_id": "t"}
    settings = {"default_thread": "d"}
    resolve = fid.resolve_thread
    assert resolve("x", full_step, arrival, settings, "prev") == ("s", "step")
    assert resolve("x", {"group": "g"}, arrival, settings, "prev") == ("t", "transition")
    assert resolve("x", {"group": "g"}, {}, settings, "prev") == ("d", "settings.default_thread")
    assert resolve("x", {"group": "g"}, {}, {}, "prev") == ("g", "group")
    assert resolve("x", {}, {}, {}, "prev") == ("prev", "previous step")
    assert resolve("x", {}, {}, {}, None) == ("x", "own step")


# --- preambles -------------------------------------------------------------------------


def history(n: int, rng: random.Random | None = None) -> list[fid.StepRecord]:
    rng = rng or random.Random(0)
    out = []
    for i in range(n):
        notes = (
            [
                " ".join(
                    rng.choice(["alpha", "beta", "γάμμα", "{json}", "x" * 30])
                    for _ in range(rng.randint(0, 40))
                )
            ]
            if rng.random() < 0.7
            else []
        )
        out.append(
            fid.StepRecord(
                i + 1,
                f"step_{i}",
                rng.choice(["call_model", "search_nodes"]),
                rng.choice(["next -> b", "yes -> c", "end"]),
                rng.uniform(0, 5000),
                rng.randint(1, 3),
                notes,
            )
        )
    return out


def view(records, variables=None, written=None, **kw: Any) -> fid.RunView:
    """A run whose variables are all inputs no step has written, all of them included in
    preambles (unless said otherwise)."""
    variables = variables if variables is not None else {}
    kw.setdefault("inputs", list(variables))
    kw.setdefault("include", list(variables))
    return fid.RunView(
        pipeline="review_loop",
        goal="Fix the port parser.",
        run_id="r1",
        step_id="now",
        total_steps=10,
        history=records,
        variables=variables,
        written=written if written is not None else [],
        **kw,
    )


@pytest.mark.parametrize("mode", list(fid.BUDGETS))
def test_long_history_keeps_the_most_recent_and_fits_exactly(mode):
    records = history(400)
    p = fid.build_preamble(mode, view(records), COUNTER)
    assert p.tokens == COUNTER.count(p.text) <= fid.BUDGETS[mode]
    if mode in ("truncate",):
        return
    assert p.steps_dropped > 0 and p.steps_shown + p.steps_dropped == 400
    # the newest step is shown, the oldest is not
    assert "step_399" in p.text and "step_0," not in p.text and "step_0 " not in p.text
    assert "step_0:" not in p.text


@pytest.mark.parametrize(
    "seed", [16, *(pytest.param(s, marks=(pytest.mark.slow, pytest.mark.pins)) for s in range(4))]
)
def test_a_thousand_random_histories_never_exceed_the_budget(seed):
    """Five seeds of 200 histories; the first in the fast subset."""
    rng = random.Random(seed)
    for i in range(200):
        mode = rng.choice(list(fid.BUDGETS))
        records = history(rng.randint(0, 120), rng)
        names = [f"v{j}" for j in range(rng.randint(0, 30))]
        variables = {
            n: rng.choice(["short", "word " * rng.randint(0, 900), {"k": list(range(50))}, 7])
            for n in names
        }
        p = fid.build_preamble(mode, view(records, variables), COUNTER)
        assert COUNTER.count(p.text) == p.tokens <= fid.BUDGETS[mode], (i, mode)


def test_budget_is_used_to_the_limit_not_far_under():
    # A history that does not fit: the next older entry would not have fitted (no estimate
    # that wastes part of the budget).
    records = history(500)
    p = fid.build_preamble("summary:medium", view(records), COUNTER)
    older = fid._entry("summary:medium", records[-p.steps_shown - 1])
    assert p.steps_shown > 5
    assert p.tokens <= fid.BUDGETS["summary:medium"] < p.tokens + COUNTER.count(older)


def test_oversized_variable_is_shortened_with_a_marker_and_secrets_never_appear():
    variables = {
        "draft": "line of code\n" * 2000,
        "api_key": "sk-live-123456789",
        "db_password": "hunter22hunter",
        "counters": {"x": 1},
        "step_trace": ["a"],
        "tip": "the secret value sk-abcdefghijkl is here",
    }
    p = fid.build_preamble(
        "compact",
        view(history(3), variables),
        COUNTER,
        scrub=lambda s: s.replace("sk-abcdefghijkl", "[redacted]"),
    )
    # the count of what the marker stands for (its first 40 * 64 characters, one line)
    # the marker gives what was shown and the whole value's size
    assert "… [shortened: 26,000 characters in all]" in p.text
    assert p.shortened == ("draft",)
    for hidden in (
        "sk-live",
        "hunter22",
        "api_key",
        "db_password",
        "step_trace",
        "sk-abcdefghijkl",
    ):
        assert hidden not in p.text
    assert "`counters`" not in p.text and "[redacted]" in p.text


def test_include_and_exclude_choose_the_variables():
    variables = {"a": "1", "b": "2", "c": "3"}
    p = fid.build_preamble("compact", view([], variables, include=["c", "a"]), COUNTER)
    assert "`a`" in p.text and "`c`" in p.text and "`b`" not in p.text
    p = fid.build_preamble("compact", view([], variables, exclude=["b"]), COUNTER)
    assert "`a`" in p.text and "`c`" in p.text and "`b`" not in p.text


@pytest.mark.parametrize("mode", ["compact", "summary:medium", "summary:high"])
def test_only_included_inputs_no_step_wrote_are_shown_in_include_order(mode):
    variables = {"task": "fix it", "code": "x = 1", "node_texts": "hit", "answer": "draft"}
    base = {"inputs": ["task", "code", "answer"], "written": ["answer", "node_texts"]}
    everything = ["node_texts", "code", "answer", "task", "code"]
    p = fid.build_preamble(mode, view([], variables, include=everything, **base), COUNTER)
    # node_texts is no input, answer an input a step wrote since: neither is shown.
    assert "hit" not in p.text and "draft" not in p.text
    assert p.text.index("x = 1") < p.text.index("fix it")  # the include list's order
    assert p.text.count("x = 1") == 1 and p.variables_shown == 2
    # A variable no step wrote that is no input either (an action's default, say) is not
    # shown however the include list names it.
    other = fid.build_preamble(
        mode, view([], {"context_blocks": ["b"]}, include=["context_blocks"], inputs=[]), COUNTER
    )
    assert '"b"' not in other.text and "context_blocks" not in other.text
    # Without an include list a preamble shows no variable at all.
    bare = fid.build_preamble(mode, view([], variables, include=None, **base), COUNTER)
    assert not any(v in bare.text for v in variables.values()) and bare.variables_shown == 0
    assert "### Inputs" not in bare.text


def test_each_mode_shows_its_content():
    records = history(6)
    records[-1].attempts = 3
    records[-1].duration_ms = 4200
    records[-1].notes = ["the review found two problems"]
    variables = {"task": "fix it", "report": {"ok": True}}
    t = {m: fid.build_preamble(m, view(records, variables), COUNTER).text for m in fid.BUDGETS}
    assert "- run: r1" in t["truncate"] and "step_5" not in t["truncate"]
    assert "### Completed steps" in t["compact"] and "`task`: fix it" in t["compact"]
    assert "Pipeline review_loop (10 steps)" in t["summary:low"]
    assert "Run r1, now at step 7: now." in t["summary:low"]
    assert (
        "Completed: step_0, step_1" in t["summary:low"]
        and "Last outcome: step_5" in t["summary:low"]
    )
    assert "### Recent steps" in t["summary:medium"] and "### Inputs" in t["summary:medium"]
    high = t["summary:high"]
    assert "[4 s, 3 attempts]" in high
    assert "- actions used:" in high and '"report": {"ok": true}' in high and "```json" in high
    # A step's notes (its model replies, a caught error's message) are never in a preamble.
    assert not any("two problems" in text for text in t.values())


# --- the example pipeline, threads, resume ------------------------------------------------


def model_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "MODEL_CALL"]


def run_loop(db: str, run_id: str = "rl") -> runtime.RunResult:
    p = runtime.load(str(REVIEW_LOOP))
    r = Engine(p, store=runtime.SqliteRunStore(db)).run(INPUTS, run_id=run_id)
    assert r.status == "completed", r.error
    return r


def test_review_loop_uses_all_six_modes_and_one_thread(tmp_path):
    db = str(tmp_path / "r.db")
    run_loop(db)
    store = runtime.SqliteRunStore(db)
    calls = {e["step_id"]: e for e in model_calls(store.events("rl"))}
    assert {c["fidelity"] for c in calls.values()} == set(fid.MODES)
    # draft starts the thread from the transition; review, fix, review_again join it
    assert calls["draft"]["thread_id"] == "coding" and calls["draft"]["thread_messages"] == 0
    assert [calls[s]["thread_messages"] for s in ("review", "fix", "review_again")] == [3, 6, 9]
    review_again = calls["review_again"]["messages"]
    thread = store.threads("rl")["coding"]
    assert review_again[:9] == thread[:9] and review_again[:8] == calls["fix"]["messages"]
    assert thread[8]["role"] == "assistant" and thread[8]["content"].startswith(
        calls["fix"]["reply"]
    )
    for c in calls.values():
        if c["fidelity"] != "full":
            assert c["preamble_tokens"] <= fid.BUDGETS[c["fidelity"]]
            # The prompt file first (the same every run), then the preamble.
            system = c["messages"][0]["content"]
            assert "\n\n## Run context\n" in system and not system.startswith("## Run")
        else:
            assert c["preamble_tokens"] == 0
            assert not any("## Run context" in m["content"] for m in c["messages"])
    assert calls["draft"]["thread_from"] == "transition"
    assert calls["review"]["thread_from"] == "settings.default_thread"
    assert calls["summary"]["fidelity_from"] == "transition"
    assert calls["notes"]["fidelity_from"] == "default"
    threads = store.threads("rl")
    assert list(threads) == ["coding"] and len(threads["coding"]) == 12


def test_threads_are_isolated_by_run_and_by_id(tmp_path):
    db = str(tmp_path / "r.db")
    run_loop(db, "one")
    run_loop(db, "two")
    store = runtime.SqliteRunStore(db)
    a, b = store.threads("one"), store.threads("two")
    assert len(a["coding"]) == len(b["coding"]) == 12  # not 24: runs never share a thread
    p = runtime.load(str(REVIEW_LOOP))
    raw = json.loads(json.dumps(p.raw))
    for s in raw["steps"]:
        if s["id"] == "fix":
            s["thread_id"] = "fixes"  # the step's own thread wins
    p2 = runtime.Pipeline.from_dict(raw, file=p.file)
    r = Engine(p2, store=runtime.SqliteRunStore(db)).run(INPUTS, run_id="three")
    assert r.status == "completed", r.error
    t = runtime.SqliteRunStore(db).threads("three")
    assert len(t["fixes"]) == 3 and len(t["coding"]) == 9
    calls = {e["step_id"]: e for e in model_calls(runtime.SqliteRunStore(db).events("three"))}
    assert calls["fix"]["thread_messages"] == 0  # a new thread: nothing of `coding`


def test_a_failed_attempt_appends_nothing_to_the_thread(tmp_path, monkeypatch):
    from runtime.errors import ModelError
    from runtime.models.extractive import ExtractiveProvider

    real = ExtractiveProvider.complete
    seen: list[str] = []

    def flaky(self, request, **kw):
        seen.append(request.step_id)
        if request.step_id == "fix" and seen.count("fix") == 1:
            raise ModelError("busy", code="MODEL_RATE_LIMITED")
        return real(self, request, **kw)

    monkeypatch.setattr(ExtractiveProvider, "complete", flaky)
    p = runtime.load(str(REVIEW_LOOP))
    fix = p.step("fix")
    fix.config["retry"] = {"max_attempts": 2, "backoff": {"initial_seconds": 0}}
    db = str(tmp_path / "r.db")
    r = Engine(p, store=runtime.SqliteRunStore(db), sleep=lambda _: None).run(INPUTS, run_id="f")
    assert r.status == "completed", r.error
    assert len(runtime.SqliteRunStore(db).threads("f")["coding"]) == 12


CHILD = """
import os, sys, time
from pathlib import Path
import runtime
from runtime.engine import Engine
from runtime.models.extractive import ExtractiveProvider
real = ExtractiveProvider.complete
def stall(self, request, **kw):
    if request.step_id == os.environ["STALL_STEP"]:
        Path(os.environ["STALL_FILE"]).write_text("x")
        time.sleep(600)
    return real(self, request, **kw)
ExtractiveProvider.complete = stall
p = runtime.load(sys.argv[1])
Engine(p, store=runtime.SqliteRunStore(sys.argv[2])).run(
    {"task": sys.argv[3], "code": sys.argv[4]}, run_id="rl")
"""


def kill_in(step: str, tmp_path: Path) -> str:
    """Run review_loop in a child process and SIGKILL it while `step` calls the model."""
    db = str(tmp_path / "killed.db")
    flag = tmp_path / "entered"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(REVIEW_LOOP), db, INPUTS["task"], INPUTS["code"]],
        env={**os.environ, "STALL_FILE": str(flag), "STALL_STEP": step},
        cwd=str(ROOT),
    )
    try:
        deadline = time.time() + 120
        while not flag.exists() and child.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert flag.exists(), "the child never reached the step"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    return db


def test_sigkill_in_the_middle_of_a_full_thread_then_resume_gives_the_same_messages(tmp_path):
    db = kill_in("fix", tmp_path)
    saved = runtime.SqliteRunStore(db)
    assert len(saved.threads("rl")["coding"]) == 6  # draft and review were checkpointed
    p = runtime.load(str(REVIEW_LOOP))
    resumed = Engine(p, store=runtime.SqliteRunStore(db)).resume("rl")
    assert resumed.status == "completed", resumed.error
    run_loop(str(tmp_path / "ref.db"))
    got = model_calls(runtime.SqliteRunStore(db).events("rl"))
    ref = model_calls(runtime.SqliteRunStore(str(tmp_path / "ref.db")).events("rl"))
    assert [c["step_id"] for c in got] == [c["step_id"] for c in ref]
    assert [c["messages"] for c in got] == [c["messages"] for c in ref]
    assert not any("degraded" in c for c in got)
    assert runtime.SqliteRunStore(db).threads("rl") == runtime.SqliteRunStore(
        str(tmp_path / "ref.db")
    ).threads("rl")


def test_non_restorable_provider_degrades_the_first_full_step_after_resume_once(
    tmp_path, monkeypatch
):
    from runtime.models.extractive import ExtractiveProvider

    db = kill_in("review", tmp_path)
    monkeypatch.setattr(ExtractiveProvider, "restorable_state", False)
    p = runtime.load(str(REVIEW_LOOP))
    resumed = Engine(p, store=runtime.SqliteRunStore(db)).resume("rl")
    assert resumed.status == "completed", resumed.error
    calls = {e["step_id"]: e for e in model_calls(runtime.SqliteRunStore(db).events("rl"))}
    assert calls["review"]["degraded"] == {"from": "full", "to": "summary:high", "reason": "resume"}
    assert calls["review"]["fidelity"] == "summary:high"
    assert calls["review"]["preamble_tokens"] <= 3000
    assert "\n\n## Run context\n" in calls["review"]["messages"][0]["content"]
    # once: the next full steps use the thread again, which holds the degraded step's turn
    for step in ("fix", "review_again"):
        assert calls[step]["fidelity"] == "full" and "degraded" not in calls[step]
    assert calls["fix"]["thread_messages"] == 6
    # without a resume the same provider never degrades
    run_loop(str(tmp_path / "ref.db"))
    ref = model_calls(runtime.SqliteRunStore(str(tmp_path / "ref.db")).events("rl"))
    assert not any("degraded" in c for c in ref)


def test_history_is_rebuilt_from_the_trace_on_resume(tmp_path):
    db = kill_in("status", tmp_path)
    p = runtime.load(str(REVIEW_LOOP))
    Engine(p, store=runtime.SqliteRunStore(db)).resume("rl")
    run_loop(str(tmp_path / "ref.db"))
    got = {e["step_id"]: e for e in model_calls(runtime.SqliteRunStore(db).events("rl"))}
    ref = {
        e["step_id"]: e
        for e in model_calls(runtime.SqliteRunStore(str(tmp_path / "ref.db")).events("rl"))
    }
    for step in ("status", "audit", "notes"):
        assert got[step]["messages"] == ref[step]["messages"]
        assert "summary (call_model)" in got["audit"]["messages"][0]["content"]


def test_runtime_trace_threads_shows_each_call_and_the_thread(tmp_path):
    from click.testing import CliRunner

    from runtime.cli import cli

    db = str(tmp_path / "r.db")
    run_loop(db)
    out = CliRunner().invoke(cli, ["trace", "rl", "--store", db, "--threads"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert any("review_again" in x and "thread coding (9 before)" in x for x in lines)
    assert any(" summary " in x and "truncate" in x and "/100 tokens" in x for x in lines)
    assert "thread coding: 12 message(s)" in out.output
    rows = [
        json.loads(x)
        for x in CliRunner()
        .invoke(cli, ["trace", "rl", "--store", db, "--threads", "--format", "jsonl"])
        .output.splitlines()
    ]
    assert [r["n"] for r in rows if r["type"] == "message"] == list(range(12))
    assert {r["fidelity"] for r in rows if r["type"] == "call"} == set(fid.MODES)


def test_same_inputs_give_the_same_trace(tmp_path):
    from runtime.engine.trace import without_timing

    traces = []
    for name in ("a.db", "b.db"):
        run_loop(str(tmp_path / name))
        events = runtime.SqliteRunStore(str(tmp_path / name)).events("rl")
        traces.append(without_timing(events))
    assert traces[0] == traces[1]


@pytest.mark.parametrize("mode", list(fid.BUDGETS))
def test_a_preamble_exactly_at_its_budget_is_kept_whole_and_one_token_less_is_cut(mode):
    records = history(12)
    variables = {"task": "fix the parser", "notes": "word " * 30}
    whole = fid.build_preamble(mode, view(records, variables), COUNTER, budget=100_000)
    assert whole.steps_dropped == (12 if mode == "truncate" else 0)  # truncate shows none
    exact = fid.build_preamble(mode, view(records, variables), COUNTER, budget=whole.tokens)
    assert exact.text == whole.text and exact.tokens == whole.tokens
    less = fid.build_preamble(mode, view(records, variables), COUNTER, budget=whole.tokens - 1)
    assert less.text != whole.text and less.tokens <= whole.tokens - 1


def test_history_log_records_steps_catches_notes_and_writes_in_order():
    log = fid.HistoryLog({"a": "call_model", "b": "search_nodes"})
    log.extend(
        [
            {"type": "RUN_STARTED", "step_id": None},
            {"type": "MODEL_CALL", "step_id": "a", "reply": "first   reply\nline"},
            {
                "type": "STEP",
                "step_id": "a",
                "action": "call_model",
                "outcome": "next",
                "next": "b",
                "attempt": 2,
                "duration_ms": 12.5,
                "wrote": {"x": {}, "y": {}},
            },
            {
                "type": "CATCH",
                "step_id": "b",
                "code": "SEARCH_FAILED",
                "message": "boom",
                "next": "a",
            },
            {
                "type": "STEP",
                "step_id": "a",
                "action": "call_model",
                "outcome": "end",
                "next": None,
                "attempt": 1,
                "duration_ms": 1.0,
                "wrote": {"x": {}},
            },
        ]
    )
    got = [r.to_dict() for r in log.records]
    assert [(r["id"], r["action"], r["outcome"], r["attempts"]) for r in got] == [
        ("a", "call_model", "next -> b", 2),
        ("b", "search_nodes", "failed SEARCH_FAILED, caught -> a", 1),
        ("a", "call_model", "end", 1),
    ]
    assert got[0]["notes"] == ["first reply line"] and got[1]["notes"] == ["error: boom"]
    assert got[2]["notes"] == []  # a note belongs to the visit that made the call
    assert list(log.written) == ["y", "last_error", "x"]  # oldest write first


# --- what a small budget keeps; what comes first (issue 24 item 9, issue 23 item 7) ---------

LONG_GOAL = (
    "Answer a question about an indexed C#/.NET and SQL codebase with cited evidence: route, "
    "retrieve (search, then the dependency graph, then evidence under budget), keep the "
    "global prompt budget with code-aware compaction, check sufficiency, and answer it. "
    "Every step is traced, every fallback says so, nothing is sent over its window."
)


@pytest.mark.parametrize("mode", ["truncate", "summary:low"])
@pytest.mark.parametrize("budget", [None, 90, 70, 55])
def test_truncate_and_low_keep_the_run_and_step_and_cut_the_goal_first(mode, budget):
    records = history(12)
    long = fid.RunView("code_qa", LONG_GOAL, "run-7f3a9c", "answer", 14, records, {}, [], inputs=())
    p = fid.build_preamble(mode, long, COUNTER, budget=budget)
    limit = budget or fid.BUDGETS[mode]
    assert p.tokens == COUNTER.count(p.text) <= limit
    if mode == "truncate":
        assert p.text.endswith("\n- run: run-7f3a9c\n- current step: answer (step 13)")
    else:
        assert p.text.endswith("\nRun run-7f3a9c, now at step 13: answer.")
    assert "code_qa" in p.text and "shortened to its budget" not in p.text
    if mode == "truncate" or (budget is not None and budget < 70):
        # The description is what gave way, visibly, and from its end.
        assert LONG_GOAL not in p.text and "Answer a question about" in p.text
        assert "…" in p.text
    short = fid.RunView("code_qa", "Answer.", "run-7f3a9c", "answer", 14, records, {}, [])
    whole = fid.build_preamble(mode, short, COUNTER)
    assert "Answer." in whole.text and "…" not in whole.text


def test_a_budget_too_small_for_the_head_keeps_the_run_and_step_after_the_marker():
    records = history(3)
    long = fid.RunView("code_qa", LONG_GOAL, "run-7f3a9c", "answer", 14, records, {}, [])
    for mode in fid.BUDGETS:
        p = fid.build_preamble(mode, long, COUNTER, budget=40)
        assert p.tokens == COUNTER.count(p.text) <= 40, mode
        step = "run-7f3a9c, now at step 4: answer" if mode == "summary:low" else "answer (step 4)"
        assert "run-7f3a9c" in p.text and step in p.text, (mode, p.text)


@pytest.mark.parametrize("mode", list(fid.BUDGETS))
def test_the_stable_part_comes_first_and_the_run_and_step_last(mode):
    records = history(5)
    variables = {"task": "fix it"}
    p = fid.build_preamble(mode, view(records, variables), COUNTER).text
    # Pipeline and goal first; then the inputs and the steps; the run id and step at the end.
    assert p.index("review_loop") < p.index("Fix the port parser") < p.index("r1")
    for later in ("fix it", "step_4"):
        if later in p:
            assert p.index("Fix the port parser") < p.index(later) < p.index("r1"), later
    tail = p[p.index("r1") :]
    assert "now" in tail and "step 6" in tail and "step_4" not in tail
    [message] = fid.with_preamble([{"role": "system", "content": "The prompt file."}], p)
    assert message["content"] == f"The prompt file.\n\n{p}"  # the prompt file stays first
    assert fid.with_preamble([], p) == [{"role": "system", "content": p}]


def test_two_runs_route_prompts_share_the_prompt_file_and_goal_as_a_prefix(sample_index):
    """A server's prefix cache reuses a prompt across runs up to the first byte that differs:
    the prompt file, the pipeline and its goal come before the run id."""
    pipeline = runtime.load(str(ROOT / "pipelines" / "code_qa.yaml"))
    systems = []
    for run_id, question in (
        ("first", "Who calls usp_CancelOrder?"),
        ("second", "What is a basket?"),
    ):
        services = runtime.Services(
            settings=pipeline.settings, node_store=sample_index, base_dir=str(pipeline.base_dir)
        )
        result = runtime.Runner(pipeline, services=services).run(
            {"question": question}, run_id=run_id
        )
        assert result.status == "completed", result.error
        [route] = [
            e for e in result.events if e["type"] == "MODEL_CALL" and e["step_id"] == "route"
        ]
        systems.append(route["messages"][0]["content"])
    prompt = (ROOT / "pipelines" / "prompts" / "code_qa" / "route.md").read_text().strip()
    first, second = systems
    common = first[: next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)]
    goal = " ".join(pipeline.description.split())
    assert systems[0].startswith(prompt) and goal[:200] in common
    assert len(common) >= len(prompt) + len(goal)
    # What differs is at the end: the run id, then the current step.
    assert systems[0][len(common) :].startswith("first") and systems[1][len(common) :].startswith(
        "second"
    )
    assert systems[0].endswith("- current step: route (step 3)")


# --- documented limits, pinned (issue 24 item 13: tests/mutation/mutants/fidelity_summarize.toml)


def _section(text: str, title: str) -> str:
    """A preamble's section from its title to the next title."""
    start = text.index(title)
    end = text.find("\n###", start + len(title))
    return text[start : end if end >= 0 else len(text)]


def test_inputs_take_at_most_half_the_budget_and_the_rest_are_counted():
    variables = {f"v{i:02d}": f"value {i} " + "word " * 60 for i in range(20)}
    p = fid.build_preamble("compact", view([], variables), COUNTER)
    inputs = _section(p.text, "### Inputs")
    assert COUNTER.count(inputs) <= fid.BUDGETS["compact"] // 2
    assert p.variables_shown + p.variables_dropped == 20 and p.variables_dropped > 0
    assert f"- ({p.variables_dropped} more inputs not shown)" in inputs
    # The shown inputs are the first of the include list: the first that does not fit ends it.
    shown = [n for n in variables if f"`{n}`" in p.text]
    assert shown == list(variables)[: p.variables_shown]


def test_the_first_input_that_does_not_fit_ends_the_section():
    variables = {"a": "short", "big": "word " * 30, "c": "tiny"}
    p = fid.build_preamble("compact", view([], variables), COUNTER, budget=70)
    assert "`a`: short" in p.text and "`big`" not in p.text and "`c`" not in p.text
    assert "- (2 more inputs not shown)" in p.text


def test_a_value_cut_before_it_was_counted_is_always_marked():
    # 64 '=' encode as one token: the first 2,560 characters (40 * 64) are within compact's
    # 40 tokens, but the value is longer, so what is shown is marked with the whole size.
    p = fid.build_preamble("compact", view([], {"rule": "=" * 3000}), COUNTER)
    assert p.shortened == ("rule",)
    assert "… [shortened: 3,000 characters in all]" in p.text


def test_a_goal_exactly_at_its_400_characters_is_whole_and_one_more_is_cut():
    exact = "g" * 399 + "."
    for goal, shown in ((exact, exact), (exact + "x", "g" * 399 + "…")):
        v = fid.RunView("p", goal, "r", "s", 3, [], {}, [])
        text = fid.build_preamble("summary:high", v, COUNTER).text
        assert f"- goal: {shown}\n" in text
    assert fid.excerpt("a  b\n c", 5) == "a b c" and fid.excerpt("abcdef", 5) == "abcd…"


@pytest.mark.parametrize("name", ["api_keys", "passwords", "db_tokens", "client_secret", "TOKEN"])
def test_an_input_named_like_a_credential_is_never_shown(name):
    p = fid.build_preamble("summary:high", view([], {name: "s3cr3t", "task": "t"}), COUNTER)
    assert "s3cr3t" not in p.text and name not in p.text and '"task": "t"' in p.text


@pytest.mark.parametrize("mode", ["compact", "summary:medium", "summary:high"])
def test_the_line_of_earlier_steps_counts_exactly_those_not_shown(mode):
    p = fid.build_preamble(mode, view(history(300)), COUNTER)
    assert p.steps_dropped > 0
    assert f"- ({p.steps_dropped} earlier steps not shown)" in p.text
    entries = [ln for ln in p.text.splitlines() if ln.startswith("- ") and ". step_" in ln]
    assert len(entries) == p.steps_shown


def test_summary_high_inputs_are_json_even_when_shortened():
    variables = {"task": "fix it", "long": "line\n" * 2000, "obj": {"k": list(range(400))}}
    p = fid.build_preamble("summary:high", view([], variables), COUNTER)
    block = p.text.split("```json\n", 1)[1].split("\n```", 1)[0]
    parsed = json.loads(block)
    assert parsed["task"] == "fix it" and set(parsed) == {"task", "long", "obj"}
    # A value too long is its JSON text cut and quoted: the marker gives that text's size.
    assert parsed["long"].startswith('"line\\nline') and parsed["long"].endswith(
        "[shortened: 12,002 characters in all]"
    )
    assert sorted(p.shortened) == ["long", "obj"]


def test_durations_and_attempts_only_when_they_say_something():
    records = history(3)
    for r in records:
        r.duration_ms, r.attempts = 1999.0, 1
    records[1].duration_ms, records[2].attempts = 2000.0, 2
    text = fid.build_preamble("summary:high", view(records), COUNTER).text
    lines = {
        r.step_id: next(ln for ln in text.splitlines() if f" {r.step_id} (" in ln) for r in records
    }
    assert "[" not in lines["step_0"]  # 1.999 s and one attempt: nothing to say
    assert "[2 s]" in lines["step_1"] and "[2 attempts]" in lines["step_2"]


def test_the_transition_wins_then_the_step_then_settings():
    assert fid.resolve_mode({"fidelity": "truncate"}, {"fidelity": "full"}, {}) == (
        "truncate",
        "transition",
    )
    assert fid.resolve_thread("s", {"group": "g"}, {}, {"default_thread": "d"}, "p") == (
        "d",
        "settings.default_thread",
    )


def test_a_variable_written_again_moves_to_the_end_of_the_write_order():
    log = fid.HistoryLog()
    for name in ("x", "y", "x"):
        log.feed(
            {"type": "STEP", "step_id": "s", "action": "a", "outcome": "next", "wrote": {name: {}}}
        )
    assert list(log.written) == ["y", "x"]


def test_summary_low_keeps_the_newest_names_when_it_must_cut():
    records = history(200)
    p = fid.build_preamble("summary:low", view(records), COUNTER, budget=150)
    assert p.steps_dropped > 0 and "step_199" in p.text and "step_0," not in p.text
    assert f"(last {p.steps_shown} of 200)" in p.text


def test_a_preamble_cut_to_a_tiny_budget_ends_visibly_marked():
    p = fid.build_preamble("compact", view(history(2), {"task": "x" * 50}), COUNTER, budget=30)
    assert p.tokens <= 30 and "… [preamble shortened to its budget]" in p.text
