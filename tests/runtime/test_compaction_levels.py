"""Hierarchical compaction (docs/budget.md, Automatic compaction): per source, then per
cluster of related payloads, then the whole session, each level only when the one before
left the prompt over its trigger; citations kept, every original two rehydrations away at
most, deterministic.

The prompt: two model turns of a thread and a question with four evidence blocks, two of
one file (a.sql), one each of b.sql and c.sql, and a part of notes, counted with the real
cl100k_base.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from actions import _budget
from runtime.context import policy as pol
from runtime.context.blocks import format_block
from runtime.context.pointers import MemoryPointerStore
from runtime.context.tokens import get_counter

COUNTER = get_counter("cl100k_base")
TURN = "".join(f"line {i}: the answer names table t{i} and its writer.\n" for i in range(60))
PATHS = ("a.sql", "a.sql", "b.sql", "c.sql")
# A part of its own (a source no other payload shares: in no cluster, only in the session).
NOTES = "".join(f"Note {i}: the writer of table t{i} is procedure p{i}.\n" for i in range(40))
ID = re.compile(r"ptr-[0-9a-f]{16}")


def block(i: int, path: str) -> str:
    body = "".join(f"select c{i}_{k} from t{k} where id = {k};\n" for k in range(30))
    return format_block({"id": f"shop::proc{i}", "path": path, "text": body})


def prompt() -> list[pol.PromptMessage]:
    pieces: list[Any] = [pol.Segment("user_parts.q", "which table?", summarizable=False)]
    pieces.append("\n<evidence>\n")
    for j, path in enumerate(PATHS):
        pieces += _budget._block_pieces(f"user_parts.code[{j}]", block(j, path), True, None)
        pieces.append("\n\n")
    pieces += ["</evidence>\n\nNotes:\n", pol.Segment("user_parts.notes", NOTES)]
    return [
        pol.PromptMessage("system", ["Answer from the evidence."]),
        pol.PromptMessage("assistant", [pol.Segment("assistant[1]", "old " + TURN)]),
        pol.PromptMessage("assistant", [pol.Segment("assistant[2]", "new " + TURN)]),
        pol.PromptMessage("user", pieces),
    ]


BUDGET = 1 << 20  # the prompt budget; `at` sets the limit (exact: a power of two divides)


def compact(limit: int, **kw: Any) -> tuple[pol.AutoCompaction, list[pol.PromptMessage], Any]:
    """compact_prompt on a fresh prompt with a limit of exactly `limit` tokens."""
    messages = prompt()
    store = MemoryPointerStore()
    out = pol.compact_prompt(
        messages,
        BUDGET,
        COUNTER,
        at=limit / BUDGET,
        store=store,
        run_id="r",
        overhead=4,
        summary_tokens=kw.pop("summary_tokens", 60),
        **kw,
    )
    assert int(limit / BUDGET * BUDGET) == limit
    assert out.tokens_after == pol.prompt_tokens(messages, COUNTER, 4)
    return out, messages, store


@pytest.fixture(scope="module")
def sizes() -> dict[int, int]:
    """Tokens of the prompt whole (0) and after levels 1, 2 and 3 have run to the end."""
    whole = pol.prompt_tokens(prompt(), COUNTER, 4)
    level1 = compact(BUDGET, force="after_tool_call")[0].tokens_after  # every payload, level 1
    out, _, _ = compact(1)
    level2 = level1 - sum(f["tokens_before"] - f["tokens_after"] for f in out.folds[:-1])
    assert [f["level"] for f in out.folds] == [2, 2, 2, 3]
    return {0: whole, 1: level1, 2: level2, 3: out.tokens_after}


def test_the_levels_shrink_the_prompt_in_turn(sizes):
    assert sizes[0] > sizes[1] > sizes[2] > sizes[3]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_a_level_runs_exactly_when_the_one_before_left_the_prompt_one_token_over(sizes, level):
    # At the size the level before reached: it fits, the level does not run.
    fits, _, _ = compact(sizes[level - 1])
    assert fits.levels == ([] if level == 1 else list(range(1, level)))
    assert fits.tokens_after <= sizes[level - 1]
    # One token under it: it runs (the one before could not get there).
    over, _, _ = compact(sizes[level - 1] - 1)
    assert over.levels == list(range(1, level + 1))
    assert max(e["level"] for e in over.entries) == level
    assert over.tokens_after < sizes[level - 1]


def test_level_two_stops_at_the_cluster_that_makes_it_fit(sizes):
    out, _, _ = compact(sizes[1] - 1)
    assert out.levels == [1, 2] and len(out.folds) == 1 and out.tokens_after <= sizes[1] - 1
    # The first cluster in prompt order is the thread's two turns.
    assert out.folds[0]["of"] == "the thread"
    assert out.folds[0]["members"] == ["assistant[1]", "assistant[2]"]


def test_clusters_are_a_path_shared_by_blocks_then_the_source_then_the_thread():
    out, _, _ = compact(1)
    assert [(f["level"], f["of"], f["members"]) for f in out.folds] == [
        (2, "the thread", ["assistant[1]", "assistant[2]"]),
        (2, "path a.sql", ["user_parts.code[0]", "user_parts.code[1]"]),
        (2, "source user_parts.code", ["user_parts.code[2]", "user_parts.code[3]"]),
        (
            3,
            "",
            [
                "assistant[1]",
                "assistant[2]",
                *(f"user_parts.code[{j}]" for j in range(4)),
                "user_parts.notes",
            ],
        ),
    ]


def test_each_entry_says_the_level_it_ended_at_and_why(sizes):
    out, _, _ = compact(sizes[1] - 1)
    levels = {e["id"]: (e["level"], e.get("cluster")) for e in out.entries}
    cluster = out.folds[0]["pointer_id"]
    assert levels == {
        "assistant[1]": (2, cluster),
        "assistant[2]": (2, cluster),
        **{f"user_parts.code[{j}]": (1, None) for j in range(4)},
        "user_parts.notes": (1, None),
    }
    reasons = {e["id"]: e["level_reason"] for e in out.entries}
    assert (
        reasons["assistant[1]"]
        == f"per cluster: the prompt was {sizes[1]:,} tokens, over {sizes[1] - 1:,}"
    )
    assert reasons["user_parts.code[0]"].startswith(
        f"per source: the prompt was {sizes[0]:,} tokens"
    )
    # The tokens each entry saved add up to what the prompt lost.
    saved = sum(e["tokens_before"] - e["tokens_after"] for e in out.entries)
    assert abs(saved - (sizes[0] - out.tokens_after)) <= 2 * len(out.entries)


def test_citations_stay_headers_and_every_member_is_named_in_its_block():
    out, messages, _ = compact(1)
    user = messages[-1].content()
    for j, path in enumerate(PATHS):
        assert f"id: shop::proc{j}\npath: {path}\ntext:\n" in user  # the header stays
    session = out.folds[-1]["pointer_id"]
    start = user.index(f"[ELIDED {session}: session of 7 items")
    body = user[start : user.index(f"[/ELIDED {session}]")]
    labels = ("[assistant[1]]", "[assistant[2]]", "[user_parts.notes]")
    for label in (*labels, *(f"[shop::proc{j}]" for j in range(4))):
        assert label in body
    # Every other member is one line naming its own pointer and the session's.
    refs = re.findall(
        r"\[ELIDED (ptr-[0-9a-f]{16}): \w+, in (ptr-[0-9a-f]{16})\]",
        "".join(m.content() for m in messages),
    )
    assert len(refs) == 6 and {host for _, host in refs} == {session}
    # The session block sits in the step's own user message, never a system message.
    assert session not in messages[0].content()


@pytest.mark.parametrize("budget_of", [1, 2, 3])
def test_every_original_is_at_most_two_rehydrations_from_any_level(sizes, budget_of):
    out, messages, store = compact(sizes[budget_of - 1] - 1)
    originals = {s.sid: s.text for m in prompt() for s in m.segments() if s.summarizable}
    shown = "".join(m.content() for m in messages)
    reached: dict[str, str] = {}
    for pid in set(ID.findall(shown)):
        _, text = store.get_original("r", pid)
        for sid, original in originals.items():
            if text == original:
                reached[sid] = pid  # one hop
        for line in text.splitlines()[1:] if text.startswith(("cluster", "session")) else ():
            sid, member = re.fullmatch(r"\d+\. .+ \((.+)\): (ptr-[0-9a-f]{16})", line).groups()
            assert store.get_original("r", member)[1] == originals[sid]  # two hops
            reached.setdefault(sid, member)
    # Every payload not sent whole is reached (at level 3 that is every one).
    assert set(reached) == {e["id"] for e in out.entries}
    assert budget_of < 3 or set(reached) == set(originals)
    for e in out.entries:  # the entry's pointer is its own original
        assert store.get_original("r", e["pointer_id"])[1] == originals[e["id"]]


def test_compaction_at_every_level_is_deterministic():
    a, ma, sa = compact(1)
    b, mb, sb = compact(1)
    assert [m.content() for m in ma] == [m.content() for m in mb]
    assert a.entries == b.entries and a.folds == b.folds
    assert sa.pointers("r") == sb.pointers("r")


def test_a_fold_that_would_not_be_smaller_is_not_applied():
    # Short turns: neither their pointers nor a block folding them is smaller than they are.
    messages = [
        pol.PromptMessage("system", ["Answer."]),
        pol.PromptMessage("assistant", [pol.Segment("assistant[1]", "The orders table.")]),
        pol.PromptMessage("assistant", [pol.Segment("assistant[2]", "Sales.Orders, yes.")]),
        pol.PromptMessage("user", [pol.Segment("user_parts.q", "which?", summarizable=False)]),
    ]
    before = [m.content() for m in messages]
    store = MemoryPointerStore()
    out = pol.compact_prompt(
        messages,
        BUDGET,
        COUNTER,
        at=1 / BUDGET,
        store=store,
        run_id="r",
        overhead=4,
    )
    assert out.levels == [1, 2, 3] and out.folds == [] and out.entries == []
    assert [m.content() for m in messages] == before
    # A fold not applied stores nothing (no manifest; level 1 kept the turns' originals).
    kept = [store.get_original("r", p["pointer_id"])[1] for p in store.pointers("r")]
    assert sorted(kept) == ["Sales.Orders, yes.", "The orders table."]


def test_after_tool_call_runs_level_one_only_when_the_prompt_is_under_its_limit():
    out, _, _ = compact(BUDGET, force="after_tool_call")
    assert out.levels == [1] and out.folds == [] and len(out.entries) == 7


def test_a_turn_the_thread_compaction_cut_to_one_line_is_left_as_it_is():
    messages = prompt()
    turn = messages[1].segments()[0]
    store = MemoryPointerStore()
    turn.pointer = pol.point(turn, store, "r", COUNTER, 0, short_for="assistant")
    line = messages[1].content()
    out = pol.compact_prompt(
        messages,
        BUDGET,
        COUNTER,
        at=1 / BUDGET,
        store=store,
        run_id="r",
        overhead=4,
        summary_tokens=60,
    )
    assert out.levels == [1, 2, 3]
    assert messages[1].content() == line
    assert "assistant[1]" not in {e["id"] for e in out.entries}
    assert all("assistant[1]" not in f["members"] for f in out.folds)


def test_a_fold_exactly_as_large_as_what_it_replaces_is_not_applied():
    # Two turns whose cluster block and reference (and session block) take exactly the 96
    # tokens the turns show after level 1 (found by search): an equal fold gains nothing
    # and is not applied.
    words = [
        "the",
        "orders",
        "table",
        "is",
        "written",
        "by",
        "usp_PlaceOrder",
        "and",
        "read",
        "by",
        "the",
        "report",
        "job",
    ]
    one, two = " ".join((words * 20)[:40]), " ".join((words * 20)[3:41])
    messages = [
        pol.PromptMessage("system", ["Answer."]),
        pol.PromptMessage("assistant", [pol.Segment("assistant[1]", one)]),
        pol.PromptMessage("assistant", [pol.Segment("assistant[2]", two)]),
        pol.PromptMessage("user", [pol.Segment("user_parts.q", "which?", summarizable=False)]),
    ]
    out = pol.compact_prompt(
        messages,
        BUDGET,
        COUNTER,
        at=1 / BUDGET,
        store=MemoryPointerStore(),
        run_id="r",
        overhead=4,
        summary_tokens=24,
    )
    assert out.levels == [1, 2, 3] and out.folds == []
    assert all(e["level"] == 1 for e in out.entries)
    assert "cluster of" not in messages[2].content() + messages[1].content()
