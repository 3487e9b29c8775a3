"""The offset index of a JSON original: a slice seeks to stored offsets, exactly, and survives.

Every slice through the index must be the very text scanning finds and the value
`json.loads` navigation finds; the index is stored with the original (memory and SQLite),
built late for originals stored before migration m005, read from disk in a new process,
and a damaged offset is reported, never followed into the wrong text.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import sys
from typing import Any

import pointer_support as support
import pytest
from pointer_support import ctx_of, paths

from runtime.context import pointers as ptr
from runtime.context.pointers import JsonIndex, build_json_index, json_slice
from runtime.engine.store import CHUNK, MIGRATIONS, SqliteRunStore, _index_crc
from runtime.errors import RunError, StoreError

ODD = ["a]b", 'q"uo\\te', "{x}", "é ü ß", "😀 emoji", "tab\tnew\nline", "[", "", "a,b:c"]


def random_value(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.35:
        return rng.choice(
            [
                rng.randint(-(10**6), 10**6),
                rng.random() * 1e3,
                True,
                False,
                None,
                rng.choice(ODD) + str(rng.randint(0, 9)),
            ]
        )
    if roll < 0.65:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 7))]
    keys = [
        rng.choice([*ODD, "id", "name", "items", "k"]) + str(i) for i in range(rng.randint(0, 7))
    ]
    return {k: random_value(rng, depth + 1) for k in keys}


def dumps(value: Any, rng: random.Random) -> str:
    """The value written one of several ways: compact, pretty, ASCII-escaped, odd blanks."""
    style = rng.randint(0, 3)
    if style == 0:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if style == 1:
        return json.dumps(value, indent=2, ensure_ascii=False)
    if style == 2:
        return json.dumps(value)  # \u escapes
    text = json.dumps(value, indent="\t", separators=(" ,\r\n ", " : "), ensure_ascii=False)
    return "\n \t" + text + " \r\n"


def documents(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        root: Any = random_value(rng, 0)
        if i % 3 == 0:
            root = {"query": "q", "results": [random_value(rng, 2) for _ in range(40)]}
        elif i % 3 == 1:
            root = [random_value(rng, 1) for _ in range(30)]  # more than _DIRECT members
        out.append(dumps(root, rng))
    return out


def check_every_path(doc: str, index: bytes) -> int:
    value = json.loads(doc)
    count = 0
    for path, expected in paths(value):
        scanned = json_slice(doc, path)
        seeked = json_slice(doc, path, index)
        assert seeked == scanned, path
        assert json.loads(seeked) == expected, path
        assert doc.find(seeked) >= 0, path
        count += 1
    return count


SLOW_PINS = (pytest.mark.slow, pytest.mark.pins)  # docs/testing.md: the fast subset keeps one


@pytest.mark.parametrize(
    "big,docs",
    [
        (24, slice(0, 20)),
        pytest.param(24, slice(20, 60), marks=SLOW_PINS),
        pytest.param(256, slice(0, 60), marks=SLOW_PINS),
        pytest.param(ptr._BIG, slice(0, 60), marks=SLOW_PINS),
    ],
)
def test_indexed_slices_equal_scanned_slices_and_json_loads_navigation(monkeypatch, big, docs):
    """60 random documents per index threshold; the fast subset checks the first 20 at 24."""
    # A small _BIG indexes containers at every depth, so the seeking paths are all exercised.
    monkeypatch.setattr(ptr, "_BIG", big)
    total = 0
    for doc in documents(60, seed=big)[docs]:
        total += check_every_path(doc, build_json_index(doc))
    assert total > 50 * (docs.stop - docs.start)


def test_scalar_and_empty_roots():
    for doc in ["17", ' "x[y]" ', "null", "[]", "{}", " [ ] ", '{"a": {}}', "[[], [[]]]"]:
        index = build_json_index(doc)
        check_every_path(doc, index)
        assert json_slice(doc, "$", index) == doc.strip()


def test_first_last_and_out_of_range_are_coded_errors():
    doc = json.dumps({"results": [{"id": i} for i in range(100)], "n": 1}, indent=1)
    index = build_json_index(doc)
    assert json_slice(doc, "$.results[0]", index) == '{\n   "id": 0\n  }'
    assert json.loads(json_slice(doc, "$.results[99]", index)) == {"id": 99}
    assert json.loads(json_slice(doc, "$.results[99].id", index)) == 99
    cases = [
        ("$.results[100]", "$.results[100]: index 100 is past the array's 100 item(s)"),
        ("$.results[100].id", "$.results[100]: index 100 is past the array's 100 item(s)"),
        ("$.nothing", "$.nothing: no key 'nothing'"),
        ("$.results.id", "$.results.id: .id names a key of something that is not an object"),
        ("$[0]", "$[0]: [0] indexes something that is not an array"),
        ("$.n[0]", "$.n[0]: [0] indexes something that is not an array"),
        ("$.results[5].nope", "no key 'nope'"),
    ]
    for path, why in cases:
        for idx in (index, None):
            with pytest.raises(RunError, match=re.escape(why)) as e:
                json_slice(doc, path, idx)
            assert e.value.code == "SLICE_INVALID"


def test_many_keys_are_found_through_the_crc_order_and_the_first_duplicate_wins():
    members = ", ".join(f'"k{i}": {i}' for i in range(500))
    doc = '{"dup": "first", ' + members + ', "dup": "second"}'
    index = build_json_index(doc)
    for i in range(500):
        assert json_slice(doc, f"$.k{i}", index) == str(i)
    # Scanning stops at the first "dup"; the index keeps the same answer.
    assert json_slice(doc, "$.dup", index) == json_slice(doc, "$.dup") == '"first"'
    with pytest.raises(RunError, match="no key 'k500'"):
        json_slice(doc, "$.k500", index)


def containers(index: bytes) -> int:
    return JsonIndex(index).a[2]


def test_what_is_indexed_root_first_members_and_big_containers(monkeypatch):
    monkeypatch.setattr(ptr, "_BIG", 40)
    small = [[i] for i in range(20)]
    # The root and its first _DIRECT (16) members; the other small ones are not indexed.
    assert containers(build_json_index(json.dumps(small))) == 1 + ptr._DIRECT
    # A member past the first 16 is indexed when it is _BIG characters or more, not less.
    exact = ["x" * 36]
    assert len(json.dumps(exact)) == 40
    doc = json.dumps([*small, exact])
    assert containers(build_json_index(doc)) == 1 + ptr._DIRECT + 1
    doc = json.dumps([*small, ["x" * 35]])  # 39 characters
    assert containers(build_json_index(doc)) == 1 + ptr._DIRECT


def test_a_slice_reads_only_around_the_value():
    doc = json.dumps(
        {"query": "q", "results": [{"id": i, "body": "b" * 700} for i in range(6000)]},
        indent=1,
    )
    index = build_json_index(doc)
    read: list[tuple[int, int]] = []

    def reader(start: int, end: int) -> str:
        read.append((start, end))
        return doc[start:end]

    steps: list[str | int] = ["results", 3000, "id"]
    got = ptr._indexed_slice(JsonIndex(index), reader, "$.results[3000].id", steps)
    assert got == "3000"
    # The "results" key and the item (with a few characters before it, checked to be a
    # value's start), nothing like the 4 MB document.
    assert sum(e - s for s, e in read) < 1000 + 2 * ptr._LOOKBACK
    item = doc[read[-1][0] : read[-1][1]]  # the item, then scanned for "id"
    assert '"id": 3000' in item and '"id": 2999' not in item and '"id": 3001' not in item


BIG_DOC = json.dumps(
    {"query": "q", "results": [{"id": i, "t": "é[" + "x" * (i % 50)} for i in range(4000)]},
    indent=1,
    ensure_ascii=False,
)


def put(store: Any, text: str, kind: str = "json") -> str:
    return support.put(store, text, kind)


def test_the_memory_store_keeps_the_index_and_slices_through_it(monkeypatch):
    store = ptr.MemoryPointerStore()
    built: list[str] = []
    real_build = ptr.build_json_index
    monkeypatch.setattr(ptr, "build_json_index", lambda t: built.append(t) or real_build(t))
    pid = put(store, BIG_DOC)
    put(store, BIG_DOC)  # the same original again: indexed once
    assert len(built) == 1
    kind, index = store.get_index("r", pid)
    assert kind == "json" and index is not None
    monkeypatch.setattr(store, "get_original", None)  # a JSON path never loads the whole text
    got = ptr.rehydrate(ctx_of(store), pid, "$.results[3999]")
    assert json.loads(got) == json.loads(BIG_DOC)["results"][3999]


def test_the_sqlite_store_keeps_index_and_chunks_and_a_new_process_seeks(tmp_path):
    db = str(tmp_path / "runs.db")
    store = SqliteRunStore(db)
    pid = put(store, BIG_DOC)
    text_pid = put(store, "not json [", kind="text")
    conn = store._conn()
    assert conn.execute("SELECT count(*) FROM original_index").fetchone()[0] == 1
    sha = ptr.pointer_id_of(BIG_DOC)[1]
    chunks = [
        r[0]
        for r in conn.execute(
            "SELECT text FROM original_chunks WHERE sha256 = ? ORDER BY n", (sha,)
        )
    ]
    assert "".join(chunks) == BIG_DOC and len(chunks) == -(-len(BIG_DOC) // CHUNK)
    assert store.get_index("r", text_pid) == ("text", None)
    assert store.get_index("r", "ptr-0123456789abcdef") is None
    for start, end in [(0, 1), (CHUNK - 3, CHUNK + 5), (len(BIG_DOC) - 7, len(BIG_DOC))]:
        assert store.read_original("r", pid, start, end) == BIG_DOC[start:end]
    store.close()
    # A new process: nothing in memory; the index comes from disk and no whole text is read.
    parts = [f"$.results[{i}].t" for i in (0, 1234, 3999)]
    out = support.slices_in_a_new_process(db, pid, parts)
    assert out == [json_slice(BIG_DOC, part) for part in parts]


def old_store(db: str, text: str, kind: str = "json") -> str:
    """A store as m001-m004 wrote it, holding one original."""
    old = sqlite3.connect(db, isolation_level=None)
    old.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    for name, fn in MIGRATIONS[:4]:
        fn(old)
        old.execute("INSERT INTO migrations VALUES (?, 0)", (name,))
    pid, sha = ptr.pointer_id_of(text)
    old.execute("INSERT INTO originals VALUES (?, ?)", (sha, text))
    old.execute("INSERT INTO run_pointers VALUES ('r', ?, ?, ?)", (pid, sha, kind))
    old.close()
    return pid


def test_an_old_store_is_migrated_and_indexed_on_its_first_slice(tmp_path):
    db = str(tmp_path / "old.db")
    pid = old_store(db, BIG_DOC)
    store = SqliteRunStore(db)
    names = [r[0] for r in store._conn().execute("SELECT name FROM migrations ORDER BY name")]
    assert "m005_original_index" in names and len(names) == len(MIGRATIONS)
    assert store.get_index("r", pid) == ("json", None)
    got = ptr.rehydrate(ctx_of(store), pid, "$.results[2000]")  # builds and saves the index
    assert got == json_slice(BIG_DOC, "$.results[2000]")
    kind, index = store.get_index("r", pid)
    assert kind == "json" and index == build_json_index(BIG_DOC)
    reopened = SqliteRunStore(db, create=False)
    reopened.get_original = None  # type: ignore[method-assign]  # the next slice seeks
    assert ptr.rehydrate(ctx_of(reopened), pid, "$.results[2000]") == got


def test_an_old_original_that_is_not_json_is_a_coded_slice_error(tmp_path):
    db = str(tmp_path / "old.db")
    pid = old_store(db, '{"a": [1, 2', kind="json")
    with pytest.raises(RunError, match="not valid JSON") as e:
        ptr.rehydrate(ctx_of(SqliteRunStore(db)), pid, "$.a[0]")
    assert e.value.code == "SLICE_INVALID"
    # A text original is sliced by scanning, as before indexes.
    store = ptr.MemoryPointerStore()
    tid = put(store, '{"a": [1, 2]}', kind="text")
    assert store.get_index("r", tid) == ("text", None)
    assert ptr.rehydrate(ctx_of(store), tid, "$.a[1]") == "2"


def damage(store: SqliteRunStore, pid: str, at: int, delta: int) -> None:
    """Move one stored offset, and make the index's checksum (m008) match again: the
    index's own checks behind the checksum must still catch it."""
    conn = store._conn()
    (sha, blob) = conn.execute("SELECT sha256, offsets FROM original_index").fetchone()
    a = JsonIndex(blob).a
    a[at] += delta
    if sys.byteorder == "big":
        a.byteswap()
    conn.execute(
        "UPDATE original_index SET offsets = ?, crc = ?",
        (a.tobytes(), _index_crc(sha, a.tobytes())),
    )


