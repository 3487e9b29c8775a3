"""The citation parser and the claim rules on hostile answers and prompts: megabytes of
pathological text and random noise give a verdict of the documented shape, never a
traceback, and lists stay bounded."""

from __future__ import annotations

import random

import pytest

from runtime.models.citations import MAX_LISTED, shown_record, verify

NODE = "eshop::main::procedure::dbo.usp_PlaceOrder"
SHOWN = shown_record(
    [{"role": "user", "content": f"--- NODE ---\nid: {NODE}\npath: a/b.sql\ntext:\nx"}]
)
PATHOLOGICAL = [
    "[" * 300_000,
    "[" + "a" * 500_000 + "]",
    "`" * 200_001,
    "a::" * 200_000,
    "x.cs:" * 100_000,
    "ptr-" + "0" * 400_000,
    "Foo_bar. " * 20_000,
    "- item\n  " * 20_000,
    "```\n" * 50_001,
    "[" + ", ".join(f"r::s::k::n{i}" for i in range(50_000)) + "]",
    "\u202e" * 100_000 + "[ELIDED " * 10_000,
]


@pytest.mark.parametrize("text", PATHOLOGICAL, ids=range(len(PATHOLOGICAL)))
def test_pathological_answers_get_a_bounded_verdict(text):
    verdict = verify(text, SHOWN)
    assert set(verdict) >= {"ok", "unsupported", "unknown_citations", "counts"}
    assert len(verdict["unsupported"]) <= MAX_LISTED
    assert len(verdict["unknown_citations"]) <= MAX_LISTED
    assert all(len(u["sentence"]) < 260 for u in verdict["unsupported"])
    record = shown_record([{"role": "user", "content": text}, {"role": "tool", "content": text}])
    assert len(record["unnamed_summaries"]) <= MAX_LISTED


def test_random_noise_never_raises():
    rng = random.Random(2929)
    alphabet = [
        "[",
        "]",
        "`",
        "::",
        ":",
        "ptr-",
        "0a",
        ".",
        " ",
        "\n",
        "- ",
        "> ",
        "x",
        "Foo",
        "_",
        "(",
        ")",
        "1",
        NODE,
        "[ELIDED ",
        "?",
        "!",
        "writes",
        "\u202e",
    ]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 400)))
        verdict = verify(text, SHOWN)
        assert verdict["ok"] == (not verdict["unsupported"] and not verdict["unknown_citations"])
