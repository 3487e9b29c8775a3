"""runtime/retrieval/fts_expr.py reads any text: a tree, never an exception, in bounded time,
and what the runtime writes parses as before."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.retrieval.fts_expr import parse, phrases

PIECES = ['"a"', '"b c"', '""""', "x", "AND", "OR", "NOT", "(", ")", ":", "name", "{body}", " "]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40), st.text(max_size=60))
def test_any_text_is_a_tree(pieces, noise):
    for text in (" ".join(pieces), noise, " ".join(pieces) + noise):
        tree = parse(text)
        assert tree[0] in ("or", "and", "not", "col", "phrase")
        list(phrases(tree))


def test_deep_nesting_and_long_input_stay_bounded():
    start = time.process_time()
    deep = parse("(" * 10_000 + '"x"' + ")" * 10_000)
    long = parse(" OR ".join(f'"w{i}"' for i in range(20_000)))
    assert len(list(phrases(long))) == 20_000 and list(phrases(deep)) == []
    assert time.process_time() - start < 30  # a bound on runaway work, not a speed test


def test_what_the_runtime_writes_parses_as_written():
    tree = parse('("basketservice" OR ("basket" AND "service")) AND name : ("x" NOT "y")')
    assert list(phrases(tree)) == [
        ("basketservice", None), ("basket", None), ("service", None), ("x", "name"), ("y", "name")
    ]  # fmt: skip
    assert parse('{strategy} : ("a" OR "b")') == (
        "col", "strategy", ("or", [("phrase", "a"), ("phrase", "b")])
    )  # fmt: skip
    assert parse('"say ""hi"""') == ("phrase", 'say "hi"')
    assert parse('"a" NOT') == ("not", ("phrase", "a"), ("or", []))
