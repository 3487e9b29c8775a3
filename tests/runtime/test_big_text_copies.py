"""The helpers that stand in for whole copies of a large text (issue 25 item 9) give the
answers the copies gave: UTF-8 size, content hash, message equality."""

from __future__ import annotations

import hashlib

import pytest

from runtime.context import packs
from runtime.context import policy as pol

MIXED = ("plain ascii line\n" * 40_000) + "\u00e9\u2014\u4e2d\U0001f600" * 30_000 + "end"


@pytest.mark.parametrize("text", ["", "ascii only", MIXED, MIXED[: (1 << 20) + 1]])
def test_utf8_size_and_content_hash_equal_the_whole_encoding(text):
    raw = text.encode("utf-8")
    assert pol._utf8_size(text) == len(raw)
    assert packs.content_hash(text) == "sha256:" + hashlib.sha256(raw).hexdigest()


def test_a_message_is_compared_piece_by_piece():
    big = "x" * 100_000
    message = pol.PromptMessage("user", ["q\n\n", pol.Segment("doc", big), "!"])
    assert message.is_content("q\n\n" + big + "!")
    assert message.content() == "q\n\n" + big + "!"
    for other in ("q\n\n" + big, "q\n\n" + big + "!!", "q\n\n" + big[:-1] + "y!", "", "q"):
        assert not message.is_content(other)
    assert pol.PromptMessage("user", []).is_content("")


def test_the_inputs_depth_scan_keeps_no_memory_per_escape():
    """json_depth's string pattern is possessive: a string with many escapes (every line
    of a large document) keeps no backtracking point per escape (a 200 MB input: 266 MiB)."""
    import json
    import tracemalloc

    from runtime.cli._inputs import json_depth

    text = json.dumps({"doc": "line\n" * 200_000, "nested": [[{"a": "b\\"}]]})
    tracemalloc.start()
    try:
        assert json_depth(text, 64) == 4
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(text) // 4
