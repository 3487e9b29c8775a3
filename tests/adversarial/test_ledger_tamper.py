"""Tampering with a stored run is found by `runtime verify` (issue 26, provenance ledger).

A run of call_model steps that compact a long history (model calls, budget decisions,
pointers with their originals, a checkpoint per step, context packs when the store keeps
them) is stored; then the SQLite file itself is edited, one byte at a time, in every
table a run's record lives in (tests/adversarial/sqlite_cells.py finds each value's bytes
in the file). A byte of a covered column changed must make verify fail, naming the entry
that covers it for trace events and the ledger's own rows; a byte of a column the ledger
does not cover (update times, owners, checksums, recorded choices, ...) must pass: the
split is asserted exactly, column by column (COVERED below, docs/packs.md says the same).
Indexes are not edited: they hold copies of key columns, and verify reads rows from the
tables' own records.

The default suite edits a few bytes of every value (FAST_BYTES, seeded); the slow chunk
edits every byte of every value up to SLOW_BYTES bytes long and a seeded sample of longer
ones. A run killed with SIGKILL at a checkpoint and resumed verifies clean.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from kill_support import cli as _cli
from kill_support import long_history, write_folder
from ledger_support import open_and_verify
from sqlite_cells import Value, values

import runtime

PIPELINE = """\
name: ledgered
settings:
  entry_step_id: prep
  models:
    small: {provider: extractive, context_window: 16000}
  context_policy: {enabled: true, trace_threshold_tokens: 2500}
inputs:
  question: {type: string}
  conversation_history: {type: array}
steps:
  - id: prep
    action: set_variables
    rules:
      - {set: note, value: ready}
    next: a1
  - id: a1
    action: call_model
    prompt_key: sys
    model: small
    use_history: true
    user_parts: {q: {source: question, template: "Question: {}"}}
    next: f
  - id: f
    action: finalize
    source: last_model_response
"""
# table -> the columns whose bytes the ledger covers; every other column of the table is
# not covered, and a changed byte there must pass.
COVERED: dict[str, set[str]] = {
    "runs": {"id", "pipeline", "file", "content_hash", "created_at", "status", "output", "error"},
    "run_inputs": {"run_id", "inputs"},
    "events": {"run_id", "seq", "type", "step_id", "data"}
    # a checkpoint's ledger entry, kept in its last event's row (m014): as run_ledger's
    | {f"ledger_{c}" for c in ("seq", "kind", "content", "content_hash", "prev", "hash")},
    "checkpoints": {"run_id", "position", "engine", "event_seq", "steps"},
    "run_vars": {"run_id", "name", "value"},
    "run_steps": {"run_id", "n", "step_id"},
    "run_threads": {"run_id", "thread_id", "n", "message"},
    "run_pointers": {"run_id", "pointer_id", "sha256", "kind"},
    "originals": {"sha256", "chars", "chunks"},
    "original_chunks": {"sha256", "n", "text"},
    "run_context_packs": {"run_id", "seq", "step_id", "pack_id", "body"},
    "run_ledger": {"run_id", "seq", "kind", "content", "content_hash", "prev", "hash"},
    # not covered at all: what a run was started with (RUN_STARTED carries it), derived data
    "run_choices": set(),
    "original_index": set(),
}
FAST_BYTES = 2  # bytes edited per value in the default suite
SLOW_BYTES = 64  # values up to this long get every byte edited in the slow chunk
SLOW_SAMPLE = 24  # bytes edited of each longer value in the slow chunk


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    inputs = {"question": "q", "conversation_history": long_history()}
    prompts = {"sys": "You answer from the document.\n"}
    return write_folder(tmp_path_factory.mktemp("ledger"), PIPELINE, prompts, inputs)


@pytest.fixture(scope="module")
def stored(folder: Path) -> dict[str, Any]:
    """The run, stored once; its file's bytes and every value in it."""
    from runtime.engine import Engine

    db = folder / "runs.db"
    pipeline = runtime.load(str(folder / "p.yaml"))
    here = os.getcwd()
    os.chdir(folder)
    try:
        store = runtime.SqliteRunStore(str(db))
        done = Engine(pipeline, store=store).run(
            json.loads((folder / "in.json").read_text()), run_id="k"
        )
        store.close()
    finally:
        os.chdir(here)
    assert done.status == "completed", done.error
    report = open_and_verify(str(db), "k", None)
    assert report.ok, report.to_dict()
    found = values(db, [t for t in COVERED if _has_table(db, t)])
    return {"path": db, "bytes": db.read_bytes(), "values": found, "cover": _covering(db)}


