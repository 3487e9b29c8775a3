"""The provenance ledger: the chain's formula, what each entry covers, the HMAC key, atomicity.

runtime/governance/ledger.py (the chain) and runtime/engine/ledger.py (the store's entries,
`verify_run`); the SQLite file edited byte by byte is tests/adversarial/test_ledger_tamper.py.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ledger_support import open_and_verify

from runtime.cli import cli
from runtime.context.pointers import make_pointer
from runtime.contract.action import Action, Outcome
from runtime.contract.registry import Registry
from runtime.engine import Engine
from runtime.engine.store import SqliteRunStore
from runtime.errors import StoreError
from runtime.format.pipeline import Pipeline
from runtime.governance import ledger as chain

KEY = "RUNTIME_LEDGER_KEY"


class Talk(Action):
    """A model call's trace event, a thread message, a pointer and an answer."""

    name = "talk"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        n = ctx.get("n", 0) + 1
        ctx.set("n", n)
        messages = [{"role": "user", "content": f"question {n}"}]
        ctx.trace("MODEL_CALL", model="m", messages=messages, reply=f"answer {n}")
        ctx.trace("CONTEXT_BUDGET_DECISION", decision="ok", tokens=12)
        ctx.append_thread("t", [{"role": "assistant", "content": f"answer {n}"}])
        make_pointer(ctx.services.pointers, ctx.run_id, "x" * 50 + str(n), "text", "", 1)
        ctx.set("answer", f"answer {n}")
        if n == 1:
            ctx.set("scratch", n)
        if n == 3:
            ctx.delete("scratch")
        return Outcome.to_branch("again" if n < 3 else "done")


class Stop(Action):
    name = "stop"
    runnable = True
    terminal = True

    def run(self, ctx: Any) -> Outcome | None:
        return Outcome.end()


PIPELINE = Pipeline.from_dict(
    {
        "settings": {"entry_step_id": "t"},
        "steps": [
            {"id": "t", "action": "talk", "on_again": "t", "on_done": "s"},
            {"id": "s", "action": "stop"},
        ],
    }
)


def run(tmp_path: Path, run_id: str = "r", **store_kw: Any) -> str:
    path = str(tmp_path / "runs.db")
    store = SqliteRunStore(path, **store_kw)
    done = Engine(PIPELINE, registry=Registry.from_classes(Talk, Stop), store=store).run(
        {"question": "q"}, run_id=run_id
    )
    assert done.status == "completed", done.error
    store.close()
    return path


def sql(path: str, statement: str, *args: Any) -> None:
    db = sqlite3.connect(path)
    db.execute(statement, args)
    db.commit()
    db.close()


def entries(path: str, run_id: str = "r") -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        # run_ledger's rows and the checkpoint entries kept in event rows (m014)
        return db.execute(
            "SELECT seq, kind, content, content_hash, prev, hash, mac FROM run_ledger"
            " WHERE run_id = ? UNION ALL SELECT ledger_seq, ledger_kind, ledger_content,"
            " ledger_content_hash, ledger_prev, ledger_hash, ledger_mac FROM events"
            " WHERE run_id = ? AND ledger_seq IS NOT NULL ORDER BY 1",
            (run_id, run_id),
        ).fetchall()
    finally:
        db.close()


def first(path: str, key: bytes | None = None) -> dict[str, Any] | None:
    found = open_and_verify(path, "r", key).first
    return None if found is None else found.to_dict()


# --- the chain ------------------------------------------------------------------------


def test_an_entry_hash_is_sha256_of_prev_kind_content_hash_and_seq():
    digest = chain.content_hash({"b": 1, "a": [1, "é"]})
    assert digest == hashlib.sha256(b'{"a":[1,"\\u00e9"],"b":1}').hexdigest()
    want = hashlib.sha256(f"{chain.GENESIS}\ncheckpoint\n{digest}\n1".encode()).hexdigest()
    assert chain.entry_hash(chain.GENESIS, "checkpoint", digest, 1) == want
    assert chain.sign(b"k", want) == hmac.new(b"k", want.encode(), hashlib.sha256).hexdigest()


