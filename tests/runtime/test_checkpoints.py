"""Checkpoints that cost the same at every step, old stores that still open, durability.

What a checkpoint writes is observed with temporary triggers on the store's own
connection (the engine runs on this thread, so it uses that connection).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

import runtime
from runtime.cli import cli
from runtime.engine import Engine
from runtime.engine.store import MIGRATIONS, SqliteRunStore
from runtime.errors import RunError, StoreError


class Tick(runtime.Action):
    """n += 1 until `limit`; appends n * n to `log`."""

    name = "tick"
    runnable = True
    outcomes = ("again", "done")

    def run(self, ctx: Any) -> runtime.Outcome | None:
        n = ctx.get("n", 0) + 1
        ctx.set("n", n)
        ctx.set("log", [*ctx.get("log", []), n * n])
        return runtime.Outcome.to_branch("again" if n < ctx.step["limit"] else "done")


class Stop(runtime.Action):
    name = "stop"
    runnable = True
    terminal = True

    def run(self, ctx: Any) -> runtime.Outcome | None:
        ctx.set("final_answer", sum(ctx.get("log")))
        return runtime.Outcome.end()


REG = runtime.Registry.from_classes(Tick, Stop)


def ticks(limit: int = 40, **settings: Any) -> runtime.Pipeline:
    return runtime.Pipeline.from_dict(
        {
            "name": "ticks",
            "settings": {"entry_step_id": "t", **settings},
            "steps": [
                {"id": "t", "action": "tick", "limit": limit, "on_again": "t", "on_done": "s"},
                {"id": "s", "action": "stop"},
            ],
        }
    )


def record(conn: sqlite3.Connection, table: str, event: str, what: str) -> None:
    """Keep `what` (an SQL expression over new.*) for every INSERT or UPDATE of a table."""
    conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS seen_{table} (what)")
    conn.execute(
        f"CREATE TEMP TRIGGER seen_{table}_{event} AFTER {event} ON {table} "
        f"BEGIN INSERT INTO seen_{table} VALUES ({what}); END"
    )


def seen(conn: sqlite3.Connection, table: str) -> list[Any]:
    return [r[0] for r in conn.execute(f"SELECT what FROM seen_{table} ORDER BY rowid")]


def test_a_checkpoint_appends_one_step_and_never_rewrites_the_inputs(tmp_path):
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    conn = store._conn()
    record(conn, "run_steps", "INSERT", "new.n || ':' || new.step_id")
    record(conn, "checkpoints", "UPDATE", "new.engine")
    record(conn, "run_inputs", "INSERT", "length(new.inputs)")
    record(conn, "original_chunks", "INSERT", "new.n")
    record(conn, "runs", "UPDATE", "new.status")
    big = "x" * 200_000
    result = Engine(ticks(), registry=REG, store=store).run({"big": big}, run_id="r")
    assert result.status == "completed"
    # every step is written once, as one row, in the checkpoint after it
    assert seen(conn, "run_steps") == [f"{n}:t" for n in range(40)] + ["40:s"]
    # the engine record does not grow with the run: no step list in it
    engine_records = seen(conn, "checkpoints")
    assert json.loads(engine_records[-1]) == {
        "counters": {},
        "step_count": 41,
        "inbox": {"seq": 0, "messages": []},
        "arrival": {"from": "s", "attrs": {}},  # the transition taken last (ctx.arrival)
    }
    assert len(engine_records[5]) == len(engine_records[-2]) - 1  # 6 vs 40: one digit more
    # the inputs are written once, apart from the run row, which only its end updates;
    # their large string once, by content, in chunks (the row and the variable refer to it)
    [inputs_row] = seen(conn, "run_inputs")
    assert inputs_row < 200
    assert seen(conn, "original_chunks") == list(range(-(-len(big) // 16_384)))
    assert seen(conn, "runs") == ["completed", "completed"]  # last checkpoint, finish
    assert [r["steps"] for r in store.runs()] == [41]
    assert "inputs" not in [c[1] for c in conn.execute("PRAGMA table_info(runs)")]
    saved = store.load("r")
    assert saved["inputs"] == {"big": big}
    assert saved["engine"]["step_trace"] == ["t"] * 40 + ["s"]


def test_a_store_written_before_the_append_only_schema_opens_and_its_run_resumes(tmp_path):
    db = str(tmp_path / "old.db")
    # The store as the first schema wrote it: a run killed after its fifth step.
    old = sqlite3.connect(db, isolation_level=None)
    old.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    MIGRATIONS[0][1](old)
    old.execute("INSERT INTO migrations VALUES ('m001_initial', 0)")
    p = ticks()
    old.execute(
        "INSERT INTO runs VALUES ('old', 'ticks', NULL, ?, 'running', 1, 2, ?, NULL, NULL, 5)",
        (p.content_hash, json.dumps({"n": 0})),
    )
    for name, value in (("n", 5), ("log", [1, 4, 9, 16, 25])):
        old.execute("INSERT INTO run_vars VALUES ('old', ?, 'h', ?)", (name, json.dumps(value)))
    engine = {
        "counters": {},
        "step_trace": ["t"] * 5,
        "step_count": 5,
        "inbox": {"seq": 0, "messages": []},
    }
    old.execute("INSERT INTO checkpoints VALUES ('old', 't', ?, 7)", (json.dumps(engine),))
    old.close()

    store = SqliteRunStore(db)
    conn = store._conn()
    assert [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY name")] == sorted(
        name for name, _ in MIGRATIONS
    )
    assert "inputs" not in [c[1] for c in conn.execute("PRAGMA table_info(runs)")]
    saved = store.load("old")
    assert (saved["inputs"], saved["engine"]["step_trace"], saved["durability"]) == (
        {"n": 0},
        ["t"] * 5,
        None,
    )
    resumed = Engine(p, registry=REG, store=store).resume("old")
    reference = Engine(p, registry=REG).run({"n": 0}, run_id="ref")
    assert resumed.status == "completed", resumed.error
    assert (resumed.state, resumed.steps) == (reference.state, reference.steps)
    assert store.events("old")[0]["seq"] == 8  # numbering continues
    assert store.load("old")["engine"]["step_trace"] == ["t"] * 40 + ["s"]


def synchronous(store: SqliteRunStore) -> int:
    """The PRAGMA synchronous of this thread's connection: 1 NORMAL, 2 FULL."""
    return int(store._conn().execute("PRAGMA synchronous").fetchone()[0])