def _has_table(db: Path, name: str) -> bool:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone())
    finally:
        conn.close()


def _covering(db: Path) -> dict[int, int]:
    """Event seq -> the ledger entry that covers it (read from the intact ledger)."""
    import sqlite3

    conn = sqlite3.connect(db)
    out: dict[int, int] = {}
    try:
        for seq, content in conn.execute(
            "SELECT seq, content FROM run_ledger WHERE run_id = 'k' UNION ALL SELECT"
            " ledger_seq, ledger_content FROM events WHERE run_id = 'k' AND ledger_seq NOT NULL"
        ):
            c = json.loads(content)
            if isinstance(c.get("seq"), int) and "type" in c:
                out[c["seq"]] = seq
            for e in c.get("events", []):
                out[e["seq"]] = seq
    finally:
        conn.close()
    return out


def _ours(v: Value) -> bool:
    """A value of run k's record (the store holds this run only; originals have no run id)."""
    return bool(v.offsets)


def _edit(stored: dict[str, Any], offset: int) -> Any:
    """Verify the run with one byte of the file changed (XOR 1: text stays text)."""
    path: Path = stored["path"]
    for extra in ("-wal", "-shm"):
        Path(str(path) + extra).unlink(missing_ok=True)
    data = bytearray(stored["bytes"])
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    try:
        return open_and_verify(str(path), "k", None)
    finally:
        path.write_bytes(stored["bytes"])


def _check(stored: dict[str, Any], value: Value, offset: int) -> str | None:
    """What is wrong with verify's answer to one edited byte; None when it is right."""
    report = _edit(stored, offset)
    where = f"{value.table}.{value.column} row {value.row} byte at {offset}"
    if value.column not in COVERED[value.table]:
        return None if report.ok else f"{where}: uncovered, yet {report.first}"
    if report.ok:
        return f"{where}: covered, yet verify passed"
    first = report.first
    assert first is not None
    key = dict(zip(_columns(stored, value.table), value.key, strict=False))
    if value.table == "run_ledger" or value.column.startswith("ledger_"):
        want = key["seq" if value.table == "run_ledger" else "ledger_seq"]
        # A changed key (run_id, seq) breaks the b-tree's order: a search may then miss the
        # rows beside it too, so an earlier entry may be named; so may a changed seq (the
        # entry now numbered as an earlier one breaks there); any other column: exactly it.
        if first.seq is None or (
            first.seq > want
            if value.column in ("run_id", "seq", "ledger_seq")
            else first.seq != want
        ):
            return f"{where}: named entry {first.seq}, not {want}"
    elif value.table == "events" and value.column != "seq":
        want = stored["cover"][key["seq"]]
        if first.seq != want:
            return f"{where}: named entry {first.seq}, not {want}"
    return None


def _columns(stored: dict[str, Any], table: str) -> list[str]:
    return [v.column for v in stored["values"] if v.table == table and v.row == 0]


def _offsets(value: Value, rng: random.Random, *, slow: bool) -> list[int]:
    if not slow:
        return rng.sample(value.offsets, min(FAST_BYTES, len(value.offsets)))
    if len(value.offsets) <= SLOW_BYTES:
        return list(value.offsets)
    return rng.sample(value.offsets, SLOW_SAMPLE)


def _run(stored: dict[str, Any], *, slow: bool) -> tuple[list[str], set[str], int]:
    rng = random.Random(26 if not slow else 2626)
    wrong, seen, edits = [], set(), 0
    for value in stored["values"]:
        if not _ours(value):
            continue
        seen.add(f"{value.table}.{value.column}")
        for offset in _offsets(value, rng, slow=slow):
            edits += 1
            problem = _check(stored, value, offset)
            if problem:
                wrong.append(problem)
    return wrong, seen, edits


