"""The context policy through call_model: decisions, pointers, dry runs, threads, counters."""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

import pytest

from actions.call_model import MESSAGE_OVERHEAD
from runtime.context import fidelity as fid
from runtime.context.pointers import OPEN
from runtime.context.tokens import get_counter
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline

DATA = Path(__file__).parents[1] / "data"
SYSTEM = "You answer from the document."
DOC = "".join(f"line {i}: the quick brown fox number {i} jumps over the dog.\n" for i in range(600))


@pytest.fixture(scope="module")
def counter():
    return get_counter()


def run(
    tmp_path,
    parts: dict[str, Any],
    inputs: dict[str, Any],
    *,
    window: int = 2048,
    settings: dict[str, Any] | None = None,
    step: dict[str, Any] | None = None,
    catch: bool = False,
):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text(SYSTEM + "\n")
    steps: list[dict[str, Any]] = [
        {
            "id": "ask",
            "action": "call_model",
            "prompt_key": "sys",
            "model": "small",
            "max_output_tokens": 256,
            "user_parts": parts,
            "next": "f",
            **(step or {}),
        },
        {"id": "f", "action": "finalize", "source": "last_model_response"},
    ]
    if catch:
        steps[0]["catch"] = {"CONTEXT_OVERFLOW": "fallback"}
        steps.append({"id": "fallback", "action": "finalize", "source": "question"})
    data = {
        "settings": {
            "entry_step_id": "ask",
            "models": {"small": {"provider": "extractive", "context_window": window}},
            **(settings or {}),
        },
        "steps": steps,
    }
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    engine = Engine(p, services=Services(settings=p.settings, base_dir=str(tmp_path)))
    return engine.run(inputs, run_id="t")


def events(r, kind: str) -> list[dict[str, Any]]:
    return [e for e in r.events if e["type"] == kind]


def sent_tokens(r, counter) -> int:
    """The prompt of the model call, counted again from the trace."""
    [call] = events(r, "MODEL_CALL")
    return sum(counter.count(m["content"]) + MESSAGE_OVERHEAD for m in call["messages"])


def counters(r) -> dict[str, int]:
    return dict(r.events[-1].get("counters") or {})


def sent_system(counter) -> str:
    """ask's system message in run t (no catch: 2 steps): SYSTEM, then its compact preamble.

    Every fresh model call starts with its fidelity preamble (compact by default,
    docs/fidelity.md); the entry step's is the run's head lines alone.
    """
    view = fid.RunView("p", "", "t", "ask", 2, history=(), variables={}, written=())
    return f"{SYSTEM}\n\n{fid.build_preamble('compact', view, counter).text}"


def prompt_size(counter, user: str) -> int:
    return counter.count(sent_system(counter)) + counter.count(user) + 2 * MESSAGE_OVERHEAD


Q = {"q": {"source": "question", "template": "Question: {}"}}
D = {"doc": {"source": "doc", "template": "Document:\n{}"}}


@pytest.mark.parametrize("extra", [0, 1])
def test_without_a_policy_the_window_is_the_limit_to_the_token(tmp_path, counter, extra):
    doc = DOC[:3000]
    size = prompt_size(counter, f"Question: which?\n\nDocument:\n{doc}")
    r = run(tmp_path, {**Q, **D}, {"question": "which?", "doc": doc}, window=size + 256 - extra)
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["prompt_tokens"] == size and d["budget"] == size - extra and d["reserve"] == 256
    if extra:
        assert r.status == "failed" and r.error.code == "CONTEXT_OVERFLOW"
        assert d["decision"] == "reject" and d["deficit"] == 1
    else:
        assert r.status == "completed" and d["decision"] == "ok" and d["deficit"] == 0
        assert sent_tokens(r, counter) == size
        assert events(r, "MODEL_CALL")[0]["messages"][0]["content"] == sent_system(counter)
        assert counters(r).get("context_budget_violations", 0) == 0  # at the budget is within


