"""The run store on PostgreSQL (issue 34): schema, migrations, outages, the ledger, the CLI.

What both backends share is in the contract tests (`store_location`, tests/conftest.py);
this file holds what only Postgres has: its migrations under an advisory lock, a server
that is down or goes away mid-run, and the ledger's tamper detection on its rows.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runtime.cli import cli
from runtime.contract.action import Action, Outcome
from runtime.contract.registry import Registry
from runtime.engine import Engine
from runtime.engine.store import SqliteRunStore
from runtime.engine.stores import open_run_store
from runtime.errors import StoreError
from runtime.format.pipeline import Pipeline

pytestmark = pytest.mark.postgres


def psql(url: str, statement: str, *args: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, args or None)
        return cur.fetchall() if cur.description else []


# --- schema and migrations --------------------------------------------------------------------


def test_every_sqlite_table_and_column_is_in_postgres_in_the_same_order(tmp_path, pg_url):
    """A SQLite migration that adds a table or column fails here until pgstore has it too."""
    path = str(tmp_path / "runs.db")
    SqliteRunStore(path).close()
    db = sqlite3.connect(path)
    want = {}
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        if table != "migrations":
            want[table] = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
    db.close()
    open_run_store(pg_url).close()
    got: dict[str, list[str]] = {}
    for table, column in psql(
        pg_url,
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = 'public' ORDER BY table_name, ordinal_position",
    ):
        got.setdefault(table, []).append(column)
    got.pop("run_store_migrations")
    from runtime.engine.pgstore import POSTGRES_ONLY

    for table in POSTGRES_ONLY:  # the workers' queue and leases
        got.pop(table)
    # run_vars.ord is SQLite's rowid (the order variables were first set in)
    assert got.pop("run_vars") == [*want.pop("run_vars"), "ord"]
    assert got == want


def test_migrations_are_named_recorded_and_applied_once_by_racing_processes(pg_url, tmp_path):
    gate = tmp_path / "go"
    # each process imports everything, says so, then waits at the gate: all migrate at once
    script = (
        "import os, sys, time\nfrom runtime.engine.stores import open_run_store\n"
        "import runtime.engine.pgstore, psycopg, psycopg_pool\n"
        "print('ready', flush=True)\n"
        "while not os.path.exists(sys.argv[2]): time.sleep(0.001)\n"
        "open_run_store(sys.argv[1]).close()\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, pg_url, str(gate)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(6)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    gate.touch()
    errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errors
    from runtime.engine import pgstore

    rows = psql(pg_url, "SELECT name FROM run_store_migrations ORDER BY name")
    assert [r[0] for r in rows] == [name for name, _ in pgstore.MIGRATIONS]
    # and opening again applies nothing
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert pgstore.PostgresRunStore.migrate(pgstore._Conn(conn, "x")) == []


def test_a_database_with_other_tables_by_our_names_is_refused(pg_url):
    psql(pg_url, "CREATE TABLE runs (x int)")
    with pytest.raises(StoreError) as info:
        open_run_store(pg_url)
    assert "not a run store" in info.value.message
    assert psql(pg_url, "SELECT to_regclass('events')") == [(None,)]


def test_reading_commands_refuse_a_database_without_a_store(pg_url, runner):
    done = runner.invoke(cli, ["runs", "--store", pg_url])
    assert done.exit_code == 1
    assert done.stderr.startswith("error: STORE_NOT_FOUND: ")
    assert psql(pg_url, "SELECT to_regclass('runs')") == [(None,)]


# --- a server that is down or goes away -------------------------------------------------------


def test_a_server_that_is_down_is_a_coded_error_without_the_password(runner, pg_server):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql://admin:s3cret@127.0.0.1:{port}/runs"
    for args in (["runs", "--store", url], ["verify", "r", "--store", url]):
        done = runner.invoke(cli, args)
        assert done.exit_code == 1, done.output
        assert done.stderr.startswith("error: STORE_UNAVAILABLE: run store postgresql://admin:***@")
        assert "s3cret" not in done.stderr and "Traceback" not in done.stderr


class Tick(Action):
    """Counts to 30; at `stop_at` the test's hook stops the database server."""

    name = "tick"
    runnable = True
    outcomes = ("again", "done")
    hook: Any = None

    def run(self, ctx: Any) -> Outcome | None:
        n = ctx.get("n", 0) + 1
        ctx.set("n", n)
        ctx.set("log", [*ctx.get("log", []), n * n])
        if Tick.hook is not None:
            Tick.hook(n)
        return Outcome.to_branch("again" if n < 30 else "done")


class Done(Action):
    name = "done"
    runnable = True
    terminal = True

    def run(self, ctx: Any) -> Outcome | None:
        ctx.set("final_answer", sum(ctx.get("log")))
        return Outcome.end()