def item_slot(blob: bytes, item: int) -> int:
    """Where the start of item `item` of $.results is in the index's int64 array."""
    index = JsonIndex(blob)
    _, _, root = index.root()
    _kind, count, at = index.container(root)
    a = index.a
    for m in range(at, at + 5 * count, 5):
        if a[m + 4] >= 0 and index.container(a[m + 4])[1] == 4000:
            return index.container(a[m + 4])[2] + 3 * item
    raise AssertionError("no results array")


@pytest.mark.parametrize("delta", [1, -1, 2, 40])
def test_a_damaged_stored_offset_is_detected(tmp_path, delta):
    db = str(tmp_path / "runs.db")
    store = SqliteRunStore(db)
    pid = put(store, BIG_DOC)
    (blob,) = store._conn().execute("SELECT offsets FROM original_index").fetchone()
    slot = item_slot(blob, 1500)
    good = ptr.rehydrate(ctx_of(store), pid, "$.results[1500]")
    damage(store, pid, slot, delta)
    for path in ("$.results[1500]", "$.results[1500].t"):  # the value, or scanned inside
        with pytest.raises(StoreError, match=f"offset index of {pid} disagrees") as e:
            ptr.rehydrate(ctx_of(store), pid, path)
        assert e.value.code == "STORE_ERROR"
    assert ptr.rehydrate(ctx_of(store), pid, "$.results[1499]") == json_slice(
        BIG_DOC, "$.results[1499]"
    )
    damage(store, pid, slot, -delta)
    assert ptr.rehydrate(ctx_of(store), pid, "$.results[1500]") == good


