"""Checkpoints sealed in batches (runtime/engine/ledger.py, LedgerWriter; docs/packs.md).

A checkpoint that calls for no entry of its own is covered by the next checkpoint entry:
written at a model call, tool call, decision, summary, pack or pointer, at the run's end,
and at least every `seal_every` checkpoints. A run killed mid-batch gets its tail sealed
late (resume, verify), and verify reports such an entry every time (LEDGER_SEALED_LATE).
"""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ledger_support import open_and_verify

from runtime.cli import cli
from runtime.contract.action import Action, Outcome
from runtime.contract.registry import Registry
from runtime.engine import Engine
from runtime.engine.store import SqliteRunStore
from runtime.errors import StoreError
from runtime.format.pipeline import Pipeline


class Count(Action):
    """A step that calls no model: counts, and says when to stop."""

    name = "count"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        n = ctx.get("n", 0) + 1
        ctx.set("n", n)
        ctx.set(f"v{n % 3}", n)  # variables written, rewritten, in and across batches
        return Outcome.to_branch("again" if n < ctx.get("limit") else "done")


class Stop(Action):
    name = "stop"
    runnable = True
    terminal = True

    def run(self, ctx: Any) -> Outcome | None:
        return Outcome.end()


PIPELINE = Pipeline.from_dict(
    {
        "settings": {"entry_step_id": "c", "max_steps": 1000},
        "steps": [
            {"id": "c", "action": "count", "on_again": "c", "on_done": "s"},
            {"id": "s", "action": "stop"},
        ],
    }
)
REGISTRY = Registry.from_classes(Count, Stop)


