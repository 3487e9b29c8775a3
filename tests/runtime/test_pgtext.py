"""runtime/net/pgtext.py: the escape that lets Postgres text hold NUL is a bijection."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from runtime.net.pgtext import ESC, escape, unescape, unescape_bytes

# Text dense in what matters: NUL, the escape, and the letters that follow it.
TEXT = st.text(alphabet=st.sampled_from(["\x00", ESC, "0", "e", "a", "é", "\n"]), max_size=40)


@given(TEXT)
def test_escape_round_trips_and_stores_no_nul(text):
    stored = escape(text)
    assert "\x00" not in stored
    assert unescape(stored) == text
    assert unescape_bytes(stored.encode()) == text.encode()


@given(TEXT, TEXT)
def test_different_texts_are_stored_differently(a, b):
    if a != b:
        assert escape(a) != escape(b)


def test_plain_text_is_stored_as_it_is():
    assert escape("plain é text") == "plain é text"
    assert escape("a\x00b") == f"a{ESC}0b" and escape(ESC) == f"{ESC}e"