def test_a_damaged_key_offset_or_missing_chunk_is_detected(tmp_path):
    db = str(tmp_path / "runs.db")
    store = SqliteRunStore(db)
    pid = put(store, BIG_DOC)
    (blob,) = store._conn().execute("SELECT offsets FROM original_index").fetchone()
    index = JsonIndex(blob)
    _, _, root = index.root()
    _, count, at = index.container(root)
    assert count == 2
    for m in range(at, at + 10, 5):  # shift both key starts: neither is read as a key
        damage(store, pid, m + 1, 3)
    with pytest.raises(StoreError, match="no key"):
        ptr.rehydrate(ctx_of(store), pid, "$.results[0]")
    store._conn().execute("DELETE FROM original_index")
    store.put_index("r", pid, BIG_DOC, blob)  # the index written again
    assert ptr.rehydrate(ctx_of(store), pid, "$.results[0]") == json_slice(BIG_DOC, "$.results[0]")
    # The chunks are the original's only copy (m008): one lost is STORE_ERROR, never text.
    store._conn().execute("DELETE FROM original_chunks WHERE n = 3")
    with pytest.raises(StoreError, match="chunk 3 of its original is missing"):
        store.read_original("r", pid, 2 * CHUNK, 4 * CHUNK)
    with pytest.raises(StoreError, match="chunk 3 of its original is missing"):
        store.get_original("r", pid)