def test_an_oversized_document_becomes_a_pointer_and_the_call_fits(tmp_path, counter):
    r = run(
        tmp_path,
        {**Q, **D},
        {"question": "which fox?", "doc": DOC},
        settings={"context_policy": {"enabled": True}},
    )
    assert r.status == "completed", r.error
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["decision"] == "needs_summary" and d["dry_run"] is False
    assert d["original_tokens"] > d["budget"] == 2048 - 256
    assert d["deficit"] == d["original_tokens"] - d["budget"]
    [pid] = d["summarised"]
    [summary] = d["summaries"]
    assert summary["id"] == "user_parts.doc" and summary["kind"] == "text"
    assert summary["tokens_after"] < 300 <= summary["tokens_before"]
    [call] = events(r, "MODEL_CALL")
    user = call["messages"][-1]["content"]
    assert user.startswith("Question: which fox?\n\nDocument:\n" + OPEN + " " + pid)
    assert sent_tokens(r, counter) == d["prompt_tokens"] == call["prompt_tokens"] <= d["budget"]
    assert counters(r).get("context_budget_violations", 0) == 0


def test_the_question_and_unsummarisable_parts_are_never_touched(tmp_path):
    parts = {
        **Q,
        "keep": {"source": "keep", "summarizable": False},
        "doc": {"source": "doc"},
    }
    keep = DOC[:2000]
    r = run(
        tmp_path,
        parts,
        {"question": DOC[:1500], "keep": keep, "doc": DOC},
        settings={"context_policy": {"enabled": True}},
    )
    assert r.status == "completed", r.error
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert [s["id"] for s in d["summaries"]] == ["user_parts.doc"]
    user = events(r, "MODEL_CALL")[0]["messages"][-1]["content"]
    assert user.startswith(f"Question: {DOC[:1500]}\n\n{keep}\n\n{OPEN}")


def test_when_what_may_not_be_summarised_is_over_the_budget_it_is_rejected(tmp_path):
    parts = {**Q, "doc": {"source": "doc"}}
    r = run(
        tmp_path,
        parts,
        {"question": DOC, "doc": DOC},
        settings={"context_policy": {"enabled": True}},
        catch=True,
    )
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["decision"] == "reject" and d["deficit"] > 0
    assert "may not be summarised" in d["reason"]
    assert r.status == "completed" and r.steps == ["ask", "fallback"]  # catchable


def test_oldest_payload_first_and_only_as_many_as_needed(tmp_path):
    half = DOC[:6400]  # about 1,700 tokens: two are over the budget, one and a pointer not
    parts = {**Q, "a": {"source": "a"}, "b": {"source": "b"}}
    r = run(
        tmp_path,
        parts,
        {"question": "q", "a": half, "b": half.replace("fox", "cat")},
        window=3500,
        settings={"context_policy": {"enabled": True}},
    )
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert [s["id"] for s in d["summaries"]] == ["user_parts.a"]
    user = events(r, "MODEL_CALL")[0]["messages"][-1]["content"]
    assert half.replace("fox", "cat") in user and half not in user


def test_evidence_blocks_are_summarised_one_by_one_oldest_first(tmp_path):
    from runtime.context.blocks import format_block

    blocks = [
        format_block({"id": f"n{i}", "path": f"f{i}.txt", "text": DOC[:4000]}) for i in range(4)
    ]
    r = run(
        tmp_path,
        {**Q, "ev": {"source": "context_blocks"}},
        {"question": "q", "context_blocks": blocks},
        window=3000,
        settings={"context_policy": {"enabled": True}},
    )
    assert r.status == "completed", r.error
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    ids = [s["id"] for s in d["summaries"]]
    assert ids == [f"user_parts.ev[{i}]" for i in range(len(ids))] and 0 < len(ids) < 4
    user = events(r, "MODEL_CALL")[0]["messages"][-1]["content"]
    assert user.count("<evidence>") == 1 and user.count(OPEN) == len(ids)
    assert blocks[3].split("text:\n")[1][:200] in user  # the newest block stays whole


def test_dry_run_decides_and_records_but_sends_the_prompt_unchanged(tmp_path, counter):
    doc = DOC[:6000]
    r = run(
        tmp_path,
        {**Q, **D},
        {"question": "q", "doc": doc},
        window=4096,
        settings={"context_policy": {"enabled": True, "dry_run": True, "prompt_budget": 1000}},
    )
    assert r.status == "completed", r.error
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["decision"] == "needs_summary" and d["dry_run"] is True and d["budget"] == 1000
    assert d["summarised"]
    assert doc in events(r, "MODEL_CALL")[0]["messages"][-1]["content"]
    # Sent over its budget: the one case the violation counter counts.
    assert counters(r)["context_budget_violations"] == 1
    assert sent_tokens(r, counter) > 1000


