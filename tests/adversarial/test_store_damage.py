"""A damaged run store never answers wrongly: STORE_ERROR, never a wrong slice or a traceback.

Every read of an original is checked against what was stored (runtime/engine/store.py,
m008): a CRC-32 per chunk, per offset or line index, per pointer row and per original's
row, and a whole original against its sha256. The targeted cases are the damage issue 25
found (swapped index entries, shifted line starts, an edited chunk, overwritten pages);
the sweep damages every byte of every table's and index's pages of a small store, one at
a time, and reads everything back through the store and the `runtime trace` renderers.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from array import array
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from slice_support import ctx_of, put

from runtime.cli import cli
from runtime.cli import runs as runs_cli
from runtime.context import pointers as ptr
from runtime.engine import store as store_module
from runtime.engine import trace as tr
from runtime.engine.store import SqliteRunStore
from runtime.errors import StepRuntimeError, StoreError
from runtime.format.pipeline import Pipeline

DOC = json.dumps(
    {"query": "q", "results": [{"id": i, "title": f"letter {i}", "n": i * 7} for i in range(40)]},
    indent=1,
)
NOVEL = "".join(f"line {n}: It is a truth universally acknowledged.\n" for n in range(1, 2001))


def _blob(a: array) -> bytes:
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def _sha(text: str) -> str:
    return ptr.pointer_id_of(text)[1]


def test_swapped_json_index_entries_are_a_store_error_not_the_next_item(tmp_path):
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    pid = put(store, DOC, "json")
    expected = ptr.json_slice(DOC, "$.results[0]")
    assert ptr.rehydrate(ctx_of(store), pid, "$.results[0]") == expected
    conn = store._conn()
    (blob,) = conn.execute("SELECT offsets FROM original_index").fetchone()
    index = ptr.JsonIndex(blob)
    a = index.a
    _, _, root = index.root()
    _, count, at = index.container(root)
    results = next(a[m + 4] for m in range(at, at + 5 * count, 5) if a[m + 4] >= 0)
    _, _, items = index.container(results)
    a[items : items + 3], a[items + 3 : items + 6] = a[items + 3 : items + 6], a[items : items + 3]
    conn.execute("UPDATE original_index SET offsets = ?", (_blob(a),))
    with pytest.raises(StoreError) as info:  # it returned results[1]
        ptr.rehydrate(ctx_of(store), pid, "$.results[0]")
    assert info.value.code == "STORE_ERROR" and pid in info.value.message


def test_shifted_line_index_entries_are_a_store_error_not_other_lines(tmp_path, monkeypatch):
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    text = NOVEL * 40  # over 64 KiB: stored with a line index
    pid = put(store, text, "text")
    conn = store._conn()
    (blob,) = conn.execute("SELECT offsets FROM original_index").fetchone()
    a = array("q")
    a.frombytes(blob)
    line = len(ptr.line_slice(text, 300, 300))
    a[4] += line  # block 2 now starts one line later: a whole line, so still a line start
    conn.execute("UPDATE original_index SET offsets = ?", (_blob(a),))
    with pytest.raises(StoreError) as info:
        ptr.rehydrate(ctx_of(store), pid, "lines 257-260")
    assert info.value.code == "STORE_ERROR"


@pytest.mark.parametrize("big", [False, True])
def test_an_edited_chunk_is_a_store_error_not_edited_text(tmp_path, big):
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    text = NOVEL * 40 if big else NOVEL
    pid = put(store, text, "text")
    conn = store._conn()
    edited = conn.execute("SELECT text FROM original_chunks WHERE n = 0").fetchone()[0]
    edited = edited.replace("truth", "trutH", 1)
    conn.execute("UPDATE original_chunks SET text = ? WHERE n = 0", (edited,))
    for part in ("lines 1-3", None):
        with pytest.raises(StoreError):
            ptr.rehydrate(ctx_of(store), pid, part)
    with pytest.raises(StoreError):
        store.get_original("r", pid)


def test_a_pointer_row_sent_to_another_original_is_a_store_error(tmp_path):
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    pid = put(store, NOVEL, "text")
    put(store, DOC, "json")
    store._conn().execute(
        "UPDATE run_pointers SET sha256 = ? WHERE pointer_id = ?", (_sha(DOC), pid)
    )
    with pytest.raises(StoreError):
        ptr.rehydrate(ctx_of(store), pid, "lines 1-2")


# --- a small store, and every byte of it ---------------------------------------------


def small_store(folder: Path, monkeypatch: Any) -> tuple[str, dict[str, Any]]:
    """A store of one run (events, a thread, a json, a text and a diff original), its
    pages 512 bytes and its chunks 64 characters, so a sweep of every byte stays small."""
    monkeypatch.setattr(store_module, "CHUNK", 128)
    monkeypatch.setattr(ptr, "_BIG", 512)  # the text gets a line index
    monkeypatch.setattr(ptr, "_LINE_STEP", 16)  # of several blocks
    db = str(folder / "runs.db")
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA page_size=512")
    conn.execute("VACUUM")
    conn.close()
    store = SqliteRunStore(db)
    pipeline = Pipeline.from_dict(
        {"name": "p", "settings": {"entry_step_id": "ask"}, "steps": [{"id": "ask", "action": "x"}]}
    )
    store.create_run("r", pipeline, {"question": "who?"})
    text = "".join(f"line {n}: a truth.\n" for n in range(1, 81))
    doc = json.dumps({"query": "q", "results": [{"id": i, "t": f"x{i}"} for i in range(12)]})
    diff = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n@@ -9 +9 @@\n-c\n+d\n"
    pids = {
        kind: put(store, t, kind) for kind, t in (("text", text), ("json", doc), ("diff", diff))
    }
    thread = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    events = [
        {"seq": 1, "type": "RUN_STARTED", "step_id": None},
        {"seq": 2, "type": "STEP_FINISHED", "step_id": "ask", "tokens": 12},
        {
            "seq": 3,
            "type": "THREAD_COMPACTED",
            "step_id": "ask",
            "map": [
                {
                    "index": 1,
                    "role": "assistant",
                    "pointer_id": pids["text"],
                    "tokens_before": 9,
                    "tokens_after": 3,
                }
            ],
        },
    ]
    store.checkpoint(
        "r",
        position="ask",
        variables={"question": "who?", "answer": "a"},
        engine={"step_trace": ["ask"], "step_count": 1, "threads": {"t": thread}},
        events=events,
        status="completed",
    )
    store._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    originals = {pids["text"]: text, pids["json"]: doc, pids["diff"]: diff}
    slices = {
        pids["text"]: [None, "lines 1-2", "lines 15-33", "lines 80-80"],
        pids["json"]: [None, "$", "$.results[0]", "$.results[11].t", "$.query"],
        pids["diff"]: [None, "hunk 1", "hunk 2", "lines 2-3"],
    }
    expected = {
        (pid, part): originals[pid] if part is None else ptr.slice_text(originals[pid], part)
        for pid, parts in slices.items()
        for part in parts
    }
    return db, expected


def pages(db: str) -> list[tuple[str, int]]:
    """(table or index, page number) of every page of the store."""
    conn = sqlite3.connect(db)
    try:
        return [(n, p) for n, p in conn.execute("SELECT name, pageno FROM dbstat ORDER BY pageno")]
    finally:
        conn.close()


def read_everything(db: str, expected: dict[tuple[str, str | None], str]) -> str:
    """Every reader over a (damaged) copy: 'ok', or the code of the coded error it gave.

    A wrong slice or any exception that is not a coded error fails the test. `db`: a
    SQLite file, or a Postgres URL (test_pg_store_damage.py).
    """
    from runtime.engine.stores import open_run_store

    try:
        store = open_run_store(db, create=False)
    except StepRuntimeError as exc:
        return exc.code
    codes = set()
    ctx = ctx_of(store)
    for (pid, part), text in expected.items():
        try:
            got = ptr.rehydrate(ctx, pid, part)
        except StepRuntimeError as exc:
            assert exc.code in ("STORE_ERROR", "POINTER_UNKNOWN"), (exc.code, exc.message)
            codes.add(exc.code)
            continue
        assert got == text, f"a wrong slice: {pid} {part}"
    for read in (
        lambda: store.pointers("r"),
        lambda: store.threads("r"),
        lambda: store.runs(),
        lambda: store.load("r"),
        lambda: ptr.export(store, "r", with_text=True),
        lambda: _render(store),
    ):
        try:
            read()
        except StepRuntimeError as exc:
            codes.add(exc.code)
    store.close()
    return ",".join(sorted(codes)) or "ok"


def _render(store: SqliteRunStore) -> None:
    """What `runtime trace` prints: the listing, jsonl, --pointers and --threads."""
    events = store.events("r")
    tr.render_text(events, width=80)
    tr.to_jsonl(events)
    for fmt in ("text", "jsonl"):
        runs_cli._render_pointers(store, "r", events, fmt)
        runs_cli._render_threads(store.threads("r"), events, fmt, False)


def sweep(folder: Path, db: str, expected: dict[Any, str], chosen: list[int]) -> dict[str, int]:
    """Damage each chosen byte of the file (one at a time, inverted) and read everything."""
    original = Path(db).read_bytes()
    copy = folder / "damaged.db"
    outcomes: dict[str, int] = {}
    for at in chosen:
        if not copy.exists() or copy.stat().st_size != len(original):
            copy.write_bytes(original)
        with copy.open("r+b") as f:
            f.seek(at)
            f.write(bytes([original[at] ^ 0xFF]))
        stamp = copy.stat().st_mtime_ns
        code = read_everything(str(copy), expected)
        outcomes[code] = outcomes.get(code, 0) + 1
        for suffix in ("-wal", "-shm", "-journal"):
            Path(str(copy) + suffix).unlink(missing_ok=True)
        if copy.stat().st_mtime_ns != stamp:  # opening it ran a migration: start afresh
            copy.unlink()
            continue
        with copy.open("r+b") as f:
            f.seek(at)
            f.write(original[at : at + 1])
    return outcomes


def _bytes_of(db: str, names: set[str] | None, stride: int, offset: int = 0) -> list[int]:
    out = []
    for name, page in pages(db):
        if names is None or name in names:
            out.extend(range((page - 1) * 512 + offset % stride, page * 512, stride))
    return out


def test_a_damaged_byte_anywhere_is_never_a_wrong_slice_nor_a_traceback(tmp_path, monkeypatch):
    """The fast chunk: every 307th byte of every page."""
    db, expected = small_store(tmp_path, monkeypatch)
    assert read_everything(db, expected) == "ok"
    outcomes = sweep(tmp_path, db, expected, _bytes_of(db, None, 307))
    assert "STORE_ERROR" in ",".join(outcomes)  # the damage was seen, not only survived


POINTER_TABLES = {
    "originals",
    "original_chunks",
    "original_index",
    "run_pointers",
    "sqlite_autoindex_run_pointers_1",
}


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(4))
def test_every_byte_of_every_table_and_index(tmp_path, monkeypatch, chunk):
    """The slow chunks: every byte of the pages holding originals and pointers (where a
    damaged byte could become a wrong slice), every 5th byte of every other table's and
    index's pages (where it could become a traceback), spread over 4 chunks."""
    db, expected = small_store(tmp_path, monkeypatch)
    chosen = sorted(set(_bytes_of(db, POINTER_TABLES, 1)) | set(_bytes_of(db, None, 5)))
    sweep(tmp_path, db, expected, chosen[chunk::4])


def test_overwritten_pages_are_store_error_in_every_trace_command(tmp_path, monkeypatch):
    db, _ = small_store(tmp_path, monkeypatch)
    data = bytearray(Path(db).read_bytes())
    for name, page in pages(db):
        if name in ("events", "run_pointers", "originals", "run_threads"):
            data[(page - 1) * 512 + 8 : page * 512] = b"\xa5" * (512 - 8)
    Path(db).write_bytes(bytes(data))
    runner = CliRunner()
    for extra in (
        [],
        ["--pointers"],
        ["--pointers", "--format", "jsonl"],
        ["--threads"],
        ["--format", "jsonl"],
    ):
        done = runner.invoke(cli, ["trace", "r", "--store", db, *extra])
        assert done.exception is None or isinstance(done.exception, SystemExit), done.output
        assert done.exit_code != 0 and "STORE_ERROR" in done.output, (extra, done.output)
