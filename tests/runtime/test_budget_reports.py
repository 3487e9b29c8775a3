"""What the budget policy reports: bounds labelled, each round's prompt, rejects with a cause.

A count the trace gives as a lower bound (a payload too large to be encoded whole) says
so; the tokens reported are those of the request actually sent, round by round; a reject
names what overflowed (the parts that may not be summarised, the fidelity preamble, the
pointer blocks, a summary size that left nothing summarisable) with its numbers and a
hint, and keeps the rejected prompt in the trace.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from actions.call_model import MESSAGE_OVERHEAD
from runtime.context import policy as pol
from runtime.context.pointers import MemoryPointerStore, make_pointer, pointer_id_of
from runtime.context.tokens import get_counter
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline

COUNTER = get_counter()
DOC = "".join(f"line {i}: the quick brown fox number {i} jumps over the dog.\n" for i in range(600))
# Dense: over a 1,792-token budget in under 4 characters a token, so it is counted exactly.
NUMBERS = " ".join(f"{i * 7919 % 10007}" for i in range(1400))
# Far over any budget here: its size is decided from its bytes, never encoded whole.
HUGE = DOC * 60  # ~2.2 MB


def run(
    tmp_path,
    parts: dict[str, Any],
    inputs: dict[str, Any],
    *,
    window: int = 2048,
    policy: dict[str, Any] | None = None,
    store: Any = None,
    model: dict[str, Any] | None = None,
    run_store: Any = None,
    **step: Any,
):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("You answer from the document.\n")
    data: dict[str, Any] = {
        "settings": {
            "entry_step_id": "ask",
            "models": {
                "small": model or {"provider": "extractive", "context_window": window},
            },
            **({"context_policy": policy} if policy is not None else {}),
        },
        "steps": [
            {
                "id": "ask",
                "action": "call_model",
                "prompt_key": "sys",
                "model": "small",
                "max_output_tokens": 256,
                "user_parts": parts,
                "next": "f",
                **step,
            },
            {"id": "f", "action": "finalize", "source": "last_model_response"},
        ],
    }
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    services = Services(settings=p.settings, base_dir=str(tmp_path))
    if store is not None:
        store(services)
    engine = Engine(p, services=services, store=run_store)
    return engine.run(inputs, run_id="t")


def events(r, kind: str) -> list[dict[str, Any]]:
    return [e for e in r.events if e["type"] == kind]


Q = {"q": {"source": "question", "template": "Question: {}"}}
D = {"doc": {"source": "doc", "template": "Document:\n{}"}}


# --- item 4: numbers are labelled ------------------------------------------------------


def test_an_exact_decision_says_so(tmp_path):
    r = run(
        tmp_path, {**Q, **D}, {"question": "which?", "doc": DOC[:300]}, policy={"enabled": True}
    )
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["decision"] == "ok" and d["exact"] is True and d["lower_bounds"] == []


def test_a_reject_decided_on_a_byte_bound_labels_every_bound(tmp_path):
    # The question may not be summarised; it is sized from its bytes, not encoded.
    r = run(tmp_path, Q, {"question": HUGE}, policy={"enabled": True})
    assert r.status == "failed" and r.error.code == "CONTEXT_OVERFLOW"
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["decision"] == "reject" and d["exact"] is False
    assert d["lower_bounds"] == ["prompt_tokens", "original_tokens", "deficit"]
    assert d["prompt_tokens"] >= len(HUGE.encode()) // 128  # the bound it was decided on
    assert "at least" in r.error.message


def test_a_payload_summarised_from_a_bound_says_its_size_is_a_bound(tmp_path):
    r = run(tmp_path, {**Q, **D}, {"question": "which fox?", "doc": HUGE}, policy={"enabled": True})
    assert r.status == "completed", r.error
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["decision"] == "needs_summary"
    # What was sent is counted whole; the original and its deficit are bounds.
    assert d["lower_bounds"] == ["original_tokens", "deficit", "summaries[0].tokens_before"]
    assert d["exact"] is False and d["summaries"][0]["tokens_before_exact"] is False
    [call] = events(r, "MODEL_CALL")
    assert call["prompt_tokens"] == d["prompt_tokens"] == d["sent_tokens"]


def test_a_counted_payload_is_exact(tmp_path):
    r = run(tmp_path, {**Q, **D}, {"question": "which?", "doc": NUMBERS}, policy={"enabled": True})
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["decision"] == "needs_summary" and d["lower_bounds"] == []
    assert d["summaries"][0]["tokens_before_exact"] is True


def test_a_dry_run_reports_what_it_sent_beside_what_it_would_have(tmp_path):
    r = run(
        tmp_path,
        {**Q, **D},
        {"question": "which fox?", "doc": DOC},
        window=32000,
        policy={"dry_run": True, "prompt_budget": 1500},
    )
    assert r.status == "completed", r.error
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    [call] = events(r, "MODEL_CALL")
    sent = sum(COUNTER.count(m["content"]) + MESSAGE_OVERHEAD for m in call["messages"])
    assert d["decision"] == "needs_summary" and d["prompt_tokens"] <= 1500 < sent
    assert d["sent_tokens"] == call["prompt_tokens"] == sent


NOVEL = "".join(f"line {n}: It is a truth universally acknowledged.\n" for n in range(1, 41))
POINTER = pointer_id_of(NOVEL)[0]


def _tool_call(call_id: str, arguments: str) -> str:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "rehydrate", "arguments": arguments},
            }
        ],
    }
    return json.dumps({"choices": [{"message": message, "finish_reason": "tool_calls"}]})


def test_each_tool_round_reports_the_prompt_it_sent(tmp_path, chat_server):
    args = json.dumps({"pointer_id": POINTER, "slice": "lines 3-5"})
    chat_server.script = [{"raw": _tool_call("c1", args)}, {"reply": "Mr. Bennet."}]

    def keep_novel(services):
        make_pointer(services.pointers, "t", NOVEL, "text", "(summary)", 40)

    model = {"provider": "openai", "model": "m", "base_url": chat_server.url}
    r = run(
        tmp_path,
        Q,
        {"question": "Who?"},
        model={**model, "context_window": 8192},
        store=keep_novel,
        tools=["rehydrate"],
    )
    assert r.status == "completed", r.error
    first, second = (x["body"]["messages"] for x in chat_server.requests)

    def size(messages: list[dict[str, Any]]) -> int:
        return sum(
            COUNTER.count(m.get("content") or "")
            + sum(
                COUNTER.count(c["function"]["name"] + c["function"]["arguments"])
                for c in m.get("tool_calls") or ()
            )
            + MESSAGE_OVERHEAD
            for m in messages
        )

    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    [again] = events(r, "CONTEXT_BUDGET_ROUND")
    [call] = events(r, "MODEL_CALL")
    assert d["sent_tokens"] == size(first)
    assert again["round"] == 1 and again["prompt_tokens"] == size(second) > size(first)
    assert call["prompt_tokens"] == size(second)  # the request that got the answer
    assert call["round_prompt_tokens"] == [size(first), size(second)]


# --- item 5: rejections name the real cause ----------------------------------------------


def test_a_reject_names_the_part_that_may_not_be_summarised_and_keeps_the_prompt(tmp_path):
    question = NUMBERS
    keep = {"keep": {"source": "keep", "summarizable": False}}
    r = run(
        tmp_path, {**Q, **keep}, {"question": question, "keep": "short"}, policy={"enabled": True}
    )
    assert r.status == "failed" and r.error.code == "CONTEXT_OVERFLOW"
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["cause"] == "unsummarisable" and d["exact"] is True
    numbers = d["breakdown"]
    [top, *_] = numbers["unsummarisable_parts"]
    assert top["id"] == "user_parts.q" and top["tokens"] == COUNTER.count(question)
    assert (
        f"take {numbers['unsummarisable'] + numbers['fixed']:,} tokens of the 1,792"
        in (d["reason"])
    )
    assert d["hint"] == pol.REJECT_CAUSES["unsummarisable"]
    assert "runtime trace t --step ask --messages" in r.error.hint
    # The prompt as it came is in the trace.
    [system, user] = d["messages"]
    assert system["role"] == "system" and user["content"] == f"Question: {question}\n\nshort"


def test_a_rejected_prompt_is_printed_by_trace_messages(tmp_path):
    from runtime.cli import cli as main
    from runtime.engine.store import SqliteRunStore

    db = str(tmp_path / "runs.db")
    r = run(
        tmp_path, Q, {"question": NUMBERS}, policy={"enabled": True}, run_store=SqliteRunStore(db)
    )
    assert r.status == "failed"
    out = CliRunner().invoke(main, ["trace", "t", "--store", db, "--step", "ask", "--messages"])
    assert out.exit_code == 0, out.output
    assert "=== ask: rejected prompt, not sent 1 of 1" in out.stdout
    assert f"Question: {NUMBERS}\n" in out.stdout
    full = CliRunner().invoke(main, ["trace", "t", "--store", db, "--step", "ask", "--full"])
    assert full.exit_code == 0 and 'cause="unsummarisable"' in full.stdout
    assert json.dumps(f"Question: {NUMBERS}") in full.stdout  # whole, not cut at 80


def _enforce(
    messages: list[pol.PromptMessage], budget: int, *, preamble: int = 0, **cfg: Any
) -> pol.Decision:
    config = pol.PolicyConfig(enabled=True, emergency_floor=0, **cfg)
    profile = pol.Profile("m", budget + 100, 100, budget, config.emergency_floor)
    return pol.enforce(
        messages,
        profile,
        config,
        COUNTER,
        store=MemoryPointerStore(),
        run_id="r",
        overhead=4,
        preamble_tokens=preamble,
    )


def _system(text: str) -> pol.PromptMessage:
    return pol.PromptMessage("system", [pol.Segment("system[0]", text, False)])


def test_an_oversized_preamble_is_named(tmp_path):
    preamble = DOC[:4000]
    system = _system(preamble + "\n\nAnswer.")
    user = pol.PromptMessage("user", ["Q: ", pol.Segment("user_parts.doc", DOC[:3000])])
    d = _enforce([system, user], 700, preamble=COUNTER.count(preamble))
    assert d.decision == "reject" and d.cause == "preamble"
    assert d.breakdown["preamble"] == COUNTER.count(preamble)
    assert d.reason.startswith(f"the fidelity preamble takes {COUNTER.count(preamble):,} tokens")
    assert d.hint == pol.REJECT_CAUSES["preamble"]


def test_pointer_blocks_that_overflow_are_named():
    blocks = [pol.Segment(f"user_parts.ev[{i}]", DOC[i * 900 : i * 900 + 2000]) for i in range(30)]
    pieces: list[str | pol.Segment] = []
    for b in blocks:
        pieces += [b, "\n\n"]
    d = _enforce([_system("Answer."), pol.PromptMessage("user", pieces)], 1500, summary_tokens=16)
    assert d.decision == "reject" and d.cause == "pointer_blocks"
    assert d.breakdown["pointer_block_count"] == 30
    assert d.breakdown["pointer_blocks"] > 1500
    assert d.reason.startswith(f"30 pointer block(s) still take {d.breakdown['pointer_blocks']:,}")
    assert "summary_tokens 16" in d.reason


def test_a_summary_size_that_leaves_nothing_summarisable_is_named():
    parts = [pol.Segment(f"user_parts.p{i}", DOC[i * 1000 : i * 1000 + 1100]) for i in range(5)]
    pieces: list[str | pol.Segment] = []
    for p in parts:
        pieces += [p, "\n\n"]
    d = _enforce([_system("Answer."), pol.PromptMessage("user", pieces)], 600, summary_tokens=2000)
    assert d.decision == "reject" and d.cause == "summary_size" and not d.summarised
    assert d.reason.startswith("summary_tokens 2000 left nothing summarisable: 5 payload(s)")
    assert d.hint == pol.REJECT_CAUSES["summary_size"]


@pytest.mark.parametrize(("enabled", "cause"), [(False, "no_policy"), (True, "floor")])
def test_a_reject_before_summarising_names_why_and_the_largest_parts(enabled, cause):
    user = pol.PromptMessage("user", [pol.Segment("user_parts.doc", DOC[:8000])])
    config = pol.PolicyConfig(enabled=enabled, emergency_floor=5000 if enabled else 256)
    d = pol.enforce(
        [_system("Answer."), user],
        pol.Profile("m", 2000, 100, 1900, config.emergency_floor),
        config,
        COUNTER,
        store=MemoryPointerStore(),
        run_id="r",
        overhead=4,
    )
    assert d.decision == "reject" and d.cause == cause and d.hint == pol.REJECT_CAUSES[cause]
    assert d.breakdown["kept_whole_parts"] == ["user_parts.doc"]
    assert d.reason.endswith(f"summarisable user_parts.doc at least {d.breakdown['kept_whole']:,}")
