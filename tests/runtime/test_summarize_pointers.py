"""Pointer slices are exact: lines, JSON paths and hunks give back the original's own text."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from pointer_support import paths

from runtime.context import pointers as ptr
from runtime.context.pointers import hunk_slice, json_slice, line_slice, slice_text
from runtime.errors import RunError

REAL = Path(__file__).parents[1] / "data" / "summaries"


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def test_every_json_path_slices_to_its_value_scanned_or_indexed():
    doc = real("eshop_catalog.json")
    everything = list(paths(json.loads(doc)))
    assert len(everything) > 600
    index = ptr.build_json_index(doc)
    rng = random.Random(3)
    for path, value in rng.sample(everything, 300) + everything[-3:]:
        text = json_slice(doc, path)
        assert json.loads(text) == value
        assert doc.find(text) >= 0  # the original's own bytes, not a re-serialisation
        assert json_slice(doc, path, index) == text  # the offset index changes nothing


def test_odd_keys_whitespace_and_escapes_are_sliced_exactly():
    doc = '{ "a b" : [ 1 ,\n  {"x\\"y": "z\\u00e9"} , [ ] ] , "n":null }'
    assert json_slice(doc, '$["a b"][1]') == '{"x\\"y": "z\\u00e9"}'
    assert json_slice(doc, '$["a b"][1]["x\\"y"]') == '"z\\u00e9"'
    assert json_slice(doc, '$["a b"][2]') == "[ ]"
    assert json_slice(doc, "$.n") == "null"
    with pytest.raises(RunError, match="past the array's 3 item"):
        json_slice(doc, '$["a b"][3]')
    with pytest.raises(RunError, match="past the array's 3 item"):
        json_slice(doc, '$["a b"][3]', ptr.build_json_index(doc))  # from the index too


def test_random_line_ranges_are_byte_identical():
    for name in ("dpkg.log", "eshop_README.md", "eshop_aaf1857.diff"):
        text = real(name)
        lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
        rng = random.Random(name)
        for _ in range(200):
            a = rng.randint(1, len(lines))
            b = rng.randint(a, len(lines))
            got = slice_text(text, f"lines {a}-{b}")
            assert got == "".join(ln + "\n" for ln in lines[a - 1 : b])[: len(got)]
            assert got.endswith("\n") and got.split("\n")[:-1] == lines[a - 1 : b]
            start = sum(len(ln) + 1 for ln in lines[: a - 1])
            assert text[start : start + len(got)] == got
        assert line_slice(text, 1, len(lines)) == text  # the whole text, last newline included
        with pytest.raises(RunError, match=f"lines 1-{len(lines)}"):
            line_slice(text, 1, len(lines) + 1)


def test_hunks_cover_the_diff_in_order_and_exactly():
    diff = real("eshop_aaf1857.diff")
    hunks = [hunk_slice(diff, n) for n in range(1, 20)]
    assert all(h.startswith("@@ ") for h in hunks)
    pos = 0
    for h in hunks:
        at = diff.index(h, pos)
        pos = at + len(h)
    with pytest.raises(RunError, match="19 hunk"):
        hunk_slice(diff, 20)
    assert sum(h.count("\n+") + h.startswith("+") for h in hunks) >= 206


def test_pointer_ids_are_content_addressed_and_stored_once():
    store = ptr.MemoryPointerStore()
    a = ptr.make_pointer(store, "r", "same text", "text", "s", 1)
    b = ptr.make_pointer(store, "r2", "same text", "text", "other summary", 1)
    assert a.pointer_id == b.pointer_id and a.sha256 == b.sha256
    assert len(store._texts) == 1
    assert store.get_original("r", a.pointer_id) == ("text", "same text")
    assert store.get_original("r3", a.pointer_id) is None  # runs do not see each other's
    assert a.display_text.startswith(f"[ELIDED {a.pointer_id}: text, 9 chars, 1 lines")
    assert a.display_text.endswith(f"s\n[/ELIDED {a.pointer_id}]")