def test_every_covered_column_of_every_table_is_found_and_no_other(stored):
    wrong, seen, edits = _run(stored, slow=False)
    assert not wrong, wrong[:10]
    # every covered column of every table was edited at least once (a column that only
    # ever held NULL or 0/1 has no bytes: status values are text, so none is skipped)
    tables = {v.table for v in stored["values"]}
    missing = {
        f"{t}.{c}"
        for t in tables
        for c in COVERED[t]
        if f"{t}.{c}" not in seen and not _always_empty(stored, t, c)
    }
    assert not missing
    assert {"events", "checkpoints", "run_ledger", "run_vars", "original_chunks"} <= tables
    assert edits > 200


def _always_empty(stored: dict[str, Any], table: str, column: str) -> bool:
    return all(not v.offsets for v in stored["values"] if (v.table, v.column) == (table, column))


@pytest.mark.slow
def test_every_byte_of_every_short_value_and_a_sample_of_long_ones(stored):
    wrong, _, edits = _run(stored, slow=True)
    assert not wrong, wrong[:10]
    assert edits > 2000


def test_runtime_verify_names_the_entry_of_an_edited_model_call(stored, tmp_path):
    from click.testing import CliRunner

    from runtime.cli import cli

    path = tmp_path / "copy.db"
    data = bytearray(stored["bytes"])
    call = next(
        v
        for v in stored["values"]
        if v.table == "events" and v.column == "data" and v.key[2] == "MODEL_CALL"
    )
    data[call.offsets[len(call.offsets) // 2]] ^= 0x01
    path.write_bytes(bytes(data))
    done = CliRunner().invoke(cli, ["verify", "k", "--store", str(path), "--json"])
    assert done.exit_code == 1, done.output
    report = json.loads(done.output)
    first = report["first_mismatch"]
    assert first["seq"] == stored["cover"][call.key[1]]
    assert first["kind"] == "model_call"
    assert first["covers"] == f"event {call.key[1]} (MODEL_CALL, step 'a1')"
    shutil.copy(stored["path"], path)
    done = CliRunner().invoke(cli, ["verify", "k", "--store", str(path)])
    assert done.exit_code == 0, done.output
    assert done.output.startswith("run k: ok, ")


# --- a run killed with SIGKILL and resumed verifies clean -------------------------------


@pytest.mark.parametrize(
    "kill_at",
    [
        "checkpoint:2",  # after a1 stored its pointers, before its checkpoint
        pytest.param("checkpoint:1", marks=pytest.mark.slow),
        pytest.param("checkpoint:3", marks=pytest.mark.slow),
    ],
)
def test_a_run_killed_and_resumed_verifies_clean(folder, kill_at):
    db = f"killed-{kill_at.replace(':', '')}.db"
    killed = _cli(
        folder, "exec", "p.yaml", "--inputs", "in.json", "--store", db, "--run-id", "k",
        kill_at=kill_at,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # what the kill left verifies: the chain is never ahead of or behind its rows
    before = _cli(folder, "verify", "k", "--store", db)
    assert before.returncode == 0, before.stdout + before.stderr
    assert _cli(folder, "resume", "k", "--store", db).returncode == 0
    after = _cli(folder, "verify", "k", "--store", db, "--json")
    assert after.returncode == 0, after.stdout + after.stderr
    report = json.loads(after.stdout)
    assert report["ok"] and report["entries"] > 5


def test_a_model_call_entry_holds_the_hashes_of_the_prompt_sent_and_the_whole_reply(stored):
    import sqlite3

    from runtime.governance.ledger import content_hash, sha256

    db = sqlite3.connect(stored["path"])
    try:
        (content,) = db.execute(
            "SELECT content FROM run_ledger WHERE run_id = 'k' AND kind = 'model_call'"
        ).fetchone()
        (value,) = db.execute(
            "SELECT value FROM run_vars WHERE run_id = 'k' AND name = 'last_model_response'"
        ).fetchone()
        (data,) = db.execute(
            "SELECT data FROM events WHERE run_id = 'k' AND type = 'MODEL_CALL'"
        ).fetchone()
    finally:
        db.close()
    entry, reply, event = json.loads(content), json.loads(value), json.loads(data)
    assert entry["reply_sha256"] == sha256(reply)
    assert entry["prompt_sha256"] == content_hash(event["messages"])