REG = Registry.from_classes(Tick, Done)
PIPELINE = Pipeline.from_dict(
    {
        "name": "ticks",
        "settings": {"entry_step_id": "t"},
        "steps": [
            {"id": "t", "action": "tick", "on_again": "t", "on_done": "d"},
            {"id": "d", "action": "done"},
        ],
    }
)


def test_a_store_that_goes_away_mid_run_is_coded_and_the_run_resumes(
    pg_private_server, monkeypatch
):
    monkeypatch.setenv("RUNTIME_STORE_TIMEOUT", "2")
    url = pg_private_server.create_database("runs")
    reference = Engine(PIPELINE, registry=REG).run({}, run_id="ref")
    store = open_run_store(url)

    def stop_at_ten(n: int) -> None:
        if n == 10:
            pg_private_server.stop("immediate")  # as if the machine running it died

    Tick.hook = stop_at_ten
    try:
        with pytest.raises(StoreError) as info:
            Engine(PIPELINE, registry=REG, store=store).run({}, run_id="k")
    finally:
        Tick.hook = None
    assert info.value.code == "STORE_UNAVAILABLE"
    pg_private_server.restart()
    [row] = store.runs()  # the same store (its pool) works again once the server is back
    assert row["run_id"] == "k" and 1 <= row["steps"] < 10
    resumed = Engine(PIPELINE, registry=REG, store=store).resume("k")
    assert resumed.status == "completed"
    assert resumed.state == reference.state
    assert resumed.output == reference.output
    assert resumed.steps == reference.steps
    events = store.events("k")
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert store.verify_ledger("k", None).ok


# --- the ledger on Postgres: a covered row edited with SQL is named by its entry --------------


class Talk(Action):
    """A model call's trace event, a thread message, a pointer and an answer."""

    name = "talk"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        from runtime.context.pointers import make_pointer

        n = ctx.get("n", 0) + 1
        ctx.set("n", n)
        messages = [{"role": "user", "content": f"question {n}"}]
        ctx.trace("MODEL_CALL", model="m", messages=messages, reply=f"answer {n}")
        ctx.append_thread("t", [{"role": "assistant", "content": f"answer {n}"}])
        make_pointer(ctx.services.pointers, ctx.run_id, "x" * 50 + str(n), "text", "", 1)
        ctx.set("answer", f"answer {n}")
        return Outcome.to_branch("again" if n < 3 else "done")


class Stop(Action):
    name = "stop"
    runnable = True
    terminal = True

    def run(self, ctx: Any) -> Outcome | None:
        return Outcome.end()


TALK = Pipeline.from_dict(
    {
        "settings": {"entry_step_id": "t"},
        "steps": [
            {"id": "t", "action": "talk", "on_again": "t", "on_done": "s"},
            {"id": "s", "action": "stop"},
        ],
    }
)


def _talk(url: str) -> None:
    store = open_run_store(url)
    done = Engine(TALK, registry=Registry.from_classes(Talk, Stop), store=store).run(
        {"question": "q"}, run_id="r"
    )
    assert done.status == "completed", done.error
    store.close()


@pytest.mark.parametrize(
    ("edit", "kind", "covers"),
    [
        (
            "UPDATE run_vars SET value = '\"answer 0\"' WHERE name = 'answer'",
            "checkpoint",
            "variable 'answer'",
        ),
        ("UPDATE run_steps SET step_id = 's' WHERE n = 0", "checkpoint", "step 0 of the step list"),
        (
            "UPDATE run_threads SET message = replace(message, 'answer', 'answes') WHERE n = 1",
            "checkpoint",
            "thread t message 1",
        ),
        ('UPDATE runs SET output = \'{"answer": "forged"}\'', "end", None),
        ('UPDATE run_inputs SET inputs = \'{"question": "forged"}\'', "run", None),
        ("UPDATE original_chunks SET text = 'y' || substr(text, 2)", "checkpoint", "pointer "),
    ],
    ids=["variable", "step", "thread", "output", "inputs", "original"],
)
def test_runtime_verify_names_the_entry_of_a_row_edited_in_postgres(pg_url, edit, kind, covers):
    _talk(pg_url)
    clean = CliRunner().invoke(cli, ["verify", "r", "--store", pg_url, "--json"])
    assert clean.exit_code == 0, clean.output
    assert json.loads(clean.output)["ok"]
    psql(pg_url, edit)
    done = CliRunner().invoke(cli, ["verify", "r", "--store", pg_url, "--json"])
    assert done.exit_code == 1, done.output
    found = json.loads(done.output)["first_mismatch"]
    assert found["kind"] == kind and found["code"] == "LEDGER_MISMATCH"
    if covers:
        assert found["covers"].startswith(covers)


