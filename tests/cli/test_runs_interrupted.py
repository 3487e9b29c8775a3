"""`runtime runs`: a run left `running` by a killed process shows as interrupted, with the
resume hint; a run whose process still runs stays `running` (runtime/engine/owner.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.cli import cli
from runtime.engine.store import SqliteRunStore

CHILD = """
import pathlib, sys, time
from runtime.contract.action import Action
from runtime.contract.registry import Registry
from runtime.engine import Engine
from runtime.engine.store import SqliteRunStore
from runtime.format.pipeline import Pipeline

class Stall(Action):
    name = "stall"
    runnable = True
    def run(self, ctx):
        pathlib.Path(sys.argv[2]).write_text("entered")
        time.sleep(120)

pipeline = Pipeline.from_dict({"name": "stalls", "settings": {"entry_step_id": "s"},
                               "steps": [{"id": "s", "action": "stall", "end": True}]})
Engine(pipeline, registry=Registry.from_classes(Stall), store=SqliteRunStore(sys.argv[1])).run(
    {}, run_id=sys.argv[3])
"""


def _stalled(folder: Path, run_id: str) -> subprocess.Popen[bytes]:
    """A child process running `run_id`, stopped inside its first step."""
    entered = folder / f"{run_id}.entered"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(folder / "runs.db"), str(entered), run_id]
    )
    deadline = time.time() + 60
    while not entered.exists() and time.time() < deadline and child.poll() is None:
        time.sleep(0.01)
    assert entered.exists(), "the child never reached its step"
    return child


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """`dead`: its process killed with SIGKILL (and reaped); `live`: its process still running.

    Shared by the tests that only read the store.
    """
    tmp_path = tmp_path_factory.mktemp("two_runs")
    dead = _stalled(tmp_path, "dead")
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    live = _stalled(tmp_path, "live")
    yield tmp_path / "runs.db", live.pid
    live.send_signal(signal.SIGKILL)
    live.wait()


def test_a_killed_run_shows_as_interrupted_with_the_resume_hint(runner, two_runs):
    db, _live = two_runs
    result = runner.invoke(cli, ["runs", "--store", str(db)])
    assert result.exit_code == 0
    rows = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()[1:]}
    assert rows == {"live": "running", "dead": "interrupted"}
    assert result.stderr == (
        "run dead was left running by a process that is gone; resume with: "
        f"runtime resume dead --store {db}\n"
    )


def test_status_filters_tell_interrupted_from_running(runner, two_runs):
    db, _live = two_runs

    def listed(status: str) -> list[tuple[str, str]]:
        out = runner.invoke(cli, ["runs", "--store", str(db), "--status", status, "--json"])
        assert out.exit_code == 0
        return [(r["run_id"], r["status"]) for r in json.loads(out.stdout)]

    assert listed("interrupted") == [("dead", "interrupted")]
    assert listed("running") == [("live", "running")]
    assert listed("completed") == []


def test_a_resumed_run_belongs_to_the_process_resuming_it(tmp_path):
    import socket
    import sqlite3

    from runtime.format.pipeline import Pipeline

    db = tmp_path / "runs.db"
    store = SqliteRunStore(str(db))
    store.create_run("r", Pipeline.from_dict({"steps": [{"id": "s", "action": "finalize"}]}), {})
    owner = json.dumps({"host": socket.gethostname(), "pid": _pid_of_exited()})
    conn = sqlite3.connect(db)
    conn.execute("UPDATE runs SET owner = ?", (owner,))
    conn.commit()
    conn.close()
    assert [r["status"] for r in store.runs()] == ["interrupted"]
    store.set_status("r", "running")  # as Engine.resume does before its first step
    assert [r["status"] for r in store.runs()] == ["running"]
    store.finish("r", "failed", None, {"code": "RUN_CANCELLED", "message": "x"})
    assert [r["status"] for r in store.runs()] == ["failed"]


def _pid_of_exited() -> int:
    """The pid of a child process that has exited and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_pid_reused_by_a_later_process_is_not_the_owner(tmp_path):
    from runtime.engine.owner import is_gone, this_process

    me = this_process()
    assert is_gone(me) is False
    assert is_gone({**me, "host": "another-host"}) is False  # cannot be checked from here
    assert is_gone(None) is False  # recorded before owners were
    if me["started"] is not None:  # Linux: /proc gives the start time
        assert is_gone({**me, "started": me["started"] - 1}) is True
    os.kill(os.getpid(), 0)  # this process is alive, so only the start time told it apart


def test_a_damaged_owner_record_leaves_the_run_listed_as_running(runner, tmp_path):
    import sqlite3

    from runtime.format.pipeline import Pipeline

    db = tmp_path / "runs.db"
    pipeline = Pipeline.from_dict({"steps": [{"id": "s", "action": "finalize"}]})
    SqliteRunStore(str(db)).create_run("r", pipeline, {})
    for owner in ("{", "[1]", '{"host": 5, "pid": "x"}', '"text"', '{"pid": -1}'):
        conn = sqlite3.connect(db)
        conn.execute("UPDATE runs SET owner = ?", (owner,))
        conn.commit()
        conn.close()
        out = runner.invoke(cli, ["runs", "--store", str(db), "--json"])
        assert out.exit_code == 0
        assert [r["status"] for r in json.loads(out.stdout)] == ["running"], owner
