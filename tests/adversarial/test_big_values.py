"""A large input or variable is stored once, by content, and read back checked (issue 25 item 9).

A string of 64 KiB or more in a run's inputs or variables is kept in the run store's
content-addressed chunks (runtime/engine/blobs.py, m013), shared with a pointer's original
of the same text; the rows hold a small reference. What is read back is checked: a damaged
chunk, head row or reference is STORE_ERROR, never a different value. User data shaped
like a reference stays user data. A byte of the pages holding the texts damaged, one at a
time, gives the exact values or STORE_ERROR (every 997th byte here, every 7th in the slow
chunks). Sizes here are a few MB; benchmarks/big_inputs.py runs 10-200 MB.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from kill_support import cli, comparable, write_folder

import runtime
from runtime.engine import blobs
from runtime.errors import StepRuntimeError, StoreError

PIPELINE = """\
name: big
settings:
  entry_step_id: prep
  models:
    small: {provider: extractive, context_window: 8192}
  context_policy: {enabled: true, summary_tokens: 160}
inputs:
  question: {type: string}
  doc: {type: string}
steps:
  - id: prep
    action: set_variables
    rules:
      - {set: note, value: ready}
    next: answer
  - id: answer
    action: call_model
    prompt_key: answer
    model: small
    max_output_tokens: 200
    user_parts:
      question: {source: question, summarizable: false}
      doc: {source: doc, summary_kind: text}
    next: f
  - id: f
    action: finalize
    source: last_model_response
