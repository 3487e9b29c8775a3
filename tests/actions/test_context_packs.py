"""Context packs of call_model steps (docs/packs.md): one per model call, stored with the run.

Each test runs the engine on a small pipeline (or code_qa on the indexed sample) and reads
the packs back from the result and the run store: sections with their tokens, items with
source, score, reason and hashes, the drop report and its coverage, `pack_budget`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from runtime.context import packs
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.engine.store import SqliteRunStore
from runtime.format.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[2]
DOC = "".join(f"line {i}: the quick brown fox number {i} jumps over the dog.\n" for i in range(600))


def run(
    tmp_path,
    step: dict[str, Any],
    inputs: dict[str, Any],
    *,
    settings: dict[str, Any] | None = None,
    store: bool = False,
    node_store: Any = None,
):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer from the document.\n")
    data = {
        "settings": {
            "entry_step_id": "ask",
            "models": {"small": {"provider": "extractive", "context_window": 2048}},
            **(settings or {}),
        },
        "steps": [
            {"id": "ask", "action": "call_model", "prompt_key": "sys", "model": "small", **step},
            {"id": "f", "action": "finalize", "source": "last_model_response"},
        ],
    }
    data["steps"][0].setdefault("next", "f")
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    kept = SqliteRunStore(str(tmp_path / "runs.db")) if store else None
    services = Services(settings=p.settings, base_dir=str(tmp_path), node_store=node_store)
    engine = Engine(p, services=services, store=kept)
    return engine.run(inputs, run_id="t"), kept


def section(pack: dict[str, Any], kind: str) -> dict[str, Any]:
    [s] = [s for s in pack["sections"] if s["type"] == kind]
    return s


def events(r, kind: str) -> list[dict[str, Any]]:
    return [e for e in r.events if e["type"] == kind]


PARTS = {"q": {"source": "question"}, "doc": {"source": "doc", "template": "Document:\n{}"}}


def test_one_pack_per_call_with_every_section_and_the_prompt_hash_of_what_was_sent(tmp_path):
    r, _ = run(tmp_path, {"user_parts": PARTS}, {"question": "which fox?", "doc": "a short doc"})
    assert r.status == "completed", r.error
    [pack] = r.packs
    assert [s["type"] for s in pack["sections"]] == list(packs.SECTIONS)
    [call] = events(r, "MODEL_CALL")
    sent = [{"role": m["role"], "content": m["content"]} for m in call["messages"]]
    body = json.dumps(sent, ensure_ascii=False, separators=(",", ":")).encode()
    assert pack["prompt_hash"] == "sha256:" + hashlib.sha256(body).hexdigest()
    assert pack["tokens"]["prompt"] == call["prompt_tokens"]
    assert section(pack, "policy")["tokens"] > 0
    # Both parts read run inputs: what the caller gave is the user section.
    question, doc = section(pack, "user")["items"]
    assert question["id"] == "user_parts.q" and question["source"] == "variable question"
    assert doc["id"] == "user_parts.doc" and doc["tokens"] > 0
    assert section(pack, "task")["tokens"] > 0  # the template "Document:"
    assert section(pack, "fidelity")["tokens"] > 0  # the compact preamble
    # The sections hold the prompt but its framing (role markers, joints), no more.
    assert 0 <= pack["tokens"]["framing"] < 30
    [event] = events(r, "CONTEXT_PACK")
    assert event["pack_id"] == pack["pack_id"]
    assert event["sections"]["user"] == question["tokens"] + doc["tokens"]


def test_a_summarised_part_is_a_drop_with_its_pointer_and_the_report_covers_the_removal(
    tmp_path,
):
    r, _ = run(
        tmp_path,
        {"user_parts": PARTS, "max_output_tokens": 256},
        {"question": "which fox?", "doc": DOC},
        settings={"context_policy": {"enabled": True}},
    )
    assert r.status == "completed", r.error
    [pack] = r.packs
    [decision] = events(r, "CONTEXT_BUDGET_DECISION")
    [pointer] = decision["summarised"]
    [drop] = [d for d in pack["drops"]["items"] if d["reason"] == "summarisation"]
    assert drop["id"] == "user_parts.doc" and drop["pointer_id"] == pointer
    [summary] = decision["summaries"]
    assert drop["tokens_saved"] == summary["tokens_before"] - summary["tokens_after"] > 1000
    [doc] = [i for i in section(pack, "user")["items"] if i["id"] == "user_parts.doc"]
    assert doc["summary_ref"] == pointer
    # The part counts as sent: its pointer block, not the document.
    assert doc["tokens"] == summary["tokens_after"]
    assert 0 <= pack["tokens"]["framing"] < 40
    # What was removed is what the report names.
    removed = decision["original_tokens"] - decision["prompt_tokens"]
    assert pack["drops"]["tokens_removed"] == removed
    assert pack["drops"]["coverage"] >= packs.MIN_COVERAGE
    packs.assert_coverage(pack)
    assert not events(r, "PACK_COVERAGE_LOW")
    # The pack holds no text of the document, only its counts and hashes.
    assert b"quick brown fox" not in packs.canonical_bytes(pack)


def test_packs_are_stored_with_the_run_in_call_order(tmp_path):
    r, store = run(
        tmp_path,
        {"user_parts": PARTS},
        {"question": "which fox?", "doc": "a doc"},
        store=True,
    )
    assert r.status == "completed", r.error
    stored = store.packs("t")
    assert [p["seq"] for p in stored] == [1] and stored == r.packs
    assert store.packs("t", "f") == []
    raw = store._conn().execute("SELECT body FROM run_context_packs").fetchone()[0]
    # The row is the pack's canonical bytes: what a ledger hashes.
    pack = {k: v for k, v in stored[0].items() if k != "seq"}
    assert raw.encode() == packs.canonical_bytes(pack)
    # The pack id is the body's hash: anyone holding the row can check it.
    assert pack["pack_id"] == packs.pack_id_of(raw.encode()) == r.packs[0]["pack_id"]


@pytest.mark.parametrize(
    ("fraction", "verdict"),
    [(1.0, "ok"), (0.93, "warning"), (0.85, "error")],
)
def test_pack_budget_within_five_percent_is_fine_then_a_warning_then_an_error(
    tmp_path, fraction, verdict
):
    # First measure the user section, then give it a share of that size times `fraction`.
    r, _ = run(tmp_path, {"user_parts": PARTS}, {"question": "which fox?", "doc": DOC[:3000]})
    [pack] = r.packs
    tokens, budget = section(pack, "user")["tokens"], pack["prompt_budget"]
    share = round(tokens * fraction / budget, 6)
    r, _ = run(
        tmp_path,
        {"user_parts": PARTS, "pack_budget": {"user": share}},
        {"question": "which fox?", "doc": DOC[:3000]},
    )
    [pack] = r.packs  # stored even when the budget fails the step
    [a] = pack["adherence"]
    assert a["section"] == "user" and a["verdict"] == verdict
    warnings = events(r, "PACK_BUDGET_OVER")
    if verdict == "error":
        assert r.status == "failed" and r.error.code == "PACK_BUDGET_EXCEEDED"
        assert "user" in r.error.message
        assert not events(r, "MODEL_CALL")  # refused before the call
    else:
        assert r.status == "completed", r.error
        assert len(warnings) == (verdict == "warning")


def test_settings_pack_budget_applies_when_the_step_has_none(tmp_path):
    r, _ = run(
        tmp_path,
        {"user_parts": PARTS},
        {"question": "which fox?", "doc": "doc"},
        settings={"pack_budget": {"knowledge": 0.5, "task": 0.2}},
    )
    [pack] = r.packs
    assert pack["pack_budget_from"] == "settings"
    assert section(pack, "knowledge")["budget"] == int(0.5 * pack["prompt_budget"])
    assert section(pack, "memory")["budget"] is None


def test_a_configured_secret_in_the_query_never_reaches_a_pack(tmp_path, monkeypatch, sample_index):
    secret = "sk-test-" + "q7" * 20
    monkeypatch.setenv("PACK_TEST_KEY", secret)
    node = "eshop::main::table::dbo.Orders"
    blocks = [f"--- NODE ---\nid: {node}\ntext:\nsome code"]
    r, _ = run(
        tmp_path,
        {"user_parts": {"q": {"source": "question"}, "e": {"source": "blocks"}}},
        # As a search step would have left them (the query the model wrote, its hit).
        {
            "question": f"why {secret}?",
            "blocks": blocks,
            "retrieval_query": f"code {secret}",
            "retrieval_mode": "bm25",
            "retrieval_hits": [{"id": node, "score": 1.0, "rank": 1}],
        },
        settings={
            "models": {
                "small": {
                    "provider": "extractive",
                    "context_window": 2048,
                    "api_key_env": "PACK_TEST_KEY",
                }
            }
        },
        node_store=sample_index,
    )
    assert r.status == "completed", r.error
    [pack] = r.packs
    assert secret.encode() not in packs.canonical_bytes(pack)
    [item] = section(pack, "knowledge")["items"]
    assert item["id"] == node and item["source"] == "search"
    assert item["evidence"]["query"].startswith("code ")  # kept, with the key scrubbed


# --- code_qa on the sample ---------------------------------------------------------------


@pytest.fixture(scope="module")
def code_qa(tmp_path_factory):
    from runtime.format.validation import load_pipeline
    from runtime.retrieval.indexer import index_paths
    from runtime.retrieval.nodestore import open_store

    tmp = tmp_path_factory.mktemp("packs_qa")
    index = open_store(str(tmp / "index.db"), create=True)
    index_paths(index, [str(ROOT / "pipelines" / "sample" / "eshop")], repository="eshop")
    pipeline = load_pipeline(str(ROOT / "pipelines" / "code_qa.yaml"))
    store = SqliteRunStore(str(tmp / "runs.db"))
    services = Services(settings=pipeline.settings, node_store=index, base_dir=str(tmp))
    engine = Engine(pipeline, services=services, store=store)
    question = "Which stored procedure writes the OrderLines table and who calls it?"
    return engine.run({"question": question, "repository": "eshop"}, run_id="qa"), store


def test_code_qa_packs_name_every_evidence_block_with_source_score_and_reason(code_qa):
    r, store = code_qa
    assert r.status == "completed", r.error
    assert [p["step_id"] for p in r.packs] == ["route", "check", "answer"]
    answer = r.packs[-1]
    knowledge = section(answer, "knowledge")
    nodes = [i for i in knowledge["items"] if i["source"] != "assembly"]
    hits = {h["id"]: h for h in r.state["retrieval_hits"]}
    assert {i["id"] for i in nodes if i["source"] == "search"} == set(hits)
    assert answer["access"]["engines"] == ["builtin"]
    for item in nodes:
        assert item["reason"] and item["content_hash"].startswith("sha256:")
        # The access decision that admitted it: the default rule's, in the store query
        # (docs/access.md), listed with the pack's access record.
        assert item["decision"].startswith("acc-")
        assert item["decision"] in answer["access"]["decisions"]
        assert item["evidence"]["filters"]["repository"] == "eshop"
        if item["source"] == "search":
            assert item["score"] == hits[item["id"]]["score"] == item["evidence"]["score"]
            assert item["evidence"]["retriever"] == "keyword"
            assert item["evidence"]["query"] == r.state["retrieval_query"]
        else:
            assert item["source"] == "expansion" and item["evidence"]["retriever"] == "graph"
            assert item["evidence"]["query"] in hits  # the hit it was reached from
    # The blocks sent are the items: their tokens add up to the section's.
    assert sum(i["tokens"] for i in knowledge["items"]) == knowledge["tokens"]
    assert section(answer, "tools")["items"][0]["id"] == "tool:rehydrate"
    assert store.packs("qa", "answer") == [answer]
    # What search folded into a hit, and the expansion's cap, are in the drop report.
    drops = answer["drops"]["items"]
    folded = {c for h in r.state["retrieval_hits"] for c in h.get("children") or ()}
    assert folded and {d["id"] for d in drops if d["reason"] == "duplicate"} == folded
    capped = [d for d in drops if d["reason"] == "per_item_cap"]
    assert len(capped) == (1 if r.state["graph_debug"].get("truncated") else 0)
    for pack in r.packs:
        packs.assert_coverage(pack)


def test_code_qa_drop_report_lists_the_fetch_budget_skips(tmp_path, sample_index):
    from runtime.format.validation import load_pipeline

    pipeline = load_pipeline(str(ROOT / "pipelines" / "code_qa.yaml"))
    pipeline.settings["evidence_budget_tokens"] = 400  # the sample's blocks do not all fit
    services = Services(settings=pipeline.settings, node_store=sample_index, base_dir=str(tmp_path))
    question = "Which stored procedure writes the OrderLines table and who calls it?"
    r = Engine(pipeline, services=services).run({"question": question}, run_id="small")
    assert r.status == "completed", r.error
    answer = r.packs[-1]
    skipped = [c for c in r.state["fetch_debug"]["candidates"] if c.get("reason") == "over_budget"]
    assert skipped
    drops = {d["id"]: d for d in answer["drops"]["items"] if d["reason"] == "budget_skip"}
    assert set(drops) == {c["id"] for c in skipped}
    assert all(drops[c["id"]]["tokens_saved"] == c["cost"] for c in skipped)


LONG = "".join(f"line {i}: the draft changes parse_port to check its range.\n" for i in range(120))


def test_a_full_threads_turns_are_the_fidelity_section_and_its_compaction_is_dropped(
    tmp_path, chat_server
):
    # draft's long reply is the thread turn review's call compacts (trace_threshold_tokens).
    chat_server.script = [{"reply": LONG}, {"reply": "Looks right."}]
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("You improve the draft.\n")
    model = {"provider": "openai", "model": "m", "base_url": chat_server.url}
    ask = {"action": "call_model", "prompt_key": "sys", "model": "m1", "max_output_tokens": 50}
    data = {
        "settings": {
            "entry_step_id": "draft",
            "models": {"m1": {**model, "context_window": 16000}},
            "context_policy": {"enabled": True, "trace_threshold_tokens": 300},
        },
        "steps": [
            {"id": "draft", **ask, "fidelity": "full", "next": "review"},
            {"id": "review", **ask, "fidelity": "full", "next": "f"},
            {"id": "f", "action": "finalize", "source": "last_model_response"},
        ],
    }
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    r = Engine(p, services=Services(settings=p.settings, base_dir=str(tmp_path))).run(
        {}, run_id="t"
    )
    assert r.status == "completed", r.error
    review = r.packs[-1]
    [compacted] = events(r, "THREAD_COMPACTED")
    [entry] = compacted["map"]
    # The thread's two turns (draft's system prompt and reply), then review's own prompt.
    thread = section(review, "fidelity")["items"]
    assert [i["id"] for i in thread] == ["system[0]", "assistant[1]"]
    assert all(i["source"] == "thread" for i in thread)
    assert thread[1]["summary_ref"] == [entry["pointer_id"]]
    assert section(review, "policy")["items"][0]["id"] == "prompt:sys"
    [drop] = [d for d in review["drops"]["items"] if d["reason"] == "compaction"]
    assert drop["pointer_id"] == entry["pointer_id"]
    assert drop["tokens_saved"] == entry["tokens_before"] - entry["tokens_after"] > 500
    saved = compacted["tokens_before"] - compacted["tokens_after"]
    assert review["drops"]["tokens_removed"] == saved
    packs.assert_coverage(review)
    # Without the compaction's entries the report would cover nothing of what was removed.
    broken = {**review, "drops": {**review["drops"], "tokens_accounted": 0, "coverage": 0.0}}
    with pytest.raises(packs.PackCoverageError, match="PACK_COVERAGE_LOW"):
        packs.assert_coverage(broken)


def test_the_embedding_api_returns_the_packs_with_the_result(tmp_path):
    import runtime

    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Answer.\n")
    (tmp_path / "p.yaml").write_text(
        "settings:\n"
        "  entry_step_id: ask\n"
        "  models: {small: {provider: extractive, context_window: 2048}}\n"
        "steps:\n"
        "  - {id: ask, action: call_model, prompt_key: sys, model: small,\n"
        "     user_parts: {q: {source: question}}, next: f}\n"
        "  - {id: f, action: finalize, source: last_model_response}\n"
    )
    pipeline = runtime.load(str(tmp_path / "p.yaml"))
    result = runtime.Runner(pipeline, store=runtime.SqliteRunStore(str(tmp_path / "r.db"))).run(
        {"question": "what?"}, run_id="e"
    )
    assert [p["step_id"] for p in result.packs] == ["ask"]
    assert "packs" not in result.to_dict()  # the --json contract is unchanged


def test_a_summarised_evidence_block_keeps_its_node_and_counts_as_sent(tmp_path):
    blocks = [f"--- NODE ---\nid: n{i}\ntext:\n{DOC[: 6000 + i]}" for i in range(3)]
    r, _ = run(
        tmp_path,
        {
            "user_parts": {"q": {"source": "question"}, "e": {"source": "blocks"}},
            "max_output_tokens": 256,
        },
        {"question": "which fox?", "blocks": blocks},
        settings={"context_policy": {"enabled": True}},
    )
    assert r.status == "completed", r.error
    [pack] = r.packs
    [decision] = events(r, "CONTEXT_BUDGET_DECISION")
    summaries = {s["id"]: s for s in decision["summaries"]}
    assert summaries
    items = {i["id"]: i for i in section(pack, "knowledge")["items"]}
    assert set(items) == {"n0", "n1", "n2"}
    for sid, s in summaries.items():
        j = int(sid.rsplit("[", 1)[1][:-1])
        item = items[f"n{j}"]
        assert item["summary_ref"] == s["pointer_id"]
        assert s["tokens_after"] < item["tokens"] < s["tokens_after"] + 20  # with its header
        [drop] = [d for d in pack["drops"]["items"] if d.get("pointer_id") == s["pointer_id"]]
        assert (drop["reason"], drop["node"]) == ("summarisation", f"n{j}")
    assert 0 <= pack["tokens"]["framing"] < 60
    packs.assert_coverage(pack)


def test_conversation_history_turns_are_the_history_section(tmp_path):
    turns = [
        {"role": "user", "content": "Where is the port parsed?"},
        {"role": "assistant", "content": "In parse_port, config.py."},
    ]
    r, _ = run(
        tmp_path,
        {"user_parts": {"q": {"source": "question"}}, "use_history": True},
        {"question": "and checked?", "conversation_history": turns},
    )
    assert r.status == "completed", r.error
    [pack] = r.packs
    history = section(pack, "history")
    assert [(i["id"], i["source"]) for i in history["items"]] == [
        ("user[1]", "history"),
        ("assistant[2]", "history"),
    ]
    assert history["tokens"] == sum(i["tokens"] for i in history["items"]) > 10
    assert section(pack, "fidelity")["items"][0]["id"] == "preamble"