def test_a_checkpoint_entry_is_kept_in_its_last_event_row(tmp_path):
    """m014: no run_ledger row of its own (one page less per commit), the chain unchanged."""
    path = run(tmp_path)
    db = sqlite3.connect(path)
    try:
        kinds = {k for (k,) in db.execute("SELECT kind FROM run_ledger")}
        kept = db.execute(
            "SELECT seq, ledger_seq, ledger_kind, (SELECT max(seq) FROM events e2"
            " WHERE e2.run_id = events.run_id AND e2.seq <= events.seq) FROM events"
            " WHERE ledger_seq IS NOT NULL"
        ).fetchall()
    finally:
        db.close()
    assert "checkpoint" not in kinds and {"run", "end"} <= kinds
    assert kept and all(kind == "checkpoint" for _, _, kind, _ in kept)
    assert [r[1] for r in kept] == sorted(r[1] for r in kept)
    assert open_and_verify(path, "r", None).ok


def test_every_stored_entry_links_to_the_one_before(tmp_path):
    path = run(tmp_path)
    rows = entries(path)
    prev = chain.GENESIS
    for n, (seq, kind, content, digest, before, head, mac) in enumerate(rows, 1):
        assert seq == n and before == prev and mac is None
        assert digest == hashlib.sha256(content.encode()).hexdigest()
        assert head == chain.entry_hash(prev, kind, digest, seq)
        prev = head
    kinds = [r[1] for r in rows]
    assert kinds[0] == "run" and kinds[-1] == "end"
    assert kinds.count("model_call") == 3 and kinds.count("decision") == 3
    # checkpoints sealed in batches: each of the three visits of t (a model call seals),
    # then s (no model call: kept) sealed with the run's last checkpoint (RUN_COMPLETED)
    assert kinds.count("checkpoint") == 4


def test_a_model_call_entry_holds_its_prompt_and_reply_hashes(tmp_path):
    path = run(tmp_path)
    calls = [json.loads(r[2]) for r in entries(path) if r[1] == "model_call"]
    messages = [{"role": "user", "content": "question 1"}]
    assert calls[0]["prompt_sha256"] == chain.content_hash(messages)
    assert calls[0]["reply_opening_sha256"] == chain.sha256("answer 1")
    assert calls[0]["type"] == "MODEL_CALL" and calls[0]["step_id"] == "t"