"""
LINE = "It is a truth universally acknowledged, that a single man in possession of a fortune.\n"
DOC = (LINE * (2_000_000 // len(LINE) + 1))[:2_000_000] + "caf\u00e9 \u2014 the end\n"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    inputs = {"question": "What is acknowledged?", "doc": DOC}
    prompts = {"answer": "Answer from the document.\n"}
    return write_folder(tmp_path_factory.mktemp("big"), PIPELINE, prompts, inputs)


def exec_(folder: Path, db: str, kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
    args = ("exec", "p.yaml", "--inputs", "in.json", "--max-input-bytes", "8000000")
    return cli(folder, *args, "--store", db, "--run-id", "k", kill_at=kill_at, timeout=300)


def text_bytes(db: str) -> dict[str, int]:
    """Bytes of text each table holding values stores (inputs, variables, chunks)."""
    conn = sqlite3.connect(db)
    try:
        return {
            "run_inputs": conn.execute("SELECT sum(length(inputs)) FROM run_inputs").fetchone()[0],
            "run_vars": conn.execute("SELECT sum(length(value)) FROM run_vars").fetchone()[0],
            "chunks": conn.execute("SELECT sum(length(text)) FROM original_chunks").fetchone()[0],
            "originals": conn.execute("SELECT count(*) FROM originals").fetchone()[0],
        }
    finally:
        conn.close()


@pytest.fixture(scope="module")
def reference(folder: Path) -> dict[str, Any]:
    """The uninterrupted run, through `runtime exec`."""
    db = str(folder / "ref.db")
    done = exec_(folder, db)
    assert done.returncode == 0, done.stderr
    store = runtime.SqliteRunStore(db)
    return {
        "db": db,
        "events": store.events("k"),
        "state": store.load("k")["variables"],
        "pointers": store.pointers("k"),
    }


def test_a_large_input_is_stored_once_for_the_inputs_the_variable_and_the_pointer(reference):
    got = text_bytes(reference["db"])
    # one copy of the text: the pointer's original is the input's blob (same sha256)
    assert got["originals"] == 1
    assert got["chunks"] == len(DOC)
    assert got["run_inputs"] < 500 and got["run_vars"] < 20_000  # references, not the text
    [pointer] = reference["pointers"]
    assert pointer["sha256"] == hashlib.sha256(DOC.encode()).hexdigest()
    store = runtime.SqliteRunStore(reference["db"])
    saved = store.load("k")
    assert saved["inputs"] == {"question": "What is acknowledged?", "doc": DOC}
    assert saved["variables"]["doc"] == DOC
    assert saved["variables"]["doc"] is saved["inputs"]["doc"]  # read once, not twice


@pytest.mark.parametrize("kill_at", ["checkpoint:1", "checkpoint:2"])
def test_a_run_killed_with_a_large_input_resumes_identically(folder, reference, kill_at):
    db = str(folder / f"killed{kill_at[-1]}.db")
    killed = exec_(folder, db, kill_at=kill_at)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)
    done = cli(folder, "resume", "k", "--store", db, timeout=300)
    assert done.returncode == 0, done.stderr
    store = runtime.SqliteRunStore(db)
    assert comparable(store.events("k")) == comparable(reference["events"])
    assert store.load("k")["variables"] == reference["state"]
    assert store.pointers("k") == reference["pointers"]
    assert text_bytes(db) == text_bytes(reference["db"])
    assert text_bytes(db)["run_inputs"] < 500 and text_bytes(db)["chunks"] == len(DOC)
    assert runtime.SqliteRunStore(db).verify_ledger("k", None).ok


# --- damage: STORE_ERROR, never another value ------------------------------------------


def _copy(reference: dict[str, Any], tmp_path: Path) -> str:
    db = str(tmp_path / "copy.db")
    src = sqlite3.connect(reference["db"])
    dst = sqlite3.connect(db)
    src.backup(dst)
    src.close()
    dst.close()
    return db


def _sql(db: str, statement: str, *args: Any) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(statement, args)
    conn.close()


def _chunk_crc(sha: str, n: int, text: str) -> int:
    return zlib.crc32(text.encode(), zlib.crc32(f"chunk {sha} {n}".encode()))


def _edit_ref(conn: sqlite3.Connection, table: str, column: str, old: str, new: str) -> None:
    (text,) = conn.execute(f"SELECT {column} FROM {table} WHERE {column} LIKE 'blobs:%'").fetchone()
    assert old in text
    conn.execute(
        f"UPDATE {table} SET {column} = ? WHERE {column} = ?", (text.replace(old, new), text)
    )


SHA = hashlib.sha256(DOC.encode()).hexdigest()
DAMAGE: dict[str, Any] = {
    "a changed character": "UPDATE original_chunks SET text = 'J' || substr(text, 2) WHERE n = 3",
    "a missing chunk": "DELETE FROM original_chunks WHERE n = 7",
    "a missing text": "DELETE FROM originals",
    "a shorter length": "UPDATE originals SET chars = chars - 1",
    "a reference to other text": lambda c: _edit_ref(c, "run_vars", "value", SHA, "0" * 64),
    "a reference's length": lambda c: _edit_ref(
        c, "run_inputs", "inputs", f", {len(DOC)}]", f", {len(DOC) - 1}]"
    ),
    "a reference that is not one": lambda c: _edit_ref(
        c, "run_inputs", "inputs", f'"{SHA}", {len(DOC)}]', f'"{SHA}", "{len(DOC)}"]'
    ),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_stored_value_is_store_error_not_another_value(
    folder, reference, tmp_path, damage
):
    db = _copy(reference, tmp_path)
    conn = sqlite3.connect(db, isolation_level=None)
    edit = DAMAGE[damage]
    if callable(edit):
        edit(conn)
    else:
        assert conn.execute(edit).rowcount > 0
    conn.close()
    with pytest.raises(StoreError) as caught:
        runtime.SqliteRunStore(db).load("k")
    assert caught.value.code == "STORE_ERROR"
    report = runtime.SqliteRunStore(db).verify_ledger("k", None)  # `runtime verify` too
    assert not report.ok
    if damage not in ("a changed character", "a reference's length"):
        return  # the command line's answer to two of them (a process each: the fast suite)
    out = cli(folder, "resume", "k", "--store", db, timeout=300)
    assert out.returncode != 0, out.stdout
    assert "STORE_ERROR" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_chunk_rewritten_with_a_matching_crc_is_caught_by_the_sha256(reference, tmp_path):
    db = _copy(reference, tmp_path)
    conn = sqlite3.connect(db, isolation_level=None)
    sha, text = conn.execute("SELECT sha256, text FROM original_chunks WHERE n = 5").fetchone()
    forged = "X" + text[1:]
    conn.execute(
        "UPDATE original_chunks SET text = ?, crc = ? WHERE n = 5",
        (forged, _chunk_crc(sha, 5, forged)),
    )
    conn.close()
    with pytest.raises(StoreError, match="not the text stored"):
        runtime.SqliteRunStore(db).load("k")


# --- the reference format: user data is never read as a reference ----------------------


def _pipeline(tmp_path: Path) -> Any:
    (tmp_path / "p.yaml").write_text(
        "name: v\nsettings: {entry_step_id: f}\nsteps:\n  - {id: f, action: finalize, source: x}\n"
    )
    return runtime.load(str(tmp_path / "p.yaml"))


BIG = "b" * blobs.BIG
LOOKALIKES: list[Any] = [
    {blobs.REF: ["0" * 64, 3]},
    {blobs.ESC: {"a": 1}},
    {blobs.ESC: {blobs.REF: ["x", 1]}},
    {blobs.REF: 1, "other": [BIG]},
    [{blobs.ESC: BIG}, {blobs.REF: [BIG, 1]}],
    "blobs:{}",
    blobs.PREFIX + json.dumps({blobs.REF: ["0" * 64, 3]}),
]


@pytest.mark.parametrize("value", LOOKALIKES, ids=range(len(LOOKALIKES)))
def test_values_shaped_like_references_are_read_back_as_written(tmp_path, value):
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    both = {"v": value, "big": [BIG, value]}
    store.create_run("r", _pipeline(tmp_path), dict(both))
    store.checkpoint(
        "r", position="f", variables=dict(both), engine={}, events=[], status="running"
    )
    saved = runtime.SqliteRunStore(store.path).load("r")
    assert saved["inputs"] == both and saved["variables"] == both


def test_a_variable_replaced_drops_its_old_text_unless_a_pointer_holds_it(tmp_path):
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    store.create_run("r", _pipeline(tmp_path), {})
    sizes = []
    for value in ("a" * 100_000, "c" * 90_000, "short"):
        store.checkpoint(
            "r", position="f", variables={"x": value}, engine={}, events=[], status="running"
        )
        assert store.load("r")["variables"] == {"x": value}
        sizes.append(text_bytes(store.path)["chunks"])
    assert sizes == [100_000, 90_000, None]  # one copy at a time: the old one is dropped
    kept = "k" * 70_000
    sha = blobs.sha256_of(kept)
    store.checkpoint(
        "r", position="f", variables={"x": kept}, engine={}, events=[], status="running"
    )
    store.put_original("r", "ptr_1", sha, "text", kept)
    store.checkpoint("r", position="f", variables={}, engine={}, events=[], status="running")
    assert text_bytes(store.path)["originals"] == 1  # the pointer's original stays
    assert store.get_original("r", "ptr_1") == ("text", kept)


def test_a_store_written_before_m013_reads_its_large_values(tmp_path):
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    store.create_run("r", _pipeline(tmp_path), {"doc": "small"})
    store.checkpoint(
        "r", position="f", variables={"doc": "small"}, engine={}, events=[], status="running"
    )
    old = json.dumps("z" * 100_000)  # a row as written before: the JSON text itself
    _sql(store.path, "UPDATE run_vars SET value = ? WHERE name = 'doc'", old)
    _sql(store.path, "UPDATE run_inputs SET inputs = ?", json.dumps({"doc": "z" * 100_000}))
    saved = runtime.SqliteRunStore(store.path).load("r")
    assert saved["variables"] == {"doc": "z" * 100_000} == saved["inputs"]


def test_runtime_verify_checks_the_stored_text_of_a_variable(tmp_path):
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    store.create_run("r", _pipeline(tmp_path), {"doc": "i" * 80_000})
    variables = {"doc": "i" * 80_000, "x": "v" * 70_000}
    store.checkpoint("r", position="f", variables=variables, engine={}, events=[], status="running")
    assert store.verify_ledger("r", None).ok
    sha = blobs.sha256_of("v" * 70_000)
    _sql(
        store.path, "UPDATE original_chunks SET text = 'w' || substr(text, 2) WHERE sha256 = ?", sha
    )
    report = runtime.SqliteRunStore(store.path).verify_ledger("r", None)
    assert [(m.covers, m.reason) for m in report.mismatches] == [
        ("variable 'x'", f"stored text {sha[:16]} is not the text stored")
    ]
    _sql(store.path, "DELETE FROM original_chunks WHERE sha256 = ?", blobs.sha256_of("i" * 80_000))
    report = runtime.SqliteRunStore(store.path).verify_ledger("r", None)
    assert {m.covers for m in report.mismatches} >= {"variable 'doc'", "variable 'x'"}
    assert any("inputs" in m.reason for m in report.mismatches)


# --- every byte of the stored texts' pages -----------------------------------------------

TEXT_A = "".join(
    f"line {n}: caf\u00e9 \u2014 a truth universally acknowledged.\n" for n in range(2400)
)
TEXT_B = "b\u00e9" * 40_000
TEXT_TABLES = {"originals", "original_chunks", "sqlite_autoindex_original_chunks_1"}


def _text_store(tmp_path: Path) -> tuple[str, list[int]]:
    """A store whose run holds two large strings; the file offsets of their pages."""
    store = runtime.SqliteRunStore(str(tmp_path / "texts.db"))
    store.create_run("r", _pipeline(tmp_path), {"doc": TEXT_A})
    variables = {"doc": TEXT_A, "x": [TEXT_B, {"k": "small"}]}
    store.checkpoint("r", position="f", variables=variables, engine={}, events=[], status="running")
    store.close()
    conn = sqlite3.connect(store.path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (size,) = conn.execute("PRAGMA page_size").fetchone()
    pages = [p for n, p in conn.execute("SELECT name, pageno FROM dbstat") if n in TEXT_TABLES]
    conn.close()
    return store.path, [at for p in pages for at in range((p - 1) * size, p * size)]


def _read_damaged(tmp_path: Path, original: bytes, at: int) -> str:
    copy = tmp_path / "damaged.db"
    for suffix in ("-wal", "-shm"):
        Path(str(copy) + suffix).unlink(missing_ok=True)
    data = bytearray(original)
    data[at] ^= 0xFF
    copy.write_bytes(bytes(data))
    try:
        saved = runtime.SqliteRunStore(str(copy), create=False).load("r")
    except StepRuntimeError as exc:
        assert exc.code == "STORE_ERROR", (at, exc.code, exc.message)
        return exc.code
    assert saved["inputs"]["doc"] == TEXT_A, f"a wrong input after damage at byte {at}"
    assert saved["variables"]["doc"] == TEXT_A, f"a wrong variable after damage at byte {at}"
    assert saved["variables"]["x"] == [TEXT_B, {"k": "small"}], f"wrong after byte {at}"
    return "ok"


def _sweep(tmp_path: Path, every: int, chunk: int = 0, chunks: int = 1) -> dict[str, int]:
    db, offsets = _text_store(tmp_path)
    original = Path(db).read_bytes()
    outcomes: dict[str, int] = {}
    for at in offsets[::every][chunk::chunks]:
        got = _read_damaged(tmp_path, original, at)
        outcomes[got] = outcomes.get(got, 0) + 1
    return outcomes


def test_a_damaged_byte_of_a_stored_text_is_store_error_or_the_exact_value(tmp_path):
    """The fast chunk: every 997th byte of the pages holding the texts."""
    outcomes = _sweep(tmp_path, 997)
    assert outcomes.get("STORE_ERROR", 0) > 50  # the damage was seen, not only survived


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(4))
def test_every_seventh_byte_of_the_stored_texts_pages(tmp_path, chunk):
    _sweep(tmp_path, 7, chunk, 4)
