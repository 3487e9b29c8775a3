"""block_id's fast path (the id line right after the header) finds what the full search
finds, for any text: the first `id:` line before the block's `text:` line, stripped."""

from __future__ import annotations

import random

from runtime.context.blocks import _ID_LINE, HEADER, block_id, format_block

PIECES = ["\n", "id: ", "id:", "text:", "\ntext:\n", " ", "a", "\r", "\t", "é", HEADER, "\x0b",
          "\x1c", "\u2028", "x"]  # fmt: skip


def searched(block: str) -> str | None:
    """The definition: the first `id: ` line before `\\ntext:\\n`, by the regex."""
    if not block.startswith(HEADER):
        return None
    end = block.find("\ntext:\n") if "\ntext:\n" in block else len(block)
    m = _ID_LINE.search(block, 0, end)
    return m.group(1).strip() if m else None


def test_the_fast_path_agrees_with_the_search_on_fuzzed_blocks():
    rng = random.Random(26)
    for _ in range(50_000):
        tail = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))
        block = HEADER + ("\nid: " if rng.random() < 0.5 else "") + tail
        assert block_id(block) == searched(block), repr(block)


def test_formatted_blocks_and_odd_ones():
    block = format_block({"id": " shop::Orders ", "path": "a.sql", "text": "id: other\n"})
    assert block_id(block) == "shop::Orders"
    assert block_id(HEADER + "\nid: \nid: second\ntext:\n") == "second"  # an empty id line
    assert block_id(HEADER + "\nid: last") == "last"  # no line end
    assert block_id(HEADER + "\npath: p\nid: late\ntext:\nid: text") == "late"
    assert block_id(HEADER + "\ntext:\nid: in the text") is None
    assert block_id("id: not a block") is None
