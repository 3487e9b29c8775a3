"""manage_context_budget with counts carried from before the process, at its limit exactly.

fetch_node_texts hands on the counts the indexer stored with each node's text; the budget
step writes the counts of the context it built (`context_block_tokens`) beside it. A run
that resumes (or a new process) then encodes only block headers and joints. The decision
must be the one counting gives: the budget is set to the recounted total of the final
context (tiktoken over the joined string, in one piece), one under and one over, on real
C# and T-SQL. Every run gets a counter that has counted nothing, so nothing is remembered
from an earlier run or test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import runtime
from runtime.context.blocks import format_block
from runtime.context.tokens import TokenCounter, get_counter
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.nodestore import open_store

DATA = Path(__file__).resolve().parent.parent / "data"
SEP = "\n\n"
MARKER = "=== new evidence ==="
END = {"id": "end", "action": "finalize", "source": "q"}
OVER = {"id": "over", "action": "finalize", "source": "q"}


@pytest.fixture(scope="module")
def real_index(tmp_path_factory):
    path = tmp_path_factory.mktemp("budget-carried") / "index.db"
    store = open_store(str(path), create=True)
    roots = [str(DATA / "realworld"), str(DATA / "code")]
    index_paths(store, roots, repository="real", jobs=1, tokenizers=["cl100k_base", "o200k_base"])
    return store


@pytest.fixture(scope="module")
def code_ids(real_index) -> list[str]:
    """Real C# and T-SQL nodes of a few hundred tokens and more, in a fixed order."""
    rows = real_index.conn().execute(
        "SELECT id FROM nodes WHERE language IN ('sql', 'dotnet') AND length(text) > 600 "
        "ORDER BY id"
    )
    ids = [r[0] for r in rows]
    assert len(ids) >= 24
    return ids[:24]


def exact(name: str, blocks: list[str]) -> int:
    return len(get_counter(name).encoding.encode_ordinary(SEP.join(blocks)))


def run(
    store: Any, steps: list[dict[str, Any]], inputs: dict[str, Any], name: str, **settings: Any
) -> Any:
    settings = {"entry_step_id": steps[0]["id"], "tokenizer": name, **settings}
    pipeline = runtime.Pipeline.from_dict({"settings": settings, "steps": [*steps, END, OVER]})
    counter = TokenCounter(get_counter(name).encoding)  # cold: counted nothing before
    services = runtime.Services(settings=settings, node_store=store, token_counter=counter)
    return runtime.Runner(pipeline, services=services).run({"q": "x", **inputs}, run_id="t")


def fetch_then_budget(
    store: Any, ids: list[str], name: str, limit: int, extra: dict[str, Any] | None = None
):
    steps = [
        {"id": "f", "action": "fetch_node_texts", "budget_tokens": limit, "next": "b"},
        {"id": "b", "action": "manage_context_budget", "on_ok": "end", "on_over": "over"},
    ]
    steps[1].update(extra or {})
    inputs = {"retrieval_seed_nodes": ids, "graph_expanded_nodes": [], "graph_edges": []}
    return run(store, steps, inputs, name, max_context_tokens=limit)


def budget_event(result) -> dict[str, Any]:
    [ev] = [e for e in result.events if e["type"] == "MANAGE_CONTEXT_BUDGET"]
    return ev


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_fetch_hands_on_the_index_counts(real_index, code_ids, name):
    r = fetch_then_budget(real_index, code_ids, name, 100_000)
    items = r.state["context_blocks"]
    assert len(items) == len(code_ids)
    ev = budget_event(r)
    assert ev["carried_counts"] == {"context": 0, "incoming": len(code_ids)}
    assert ev["total_tokens"] == exact(name, items)
    counts = r.state["context_block_tokens"]
    assert counts["encoding"] == name and len(counts["blocks"]) == len(items)


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
@pytest.mark.parametrize("delta,decision", [(-1, "over"), (0, "ok"), (1, "ok")])
def test_a_new_process_with_carried_counts_decides_at_the_limit(
    real_index, code_ids, name, delta, decision
):
    first, second = code_ids[:12], code_ids[12:]
    marker = {"divide_new_content": MARKER}
    built = fetch_then_budget(real_index, first, name, 100_000, marker)
    context = built.state["context_blocks"]
    carried = built.state["context_block_tokens"]
    node_texts = fetch_items(real_index, second, name)  # with the index's counts
    # What the resumed step must decide on: the context without its old marker, the new
    # marker, the new blocks; counted here in one piece, independently of the step.
    new = [format_block(i, compact=False, metadata=i["metadata"]) for i in node_texts]
    final = [b for b in context if b != MARKER] + [MARKER] + new
    limit = exact(name, final) + delta
    steps = [
        {"id": "b", "action": "manage_context_budget", "on_ok": "end", "on_over": "over", **marker}
    ]
    inputs = {"context_blocks": context, "context_block_tokens": carried, "node_texts": node_texts}
    r = run(real_index, steps, inputs, name, max_context_tokens=limit)
    ev = budget_event(r)
    assert ev["carried_counts"] == {"context": len(context) - 1, "incoming": len(second)}
    assert (ev["total_tokens"], ev["decision"]) == (exact(name, final), decision)
    assert ev["current_tokens"] == exact(name, [b for b in context if b != MARKER])
    if decision == "ok":
        assert r.state["context_blocks"] == final
        assert len(r.state["context_block_tokens"]["blocks"]) == len(final)
    else:
        assert r.state["context_blocks"] == context


def fetch_items(store: Any, ids: list[str], name: str) -> list[dict[str, Any]]:
    steps = [{"id": "f", "action": "fetch_node_texts", "budget_tokens": 100_000, "next": "end"}]
    inputs = {"retrieval_seed_nodes": ids, "graph_expanded_nodes": [], "graph_edges": []}
    r = run(store, steps, inputs, name, max_context_tokens=100_000)
    items = r.state["node_texts"]
    assert [i["id"] for i in items] == ids and all("tokens" in i for i in items)
    return items


@pytest.mark.parametrize("delta,decision", [(-1, "over"), (0, "ok"), (1, "ok")])
def test_stale_carried_counts_are_not_used_and_the_decision_holds(
    real_index, code_ids, delta, decision
):
    name = "cl100k_base"
    built = fetch_then_budget(real_index, code_ids[:8], name, 100_000)
    context = list(built.state["context_blocks"])
    carried = built.state["context_block_tokens"]
    context[3] = context[3] + "\n    // edited after it was counted"  # a later step changed it
    items = fetch_items(real_index, code_ids[8:16], name)
    # One incoming text edited after fetch_node_texts counted it, one count for o200k only.
    items[0] = {**items[0], "text": items[0]["text"] + "\n}"}
    parts = items[1]["tokens"]["parts"]
    items[1] = {**items[1], "tokens": {**items[1]["tokens"], "parts": {"o200k_base": parts[name]}}}
    final = context + [format_block(i, compact=False, metadata=i["metadata"]) for i in items]
    limit = exact(name, final) + delta
    steps = [{"id": "b", "action": "manage_context_budget", "on_ok": "end", "on_over": "over"}]
    inputs = {"context_blocks": context, "context_block_tokens": carried, "node_texts": items}
    r = run(real_index, steps, inputs, name, max_context_tokens=limit)
    ev = budget_event(r)
    assert ev["carried_counts"] == {"context": len(context) - 1, "incoming": len(items) - 2}
    assert (ev["total_tokens"], ev["decision"]) == (exact(name, final), decision)
