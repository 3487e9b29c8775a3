"""Budgets exactly at, one under and one over their limits.

manage_context_budget (max_context_tokens, its compaction policies, the batch marker, dedup),
fetch_node_texts (max_chars, budget_tokens, the 70% default), call_model's window check and
loop_guard's counter, all run through the engine. Every limit is computed in the test from the
shared block format (runtime.context.blocks) and the real tokenizer (runtime.context.tokens), then the budget is
set to that count, one less and one more.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import classifiers
import runtime
from runtime.context import fidelity as fid
from runtime.context.blocks import format_block
from runtime.context.tokens import get_counter

COUNTER = get_counter()  # cl100k_base: the default of settings.tokenizer and of a model
SEP = "\n\n"  # blocks are joined with a blank line in context_blocks
MARKER = "=== new evidence ==="
SAMPLE = Path(__file__).resolve().parent.parent.parent / "pipelines" / "sample" / "eshop"
SQL = (SAMPLE / "Database" / "Procedures" / "usp_PlaceOrder.sql").read_text()
END = {"id": "end", "action": "finalize", "source": "q"}
OVER = {"id": "over", "action": "finalize", "source": "q"}


def run(steps: list[dict[str, Any]], inputs: dict[str, Any], store: Any = None, **settings: Any):
    settings = {"entry_step_id": steps[0]["id"], **settings}
    pipeline = runtime.Pipeline.from_dict({"settings": settings, "steps": [*steps, END, OVER]})
    services = runtime.Services(settings=settings, node_store=store)
    return runtime.Runner(pipeline, services=services).run({"q": "x", **inputs}, run_id="t")


def tokens(blocks: list[str]) -> int:
    """The exact token count of a context: its blocks joined, tokenised in one piece."""
    return COUNTER.count(SEP.join(blocks))


def events(result, kind: str) -> list[dict[str, Any]]:
    return [e for e in result.events if e["type"] == kind]


# --- manage_context_budget --------------------------------------------------------------


def node(nid: str, text: str, language: str = "unknown") -> dict[str, Any]:
    ext = {"sql": "sql", "dotnet": "cs"}.get(language, "txt")
    return {"id": nid, "path": f"{nid}.{ext}", "language": language, "text": text}


def raw(item: dict[str, Any]) -> str:
    return format_block(item, compact=False)


def compacted(item: dict[str, Any]) -> str:
    text = classifiers.compact(item["text"], item["language"], counter=COUNTER)
    assert text != item["text"]  # the fixture really compacts
    return format_block(item, compact=True, text=text)


def budget(**kw: Any) -> dict[str, Any]:
    return {"id": "b", "action": "manage_context_budget", "on_ok": "end", "on_over": "over", **kw}


def rules(*items: dict[str, Any]) -> dict[str, Any]:
    return {"compact_code": {"rules": list(items)}}


FILLER = format_block(node("z", "word " * 400), compact=False)  # existing context, 423 tokens
A, B = node("a", "alpha"), node("b", "beta gamma")
PROC = node("p", SQL, "sql")


def test_block_format_is_the_shared_one():
    bare = {"id": "c", "path": "", "text": "gamma"}  # absent and empty fields are omitted
    r = run([budget()], {"node_texts": [A, bare]}, max_context_tokens=1000)
    assert r.state["context_blocks"] == [
        "--- NODE ---\nid: a\npath: a.txt\nlanguage: unknown\ncompact: false\ntext:\nalpha",
        "--- NODE ---\nid: c\ncompact: false\ntext:\ngamma",
    ]
    r = run(
        [budget(**rules({"language": "sql", "policy": "always"}))],
        {"node_texts": [PROC]},
        max_context_tokens=1000,
    )
    [block] = r.state["context_blocks"]
    assert block.startswith(
        "--- NODE ---\nid: p\npath: p.sql\nlanguage: sql\ncompact: true\ntext:\n"
        "-- compacted T-SQL: object headers and body summaries\n"
    )


@pytest.mark.parametrize("delta,decision", [(-1, "over"), (0, "ok"), (1, "ok")])
def test_append_is_all_or_nothing_at_the_global_limit(delta, decision):
    final = [FILLER, raw(A), raw(B)]
    limit = tokens(final) + delta
    incoming = [A, B]
    r = run(
        [budget()], {"node_texts": incoming, "context_blocks": [FILLER]}, max_context_tokens=limit
    )
    [ev] = events(r, "MANAGE_CONTEXT_BUDGET")
    assert (ev["budget"], ev["current_tokens"], ev["total_tokens"], ev["decision"]) == (
        limit,
        tokens([FILLER]),
        tokens(final),
        decision,
    )
    if decision == "ok":
        assert r.steps == ["b", "end"]
        assert r.state["context_blocks"] == final and r.state["node_texts"] == []
    else:
        assert r.steps == ["b", "over"]
        assert r.state["context_blocks"] == [FILLER] and r.state["node_texts"] == incoming


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_misconfiguration_when_the_raw_incoming_texts_alone_exceed_the_limit(delta):
    incoming = [A, B, PROC]
    need = tokens([raw(i) for i in incoming])
    # Compaction would make them fit, but the guard measures the raw texts.
    always = rules({"language": "sql", "policy": "always"})
    r = run([budget(**always)], {"node_texts": incoming}, max_context_tokens=need + delta)
    if delta < 0:
        assert (r.error.code, r.error.step_id) == ("PIPELINE_BUDGET_MISCONFIG", "b")
        assert r.state["node_texts"] == incoming
    else:
        assert r.status == "completed" and r.steps == ["b", "end"]
        assert r.state["context_blocks"] == [raw(A), raw(B), compacted(PROC)]


def test_over_budget_with_existing_context_is_over_not_a_misconfiguration():
    limit = tokens([FILLER, raw(A)]) - 1
    assert tokens([raw(A)]) <= limit
    r = run([budget()], {"node_texts": [A], "context_blocks": [FILLER]}, max_context_tokens=limit)
    assert r.error is None and r.steps == ["b", "over"]


# The procedure as stored (ending with a newline) and cut after its last statement: the
# count of a block and of the separator after it add up differently at the joint.
PROCS = [PROC, {**PROC, "text": SQL.rstrip()}]


@pytest.mark.parametrize("item", PROCS, ids=["newline", "no-newline"])
@pytest.mark.parametrize("existing", [[FILLER], []], ids=["context", "empty"])
@pytest.mark.parametrize("delta,compact", [(-1, True), (0, False), (1, False)])
def test_threshold_is_crossed_by_the_total(item, existing, delta, compact):
    # Adding the node raw takes the context to `crossing` tokens; the threshold sits at
    # 0.5 * limit = crossing + delta. With a context, the node alone stays under it.
    crossing = tokens([*existing, raw(item)])
    if existing:
        assert tokens([raw(item)]) < crossing - 1
    th = rules({"language": "sql", "policy": "threshold", "threshold": 0.5})
    r = run(
        [budget(**th)],
        {"node_texts": [item], "context_blocks": existing},
        max_context_tokens=2 * (crossing + delta),
    )
    block = compacted(item) if compact else raw(item)
    assert r.steps == ["b", "end"] and r.state["context_blocks"] == [*existing, block]
    [ev] = events(r, "MANAGE_CONTEXT_BUDGET")
    [trace] = ev["nodes"]
    assert trace == {
        "id": "p",
        "path": "p.sql",
        "language": "sql",
        "policy": "threshold",
        "compacted": compact,
        "tokens_before": COUNTER.count(raw(item) + SEP),
        "tokens_after": COUNTER.count(block + SEP),
    }


@pytest.mark.parametrize("delta,compact", [(-1, True), (0, False)])
def test_threshold_total_counts_the_batch_marker_but_not_the_old_one(delta, compact):
    # The marker of the new batch is part of the total; the previous batch's marker is removed.
    crossing = tokens([FILLER, MARKER, raw(PROC)])
    th = rules({"language": "sql", "policy": "threshold", "threshold": 0.5})
    r = run(
        [budget(divide_new_content=MARKER, **th)],
        {"node_texts": [PROC], "context_blocks": [MARKER, FILLER]},
        max_context_tokens=2 * (crossing + delta),
    )
    block = compacted(PROC) if compact else raw(PROC)
    assert r.state["context_blocks"] == [FILLER, MARKER, block]


def test_threshold_total_includes_the_nodes_appended_before_in_the_batch():
    # The first node crosses the threshold and is compacted; the second is measured against
    # the context holding the first one compacted (not raw), and stays under it.
    small = node(
        "v", (SAMPLE / "Database" / "Views" / "vw_CustomerLifetimeValue.sql").read_text(), "sql"
    )
    crossing = tokens([FILLER, compacted(PROC), raw(small)])
    assert tokens([FILLER, raw(PROC)]) > crossing  # PROC raw would cross it
    th = rules({"language": "sql", "policy": "threshold", "threshold": 0.5})
    r = run(
        [budget(**th)],
        {"node_texts": [PROC, small], "context_blocks": [FILLER]},
        max_context_tokens=2 * crossing,
    )
    assert r.state["context_blocks"] == [FILLER, compacted(PROC), raw(small)]
    # One token less and the second node crosses it too.
    r = run(
        [budget(**th)],
        {"node_texts": [PROC, small], "context_blocks": [FILLER]},
        max_context_tokens=2 * (crossing - 1),
    )
    assert r.state["context_blocks"] == [FILLER, compacted(PROC), compacted(small)]


@pytest.mark.parametrize("delta,decision", [(-1, "over"), (0, "ok"), (1, "ok")])
def test_always_policy_at_the_limit(delta, decision):
    final = [FILLER, compacted(PROC)]
    limit = tokens(final) + delta
    assert tokens([raw(PROC)]) <= limit  # the raw text alone fits: no misconfiguration
    always = rules({"language": "sql", "policy": "always"})
    r = run(
        [budget(**always)],
        {"node_texts": [PROC], "context_blocks": [FILLER]},
        max_context_tokens=limit,
    )
    assert r.steps == ["b", "end" if decision == "ok" else "over"]
    assert r.state["context_blocks"] == (final if decision == "ok" else [FILLER])
    [ev] = events(r, "MANAGE_CONTEXT_BUDGET")
    assert (ev["total_tokens"], ev["decision"], ev["nodes"][0]["compacted"]) == (
        tokens(final),
        decision,
        True,
    )


def test_compaction_that_saves_nothing_is_not_claimed():
    # The logging procedure has no body to elide: its compact form is the text itself.
    text = (SAMPLE / "Database" / "Procedures" / "usp_LogEvent.sql").read_text()
    log = node("l", text, "sql")
    assert classifiers.compact(text, "sql", counter=COUNTER) == text
    always = rules({"language": "sql", "policy": "always"})
    r = run([budget(**always)], {"node_texts": [log]}, max_context_tokens=1000)
    assert r.state["context_blocks"] == [raw(log)]
    [ev] = events(r, "MANAGE_CONTEXT_BUDGET")
    assert ev["nodes"][0]["compacted"] is False


def test_rules_apply_by_language_and_the_first_match_wins():
    limit = 2 * tokens([raw(PROC)])
    other = rules({"language": "dotnet", "policy": "always"})
    r = run([budget(**other)], {"node_texts": [PROC]}, max_context_tokens=limit)
    assert r.state["context_blocks"] == [raw(PROC)]
    first = rules(
        {"language": "sql", "policy": "threshold", "threshold": 1},
        {"language": "sql", "policy": "always"},
    )
    r = run([budget(**first)], {"node_texts": [PROC]}, max_context_tokens=limit)
    assert r.state["context_blocks"] == [raw(PROC)]


DEMAND = rules({"language": "sql", "policy": "demand", "inbox_key": "compact_code"})


def ask(topic: str = "compact_code") -> dict[str, Any]:
    return {
        "id": "ask",
        "action": "inbox_dispatcher",
        "source": "req",
        "next": "b",
        "rules": {"b": {"topic": topic, "allow_keys": ["why"]}},
    }


REQ = {"dispatch": [{"target": "b", "payload": {"why": "too long"}}]}


def enqueued(result) -> list[tuple[str, int, dict[str, Any]]]:
    return [
        (m["topic"], m["attempt"], m["payload"])
        for m in (e["message"] for e in events(result, "INBOX_ENQUEUE"))
        if m["target_step_id"] == "b"
    ]


@pytest.mark.parametrize("delta,decision", [(-1, "over"), (0, "ok")])
def test_demand_policy_at_the_limit(delta, decision):
    final = [FILLER, compacted(PROC)]
    limit = tokens(final) + delta
    r = run(
        [ask(), budget(**DEMAND)],
        {"req": REQ, "node_texts": [PROC], "context_blocks": [FILLER]},
        max_context_tokens=limit,
    )
    [ev] = events(r, "MANAGE_CONTEXT_BUDGET")
    assert (ev["demand"], ev["decision"], ev["total_tokens"]) == (
        ["compact_code"],
        decision,
        tokens(final),
    )
    if decision == "ok":
        assert r.steps == ["ask", "b", "end"] and r.state["context_blocks"] == final
        assert enqueued(r) == [("compact_code", 1, {"why": "too long"})]  # spent, not requeued
    else:
        assert r.steps == ["ask", "b", "over"] and r.state["context_blocks"] == [FILLER]
        assert enqueued(r) == [
            ("compact_code", 1, {"why": "too long"}),
            ("compact_code", 2, {"why": "too long"}),
        ]


def test_without_the_demand_the_same_limit_is_over():
    limit = tokens([FILLER, compacted(PROC)])
    # A message on another topic is no demand, and is not re-enqueued on over.
    r = run(
        [ask("other"), budget(**DEMAND)],
        {"req": REQ, "node_texts": [PROC], "context_blocks": [FILLER]},
        max_context_tokens=limit,
    )
    [ev] = events(r, "MANAGE_CONTEXT_BUDGET")
    assert (ev["demand"], ev["decision"], ev["total_tokens"]) == (
        [],
        "over",
        tokens([FILLER, raw(PROC)]),
    )
    assert r.steps == ["ask", "b", "over"] and enqueued(r) == [("other", 1, {"why": "too long"})]


def test_demand_survives_a_compaction_loop_with_its_attempt_counted():
    limit = tokens([FILLER, compacted(PROC)]) - 1  # never fits, even compacted
    guard = {
        "id": "g",
        "action": "loop_guard",
        "max_turn_loops": 2,
        "on_allow": "b",
        "on_deny": "over",
    }
    r = run(
        [ask(), budget(on_over="g", **DEMAND), guard],
        {"req": REQ, "node_texts": [PROC], "context_blocks": [FILLER]},
        max_context_tokens=limit,
    )
    assert r.steps == ["ask", "b", "g", "b", "g", "b", "g", "over"]
    assert [t for t, _, _ in enqueued(r)] == ["compact_code"] * 4
    assert [a for _, a, _ in enqueued(r)] == [1, 2, 3, 4]
    assert [e["demand"] for e in events(r, "MANAGE_CONTEXT_BUDGET")] == [["compact_code"]] * 3
    assert all(e["nodes"][0]["compacted"] for e in events(r, "MANAGE_CONTEXT_BUDGET"))


@pytest.mark.parametrize("delta,decision", [(-1, "over"), (0, "ok")])
def test_marker_is_counted_and_replaces_the_previous_one(delta, decision):
    before = [MARKER, FILLER]
    final = [FILLER, MARKER, raw(A), raw(B)]
    r = run(
        [budget(divide_new_content=MARKER)],
        {"node_texts": [A, B], "context_blocks": before},
        max_context_tokens=tokens(final) + delta,
    )
    assert r.state["context_blocks"] == (final if decision == "ok" else before)
    [ev] = events(r, "MANAGE_CONTEXT_BUDGET")
    assert (ev["current_tokens"], ev["total_tokens"]) == (tokens([FILLER]), tokens(final))


def test_no_marker_for_a_batch_of_duplicates():
    # Nothing new: no marker is added, so a context exactly at the limit still fits.
    limit = tokens([FILLER])
    r = run(
        [budget(divide_new_content=MARKER)],
        {"node_texts": [node("z", "word " * 400)], "context_blocks": [FILLER]},
        max_context_tokens=limit,
    )
    assert r.steps == ["b", "end"] and r.state["context_blocks"] == [FILLER]
    assert r.state["node_texts"] == []
    # Nor is the previous batch's marker removed: it goes with the next append.
    r = run(
        [budget(divide_new_content=MARKER)],
        {"node_texts": [node("z", "again")], "context_blocks": [MARKER, FILLER]},
        max_context_tokens=2 * limit,
    )
    assert r.steps == ["b", "end"] and r.state["context_blocks"] == [MARKER, FILLER]


@pytest.mark.parametrize("delta,decision", [(-1, "over"), (0, "ok")])
def test_duplicates_by_id_are_neither_appended_nor_counted(delta, decision):
    again = node("z", "word")  # same id as the FILLER block, other text
    twice = node("a", "alpha again")  # same id as A, in the same batch
    final = [FILLER, raw(A)]
    r = run(
        [budget()],
        {"node_texts": [again, A, twice], "context_blocks": [FILLER]},
        max_context_tokens=tokens(final) + delta,
    )
    assert r.steps == ["b", "end" if decision == "ok" else "over"]
    assert r.state["context_blocks"] == (final if decision == "ok" else [FILLER])
    [ev] = events(r, "MANAGE_CONTEXT_BUDGET")
    assert [(n["id"], n.get("skipped")) for n in ev["nodes"]] == [
        ("z", "duplicate"),
        ("a", None),
        ("a", "duplicate"),
    ]


def test_a_plain_string_in_the_context_is_not_a_node():
    note = "id: a"  # not a block: it names no node
    r = run([budget()], {"node_texts": [A], "context_blocks": [note]}, max_context_tokens=1000)
    assert r.state["context_blocks"] == [note, raw(A)]


def test_metadata_lines_fetched_for_the_context_reach_it():
    item = {**A, "metadata": {"signature": "alpha()", "lines": 3}}
    block = format_block(item, compact=False, metadata=item["metadata"])
    assert block.endswith("compact: false\nmetadata:\nsignature: alpha()\nlines: 3\ntext:\nalpha")
    r = run([budget()], {"node_texts": [item]}, max_context_tokens=tokens([block]))
    assert r.steps == ["b", "end"] and r.state["context_blocks"] == [block]


@pytest.mark.parametrize(
    "threshold,valid", [(1, True), (0.5, True), (1.01, False), (0, False), (-0.5, False)]
)
def test_threshold_fraction_range(tmp_path, threshold, valid):
    th = rules({"language": "sql", "policy": "threshold", "threshold": threshold})
    found = diagnostics(tmp_path, [budget(**th)], max_context_tokens=1000)
    assert (
        ("COMPACTION_RULE_INVALID", "$.steps[0].compact_code.rules[0].threshold") not in found
    ) is valid


def diagnostics(tmp_path, steps: list[dict[str, Any]], **settings: Any) -> list[tuple[str, str]]:
    path = tmp_path / "p.yaml"
    data = {"settings": {"entry_step_id": steps[0]["id"], **settings}, "steps": [*steps, END, OVER]}
    path.write_text(json.dumps(data))
    return [(d.code, d.path) for d in runtime.validate(str(path)).diagnostics]


# --- fetch_node_texts -------------------------------------------------------------------

CANCEL = "eshop::main::procedure::dbo.usp_CancelOrder"
SMALL = "eshop::main::method::Eshop.Core.Interfaces.IOrderRepository.CancelAsync"
PLACE = "eshop::main::procedure::dbo.usp_PlaceOrder"
SEEDS = {
    "retrieval_seed_nodes": [CANCEL, PLACE, SMALL],
    "graph_expanded_nodes": [],
    "graph_edges": [],
}


def fetch(**kw: Any) -> dict[str, Any]:
    return {"id": "f", "action": "fetch_node_texts", "next": "end", **kw}


@pytest.fixture(scope="module")
def measured(sample_index) -> dict[str, dict[str, int]]:
    """Each candidate's cost: its formatted block plus the separator after it in the context."""
    r = run([fetch(budget_tokens=100_000)], SEEDS, sample_index)
    items = {i["id"]: i for i in r.state["node_texts"]}
    assert list(items) == [CANCEL, PLACE, SMALL]
    blocks = {nid: format_block(i, compact=False) for nid, i in items.items()}
    costs = {
        "tokens": {nid: COUNTER.count(b + SEP) for nid, b in blocks.items()},
        "chars": {nid: len(b) + len(SEP) for nid, b in blocks.items()},
    }
    assert {c["id"]: c["cost"] for c in r.state["fetch_debug"]["candidates"]} == costs["tokens"]
    # The middle candidate is the largest, the last the smallest (for the atomic skip below).
    assert costs["tokens"][PLACE] > costs["tokens"][CANCEL] > costs["tokens"][SMALL]
    return costs


