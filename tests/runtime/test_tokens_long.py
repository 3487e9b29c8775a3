"""A long text is counted a megabyte at a time, exactly (issue 25 item 9: a 200 MB input's
token list took gigabytes when a context pack counted it whole)."""

from __future__ import annotations

import pytest

from runtime.context.tokens import TokenCounter, get_counter

LINES = [
    "It is a truth universally acknowledged, that a single man in possession of a fortune.",
    "    def count(self, text: str) -> int:  # indented code",
    "",
    "  ",
    "//a comment after a newline, and a path /usr/lib",
    "\u00e9t\u00e9 \u2014 \u4e2d\u6587 emoji \U0001f600",
]
TEXT = "\n".join(LINES[i % len(LINES)] + f" {i}" * (i % 3) for i in range(60_000))


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_a_long_text_is_counted_in_pieces_and_exactly(name):
    counter = get_counter(name)
    assert len(TEXT) > 2 * (1 << 20)
    whole = len(counter.encoding.encode_ordinary(TEXT))
    seen: list[int] = []

    class Recording:
        name = counter.encoding.name

        def encode_ordinary(self, text: str) -> list[int]:
            seen.append(len(text))
            return counter.encoding.encode_ordinary(text)

    assert TokenCounter(Recording()).count(TEXT) == whole
    assert len(seen) >= 3 and max(seen) < (1 << 20) + 10_000  # never the whole text at once
    assert sum(seen) == len(TEXT)