def entries(path: str) -> list[tuple[int, str, dict[str, Any]]]:
    """The stored chain: (seq, kind, content), both places (run_ledger and event rows)."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute(
            "SELECT seq, kind, content FROM run_ledger UNION ALL SELECT ledger_seq, ledger_kind,"
            " ledger_content FROM events WHERE ledger_seq IS NOT NULL ORDER BY 1"
        ).fetchall()
    finally:
        db.close()
    return [(seq, kind, json.loads(content)) for seq, kind, content in rows]


def sql(path: str, statement: str, *args: Any) -> None:
    db = sqlite3.connect(path)
    db.execute(statement, args)
    db.commit()
    db.close()


def run(tmp_path: Path, limit: int, **store_kw: Any) -> tuple[str, int]:
    """A finished run of `limit` counting steps; its path and how many checkpoints it wrote."""
    path = str(tmp_path / "runs.db")
    store = SqliteRunStore(path, **store_kw)
    calls = []
    real = store.checkpoint

    def counted(*args: Any, **kwargs: Any) -> None:
        calls.append(kwargs.get("status"))
        real(*args, **kwargs)

    store.checkpoint = counted  # type: ignore[method-assign]
    done = Engine(PIPELINE, registry=REGISTRY, store=store).run({"limit": limit}, run_id="r")
    assert done.status == "completed", done.error
    store.close()
    return path, len(calls)


@pytest.mark.parametrize(("limit", "every"), [(70, 32), (62, 32), (10, 32), (9, 1), (20, 4)])
def test_checkpoints_are_sealed_every_n_and_at_the_end(tmp_path, limit, every):
    path, checkpoints = run(tmp_path, limit, seal_every=every)
    chain = entries(path)
    kinds = [k for _, k, _ in chain]
    assert kinds[0] == "run" and kinds[-1] == "end"
    # one entry per `every` checkpoints, and one for the rest at the run's end
    assert kinds.count("checkpoint") == -(-checkpoints // every)
    # together they cover every event once, in order, and verify
    covered = [e["seq"] for _, k, c in chain if k in ("run", "checkpoint") for e in c["events"]]
    db = sqlite3.connect(path)
    stored = [r[0] for r in db.execute("SELECT seq FROM events ORDER BY seq")]
    db.close()
    assert covered == stored
    steps = [n for _, k, c in chain if k == "checkpoint" for n, _ in c["step_ids"]]
    assert steps == list(range(limit + 1))
    report = open_and_verify(path, "r", None)
    assert report.ok and report.warnings == [] and report.provisional == []


def _store(tmp_path: Path, **kw: Any) -> SqliteRunStore:
    store = SqliteRunStore(str(tmp_path / "runs.db"), **kw)
    store.create_run("r", PIPELINE, {"limit": 1})
    return store


def _step(store: SqliteRunStore, seq: int, type_: str = "STEP", **extra: Any) -> None:
    event = {"run_id": "r", "seq": seq, "type": type_, "step_id": "c", **extra}
    store.checkpoint(
        "r",
        position="c",
        variables={"n": seq},
        engine={"step_count": seq},
        events=[event],
        status="running",
    )


def _kinds(store: SqliteRunStore) -> list[str]:
    return [k for _, k, _ in entries(store.path)]


@pytest.mark.parametrize(
    ("type_", "own"),
    [
        ("MODEL_CALL", "model_call"),
        ("MODEL_TOOL_CALL", "tool_call"),
        ("REHYDRATED", "tool_call"),
        ("CONTEXT_BUDGET_DECISION", "decision"),
        ("THREAD_COMPACTED", "summary"),
    ],
)
def test_an_event_with_an_entry_of_its_own_seals_the_batch_at_once(tmp_path, type_, own):
    store = _store(tmp_path)
    for seq in (2, 3, 4):
        _step(store, seq)
    assert _kinds(store) == ["run"]  # kept: three checkpoints, no entry yet
    _step(store, 5, type_, messages=[], reply="")
    assert _kinds(store) == ["run", own, "checkpoint"]
    (_, _, content) = entries(store.path)[-1]
    assert [e["seq"] for e in content["events"]] == [2, 3, 4]
    assert content["event_seq"] == 5 and content["vars"] == [["n", content["vars"][0][1]]]
    assert open_and_verify(store.path, "r", None).ok


def test_a_pack_a_pointer_and_the_run_end_seal_at_once(tmp_path):
    from runtime.context import packs
    from runtime.context.pointers import make_pointer

    store = _store(tmp_path)
    _step(store, 2)
    b = packs.PackBuilder(run_id="r", step_id="c", model="m", prompt_budget=100)
    pack = b.finish([{"role": "user", "content": "q"}], 5)
    seq = store.save_pack("r", pack, b.body, b.body_sha256)
    _step(store, 3, "CONTEXT_PACK", pack_seq=seq)
    assert _kinds(store) == ["run", "pack", "checkpoint"]
    _step(store, 4)
    make_pointer(store, "r", "y" * 80, "text", "", 1)
    _step(store, 5)
    assert _kinds(store)[-1] == "checkpoint" and len(_kinds(store)) == 4
    _step(store, 6)
    store.checkpoint(
        "r", position=None, variables={}, engine={}, events=[], status="completed"
    )  # the run's last checkpoint
    assert _kinds(store)[-1] == "checkpoint" and len(_kinds(store)) == 5
    store.finish("r", "completed", {}, None)
    assert open_and_verify(store.path, "r", None).ok


def test_finish_seals_what_is_kept_before_the_end(tmp_path):
    store = _store(tmp_path)
    for seq in (2, 3):
        _step(store, seq)
    store.finish("r", "failed", None, {"code": "X"})
    assert _kinds(store) == ["run", "checkpoint", "end"]
    report = open_and_verify(store.path, "r", None)
    assert report.ok and report.warnings == []


def test_a_checkpoint_that_rolls_back_is_not_kept_in_the_batch(tmp_path):
    store = _store(tmp_path)
    _step(store, 2)
    with pytest.raises(StoreError):
        _step(store, 2)  # an event numbered as one stored: the transaction rolls back
    _step(store, 3)
    store.finish("r", "completed", {}, None)
    (_, _, content) = [e for e in entries(store.path) if e[1] == "checkpoint"][-1]
    assert [e["seq"] for e in content["events"]] == [2, 3]
    assert open_and_verify(store.path, "r", None).ok


def test_tampering_inside_a_finished_batch_is_named_by_its_entry(tmp_path):
    path, _ = run(tmp_path, 40, seal_every=32)
    first_cp = next(seq for seq, k, _ in entries(path) if k == "checkpoint")
    last_cp = [seq for seq, k, _ in entries(path) if k == "checkpoint"][-1]
    sql(path, "UPDATE events SET data = replace(data, '\"c\"', '\"d\"') WHERE seq = 10")
    found = open_and_verify(path, "r", None).first
    assert found is not None and (found.seq, found.kind) == (first_cp, "checkpoint")
    assert found.covers.startswith("event 10 ")
    path, _ = run(tmp_path / "b", 40, seal_every=32)
    sql(path, "UPDATE run_vars SET value = '99' WHERE name = 'v1'")  # last written at 40
    found = open_and_verify(path, "r", None).first
    assert found is not None and (found.seq, found.covers) == (last_cp, "variable 'v1'")
    before = entries(path)
    path, _ = run(tmp_path / "c", 40, seal_every=32)
    sql(path, "UPDATE run_steps SET step_id = 'x' WHERE n = 35")
    assert open_and_verify(path, "r", None).first.covers == "step 35 of the step list"
    # verify of a run at rest never seals anything
    assert len(entries(str(tmp_path / "b" / "runs.db"))) == len(before)
    # nor does a checkpoint row moved on after the end pass for an unsealed batch
    path, _ = run(tmp_path / "d", 40, seal_every=32)
    n = len(entries(path))
    sql(path, "UPDATE checkpoints SET steps = steps + 5, event_seq = event_seq + 5")
    found = open_and_verify(path, "r", None).first
    assert found is not None and "the checkpoint row differs" in found.reason
    assert len(entries(path)) == n


def _dead_owner(path: str) -> None:
    """Make the run's owner a process that has exited (as a SIGKILL leaves it)."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    owner = {"host": socket.gethostname(), "pid": int(gone.stdout), "started": None}
    sql(path, "UPDATE runs SET owner = ? WHERE id = 'r'", json.dumps(owner))


