"""`runtime store migrate` and `runtime store copy` (issue 34): SQLite <-> Postgres, verified."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runtime.cli import cli
from runtime.engine import storecopy
from runtime.engine.stores import open_run_store

pytestmark = pytest.mark.postgres

FREE = """
name: free
settings: {entry_step_id: a}
steps:
  - id: a
    action: set_variables
    rules:
      - {set: answer, value: ok}
      - {set: zeta, value: 1}
      - {set: alpha, value: 2}
    next: b
  - id: b
    action: finalize
"""


def _sqlite_store_with_runs(tmp_path: Path, runner: Any) -> str:
    """Three runs, one holding a large input (stored once by content) and a pointer."""
    import hashlib

    (tmp_path / "free.yaml").write_text(FREE)
    db = str(tmp_path / "runs.db")
    for rid in ("a", "b"):
        done = runner.invoke(
            cli, ["exec", str(tmp_path / "free.yaml"), "--store", db, "--run-id", rid]
        )
        assert done.exit_code == 0, done.output + done.stderr
    big = "é" * 70_000  # a large input: stored once, by content (runtime/engine/blobs.py)
    done = runner.invoke(
        cli,
        [
            "exec",
            str(tmp_path / "free.yaml"),
            "--store",
            db,
            "--run-id",
            "c",
            "--input",
            f"doc={big}",
        ],
    )
    assert done.exit_code == 0, done.output + done.stderr
    store = open_run_store(db)
    # NUL and the escape Postgres text is written with (runtime/net/pgtext.py) round-trip
    text = "pointer text \x00 \U0010fffd0 \U0010fffde\n" * 3000
    store.put_original("c", "ptr-1", hashlib.sha256(text.encode()).hexdigest(), "text", text)
    store.close()
    return db


def _dump(location: str) -> dict[str, Any]:
    """What the store's readers say about every run."""
    store = open_run_store(location, create=False)
    out = {}
    for row in store.runs(limit=100):
        rid = row["run_id"]
        loaded = store.load(rid)
        out[rid] = {
            "status": row["status"],
            "steps": row["steps"],
            "variables": list(loaded["variables"].items()),
            "inputs": loaded["inputs"],
            "events": [e["type"] for e in store.events(rid)],
            "pointers": store.pointers(rid),
            "ok": store.verify_ledger(rid, None).ok,
        }
    store.close()
    return out


def test_migrate_creates_and_then_finds_nothing_to_do(runner, pg_url, tmp_path):
    first = runner.invoke(cli, ["store", "migrate", pg_url])
    assert first.exit_code == 0, first.stderr
    assert (
        "applied 3 migration(s): pg001_run_store, pg002_workers, pg003_submission_options"
        in first.output
    )
    again = runner.invoke(cli, ["store", "migrate", pg_url])
    assert again.exit_code == 0 and "up to date (3 migrations)" in again.output
    db = str(tmp_path / "new.db")
    made = runner.invoke(cli, ["store", "migrate", db])
    assert made.exit_code == 0 and "m015_subjects" in made.output
    assert "up to date" in runner.invoke(cli, ["store", "migrate", db]).output


def test_copy_sqlite_to_postgres_and_back_keeps_every_run(runner, pg_url, tmp_path):
    db = _sqlite_store_with_runs(tmp_path, runner)
    before = _dump(db)
    # c's pointer was stored after its run ended: no ledger entry covers it (verify says so)
    assert set(before) == {"a", "b", "c"} and [before[r]["ok"] for r in "abc"] == [1, 1, 0]
    done = runner.invoke(cli, ["store", "copy", db, pg_url, "--json"])
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.output)
    assert report["ok"]
    tables = {t["table"]: t for t in report["tables"]}
    assert tables["runs"]["rows"] == 3 and tables["originals"]["rows"] >= 2
    assert _dump(pg_url) == before  # order of variables, inputs, trace, pointers, ledger
    back = str(tmp_path / "back.db")
    done = runner.invoke(cli, ["store", "copy", pg_url, back])
    assert done.exit_code == 0, done.stderr
    assert "3 rows" in done.output or "verified" in done.output
    assert _dump(back) == before
    # resuming or listing from the copy works as from the original
    listed = runner.invoke(cli, ["runs", "--store", pg_url, "--json"])
    assert {r["run_id"] for r in json.loads(listed.output)} == {"a", "b", "c"}


def test_a_damaged_copy_is_refused_and_nothing_is_kept(runner, pg_url, tmp_path, monkeypatch):
    db = _sqlite_store_with_runs(tmp_path, runner)

    def damage(table: str, row: tuple[Any, ...]) -> tuple[Any, ...]:
        if table == "run_vars" and row[1] == "answer":
            return (*row[:3], '"forged"')
        return row

    monkeypatch.setattr(storecopy, "_damage", damage)
    done = runner.invoke(cli, ["store", "copy", db, pg_url])
    assert done.exit_code == 1
    assert done.stderr.startswith("error: STORE_COPY_MISMATCH: ")
    assert "table run_vars differs" in done.stderr and "Traceback" not in done.stderr
    assert open_run_store(pg_url).runs() == []  # rolled back whole


def test_a_target_with_runs_is_refused(runner, pg_url, tmp_path):
    db = _sqlite_store_with_runs(tmp_path, runner)
    assert runner.invoke(cli, ["store", "copy", db, pg_url]).exit_code == 0
    again = runner.invoke(cli, ["store", "copy", db, pg_url])
    assert again.exit_code == 1
    assert again.stderr.startswith("error: STORE_COPY_TARGET_NOT_EMPTY: ")
    missing = runner.invoke(cli, ["store", "copy", str(tmp_path / "none.db"), pg_url])
    assert missing.exit_code == 1 and "STORE_NOT_FOUND" in missing.stderr
    unknown = runner.invoke(cli, ["store", "copy", db, pg_url, "--what", "nodes"])
    assert unknown.exit_code != 0 and "nothing copies 'nodes'" in unknown.stderr


def test_the_copy_hashes_rows_the_same_on_both_backends(runner, pg_url, tmp_path):
    """The digest is of values, not of a backend's encoding: equal stores, equal digests."""
    db = _sqlite_store_with_runs(tmp_path, runner)
    report = storecopy.copy_run_store(db, pg_url)
    again = storecopy.copy_run_store(pg_url, str(tmp_path / "again.db"))
    assert [(t.table, t.rows, t.sha256) for t in report.tables] == [
        (t.table, t.rows, t.sha256) for t in again.tables
    ]
    conn = sqlite3.connect(str(tmp_path / "again.db"))
    names = [
        r[0] for r in conn.execute("SELECT name FROM run_vars WHERE run_id = 'a' ORDER BY rowid")
    ]
    conn.close()
    assert names[:3] == ["answer", "zeta", "alpha"]