def test_step_policy_overrides_settings_and_reserve_sets_the_budget(tmp_path):
    r = run(
        tmp_path,
        {**Q, **D},
        {"question": "q", "doc": "short"},
        settings={"context_policy": {"enabled": True, "prompt_budget": 100}},
        step={"context_policy": {"prompt_budget": 5000, "response_reserve": 1000}},
    )
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["budget"] == 2048 - 1000 and d["reserve"] == 1000 and d["decision"] == "ok"


def test_a_budget_under_the_emergency_floor_is_rejected(tmp_path):
    r = run(
        tmp_path,
        {**Q, **D},
        {"question": "q", "doc": DOC},
        settings={
            "context_policy": {"enabled": True, "prompt_budget": 200, "emergency_floor": 201}
        },
    )
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["decision"] == "reject" and "emergency floor 201" in d["reason"]
    assert r.error.code == "CONTEXT_OVERFLOW"


def test_history_assistant_turns_are_summarised_user_turns_kept(tmp_path):
    turns = []
    for i in range(6):
        turns.append({"role": "user", "content": f"question {i}"})
        turns.append({"role": "assistant", "content": DOC[: 1500 + i]})
    r = run(
        tmp_path,
        Q,
        {"question": "q", "conversation_history": turns},
        window=2400,
        settings={"context_policy": {"enabled": True}},
        step={"use_history": True},
    )
    assert r.status == "completed", r.error
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    ids = [s["id"] for s in d["summaries"]]
    assert ids and ids == [f"assistant[{2 + 2 * i}]" for i in range(len(ids))]  # oldest first
    messages = events(r, "MODEL_CALL")[0]["messages"]
    assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 6 + ["user"]
    assert [m["content"] for m in messages[1:-1:2]] == [f"question {i}" for i in range(6)]


def test_thread_compaction_past_the_threshold_keeps_order_and_counts(tmp_path, counter):
    turns = []
    for i in range(8):
        turns.append({"role": "user", "content": f"question {i}"})
        turns.append({"role": "assistant", "content": DOC[: 3000 + i]})
    policy = {"enabled": True, "trace_threshold_tokens": 3000, "summary_tokens": 60}
    r = run(
        tmp_path,
        Q,
        {"question": "q", "conversation_history": turns},
        window=16000,
        settings={"context_policy": policy},
        step={"use_history": True},
    )
    assert r.status == "completed", r.error
    [c] = events(r, "THREAD_COMPACTED")
    assert c["tokens_before"] > 3000 >= c["tokens_after"]
    assert [e["index"] for e in c["map"]] == [2 + 2 * i for i in range(len(c["map"]))]
    assert all(e["role"] == "assistant" for e in c["map"])
    saved = sum(e["tokens_before"] - e["tokens_after"] for e in c["map"])
    assert counters(r) == {"compactions": len(c["map"]), "tokens_saved": saved}
    assert saved == c["tokens_before"] - c["tokens_after"]
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["decision"] == "ok"  # compacted under the threshold, the prompt fits as it is
    messages = events(r, "MODEL_CALL")[0]["messages"]
    assert len(messages) == 18 and messages[-2]["content"] == DOC[:3007]
    assert messages[2]["content"].startswith(OPEN)


def test_novel_and_big_json_fit_an_8k_window(tmp_path, counter):
    with lzma.open(DATA / "long_inputs" / "pride_and_prejudice.txt.xz", "rt") as f:
        novel = f.read()
    big = json.dumps({"items": [{"id": i, "tags": ["a", "b"]} for i in range(40_000)]})
    parts = {**Q, "novel": {"source": "novel"}, "data": {"source": "data", "summary_kind": "json"}}
    r = run(
        tmp_path,
        parts,
        {"question": "who marries?", "novel": novel, "data": big},
        window=8192,
        settings={"context_policy": {"enabled": True}},
    )
    assert r.status == "completed", r.error
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert [s["kind"] for s in d["summaries"]] == ["text", "json"]
    assert all(s["tokens_after"] < 300 for s in d["summaries"])
    assert sent_tokens(r, counter) == d["prompt_tokens"] <= 8192 - 256


