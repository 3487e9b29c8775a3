"""The line index of a big text original: a `lines A-B` slice reads only the blocks it spans.

Every slice through the index must be the very text `line_slice` cuts from the whole
original (the same line numbers, the same line endings, the same errors); the index is
stored with the original (memory and SQLite), built late for originals stored before it,
read from disk in a new process, and a damaged index is reported, never followed.
"""

from __future__ import annotations

import lzma
import random
import sqlite3
from pathlib import Path
from typing import Any

import pointer_support as support
import pytest
from pointer_support import ctx_of

from runtime.context import pointers as ptr
from runtime.context.pointers import LineIndex, build_line_index, line_slice
from runtime.engine.store import MIGRATIONS, SqliteRunStore, _index_crc
from runtime.errors import RunError, StoreError

DATA = Path(__file__).parents[1] / "data"
with lzma.open(DATA / "long_inputs" / "pride_and_prejudice.txt.xz", "rt") as _f:
    NOVEL = _f.read()
STEP = ptr._LINE_STEP


def total_lines(text: str) -> int:
    return len(text.split("\n")) - (1 if text.endswith("\n") else 0)


def put(store: Any, text: str, kind: str = "text") -> str:
    return support.put(store, text, kind)


TEXTS = {
    "novel": NOVEL,
    "novel without its last newline": NOVEL.rstrip("\n"),
    "crlf lines": "row\r\n" * 20_000,
    "only newlines": "\n" * 70_000,
    "a tail without newline": "ab\n" * 30_000 + "tail",
    "one long line": "y" * 70_000,
    f"exactly {STEP} lines": ("z" * 300 + "\n") * STEP,
    f"{STEP} lines and one": ("z" * 300 + "\n") * STEP + "last",
}


FAST = {"novel", f"exactly {STEP} lines", f"{STEP} lines and one"}


@pytest.mark.parametrize(
    "name",
    [
        n if n in FAST else pytest.param(n, marks=(pytest.mark.slow, pytest.mark.pins))
        for n in sorted(TEXTS)
    ],
)
def test_every_slice_through_the_index_equals_the_slice_of_the_whole_text(name, monkeypatch):
    text = TEXTS[name]
    assert len(text) >= ptr._BIG  # big enough to be indexed
    store = ptr.MemoryPointerStore()
    pid = put(store, text)
    assert store.get_index("r", pid)[1] == build_line_index(text)
    monkeypatch.setattr(store, "get_original", None)  # a lines slice never loads the whole text
    total = total_lines(text)
    rng = random.Random(name)
    edges = [1, 2, STEP - 1, STEP, STEP + 1, 2 * STEP, 2 * STEP + 1, total - 1, total]
    cases = {(a, b) for a in edges for b in edges if 1 <= a <= b <= total}
    for _ in range(200):
        a = rng.randint(1, total)
        cases.add((a, min(total, a + rng.choice([0, 1, 5, STEP, 3 * STEP]))))
    for a, b in sorted(cases):
        assert ptr.rehydrate(ctx_of(store), pid, f"lines {a}-{b}") == line_slice(text, a, b), (a, b)
    assert ptr.rehydrate(ctx_of(store), pid, f"line {total}") == line_slice(text, total, total)


@pytest.mark.parametrize("first,last", [(0, 1), (5, 4), (1, None), (None, None)])
def test_out_of_range_is_the_same_coded_error_as_without_the_index(first, last):
    text = NOVEL
    total = total_lines(text)
    first = total + 1 if first is None else first
    last = total + 1 if last is None else last
    part = f"lines {first}-{last}"
    with pytest.raises(RunError) as without:
        line_slice(text, first, last, part)
    store = ptr.MemoryPointerStore()
    pid = put(store, text)
    with pytest.raises(RunError) as through:
        ptr.rehydrate(ctx_of(store), pid, part)
    assert through.value.code == "SLICE_INVALID"
    assert str(through.value) == str(without.value)
    assert f"the text has lines 1-{total}" in str(through.value)


def test_small_texts_and_json_originals_get_no_line_index():
    store = ptr.MemoryPointerStore()
    small = "a\nb\n" * 100
    assert store.get_index("r", put(store, small))[1] is None
    assert ptr.rehydrate(ctx_of(store), put(store, small), "lines 2-3") == "b\na\n"
    doc = "[" + ",\n".join(str(i) for i in range(20_000)) + "]"
    pid = put(store, doc, kind="json")
    assert not ptr.is_line_index(store.get_index("r", pid)[1])
    assert ptr.rehydrate(ctx_of(store), pid, "lines 2-3") == "1,\n2,\n"
    assert ptr.rehydrate(ctx_of(store), pid, "$[19999]") == "19999"


