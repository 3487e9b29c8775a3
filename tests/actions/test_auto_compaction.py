"""context_policy `compact:` (docs/budget.md, Automatic compaction): a prompt that fits is
compacted before the call when over its trigger (a fraction of the budget, a number of
payloads, each tool call), traced in CONTEXT_BUDGET_DECISION and in the pack's drop report.

The run is code_qa-like: a question and two parts of evidence blocks (procedures, docs) on
the offline extractive model, the prompt at about 85% of its budget.
"""

from __future__ import annotations

from typing import Any

from runtime.context import packs
from runtime.context.blocks import format_block
from tests.actions.test_context_packs import events, run

PARTS = {
    "q": {"source": "question"},
    "code": {"source": "code"},
    "docs": {"source": "docs"},
}


def blocks(prefix: str, n: int, lines: int) -> list[str]:
    return [
        format_block(
            {
                "id": f"{prefix}{k}",
                "path": f"src/{prefix}{k}.sql",
                "text": "".join(
                    f"select {prefix}{i} from t{k} where id = {i};\n" for i in range(lines)
                ),
            }
        )
        for k in range(n)
    ]


INPUTS = {"question": "which table?", "code": blocks("proc", 3, 28), "docs": blocks("doc", 2, 14)}


def ask(tmp_path, compact: dict[str, Any] | None, inputs=INPUTS, policy=None, **step: Any) -> Any:
    tmp_path.mkdir(parents=True, exist_ok=True)
    policy = {"enabled": True, **(policy or {})}
    if compact is not None:
        policy["compact"] = compact
    r, _ = run(
        tmp_path,
        {"user_parts": PARTS, "max_output_tokens": 248, **step},
        inputs,
        settings={"context_policy": policy},
    )
    assert r.status == "completed", r.error
    return r


def test_the_sample_prompt_fits_at_about_85_percent_and_is_sent_whole(tmp_path):
    r = ask(tmp_path, None)
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["decision"] == "ok" and not d["summarised"]
    assert 0.8 * d["budget"] < d["prompt_tokens"] < 0.9 * d["budget"]
    assert "compacted_by" not in d


def test_compact_at_compacts_a_prompt_that_fits_to_under_the_trigger(tmp_path):
    r = ask(tmp_path, {"at": 0.8})
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["compacted_by"] == "trigger" and d["compaction_trigger"] == "at"
    assert d["compacted_tokens_before"] > 0.8 * d["budget"]
    assert d["prompt_tokens"] <= 0.8 * d["budget"]
    # Per source, in prompt order: the procedures' blocks went; that was enough.
    ids = [e["id"] for e in d["compacted"]]
    assert ids == ["user_parts.code[0]", "user_parts.code[1]", "user_parts.code[2]"]
    assert {e["source"] for e in d["compacted"]} == {"user_parts.code"}
    [call] = events(r, "MODEL_CALL")
    user = call["messages"][-1]["content"]
    # Headers stay (each block is still read and cited as its node), texts are pointers.
    for k in range(3):
        assert f"id: proc{k}\npath: src/proc{k}.sql" in user
    # A summary is the text's opening (extractive): the blocks' last lines are gone.
    assert "where id = 27;" not in user and "select doc13 from t1" in user
    assert user.count("[ELIDED ptr-") == 3
    # The pack's drop report: reason compaction, the ids, the tokens saved, full coverage.
    [pack] = r.packs
    drops = [x for x in pack["drops"]["items"] if x["reason"] == "compaction"]
    assert [x["id"] for x in drops] == ids
    assert [x["pointer_id"] for x in drops] == [e["pointer_id"] for e in d["compacted"]]
    assert all(x["by"] == "context_policy.compact" for x in drops)
    saved = sum(x["tokens_saved"] for x in drops)
    assert saved == sum(e["tokens_before"] - e["tokens_after"] for e in d["compacted"]) > 100
    removed = d["compacted_tokens_before"] - d["prompt_tokens"]
    assert pack["drops"]["tokens_removed"] == removed
    packs.assert_coverage(pack)