def test_a_500_message_thread_is_compacted_under_a_16k_window(counter):
    from benchmarks import long_inputs
    from runtime.context import policy as pol
    from runtime.context.pointers import MemoryPointerStore

    turns = long_inputs.thread(500)
    thread = [
        pol.PromptMessage(t["role"], [pol.Segment(f"m{i}", t["content"], t["role"] == "assistant")])
        for i, t in enumerate(turns)
    ]
    threshold = 16_384 - 1_024
    store = MemoryPointerStore()
    result = pol.compact_thread(thread, threshold, counter, store=store, run_id="r", overhead=4)
    exact = sum(counter.count(m.content()) + 4 for m in thread)
    assert result.tokens_before > 4 * threshold
    assert exact == result.tokens_after <= threshold
    # System and user messages stay, in order; each compacted answer comes back exactly.
    assert [m.role for m in thread] == [t["role"] for t in turns]
    for m, t in zip(thread, turns, strict=True):
        if t["role"] != "assistant":
            assert m.content() == t["content"]
    for entry in result.entries:
        original = turns[entry["index"]]["content"]
        assert store.get_original("r", entry["pointer_id"]) == ("text", original)
        shown = thread[entry["index"]].content()
        assert shown.startswith(f"[ELIDED {entry['pointer_id']} assistant")
    assert len(result.entries) >= 200


def test_payloads_smaller_than_a_pointer_are_never_replaced(counter):
    from runtime.context import policy as pol
    from runtime.context.pointers import MemoryPointerStore

    small = [pol.Segment(f"s{i}", f"note {i}: short.") for i in range(5)]
    big = pol.Segment("big", DOC)
    user = pol.PromptMessage("user", [*small, big])
    cfg = pol.PolicyConfig(enabled=True, emergency_floor=0)
    d = pol.enforce(
        [user],
        pol.Profile("m", 2000, 500, 1500, 0),
        cfg,
        counter,
        store=MemoryPointerStore(),
        run_id="r",
        overhead=4,
    )
    assert d.decision == "needs_summary" and [s["id"] for s in d.summarised] == ["big"]
    assert all(s.pointer is None for s in small)
    # Only small payloads and a budget they do not fit: nothing shrinks, rejected unchanged.
    only = pol.PromptMessage("user", [pol.Segment(f"s{i}", f"note {i}: short.") for i in range(40)])
    before = only.content()
    d = pol.enforce(
        [only],
        pol.Profile("m", 200, 100, 100, 0),
        cfg,
        counter,
        store=MemoryPointerStore(),
        run_id="r",
        overhead=4,
    )
    assert d.decision == "reject" and d.summarised == [] and only.content() == before


def test_a_budget_exactly_at_the_emergency_floor_is_summarised_into(tmp_path):
    r = run(
        tmp_path,
        {**Q, **D},
        {"question": "q", "doc": DOC},
        settings={
            "context_policy": {"enabled": True, "prompt_budget": 400, "emergency_floor": 400}
        },
    )
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["decision"] == "needs_summary" and r.status == "completed", r.error


def test_a_turn_compacted_again_by_a_later_call_is_counted_once(tmp_path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text(SYSTEM + "\n")
    turns = []
    for i in range(6):
        turns.append({"role": "user", "content": f"question {i}"})
        turns.append({"role": "assistant", "content": DOC[: 3000 + i]})
    ask = {
        "action": "call_model",
        "prompt_key": "sys",
        "model": "small",
        "use_history": True,
        "user_parts": Q,
    }
    data = {
        "settings": {
            "entry_step_id": "a1",
            "models": {"small": {"provider": "extractive", "context_window": 16000}},
            "context_policy": {"enabled": True, "trace_threshold_tokens": 2500},
        },
        "steps": [
            {"id": "a1", **ask, "next": "a2"},
            {"id": "a2", **ask, "next": "f"},
            {"id": "f", "action": "finalize", "source": "last_model_response"},
        ],
    }
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    engine = Engine(p, services=Services(settings=p.settings, base_dir=str(tmp_path)))
    r = engine.run({"question": "q", "conversation_history": turns}, run_id="t")
    assert r.status == "completed", r.error
    first, second = events(r, "THREAD_COMPACTED")
    assert [e["pointer_id"] for e in first["map"]] == [e["pointer_id"] for e in second["map"]]
    saved = sum(e["tokens_before"] - e["tokens_after"] for e in first["map"])
    assert counters(r) == {"compactions": len(first["map"]), "tokens_saved": saved}