def test_a_json_path_into_a_line_indexed_text_reads_it_as_a_document():
    text = '{"a": [1, 2, 3], "pad": [' + ",\n".join(["0"] * 40_000) + "]}\n"
    store = ptr.MemoryPointerStore()
    pid = put(store, text)
    assert ptr.is_line_index(store.get_index("r", pid)[1])
    # The text's value at the path, not a line index read as JSON offsets.
    assert ptr.rehydrate(ctx_of(store), pid, "$.a[1]") == ptr.json_slice(text, "$.a[1]") == "2"
    # A JSON value followed by more text is no JSON document (issue 24): no path answers.
    log = '{"a": [1, 2, 3]}\n' + "x\n" * 40_000
    pid = put(store, log)
    with pytest.raises(RunError, match="not valid JSON") as info:
        ptr.rehydrate(ctx_of(store), pid, "$.a[1]")
    assert info.value.code == "SLICE_INVALID"


def test_the_sqlite_store_keeps_the_line_index_and_a_new_process_seeks(tmp_path):
    db = str(tmp_path / "runs.db")
    store = SqliteRunStore(db)
    pid = put(store, NOVEL)
    assert ptr.is_line_index(store.get_index("r", pid)[1])
    store.close()
    parts = ["lines 1-3", "lines 5000-5040", "lines 13000-13100"]
    out = support.slices_in_a_new_process(db, pid, parts)
    assert out == [
        line_slice(NOVEL, 1, 3),
        line_slice(NOVEL, 5000, 5040),
        line_slice(NOVEL, 13000, 13100),
    ]


def test_an_original_stored_before_line_indexes_is_indexed_on_its_first_lines_slice(tmp_path):
    db = str(tmp_path / "old.db")
    old = sqlite3.connect(db, isolation_level=None)
    old.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    for name, fn in MIGRATIONS[:5]:  # m001-m005: originals whole in one row, no line index
        fn(old)
        old.execute("INSERT INTO migrations VALUES (?, 0)", (name,))
    pid, sha = ptr.pointer_id_of(NOVEL)
    old.execute("INSERT INTO originals VALUES (?, ?)", (sha, NOVEL))
    old.execute("INSERT INTO run_pointers VALUES ('r', ?, ?, 'text')", (pid, sha))
    old.close()
    store = SqliteRunStore(db)
    assert store.get_index("r", pid) == ("text", None)
    got = ptr.rehydrate(ctx_of(store), pid, "lines 700-720")  # builds and saves the index
    assert got == line_slice(NOVEL, 700, 720)
    assert store.get_index("r", pid)[1] == build_line_index(NOVEL)
    reopened = SqliteRunStore(db, create=False)
    reopened.get_original = None  # type: ignore[method-assign]  # the next slice seeks
    assert ptr.rehydrate(ctx_of(reopened), pid, "lines 700-720") == got


def test_a_damaged_line_index_is_detected():
    blob = build_line_index(NOVEL)
    with pytest.raises(StoreError, match="block starts"):
        LineIndex(blob[:-8])  # a block start missing
    with pytest.raises(StoreError, match="not one"):
        LineIndex(b"\0" * 32)


@pytest.mark.parametrize("cut", [1, 7, 12])
def test_a_torn_stored_index_is_a_store_error_not_a_traceback(tmp_path, cut):
    """An index blob cut mid-number (a damaged store) is STORE_ERROR, for either kind."""
    doc = "[" + ",".join(str(i) for i in range(20_000)) + "]"
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    for text, kind, part in ((NOVEL, "text", "lines 3-4"), (doc, "json", "$[5]")):
        pid = put(store, text, kind)
        blob = store.get_index("r", pid)[1]
        sha = ptr.pointer_id_of(text)[1]
        store._conn().execute(
            "UPDATE original_index SET offsets = ? WHERE sha256 = ?", (blob[:-cut], sha)
        )
        with pytest.raises(StoreError, match="fails its checksum"):  # the stored CRC (m008)
            ptr.rehydrate(ctx_of(store), pid, part)
        # With its checksum made to match, the index's own checks still refuse it.
        store._conn().execute(
            "UPDATE original_index SET crc = ? WHERE sha256 = ?",
            (_index_crc(sha, blob[:-cut]), sha),
        )
        with pytest.raises(StoreError, match="not whole int64s"):
            ptr.rehydrate(ctx_of(store), pid, part)