def test_compaction_is_deterministic_offline(tmp_path):
    a = events(ask(tmp_path / "a", {"at": 0.8}), "MODEL_CALL")[0]["messages"]
    b = events(ask(tmp_path / "b", {"at": 0.8}), "MODEL_CALL")[0]["messages"]
    assert a == b


def test_under_its_trigger_nothing_is_compacted(tmp_path):
    r = ask(tmp_path, {"at": 0.9})
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["compacted_by"] is None and d["compaction_trigger"] is None
    assert d["compacted"] == [] and d["prompt_tokens"] == d["compacted_tokens_before"]
    [pack] = r.packs
    assert not [x for x in pack["drops"]["items"] if x["reason"] == "compaction"]


def test_max_items_triggers_by_block_count(tmp_path):
    r = ask(tmp_path, {"at": 1.0, "max_items": 2})
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert d["compacted_tokens_before"] < d["budget"]  # at 1.0: not the size, the count
    assert d["compaction_trigger"] == "max_items"
    # Five whole blocks: the first source's three go, two are left (the question never goes).
    assert [e["id"] for e in d["compacted"]] == [f"user_parts.code[{k}]" for k in range(3)]
    assert d["prompt_tokens"] < d["compacted_tokens_before"]
    r = ask(tmp_path / "more", {"at": 1.0, "max_items": 5})
    assert events(r, "CONTEXT_BUDGET_DECISION")[0]["compacted"] == []


def test_after_tool_call_compacts_before_the_next_round(tmp_path):
    # Short summaries, so a doc block's pointer is smaller than the block.
    r = ask(
        tmp_path,
        {"at": 0.8, "after_tool_call": True},
        policy={"summary_tokens": 32},
        tools=["rehydrate"],
    )
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    assert [e["id"] for e in d["compacted"]][:1] == ["user_parts.code[0]"]
    # The model read a pointer through rehydrate; before the next round the rest went.
    [c] = events(r, "CONTEXT_COMPACTED")
    assert c["round"] == 1 and c["compacted_by"] == "after_tool_call"
    assert [e["id"] for e in c["compacted"]] == ["user_parts.docs[0]", "user_parts.docs[1]"]
    assert c["tokens_after"] < c["tokens_before"]
    [call] = events(r, "MODEL_CALL")
    user = [m for m in call["messages"] if m["role"] == "user"][-1]["content"]
    assert "select doc13 from t1" not in user and "id: doc1\npath: src/doc1.sql" in user
    # The tool's result stays whole: the model asked for it.
    assert any(m["role"] == "tool" and "select proc" in m["content"] for m in call["messages"])


def test_validate_names_a_bad_fraction_or_count_with_its_position(tmp_path):
    from click.testing import CliRunner

    from runtime.cli import cli

    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Be brief.\n")
    path = tmp_path / "p.yaml"
    path.write_text(
        "settings:\n"
        "  entry_step_id: ask\n"
        "  context_policy: {compact: {at: 1.5}}\n"
        "steps:\n"
        "  - id: ask\n"
        "    action: call_model\n"
        "    prompt_key: sys\n"
        "    context_policy:\n"
        "      compact: {at: 0, max_items: 0, after_tool_call: sometimes}\n"
        "    next: f\n"
        "  - {id: f, action: finalize, source: last_model_response}\n"
    )
    out = CliRunner().invoke(cli, ["validate", str(path)])
    assert out.exit_code == 1, out.output
    assert f"{path}:3:34: error SCHEMA_RANGE `at`: 1.5 is greater than the maximum of 1" in (
        out.stdout
    )
    assert f"{path}:9:21: error SCHEMA_RANGE `at`: 0 " in out.stdout
    assert f"{path}:9:35: error SCHEMA_RANGE `max_items`: 0 is less than the minimum of 1" in (
        out.stdout
    )
    assert f"{path}:9:55: error SCHEMA_TYPE `after_tool_call` must be a boolean" in out.stdout
    ok = path.read_text().replace("1.5", "0.8").replace("at: 0,", "at: 0.7,")
    path.write_text(ok.replace("max_items: 0", "max_items: 12").replace("sometimes", "true"))
    assert CliRunner().invoke(cli, ["validate", str(path)]).exit_code == 0