def test_a_clean_run_verifies_and_the_cli_says_so(tmp_path):
    path = run(tmp_path)
    assert open_and_verify(path, "r", None).ok
    done = CliRunner().invoke(cli, ["verify", "r", "--store", path, "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["ok"] and report["entries"] == len(entries(path))
    assert report["head"] == entries(path)[-1][5]


# --- what each entry covers: one change in each, named by the entry that recorded it ----


def _entry_of(path: str, kind: str, test: Any = lambda c: True) -> int:
    return next(r[0] for r in entries(path) if r[1] == kind and test(json.loads(r[2])))


@pytest.mark.parametrize(
    ("change", "kind", "test", "covers"),
    [
        (
            "UPDATE events SET data = replace(data, 'question 2', 'question 9') WHERE seq = ?",
            "model_call",
            lambda c: "question 2" in str(c) or c["seq"] > 0,
            None,
        ),
    ],
)
def test_an_edited_model_call_is_named_by_its_entry(tmp_path, change, kind, test, covers):
    path = run(tmp_path)
    calls = [json.loads(r[2]) for r in entries(path) if r[1] == "model_call"]
    seq = calls[1]["seq"]
    sql(path, change, seq)
    found = first(path)
    assert found is not None
    assert found["seq"] == _entry_of(path, "model_call", lambda c: c["seq"] == seq)
    assert found["covers"] == f"event {seq} (MODEL_CALL, step 't')"


def test_a_variable_is_named_by_the_last_checkpoint_that_wrote_it(tmp_path):
    path = run(tmp_path)
    sql(path, "UPDATE run_vars SET value = '\"answer 0\"' WHERE name = 'answer'")
    last = [r[0] for r in entries(path) if r[1] == "checkpoint"][-2]  # the last visit of t
    assert first(path) == {
        "seq": last,
        "kind": "checkpoint",
        "covers": "variable 'answer'",
        "reason": "differs from what the entry recorded",
        "code": "LEDGER_MISMATCH",
    }


def test_a_deleted_variable_put_back_is_found(tmp_path):
    path = run(tmp_path)
    sql(path, "INSERT INTO run_vars VALUES ('r', 'scratch', 'h', '2')")
    assert first(path)["covers"] == "variable 'scratch'"


def test_a_step_a_thread_message_and_an_original_are_covered(tmp_path):
    path = run(tmp_path)
    sql(path, "UPDATE run_steps SET step_id = 's' WHERE n = 0")
    assert first(path)["covers"] == "step 0 of the step list"
    path = run(tmp_path / "b")
    sql(path, "UPDATE run_threads SET message = replace(message, 'answer', 'answes') WHERE n = 1")
    assert first(path)["covers"] == "thread t message 1"
    path = run(tmp_path / "c")
    sql(path, "UPDATE original_chunks SET text = 'y' || substr(text, 2)")
    found = first(path)
    assert (
        found["covers"].startswith("pointer ") and "its original is not the text" in found["reason"]
    )


def test_the_checkpoint_row_and_the_end_are_covered(tmp_path):
    path = run(tmp_path)
    sql(path, "UPDATE checkpoints SET position = 't'")
    found = first(path)
    assert found["kind"] == "checkpoint" and "position" in found["reason"]
    path = run(tmp_path / "b")
    sql(path, 'UPDATE runs SET output = \'{"answer": "forged"}\'')
    assert first(path)["kind"] == "end"
    path = run(tmp_path / "c")
    sql(path, 'UPDATE run_inputs SET inputs = \'{"question": "forged"}\'')
    assert first(path)["kind"] == "run" and "inputs" in first(path)["reason"]


def test_rows_the_ledger_never_saw_and_removed_entries_are_found(tmp_path):
    path = run(tmp_path)
    n = len(entries(path))
    sql(
        path,
        "INSERT INTO events (run_id, seq, type, step_id, data) VALUES"
        " ('r', 999, 'MODEL_CALL', 't', '{}')",
    )
    assert first(path)["seq"] == n + 1 and first(path)["covers"] == "event 999"
    path = run(tmp_path / "b")
    sql(path, "DELETE FROM run_ledger WHERE seq = 3")
    assert first(path)["seq"] == 3 and first(path)["reason"].startswith("is missing")
    path = run(tmp_path / "c")  # the tail cut off with what it covered: the end is missing
    sql(path, "DELETE FROM run_ledger WHERE kind = 'end'")
    assert "no end entry" in first(path)["reason"]


def test_uncovered_columns_may_change(tmp_path):
    path = run(tmp_path)
    sql(path, "UPDATE runs SET updated_at = 1, owner = NULL, durability = 'full'")
    sql(path, "UPDATE checkpoints SET updated_at = 2")
    sql(path, "UPDATE run_vars SET hash = 'x'")
    sql(path, "UPDATE run_choices SET choices = '{}'")
    assert open_and_verify(path, "r", None).ok


# --- the key ----------------------------------------------------------------------------


def test_a_signed_chain_verifies_with_its_key_only(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY, "secret one")
    path = run(tmp_path)
    assert all(r[6] == chain.sign(b"secret one", r[5]) for r in entries(path))
    assert "secret one" not in Path(path).read_bytes().decode("latin-1")  # never stored
    done = CliRunner().invoke(cli, ["verify", "r", "--store", path])
    assert done.exit_code == 0 and "all signed and checked" in done.output
    monkeypatch.setenv(KEY, "secret two")
    done = CliRunner().invoke(cli, ["verify", "r", "--store", path, "--json"])
    assert done.exit_code == 1
    assert json.loads(done.output)["first_mismatch"]["code"] == "LEDGER_KEY_MISMATCH"
    monkeypatch.delenv(KEY)
    done = CliRunner().invoke(cli, ["verify", "r", "--store", path])
    assert done.exit_code == 0 and f"signed (set ${KEY} to check)" in done.output


def test_an_unsigned_chain_is_reported_when_a_key_is_set(tmp_path, monkeypatch):
    path = run(tmp_path)
    monkeypatch.setenv(KEY, "k")
    found = first(path, b"k")
    assert found["seq"] == 1 and found["code"] == "LEDGER_UNSIGNED"


def test_a_changed_signature_is_found_with_the_key_and_passes_without(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY, "k")
    path = run(tmp_path)
    # (the first hex digit changed: one that was 'a' already would stay the same)
    flip = "iif(substr({0}, 1, 1) = 'a', 'b', 'a') || substr({0}, 2)"
    sql(path, f"UPDATE run_ledger SET mac = {flip.format('mac')} WHERE seq = 2")
    # entry 2 is a checkpoint's, kept in its event's row (m014)
    sql(path, f"UPDATE events SET ledger_mac = {flip.format('ledger_mac')} WHERE ledger_seq = 2")
    assert first(path, b"k")["seq"] == 2
    assert open_and_verify(path, "r", None).ok


# --- coded errors, and a chain never ahead of its rows -----------------------------------


def test_verify_answers_with_codes(tmp_path):
    done = CliRunner().invoke(cli, ["verify", "r", "--store", str(tmp_path / "none.db")])
    assert done.exit_code == 1 and "STORE_NOT_FOUND" in done.output
    path = run(tmp_path)
    done = CliRunner().invoke(cli, ["verify", "zz", "--store", path])
    assert done.exit_code == 1 and "RUN_NOT_FOUND" in done.output
    off = run(tmp_path / "off", ledger=False)
    done = CliRunner().invoke(cli, ["verify", "r", "--store", off])
    assert done.exit_code == 1 and "LEDGER_MISSING" in done.output
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    done = CliRunner().invoke(cli, ["verify", "r", "--store", str(junk)])
    assert done.exit_code == 1 and "STORE_ERROR" in done.output
    assert "Traceback" not in done.output


def test_a_failed_checkpoint_writes_no_entry(tmp_path):
    path = run(tmp_path)
    store = SqliteRunStore(path)
    before = entries(path)
    # an event numbered as one already stored: the transaction fails and rolls back whole
    event = {"run_id": "r", "seq": 1, "type": "STEP", "step_id": "s"}
    with pytest.raises(StoreError):
        store.checkpoint(
            "r", position=None, variables={}, engine={}, events=[event], status="completed"
        )
    assert entries(path) == before
    assert open_and_verify(path, "r", None).ok


def test_a_store_keeps_no_head_for_a_run_that_ended_and_a_resume_chains_on(tmp_path):
    path = str(tmp_path / "runs.db")
    store = SqliteRunStore(path, seal_every=1)  # every checkpoint sealed at once
    engine = Engine(PIPELINE, registry=Registry.from_classes(Talk, Stop), store=store)
    assert engine.run({"question": "q"}, run_id="r").status == "completed"
    assert store._ledger._heads == {}
    # the store is told the run failed and it goes on: its entries chain after the end
    store.set_status("r", "running")
    event = {"run_id": "r", "seq": 1000, "type": "RUN_RESUMED", "step_id": None}
    store.checkpoint("r", position=None, variables={}, engine={}, events=[event], status="running")
    rows = entries(path)
    assert rows[-2][1] == "end" and rows[-1][1] == "checkpoint" and rows[-1][4] == rows[-2][5]
