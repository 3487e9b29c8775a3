"""The SQLite run store: checkpoints, resume after SIGKILL, concurrency, trace, refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from runtime.engine import Engine
from runtime.engine.store import SqliteRunStore
from runtime.errors import RunError

# A pipeline and its actions, in a module both this test and a killed child process import.
MODULE = textwrap.dedent("""
    import os, time
    from runtime.contract.action import Action, Outcome
    from runtime.format.pipeline import Pipeline
    from runtime.contract.registry import Registry

    class Tick(Action):
        name = "tick"
        runnable = True
        outcomes = ("again", "done")
        def run(self, ctx):
            n = ctx.get("n", 0) + 1
            ctx.set("n", n)
            ctx.set("log", ctx.get("log", []) + [n * n])
            if os.environ.get("SLOW_TICK"):
                time.sleep(0.05)
            return Outcome.to_branch("again" if n < 40 else "done")

    class Done(Action):
        name = "done"
        runnable = True
        terminal = True
        def run(self, ctx):
            ctx.set("final_answer", sum(ctx.get("log")))
            return Outcome.end()

    REG = Registry.from_classes(Tick, Done)
    PIPELINE = Pipeline.from_dict({"name": "ticks", "settings": {"entry_step_id": "t"},
        "steps": [{"id": "t", "action": "tick", "on_again": "t", "on_done": "d"},
                  {"id": "d", "action": "done"}]})
""")


@pytest.fixture
def mod(tmp_path, monkeypatch):
    (tmp_path / "ticks_mod.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    import ticks_mod

    return importlib.reload(ticks_mod)


def test_checkpoint_and_trace_are_stored(tmp_path, mod):
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    result = Engine(mod.PIPELINE, registry=mod.REG, store=store).run({}, run_id="a")
    assert result.status == "completed" and result.output == {
        "final_answer": sum(n * n for n in range(1, 41))
    }
    [row] = store.runs()
    assert (row["run_id"], row["status"], row["steps"]) == ("a", "completed", 41)
    types = [e["type"] for e in store.events("a")]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_COMPLETED" and types.count("STEP") == 41


def test_checkpoint_rewrites_only_changed_variables(tmp_path, mod):
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    store.create_run("r", mod.PIPELINE, {})
    big = "x" * 100_000
    store.checkpoint(
        "r", position="t", variables={"big": big, "n": 1}, engine={}, events=[], status="running"
    )
    conn = store._conn()
    conn.execute("CREATE TEMP TABLE writes (name TEXT)")
    for event in ("INSERT", "UPDATE"):  # a changed variable is updated in place
        conn.execute(
            f"CREATE TEMP TRIGGER w_{event} AFTER {event} ON run_vars BEGIN "
            "INSERT INTO writes VALUES (new.name); END"
        )
    store.checkpoint(
        "r", position="t", variables={"big": big, "n": 2}, engine={}, events=[], status="running"
    )
    assert [r[0] for r in conn.execute("SELECT name FROM writes")] == ["n"]
    assert store.load("r")["variables"] == {"big": big, "n": 2}


def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path, mod):
    db = str(tmp_path / "runs.db")
    reference = Engine(mod.PIPELINE, registry=mod.REG).run({}, run_id="ref")
    script = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import ticks_mod\nfrom runtime.engine import Engine\nfrom runtime.engine.store import SqliteRunStore\n"
        f"Engine(ticks_mod.PIPELINE, registry=ticks_mod.REG, store=SqliteRunStore({db!r}))"
        ".run({}, run_id='k')\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "SLOW_TICK": "1"})
    store = SqliteRunStore(db)
    deadline = time.time() + 30
    while time.time() < deadline:
        rows = store.runs()
        if rows and rows[0]["steps"] >= 5:
            break
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait()
    [row] = store.runs()
    # left `running` by a process that is gone: listed as interrupted (runtime/engine/owner.py)
    assert row["status"] == "interrupted" and 5 <= row["steps"] < 41
    resumed = Engine(mod.PIPELINE, registry=mod.REG, store=SqliteRunStore(db)).resume("k")
    assert resumed.status == "completed"
    assert resumed.state == reference.state
    assert resumed.steps == reference.steps
    assert resumed.output == reference.output


def test_resume_refusals(tmp_path, mod):
    from runtime.format.pipeline import Pipeline

    store = SqliteRunStore(str(tmp_path / "runs.db"))
    engine = Engine(mod.PIPELINE, registry=mod.REG, store=store)
    engine.run({}, run_id="done")
    with pytest.raises(RunError) as info:
        engine.resume("done")
    assert info.value.code == "RUN_NOT_RESUMABLE"
    with pytest.raises(RunError) as info:
        engine.resume("nope")
    assert info.value.code == "RUN_NOT_FOUND"
    failing = Engine(mod.PIPELINE, registry=mod.REG, store=store).run({}, run_id="f", max_steps=3)
    assert failing.error.code == "MAX_STEPS_EXCEEDED"
    changed = Pipeline.from_dict({**mod.PIPELINE.raw, "description": "edited"})
    other = Engine(changed, registry=mod.REG, store=store)
    with pytest.raises(RunError) as info:
        other.resume("f")
    assert info.value.code == "PIPELINE_CHANGED"
    assert other.resume("f", force=True).status == "completed"


def test_twenty_concurrent_runs_in_threads(tmp_path, mod):
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    engine = Engine(mod.PIPELINE, registry=mod.REG, store=store)
    results = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(engine.run({}, run_id=f"t{i}")))
        for i in range(20)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 20 and {r.status for r in results} == {"completed"}
    assert len({r.output["final_answer"] for r in results}) == 1
    assert {r["status"] for r in store.runs()} == {"completed"}


def test_concurrent_runs_in_processes(tmp_path, mod):
    db = str(tmp_path / "runs.db")
    script = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import ticks_mod\nfrom runtime.engine import Engine\nfrom runtime.engine.store import SqliteRunStore\n"
        f"st = SqliteRunStore({db!r})\n"
        "for i in range(5):\n"
        "    r = Engine(ticks_mod.PIPELINE, registry=ticks_mod.REG, store=st).run({}, run_id=sys.argv[1] + str(i))\n"
        "    assert r.status == 'completed', r.error\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, f"p{i}-"], stderr=subprocess.PIPE)
        for i in range(4)
    ]
    errors = [p.communicate()[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    rows = SqliteRunStore(db).runs(limit=100)
    assert len(rows) == 20 and {r["status"] for r in rows} == {"completed"}


def test_store_path_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNTIME_STORE", str(tmp_path / "env.db"))
    assert SqliteRunStore().path == str(tmp_path / "env.db")
    assert json.loads(json.dumps(SqliteRunStore().runs())) == []
    assert Path(tmp_path / "env.db").exists()