def test_sources_first_then_the_oldest_thread_turns_until_under_the_trigger():
    from runtime.context import policy as pol
    from runtime.context.pointers import MemoryPointerStore
    from runtime.context.tokens import get_counter

    counter = get_counter("cl100k_base")
    text = "".join(f"line {i}: the answer names table t{i} and its writer.\n" for i in range(60))

    def prompt() -> list[pol.PromptMessage]:
        return [
            pol.PromptMessage("system", ["Answer."]),
            pol.PromptMessage("assistant", [pol.Segment("assistant[1]", "old " + text)]),
            pol.PromptMessage("assistant", [pol.Segment("assistant[2]", "new " + text)]),
            pol.PromptMessage(
                "user",
                [
                    pol.Segment("user_parts.q", "which table?", summarizable=False),
                    "\n",
                    pol.Segment("user_parts.doc", "doc " + text),
                ],
            ),
        ]

    whole = pol.prompt_tokens(prompt(), counter, 4)
    kept: list[list[str]] = []
    for at in (0.9, 0.6, 0.4):
        messages = prompt()
        out = pol.compact_prompt(
            messages,
            whole,
            counter,
            at=at,
            store=MemoryPointerStore(),
            run_id="r",
            overhead=4,
            summary_tokens=60,
        )
        assert out.fired == "at" and out.tokens_after <= at * whole
        assert out.tokens_after == pol.prompt_tokens(messages, counter, 4)
        kept.append([e["id"] for e in out.entries])
        # The question is never compacted.
        assert messages[3].segments()[0].pointer is None
    # The step's part (a source) first; then the oldest turn, then the next.
    assert kept == [
        ["user_parts.doc"],
        ["user_parts.doc", "assistant[1]"],
        ["user_parts.doc", "assistant[1]", "assistant[2]"],
    ]


def test_a_payload_compacted_again_on_a_later_call_is_counted_once():
    from types import SimpleNamespace

    from actions import _budget
    from runtime.context import policy as pol
    from runtime.context.pointers import MemoryPointerStore
    from runtime.context.tokens import get_counter

    counter = get_counter("cl100k_base")
    text = "".join(f"line {i}: the answer names table t{i} and its writer.\n" for i in range(60))
    counts: dict[str, int] = {}
    ctx = SimpleNamespace(
        run_id="r", increment=lambda k, n=1: counts.__setitem__(k, counts.get(k, 0) + n)
    )
    store = MemoryPointerStore()
    cfg = pol.PolicyConfig(enabled=True, summary_tokens=60, compact={"at": 0.5})
    for call in range(2):
        prompt = [pol.PromptMessage("user", [pol.Segment("user_parts.doc", text)])]
        out = _budget._auto_compact(ctx, prompt, cfg, 1000, counter, store, 4, True)
        [entry] = out.entries
        assert counts == {
            "compactions": 1,
            "tokens_saved": entry["tokens_before"] - entry["tokens_after"],
        }, call


# --- hierarchical levels (runtime/context/hierarchy.py) -----------------------------------


def test_a_cluster_then_the_session_only_when_the_level_before_left_it_over(tmp_path):
    levels = {}
    for at in (0.8, 0.5, 0.3):
        r = ask(tmp_path / str(at), {"at": at})
        [d] = events(r, "CONTEXT_BUDGET_DECISION")
        levels[at] = d["compaction_levels"]
        assert d["prompt_tokens"] <= at * d["budget"]
        [pack] = r.packs
        packs.assert_coverage(pack)
        drops = {x["id"]: x for x in pack["drops"]["items"] if x["reason"] == "compaction"}
        # Each compacted payload's drop says the level it ended at and why.
        assert {i: x["level"] for i, x in drops.items()} == {
            e["id"]: e["level"] for e in d["compacted"]
        }
        assert all(
            x["level_reason"].startswith(("per source:", "per cluster:", "whole session:"))
            for x in drops.values()
        )
        items = {i["id"]: i for s in pack["sections"] for i in s["items"]}
        for e in d["compacted"]:
            node = e["id"].replace("user_parts.code[", "proc").replace("user_parts.docs[", "doc")
            assert items[node.rstrip("]")]["compaction_level"] == e["level"]
    assert levels == {0.8: [1], 0.5: [1, 2], 0.3: [1, 2, 3]}