def fetched(result) -> tuple[list[str], int]:
    return [i["id"] for i in result.state["node_texts"]], result.state["fetch_debug"]["used"]


@pytest.mark.parametrize("unit,field", [("tokens", "budget_tokens"), ("chars", "max_chars")])
@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_fetch_budget_at_the_limit(sample_index, measured, unit, field, delta):
    cost = measured[unit]
    every = cost[CANCEL] + cost[PLACE] + cost[SMALL]
    r = run([fetch(**{field: every + delta})], SEEDS, sample_index)
    debug = r.state["fetch_debug"]
    assert (debug["unit"], debug["budget"]) == (unit, every + delta)
    if delta >= 0:
        assert fetched(r) == ([CANCEL, PLACE, SMALL], every)
    else:  # the last one no longer fits
        assert fetched(r) == ([CANCEL, PLACE], every - cost[SMALL])
        assert debug["candidates"][-1]["reason"] == "over_budget"


@pytest.mark.parametrize("delta", [-1, 0])
def test_fetch_atomic_skip_keeps_scanning_at_the_limit(sample_index, measured, delta):
    cost = measured["tokens"]
    # Room for the first and the last, not the middle one: it is skipped, the scan goes on.
    r = run([fetch(budget_tokens=cost[CANCEL] + cost[SMALL] + delta)], SEEDS, sample_index)
    if delta == 0:
        assert fetched(r) == ([CANCEL, SMALL], cost[CANCEL] + cost[SMALL])
    else:
        assert fetched(r) == ([CANCEL], cost[CANCEL])
    decisions = [
        (c["id"], c["decision"], c.get("reason")) for c in r.state["fetch_debug"]["candidates"]
    ]
    assert decisions[1] == (PLACE, "skip", "over_budget")


