"""Rehydrate refuses an oversized slice from a bound, before reading it whole or encoding it.

A 50 MB single-line original asked for whole with `max_tokens: 2000` was read and
encoded whole before being refused (two minutes, 2.6 GB). No token of cl100k_base holds
more than 128 bytes (`max_token_bytes`), so a slice of more than 2,000 x 128 characters
is over the budget whatever it says: refused from the stored size, the stored offsets of
a JSON value, or while a lines slice is located piece by piece. These tests watch what
is read and what is encoded, not the clock.
"""

from __future__ import annotations

import json

import pytest
from slice_support import ctx_of, put, rehydrate_run, tool_reply, tool_run

from runtime.context import pointers as ptr
from runtime.context.tokens import TokenCounter, get_counter
from runtime.engine.store import SqliteRunStore

LINE = "x" * 3_000_000  # one line of 3 MB: a single block of its line index
BLOB = json.dumps({"meta": {"n": 1}, "blob": "y" * 3_000_000, "tail": [1, 2]})
BOUND = 2000 * 128


@pytest.fixture
def encoded(monkeypatch):
    """The length of every text the real counter encodes."""
    seen: list[int] = []
    real = TokenCounter.count

    def count(self, text):
        seen.append(len(text))
        return real(self, text)

    monkeypatch.setattr(TokenCounter, "count", count)
    return seen


class Watched:
    """A pointer store that records every read (and refuses to load an original whole)."""

    def __init__(self, store):
        self.store, self.reads = store, []

    def __getattr__(self, name):
        return getattr(self.store, name)

    def read_original(self, run_id, pointer_id, start, end):
        self.reads.append(end - start)
        return self.store.read_original(run_id, pointer_id, start, end)

    def get_original(self, run_id, pointer_id):
        raise AssertionError("the whole original was loaded")


def test_max_token_bytes_is_read_from_the_vocabulary():
    assert ptr.max_token_bytes(get_counter("cl100k_base")) == 128
    assert ptr.max_token_bytes(object()) is None  # no vocabulary: no bound


@pytest.mark.parametrize(
    ("text", "part"),
    [(LINE, None), (LINE, "lines 1-1"), (LINE + "\nend\n", "lines 1"), (BLOB, "$.blob")],
)
def test_an_oversized_slice_is_refused_before_it_is_read(tmp_path, text, part):
    store = Watched(SqliteRunStore(str(tmp_path / "runs.db")))
    pid = put(store.store, text, "json" if text is BLOB else "text")
    with pytest.raises(ptr.SliceTooLarge) as info:
        ptr.rehydrate(ctx_of(store), pid, part, max_tokens=2000, token_bytes=128)
    assert info.value.code == "REHYDRATE_OVER_BUDGET" and info.value.tokens > 2000
    assert sum(store.reads) <= BOUND + ptr._SCAN  # never the 3 MB


def test_a_slice_under_the_bound_is_read_exactly_from_a_long_block(tmp_path):
    text = "a" * 200_000 + "\nshort line\n" + "b" * 200_000  # block 1 holds all three
    store = Watched(SqliteRunStore(str(tmp_path / "runs.db")))
    pid = put(store.store, text, "text")
    got = ptr.rehydrate(ctx_of(store), pid, "lines 2-2", max_tokens=100, token_bytes=128)
    assert got == "short line\n"
    assert ptr.rehydrate(ctx_of(store), pid, "lines 2-3", max_tokens=2000, token_bytes=128) == (
        ptr.line_slice(text, 2, 3)
    )
    with pytest.raises(ptr.SliceTooLarge):
        ptr.rehydrate(ctx_of(store), pid, "lines 1-2", max_tokens=100, token_bytes=128)


@pytest.mark.parametrize(("text", "part"), [(LINE, None), (LINE, "lines 1-1"), (BLOB, "$.blob")])
def test_the_action_refuses_without_encoding_the_slice(tmp_path, encoded, text, part):
    kind = "json" if text is BLOB else "text"
    result = rehydrate_run(
        tmp_path, text, kind, max_tokens=2000, **({"part": part} if part else {})
    )
    assert result.status == "failed" and result.error.code == "REHYDRATE_OVER_BUDGET"
    assert "at least" in result.error.message and len(result.error.message) < 400
    assert max(encoded, default=0) <= BOUND  # it counted 3 MB before


def test_the_tool_refuses_without_encoding_the_slice(tmp_path, chat_server, encoded):
    pid = ptr.pointer_id_of(LINE)[0]
    arguments = json.dumps({"pointer_id": pid})
    chat_server.script = [{"raw": tool_reply(("c1", "rehydrate", arguments))}, {"reply": "ok"}]
    result = tool_run(tmp_path, chat_server.url, LINE, window=8192)
    assert result.status == "completed", result.error
    sent = chat_server.requests[1]["body"]["messages"][-1]["content"]
    assert sent.startswith("error CONTEXT_OVERFLOW: the result is at least ")
    assert max(encoded, default=0) <= 8192 * 128