def test_the_session_block_and_every_member_reach_the_model_as_data_with_their_headers(
    tmp_path,
):
    r = ask(tmp_path, {"at": 0.3})
    [d] = events(r, "CONTEXT_BUDGET_DECISION")
    session = d["compaction_folds"][-1]
    assert session["level"] == 3 and len(session["members"]) == 5
    [call] = events(r, "MODEL_CALL")
    system, user = call["messages"][0]["content"], call["messages"][-1]["content"]
    assert "ELIDED" not in system
    assert user.count(f"[ELIDED {session['pointer_id']}: session of 5 items") == 1
    for k in range(3):
        assert f"id: proc{k}\npath: src/proc{k}.sql\ntext:\n" in user
        assert f"[proc{k}]" in user  # cited in the session's digest


def test_every_original_of_a_session_is_two_rehydrations_away_in_the_run_store(tmp_path):
    import re

    r, store = run(
        tmp_path,
        {"user_parts": PARTS, "max_output_tokens": 248},
        INPUTS,
        settings={"context_policy": {"enabled": True, "compact": {"at": 0.3}}},
        store=True,
    )
    assert r.status == "completed", r.error
    [d] = [e for e in store.events("t") if e["type"] == "CONTEXT_BUDGET_DECISION"]
    session = d["compaction_folds"][-1]["pointer_id"]
    _, listing = store.get_original("t", session)
    members = re.findall(r"^\d+\. (\S+) \((\S+)\): (ptr-[0-9a-f]{16})$", listing, re.M)
    assert [sid for _, sid, _ in members] == [e["id"] for e in d["compacted"]]
    texts = [b.split("\ntext:\n", 1)[1] for b in INPUTS["code"] + INPUTS["docs"]]
    assert [store.get_original("t", p)[1] for _, _, p in members] == texts
    from tests.ledger_support import open_and_verify

    store.close()
    assert open_and_verify(str(tmp_path / "runs.db"), "t", None).ok


def test_a_key_in_a_compacted_block_reaches_no_pack_or_ledger_row(tmp_path, monkeypatch):
    import json
    import sqlite3

    key = "sk-test-" + "h26" * 12
    monkeypatch.setenv("COMPACT_TEST_KEY", key)
    planted = dict(INPUTS, code=[b + f"-- {key}\n" for b in INPUTS["code"]])
    r, store = run(
        tmp_path,
        {"user_parts": PARTS, "max_output_tokens": 248},
        planted,
        settings={
            "context_policy": {"enabled": True, "compact": {"at": 0.3}},
            "models": {
                "small": {
                    "provider": "extractive",
                    "context_window": 2048,
                    "api_key_env": "COMPACT_TEST_KEY",
                }
            },
        },
        store=True,
    )
    assert r.status == "completed", r.error
    decisions = [e for e in store.events("t") if e["type"] == "CONTEXT_BUDGET_DECISION"]
    assert [d["compaction_levels"] for d in decisions] == [[1, 2, 3]]
    store.close()
    db = sqlite3.connect(tmp_path / "runs.db")
    rows = [
        db.execute("SELECT * FROM run_context_packs").fetchall(),
        db.execute("SELECT * FROM run_ledger").fetchall(),
        db.execute("SELECT ledger_content FROM events WHERE ledger_content IS NOT NULL").fetchall(),
        decisions,
    ]
    db.close()
    assert all(rows[:3])
    assert key not in json.dumps(rows, default=repr)