def test_fetch_measures_the_metadata_lines_it_adds(sample_index, measured):
    step = fetch(
        budget_tokens=100_000, include_metadata_in_context=True, metadata_fields=["signature"]
    )
    r = run([step], {**SEEDS, "retrieval_seed_nodes": [SMALL]}, sample_index)
    [item] = r.state["node_texts"]
    assert list(item["metadata"]) == ["signature"]
    block = format_block(item, compact=False, metadata=item["metadata"])
    assert "\nmetadata:\nsignature: " in block
    [cand] = r.state["fetch_debug"]["candidates"]
    assert cand["cost"] == COUNTER.count(block + SEP) > measured["tokens"][SMALL]


@pytest.mark.parametrize(
    "max_context,default",
    [(1000, 700), (1001, 700), (1009, 706), (90, 63), (1300, 910), (10, 7), (1, 0)],
)
def test_fetch_default_budget_is_70_percent_of_the_global_budget(
    sample_index, max_context, default
):
    r = run(
        [fetch()],
        {**SEEDS, "retrieval_seed_nodes": []},
        sample_index,
        max_context_tokens=max_context,
    )
    assert (r.state["fetch_debug"]["unit"], r.state["fetch_debug"]["budget"]) == ("tokens", default)


@pytest.mark.parametrize("delta", [-1, 0])
def test_fetch_default_budget_applies_at_its_limit(sample_index, measured, delta):
    cost = measured["tokens"]
    want = cost[CANCEL] + cost[PLACE] + cost[SMALL] + delta
    max_context = -(-want * 10 // 7)  # the smallest global budget whose 70% is `want`
    assert max_context * 7 // 10 == want
    r = run([fetch()], SEEDS, sample_index, max_context_tokens=max_context)
    every = cost[CANCEL] + cost[PLACE] + cost[SMALL]
    if delta == 0:
        assert fetched(r) == ([CANCEL, PLACE, SMALL], every)
    else:
        assert fetched(r) == ([CANCEL, PLACE], every - cost[SMALL])


@pytest.mark.parametrize("delta", [-1, 0])
def test_fetch_budget_from_a_named_setting(sample_index, measured, delta):
    cost = measured["tokens"]
    every = cost[CANCEL] + cost[PLACE] + cost[SMALL]
    r = run(
        [fetch(budget_tokens_from_settings="evidence_tokens")],
        SEEDS,
        sample_index,
        evidence_tokens=every + delta,
        max_context_tokens=every + 1000,
    )
    assert r.state["fetch_debug"]["budget"] == every + delta
    assert fetched(r)[0] == ([CANCEL, PLACE, SMALL] if delta == 0 else [CANCEL, PLACE])


@pytest.mark.parametrize("given,fits", [(999, True), (1000, True), (1001, False)])
@pytest.mark.parametrize("field", ["budget_tokens", "budget_tokens_from_settings"])
def test_fetch_budget_must_fit_the_global_budget(tmp_path, given, fits, field):
    if field == "budget_tokens":
        found = diagnostics(tmp_path, [fetch(budget_tokens=given)], max_context_tokens=1000)
    else:
        found = diagnostics(
            tmp_path, [fetch(budget_tokens_from_settings="ev")], max_context_tokens=1000, ev=given
        )
    assert (("BUDGET_CANNOT_FIT", f"$.steps[0].{field}") not in found) is fits


# --- call_model: the window check --------------------------------------------------------

SYSTEM = "You answer from evidence."
QUESTION = "Which procedure writes the Orders table, and who calls it?"


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("call_model")
    (root / "prompts").mkdir()
    (root / "prompts" / "sys.md").write_text(SYSTEM + "\n")
    return root


def call(
    root: Path, window: int, inputs: dict[str, Any], tokenizer: str = "cl100k_base", **step: Any
):
    settings = {
        "entry_step_id": "m",
        "models": {
            "m1": {"provider": "extractive", "context_window": window, "tokenizer": tokenizer}
        },
    }
    data = {
        "settings": settings,
        "steps": [
            {
                "id": "m",
                "action": "call_model",
                "prompt_key": "sys",
                "model": "m1",
                "next": "end",
                "user_parts": {"q": {"source": "question"}},
                **step,
            },
            END,
        ],
    }
    pipeline = runtime.Pipeline.from_dict(data, file=str(root / "p.yaml"))
    services = runtime.Services(settings=settings, base_dir=str(root))
    return runtime.Runner(pipeline, services=services).run({"q": "x", **inputs}, run_id="t")


def system_prompt(tokenizer: str = "cl100k_base") -> str:
    """The system message call() sends: SYSTEM, a blank line, then step m's compact preamble.

    Every fresh model call starts with its fidelity preamble (compact by default,
    docs/fidelity.md); m is the entry step of p.yaml's 2 steps, in run t, so its preamble is
    the run's head lines alone (no completed steps, no variables).
    """
    view = fid.RunView("p", "", "t", "m", 2, history=(), variables={}, written=())
    preamble = fid.build_preamble("compact", view, get_counter(tokenizer))
    return f"{SYSTEM}\n\n{preamble.text}"


def prompt_tokens(*contents: str, tokenizer: str = "cl100k_base") -> int:
    """Every message's content plus 4 tokens of chat framing (role markers) per message."""
    counter = get_counter(tokenizer)
    return sum(counter.count(c) + 4 for c in contents)


@pytest.mark.parametrize("delta,fits", [(-1, False), (0, True), (1, True)])
@pytest.mark.parametrize("reserve", [None, 40])
def test_prompt_plus_reserved_output_at_the_window(prompts, delta, fits, reserve):
    need = prompt_tokens(system_prompt(), QUESTION) + (512 if reserve is None else reserve)
    step = {} if reserve is None else {"max_output_tokens": reserve}
    r = call(prompts, need + delta, {"question": QUESTION}, **step)
    if fits:
        assert r.status == "completed"
        [ev] = events(r, "MODEL_CALL")
        assert ev["prompt_tokens"] == prompt_tokens(system_prompt(), QUESTION)
        # The window the fixture sizes holds the preamble the trace reports.
        preamble = system_prompt()[len(SYSTEM) + 2 :]
        assert (ev["fidelity"], ev["preamble_tokens"]) == ("compact", COUNTER.count(preamble))
    else:
        assert (r.error.code, r.error.step_id) == ("CONTEXT_OVERFLOW", "m")
        assert events(r, "MODEL_CALL") == []


@pytest.mark.parametrize("delta,fits", [(-1, False), (0, True)])
def test_history_counts_in_the_window(prompts, delta, fits):
    history = [
        {"role": "user", "content": "What is an order?"},
        {"role": "assistant", "content": "A row of dbo.Orders."},
    ]
    need = prompt_tokens(system_prompt(), *(t["content"] for t in history), QUESTION) + 40
    r = call(
        prompts,
        need + delta,
        {"question": QUESTION, "conversation_history": history},
        use_history=True,
        max_output_tokens=40,
    )
    assert (r.status == "completed") is fits


@pytest.mark.parametrize("tokenizer", ["cl100k_base", "o200k_base"])
def test_window_is_measured_with_the_models_tokenizer(prompts, tokenizer):
    text = "Überprüfe die Größenordnung: 東京都の注文テーブル " * 3
    ours = prompt_tokens(system_prompt(tokenizer), text, tokenizer=tokenizer)
    other = {"cl100k_base": "o200k_base"}.get(tokenizer, "cl100k_base")
    theirs = prompt_tokens(system_prompt(other), text, tokenizer=other)
    assert ours != theirs  # the text tells the two encodings apart
    assert call(prompts, ours + 10, {"question": text}, tokenizer, max_output_tokens=10).status == (
        "completed"
    )
    r = call(prompts, ours + 9, {"question": text}, tokenizer, max_output_tokens=10)
    assert r.error.code == "CONTEXT_OVERFLOW"


# --- loop_guard ------------------------------------------------------------------------


def guard_run(guard: dict[str, Any], **settings: Any):
    steps = [
        {"id": "g", "action": "loop_guard", "on_allow": "c", "on_deny": "end", **guard},
        {"id": "c", "action": "set_variables", "rules": [{"set": "x", "value": 1}], "next": "g"},
    ]
    return run(steps, {}, **settings)


def guard_trace(result) -> list[tuple[int, int, str]]:
    return [(e["count"], e["limit"], e["decision"]) for e in events(result, "LOOP_GUARD")]


@pytest.mark.parametrize(
    "guard,settings,limit",
    [
        ({"max_turn_loops": 1}, {}, 1),
        ({"max_turn_loops": 3}, {"max_turn_loops": 5}, 3),
        ({"max_turn_loops_from_settings": "passes"}, {"passes": 2, "max_turn_loops": 5}, 2),
        ({}, {"max_turn_loops": 2}, 2),
        ({}, {}, 4),
    ],
)
def test_loop_guard_allows_below_the_limit_and_denies_at_it(guard, settings, limit):
    r = guard_run(guard, **settings)
    assert r.steps == ["g", "c"] * limit + ["g", "end"]
    assert guard_trace(r) == [(n, limit, "allow") for n in range(1, limit + 1)] + [
        (limit, limit, "deny")
    ]


def test_loop_guard_stays_denied_once_the_limit_is_reached():
    steps = [
        {"id": "g", "action": "loop_guard", "max_turn_loops": 1, "on_allow": "c", "on_deny": "d"},
        {"id": "c", "action": "set_variables", "rules": [{"set": "x", "value": 1}], "next": "g"},
        {"id": "d", "action": "set_variables", "rules": [{"set": "y", "value": 1}], "next": "g2"},
        {
            "id": "g2",
            "action": "loop_guard",
            "max_turn_loops": 2,
            "on_allow": "g",
            "on_deny": "end",
        },
    ]
    r = run(steps, {})
    assert r.steps == ["g", "c", "g", "d", "g2", "g", "d", "g2", "g", "d", "g2", "end"]
    assert [e["decision"] for e in events(r, "LOOP_GUARD") if e["step_id"] == "g"] == [
        "allow",
        "deny",
        "deny",
        "deny",
    ]


def test_loop_guard_limit_given_twice_is_invalid(tmp_path):
    guard = {
        "id": "g",
        "action": "loop_guard",
        "on_allow": "end",
        "on_deny": "end",
        "max_turn_loops": 2,
        "max_turn_loops_from_settings": "n",
    }
    assert ("SCHEMA_INVALID", "$.steps[0].max_turn_loops_from_settings") in diagnostics(
        tmp_path, [guard], n=2
    )