def test_durability_from_the_api_the_settings_and_the_store(tmp_path):
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    assert synchronous(store) == 1
    runtime.Runner(ticks(3), store=store, registry=REG, durability="full").run({}, run_id="a")
    assert (synchronous(store), store.load("a")["durability"]) == (2, "full")
    runtime.Runner(ticks(3), store=store, registry=REG).run({}, run_id="b")
    assert (synchronous(store), store.load("b")["durability"]) == (1, None)
    full = ticks(3, durability="full")
    runtime.Runner(full, store=store, registry=REG).run({}, run_id="c")
    assert (synchronous(store), store.load("c")["durability"]) == (2, "full")
    # the argument wins over the setting
    runtime.Runner(full, store=store, registry=REG, durability="normal").run({}, run_id="d")
    assert (synchronous(store), store.load("d")["durability"]) == (1, "normal")
    fsyncing = SqliteRunStore(str(tmp_path / "runs.db"), durability="full")
    runtime.Runner(ticks(3), store=fsyncing, registry=REG).run({}, run_id="e")
    assert synchronous(fsyncing) == 2
    with pytest.raises(RunError) as info:
        runtime.Runner(ticks(3), store=store, registry=REG, durability="often")
    assert info.value.code == "DURABILITY_UNKNOWN"
    with pytest.raises(StoreError) as err:
        SqliteRunStore(str(tmp_path / "runs.db"), durability="sometimes")
    assert err.value.code == "DURABILITY_UNKNOWN"


def test_a_resumed_run_keeps_its_durability(tmp_path):
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    failed = runtime.Runner(ticks(), store=store, registry=REG, durability="full").run(
        {}, run_id="f", max_steps=3
    )
    assert failed.error.code == "MAX_STEPS_EXCEEDED"
    other = SqliteRunStore(str(tmp_path / "runs.db"))
    assert runtime.Runner(ticks(), store=other, registry=REG).resume("f").status == "completed"
    assert synchronous(other) == 2


PIPELINE = """
name: echo
settings: {entry_step_id: a}
steps:
  - id: a
    action: set_variables
    rules:
      - {set: answer, value: 42}
    next: b
  - id: b
    action: finalize
"""


def test_durability_on_the_command_line(runner, tmp_path):
    (tmp_path / "p.yaml").write_text(PIPELINE)
    db = str(tmp_path / "runs.db")
    args = ["exec", str(tmp_path / "p.yaml"), "--store", db, "--json"]
    out = runner.invoke(cli, [*args, "--run-id", "full", "--durability", "full"])
    assert out.exit_code == 0, out.output
    out = runner.invoke(cli, [*args, "--run-id", "plain"])
    assert out.exit_code == 0, out.output
    store = SqliteRunStore(db)
    assert (store.load("full")["durability"], store.load("plain")["durability"]) == (
        "full",
        None,
    )
    bad = runner.invoke(cli, [*args, "--durability", "often"])
    assert bad.exit_code == 2
    assert "'often' is not one of 'normal', 'full'" in bad.stderr


def test_durability_setting_is_validated(tmp_path):
    bad = PIPELINE.replace("entry_step_id: a}", "entry_step_id: a, durability: often}")
    (tmp_path / "p.yaml").write_text(bad)
    result = runtime.validate(str(tmp_path / "p.yaml"))
    assert [(d.code, d.path) for d in result.diagnostics] == [
        ("SCHEMA_ENUM", "$.settings.durability")
    ]