def test_a_killed_runs_unsealed_tail_is_sealed_by_verify_and_reported_every_time(tmp_path):
    store = _store(tmp_path)
    for seq in (2, 3, 4):
        _step(store, seq)
    _dead_owner(store.path)
    report = open_and_verify(store.path, "r", None)
    assert report.ok and report.entries == 2
    assert [(w.seq, w.code) for w in report.warnings] == [(2, "LEDGER_SEALED_LATE")]
    assert report.warnings[0].reason.startswith("sealed late (at verify): 3 events")
    (_, kind, content) = entries(store.path)[-1]
    assert kind == "checkpoint" and content["late"] == "verify"
    assert [e["seq"] for e in content["events"]] == [2, 3, 4] and content["event_seq"] == 4
    # reported again, nothing sealed twice; the command line says so and exits 0
    done = CliRunner().invoke(cli, ["verify", "r", "--store", store.path])
    assert done.exit_code == 0, done.output
    assert "warning: entry 2 (checkpoint)" in done.output and "LEDGER_SEALED_LATE" in done.output
    assert len(entries(store.path)) == 2
    # from now on the tail is protected like any sealed row
    sql(store.path, "UPDATE run_vars SET value = '7' WHERE name = 'n'")
    found = open_and_verify(store.path, "r", None).first
    assert found is not None and (found.seq, found.covers) == (2, "variable 'n'")


def test_a_live_runs_unsealed_tail_is_provisional_and_not_sealed(tmp_path):
    store = _store(tmp_path)  # owned by this process, which runs
    for seq in (2, 3):
        _step(store, seq)
    report = open_and_verify(store.path, "r", None)
    assert report.ok and report.warnings == [] and report.entries == 1
    assert any(p.startswith("events 2-3 (2)") for p in report.provisional)
    assert any(p.startswith("variable 'n'") for p in report.provisional)
    assert _kinds(store) == ["run"]


def test_resume_seals_the_tail_late_and_the_run_goes_on(tmp_path):
    store = _store(tmp_path)
    for seq in (2, 3):
        _step(store, seq)
    _dead_owner(store.path)
    resumed = SqliteRunStore(store.path)
    resumed.rewind("r")  # what Engine.resume does first
    (_, kind, content) = entries(store.path)[-1]
    assert kind == "checkpoint" and content["late"] == "resume"
    resumed.set_status("r", "running")
    _step(resumed, 4)
    resumed.finish("r", "completed", {}, None)
    report = open_and_verify(store.path, "r", None)
    assert report.ok
    assert [w.code for w in report.warnings] == ["LEDGER_SEALED_LATE"]
    assert "(at resume)" in report.warnings[0].reason


def test_a_sealed_row_of_a_killed_run_changed_is_still_found(tmp_path):
    store = _store(tmp_path)
    _step(store, 2, "MODEL_CALL", messages=[], reply="r")  # sealed at once
    _step(store, 3)
    _dead_owner(store.path)
    sql(store.path, "UPDATE events SET data = replace(data, '\"r\"', '\"R\"') WHERE seq = 2")
    report = open_and_verify(store.path, "r", None)
    assert not report.ok and report.first.kind == "model_call"
    assert [w.code for w in report.warnings] == ["LEDGER_SEALED_LATE"]  # the tail, event 3


def test_an_event_put_before_the_last_sealed_one_is_not_taken_for_the_tail(tmp_path):
    store = _store(tmp_path)
    _step(store, 2, "MODEL_CALL", messages=[], reply="r")  # sealed at once
    _step(store, 3)  # the tail
    _dead_owner(store.path)
    sql(store.path, "INSERT INTO events (run_id, seq, type, step_id, data) VALUES"
        " ('r', 1, 'STEP', 'c', '{}')")  # fmt: skip
    report = open_and_verify(store.path, "r", None)
    assert [(m.covers, m.reason.split(" (")[0]) for m in report.mismatches] == [
        ("event 1", "stored but in no ledger entry")
    ]
    assert [w.code for w in report.warnings] == ["LEDGER_SEALED_LATE"]


def test_a_run_store_refuses_a_seal_every_that_is_no_count(tmp_path):
    for bad in (0, -1, True, "3", 2.5):
        with pytest.raises(StoreError) as caught:
            SqliteRunStore(str(tmp_path / "runs.db"), seal_every=bad)
        assert caught.value.code == "LEDGER_SEAL_EVERY_INVALID"