def test_a_start_moved_inside_a_value_or_past_the_text_is_detected():
    doc = '{"n": [10, 2000, "a]b", 7], "pad": "' + "p" * 300 + '"}'
    index = build_json_index(doc)
    blob = JsonIndex(index)
    _, _, root = blob.root()
    _, _, at = blob.container(root)
    numbers = next(
        blob.a[m + 4] for m in range(at, at + 10, 5) if blob.a[m + 4] >= 0
    )  # the "n" array's container
    _, count, items = blob.container(numbers)
    assert count == 4

    def damaged(slot: int, delta: int) -> bytes:
        a = JsonIndex(index).a
        a[slot] += delta
        if sys.byteorder == "big":
            a.byteswap()
        return a.tobytes()

    assert json_slice(doc, "$.n[1]", index) == "2000"
    # "2000" moved by one is "000", a value that ends where "2000" did: still refused.
    for slot, delta, path in [(items + 3, 1, "$.n[1]"), (items + 6, 1, "$.n[2]")]:
        with pytest.raises(StoreError, match="no value starts there"):
            json_slice(doc, path, damaged(slot, delta))
    with pytest.raises(StoreError, match="at char 11: the value ends at 15, not 16"):
        json_slice(doc, "$.n[1]", damaged(items + 4, 1))  # its end moved past the comma
    with pytest.raises(StoreError, match="outside its"):
        json_slice(doc, "$.n[3]", damaged(items + 10, len(doc)))
