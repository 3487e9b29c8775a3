"""The run store, SQLite and Postgres: checkpoints, resume after SIGKILL, concurrency, trace, refusals."""

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
from runtime.engine.stores import open_run_store
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


def test_checkpoint_and_trace_are_stored(store_location, mod):
    store = open_run_store(store_location)
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


def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path, mod, store_location):
    db = store_location
    reference = Engine(mod.PIPELINE, registry=mod.REG).run({}, run_id="ref")
    script = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import ticks_mod\nfrom runtime.engine import Engine\nfrom runtime.engine.stores import open_run_store\n"
        f"Engine(ticks_mod.PIPELINE, registry=ticks_mod.REG, store=open_run_store({db!r}))"
        ".run({}, run_id='k')\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "SLOW_TICK": "1"})
    store = open_run_store(db)
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
    resumed = Engine(mod.PIPELINE, registry=mod.REG, store=open_run_store(db)).resume("k")
    assert resumed.status == "completed"
    assert resumed.state == reference.state
    assert resumed.steps == reference.steps
    assert resumed.output == reference.output


def test_resume_refusals(store_location, mod):
    from runtime.format.pipeline import Pipeline

    store = open_run_store(store_location)
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


def test_twenty_concurrent_runs_in_threads(store_location, mod):
    store = open_run_store(store_location)
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


def test_concurrent_runs_in_processes(tmp_path, mod, store_location):
    db = store_location
    script = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import ticks_mod\nfrom runtime.engine import Engine\nfrom runtime.engine.stores import open_run_store\n"
        f"st = open_run_store({db!r})\n"
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
    rows = open_run_store(db).runs(limit=100)
    assert len(rows) == 20 and {r["status"] for r in rows} == {"completed"}


def test_store_path_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNTIME_STORE", str(tmp_path / "env.db"))
    assert SqliteRunStore().path == str(tmp_path / "env.db")
    assert json.loads(json.dumps(SqliteRunStore().runs())) == []
    assert Path(tmp_path / "env.db").exists()


def test_variables_load_in_the_order_they_were_first_set(store_location, mod):
    """An update keeps a variable's place: a resumed run's dict is the uninterrupted one's."""
    store = open_run_store(store_location)
    store.create_run("r", mod.PIPELINE, {})
    for variables in ({"b": 1}, {"b": 1, "a": 2}, {"b": 3, "a": 2, "c": 4}):
        store.checkpoint(
            "r", position="t", variables=variables, engine={}, events=[], status="running"
        )
    fresh = open_run_store(store_location)
    assert list(fresh.load("r")["variables"].items()) == [("b", 3), ("a", 2), ("c", 4)]


def test_originals_slices_and_packs_read_back_the_same(store_location, mod):
    import hashlib

    store = open_run_store(store_location)
    store.create_run("r", mod.PIPELINE, {})
    text = "".join(f"line {n} é\n" for n in range(5000))  # several chunks
    sha = hashlib.sha256(text.encode()).hexdigest()
    store.put_original("r", "ptr-1", sha, "text", text)
    store.put_original("r", "ptr-1", sha, "text", text)  # stored once
    assert store.get_original("r", "ptr-1") == ("text", text)
    assert store.read_original("r", "ptr-1", 16_000, 33_000) == text[16_000:33_000]
    assert store.original_size("r", "ptr-1") == len(text)
    assert store.pointers("r") == [
        {"pointer_id": "ptr-1", "sha256": sha, "kind": "text", "chars": len(text)}
    ]
    assert store.get_original("r", "ptr-2") is None
    first = store.save_pack("r", {"step_id": "s", "pack_id": "pk_1", "sections": [1]})
    second = store.save_pack("r", {"step_id": "u", "pack_id": "pk_2", "sections": [2]})
    assert (first, second) == (1, 2)
    assert [p["pack_id"] for p in store.packs("r")] == ["pk_1", "pk_2"]
    assert [p["seq"] for p in store.packs("r", "u")] == [2]
    big = {"doc": "y" * 200_000}  # a large input, stored once by content (blobs.py)
    store.create_run("big", mod.PIPELINE, big)
    assert open_run_store(store_location).load("big")["inputs"] == big
    with pytest.raises(RunError) as info:
        store.create_run("big", mod.PIPELINE, {})
    assert "already exists" in info.value.message


# NUL cannot be in a Postgres text value and U+10FFFD is the escape runtime/net/pgtext.py
# writes it with: both, alone, doubled and next to the escape's own letters, in every kind
# of text the store keeps, must read back exactly as given, on both backends.
ODD = "a\x00b \U0010fffd0 \U0010fffde \x00\x00 \U0010fffd\U0010fffd0\x00e end"


def test_nul_characters_and_the_escape_round_trip_everywhere(store_location, mod):
    import hashlib

    store = open_run_store(store_location)
    inputs = {"question": ODD, ODD: [ODD]}
    store.create_run("r", mod.PIPELINE, inputs)
    store.checkpoint(
        "r",
        position="t",
        variables={"v": ODD, "w": {"k": ODD}},
        engine={"threads": {"th": [{"role": "user", "content": ODD}]}},
        events=[{"seq": 1, "type": "NOTE", "step_id": "t", "data": {"text": ODD}}],
        status="running",
    )
    text = ODD * 3000  # several chunks, a NUL at chunk edges
    sha = hashlib.sha256(text.encode()).hexdigest()
    store.put_original("r", "ptr", sha, "text", text)
    fresh = open_run_store(store_location)
    loaded = fresh.load("r")
    assert loaded["inputs"] == inputs
    assert loaded["variables"] == {"v": ODD, "w": {"k": ODD}}
    assert fresh.get_original("r", "ptr") == ("text", text)
    assert fresh.read_original("r", "ptr", 1000, 31_000) == text[1000:31_000]
    assert fresh.original_size("r", "ptr") == len(text)
    assert [e["data"]["text"] for e in fresh.events("r")] == [ODD]


def test_runs_by_id_is_that_run_alone(store_location, mod):
    store = open_run_store(store_location)
    for rid in ("a", "b", "c"):
        store.create_run(rid, mod.PIPELINE, {})
    assert [r["run_id"] for r in store.runs(10, run_id="b")] == ["b"]
    assert store.runs(10, run_id="nope") == []
    assert store.runs(10, run_id="c", status="completed") == []  # both filters hold
    assert len(store.runs(10)) == 3
