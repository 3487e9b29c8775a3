"""Pointers: ids, the block the model sees, the memory store and the export, pinned exactly.

Written against the survivors of the mutation run of runtime/context/pointers.py
(tests/mutation/mutants/pointers.toml, docs/testing.md): what the docs promise about a
pointer that no other test checked.
"""

from __future__ import annotations

import hashlib
import json
import sys
from array import array

import pytest
from pointer_support import ctx_of, put

from runtime.context import pointers as ptr
from runtime.context.tokens import get_counter
from runtime.errors import RunError, StoreError

TEXT = "".join(f"line {n}: Elizabeth walked on.\n" for n in range(1, 51))


def test_the_id_is_ptr_and_the_first_16_hex_digits_of_the_sha256():
    sha = hashlib.sha256(TEXT.encode("utf-8")).hexdigest()
    assert ptr.pointer_id_of(TEXT) == ("ptr-" + sha[:16], sha)


@pytest.mark.parametrize("suffix", ["0", "x", "\n", " "])
def test_an_id_with_anything_after_its_16_digits_is_not_an_id(suffix):
    store = ptr.MemoryPointerStore()
    pid = put(store, TEXT, "text")
    with pytest.raises(RunError, match="is not a pointer id") as info:
        ptr.rehydrate(ctx_of(store), pid + suffix)
    assert info.value.code == "POINTER_UNKNOWN"


@pytest.mark.parametrize(
    ("kind", "hint"),
    [
        ("json", 'slice="$.path[0]" or "lines A-B"'),
        ("diff", 'slice="hunk N" or "lines A-B"'),
        ("text", 'slice="lines A-B"'),
        ("log", 'slice="lines A-B"'),
    ],
)
def test_the_block_offers_the_slices_of_its_kind_and_states_the_original(kind, hint):
    store = ptr.MemoryPointerStore()
    pointer = ptr.make_pointer(store, "r", TEXT, kind, "the summary", 50)
    assert pointer.display_text == (
        f"[ELIDED {pointer.pointer_id}: {kind}, {len(TEXT):,} chars, 50 lines, summarised; "
        f"rehydrate this pointer_id for the exact text (optional {hint})]\n"
        f"the summary\n[/ELIDED {pointer.pointer_id}]"
    )
    assert pointer.rehydrate == f"rehydrate(pointer_id={pointer.pointer_id!r}, {hint})"
    assert (pointer.chars, pointer.lines, pointer.kind) == (len(TEXT), 50, kind)
    assert ptr.as_mapping(pointer)["chars"] == len(TEXT)


def test_a_compacted_message_states_the_originals_size():
    store = ptr.MemoryPointerStore()
    pointer = ptr.make_pointer(store, "r", TEXT, "text", "short", 50, short_for="assistant")
    assert pointer.display_text == (
        f"[ELIDED {pointer.pointer_id} assistant, {len(TEXT):,} chars: rehydrate it] short"
    )
    assert pointer.chars == len(TEXT)


@pytest.mark.parametrize("kind", ["text", "json", "diff"])
def test_header_tokens_are_those_of_a_block_with_a_stand_in_id(kind):
    counter = get_counter("cl100k_base")
    block = ptr.render("ptr-" + "0" * 16, kind, 123_456, 789, "")
    assert ptr.header_tokens(counter, kind, 123_456, 789) == counter.count(block)
    # A real id's 16 hex digits may take more tokens than the stand-in's (up to 18 more
    # over 2,000 ids): the count is of the frame, not of one block.
    real = ptr.render(ptr.pointer_id_of(TEXT)[0], kind, 123_456, 789, "")
    assert counter.count(real) >= counter.count(block)


def test_the_memory_store_lists_a_runs_pointers_in_id_order_and_exports_the_texts():
    store = ptr.MemoryPointerStore()
    texts = [f"original number {n}\n" for n in range(12)]
    pids = [put(store, text, "text") for text in texts]  # ids in no particular order
    assert pids != sorted(pids)
    rows = store.pointers("r")
    assert [r["pointer_id"] for r in rows] == sorted(pids)
    by_id = dict(zip(pids, texts, strict=True))
    assert all(r["chars"] == len(by_id[r["pointer_id"]]) for r in rows)
    exported = ptr.export(store, "r", with_text=True)
    assert [(r["pointer_id"], r["text"]) for r in exported] == sorted(by_id.items())
    assert "text" not in ptr.export(store, "r")[0]
    assert store.pointers("another run") == []


def _index_of(doc: str) -> array:
    a = array("q")
    a.frombytes(ptr.build_json_index(doc))
    return a


def _slice(doc: str, a: array, path: str) -> str:
    blob = a.tobytes() if sys.byteorder == "little" else None
    assert blob is not None
    return ptr._indexed_slice(
        ptr.JsonIndex(blob), lambda s, e: doc[s:e], path, ptr._parse_path(path)
    )


def test_a_child_container_past_the_stored_table_is_a_store_error():
    doc = json.dumps({"a": [1, 2], "b": {"c": 3}})
    a = _index_of(doc)
    records = a[2]
    _, _, root = ptr.JsonIndex(a.tobytes()).root()
    at = a[6 + 3 * root + 2]  # the root's members: crc, key, start, end, child
    for m in range(at, at + 5 * a[6 + 3 * root + 1], 5):
        a[m + 4] = records  # one past the table
    with pytest.raises(StoreError, match="names container"):
        _slice(doc, a, "$.b.c")


def test_a_key_offset_moved_onto_an_equal_string_elsewhere_is_a_store_error():
    # Member "y" made to look like "x": its crc and its key start moved onto the string
    # "x" (the value of "a"). Only the check that a key is followed by ':' tells.
    doc = '{"a": "x", "x": 2, "y": 3}'
    a = _index_of(doc)
    _, _, root = ptr.JsonIndex(a.tobytes()).root()
    at, count = a[6 + 3 * root + 2], a[6 + 3 * root + 1]
    members = [list(a[m : m + 5]) for m in range(at, at + 5 * count, 5)]
    y = next(m for m in members if doc[m[1] : m[1] + 3] == '"y"')
    x = next(m for m in members if doc[m[1] : m[1] + 3] == '"x"')
    y[0], y[1] = x[0], doc.index('"x"')
    x[0] = x[0] + 1  # the real "x" no longer has the crc searched for
    members.sort(key=lambda m: (m[0], m[1]))
    for k, m in enumerate(members):
        a[at + 5 * k : at + 5 * k + 5] = array("q", m)
    with pytest.raises(StoreError):
        _slice(doc, a, "$.x")  # it would be 3, y's value


def test_a_line_index_with_a_block_start_too_many_is_a_store_error():
    text = "".join(f"{n}\n" for n in range(1000))
    blob = ptr.build_line_index(text)
    with pytest.raises(StoreError, match="block starts"):
        ptr.LineIndex(blob + blob[-8:])


@pytest.mark.parametrize("part", ["lines 1-" + "9" * 16, "$[" + "9" * 16 + "]", "hunk " + "1" * 16])
def test_numbers_have_at_most_15_digits(part):
    store = ptr.MemoryPointerStore()
    pid = put(store, TEXT, "text")
    with pytest.raises(RunError, match="a number of 16 digits") as info:
        ptr.rehydrate(ctx_of(store), pid, part)
    assert info.value.code == "SLICE_INVALID"