def test_an_edited_model_call_event_is_named_and_text_shows_the_entry(pg_url):
    _talk(pg_url)
    [(seq,)] = psql(
        pg_url,
        "SELECT seq FROM events WHERE type = 'MODEL_CALL' AND data LIKE '%question 2%'",
    )
    psql(pg_url, "UPDATE events SET data = replace(data, 'question 2', 'question 9')")
    done = CliRunner().invoke(cli, ["verify", "r", "--store", pg_url])
    assert done.exit_code == 1
    assert (
        f"event {seq} (MODEL_CALL, step 't')" in done.output and "MISMATCH at entry" in done.output
    )


# --- the command line over a Postgres store --------------------------------------------------


def test_exec_runs_trace_and_context_over_postgres(tmp_path: Path, pg_url, runner, monkeypatch):
    pipe = tmp_path / "p.yaml"
    pipe.write_text(
        "name: free\nsettings: {entry_step_id: a}\nsteps:\n  - id: a\n    action: set_variables\n"
        "    rules:\n      - {set: answer, value: ok}\n    next: b\n  - id: b\n    action: finalize\n"
    )
    done = runner.invoke(
        cli, ["exec", str(pipe), "--input", "q=hi", "--store", pg_url, "--run-id", "one"]
    )
    assert done.exit_code == 0, done.output + done.stderr
    monkeypatch.setenv("RUNTIME_STORE", pg_url)
    listed = runner.invoke(cli, ["runs", "--json"])
    assert listed.exit_code == 0, listed.stderr
    [row] = json.loads(listed.output)
    assert row["run_id"] == "one" and row["status"] == "completed"
    trace = runner.invoke(cli, ["trace", "one"])
    assert trace.exit_code == 0 and "RUN_COMPLETED" in trace.output


def test_durability_full_commits_synchronously_and_normal_does_not(pg_url):
    store = open_run_store(pg_url)
    show = lambda db: db.execute("SHOW synchronous_commit").fetchone()[0]  # noqa: E731
    assert store._tx(show, "full") == "on"
    assert store._tx(show, "normal") == "off"
    assert store._tx(show) == "off"  # the store's default
    assert open_run_store(pg_url, durability="full")._tx(show) == "on"
    with pytest.raises(StoreError) as info:
        open_run_store(pg_url, durability="fast")
    assert info.value.code == "DURABILITY_UNKNOWN"


# --- leases: a worker's writes are fenced by the epoch it took --------------------------------


def test_a_write_under_a_lease_taken_over_is_refused_and_changes_nothing(pg_url):
    first, second = open_run_store(pg_url), open_run_store(pg_url)
    assert first.take_lease("k", "w1") == 1
    Engine(PIPELINE, registry=REG, store=first).run({}, run_id="k", max_steps=5)
    before = second.load("k")
    assert second.take_lease("k", "w2") == 2  # w1 paused past its lease: w2 takes over
    event = {"run_id": "k", "seq": 999, "type": "STEP", "step_id": "t"}
    late = [
        lambda: first.checkpoint(
            "k", position="t", variables={"n": 99}, engine={}, events=[event], status="running"
        ),
        lambda: first.finish("k", "completed", {"final_answer": 0}, None),
        lambda: first.set_status("k", "running"),
        lambda: first.put_original("k", "ptr-9", "0" * 64, "text", "late"),
        lambda: first.save_pack("k", {"step_id": "t", "pack_id": "pk_9"}),
    ]
    for write in late:
        with pytest.raises(StoreError) as info:
            write()
        assert info.value.code == "STORE_LEASE_LOST"
        assert "taken over by worker w2 (epoch 2)" in info.value.message
    after = second.load("k")
    assert after["variables"] == before["variables"] and after["event_seq"] == before["event_seq"]
    assert second.pointers("k") == [] and second.packs("k") == []
    # the new holder writes, and resumes the run to its end
    resumed = Engine(PIPELINE, registry=REG, store=second).resume("k", force=True)
    assert resumed.status == "completed"
    second.drop_lease("k")
    assert second.verify_ledger("k", None).ok


def test_a_branch_run_is_written_under_its_runs_lease(pg_url):
    # a map's branches (<run>.<step>.<key>) share the parent's store: a worker paused past
    # the parent's lease must not be able to write them either
    first, second = open_run_store(pg_url), open_run_store(pg_url)
    assert first.take_lease("k", "w1") == 1
    Engine(PIPELINE, registry=REG, store=first).run({}, run_id="k.each.0", max_steps=5)
    assert second.take_lease("k", "w2") == 2
    with pytest.raises(StoreError) as info:
        Engine(PIPELINE, registry=REG, store=first).run({}, run_id="k.each.1", max_steps=5)
    assert info.value.code == "STORE_LEASE_LOST"
    with pytest.raises(StoreError) as info:
        first.set_status("k.each.0", "running")
    assert info.value.code == "STORE_LEASE_LOST"
    # another run whose id merely starts alike is not fenced by k's lease
    Engine(PIPELINE, registry=REG, store=first).run({}, run_id="kx.each.0", max_steps=5)
    second.drop_lease("k")
    first.drop_lease("k")
