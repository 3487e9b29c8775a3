"""Tool selection by retrieval: `tools: {select: auto, max, from}` (docs/tools.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actions._tool_select import bm25_scores, select, words
from tests.actions.tool_support import call, run_tools, tool_events

ROOT = Path(__file__).resolve().parent.parent.parent
FROM = ["search_nodes", "expand_dependency_tree", "fetch_node_texts", "rehydrate"]


def spec(name: str, description: str, *args: str) -> dict:
    props = {a: {"type": "string"} for a in args}
    return {
        "function": {"name": name, "description": description, "parameters": {"properties": props}}
    }


TOOLS = [
    ("git_log", spec("git_log", "List recent commits touching a path.", "path"), ("read_only",)),
    ("send_email", spec("send_email", "Send an email message.", "to", "body"), ("writes",)),
    ("read_file", spec("read_file", "Read a file by its path.", "path"), ("read_only",)),
    ("http_get", spec("http_get", "Fetch a web page by URL.", "url"), ("network",)),
]


def test_words_split_identifiers_and_stem_plurals_alike():
    assert words("usp_PlaceOrder procedures") == words("usp place orders procedure")
    assert "the" not in words("the commits")


def test_bm25_ranks_the_tool_whose_words_the_question_uses():
    scores = bm25_scores(
        "send the report by email",
        [
            tool_text
            for _, tool_text in [("a", "List recent commits"), ("b", "Send an email message")]
        ],
    )
    assert scores[1] > scores[0] == 0


def test_the_best_max_are_offered_and_the_rest_named_with_the_reason():
    chosen = select("show recent commits of this path", TOOLS, max_tools=2)
    assert chosen.offered[0] == "git_log" and len(chosen.offered) == 2
    reasons = {x["name"]: x["reason"] for x in chosen.not_offered}
    assert set(reasons) == {"send_email", "read_file", "http_get"} - set(chosen.offered)
    assert all(r == "ranked below the best 2" for r in reasons.values())
    assert chosen.scores["git_log"] > chosen.scores["send_email"]


def test_safety_tags_and_the_policy_filter_before_ranking():
    chosen = select(
        "send an email and fetch the web page",
        TOOLS,
        max_tools=4,
        deny_tags=["writes"],
        refusal=lambda name: (
            "tools of the network are not for this tenant" if name == "http_get" else None
        ),
    )
    assert "send_email" not in chosen.offered and "http_get" not in chosen.offered
    reasons = {x["name"]: x["reason"] for x in chosen.not_offered}
    assert reasons["send_email"] == "safety tag writes is denied"
    assert reasons["http_get"] == "access policy: tools of the network are not for this tenant"
    allowed = select("read the file", TOOLS, max_tools=4, allow_tags=["read_only"])
    assert set(allowed.offered) == {"git_log", "read_file"}
    assert {x["reason"] for x in allowed.not_offered} == {
        "safety tag writes is not allowed",
        "safety tag network is not allowed",
    }


def test_selection_is_deterministic_and_ties_keep_the_order_given():
    first = select("nothing matches zzz", TOOLS, max_tools=2)
    assert first.offered == ["git_log", "send_email"]
    assert select("nothing matches zzz", TOOLS, max_tools=2).trace() == first.trace()


def test_a_step_offers_what_selection_picks_and_traces_what_it_did_not(tmp_path, sample_index):
    tools = {"select": "auto", "max": 2, "from": FROM}
    result = run_tools(
        tmp_path,
        sample_index,
        tools,
        [call("search_nodes", query="OrderLines"), call("rehydrate", pointer_id="ptr-0")],
    )
    (selected,) = [e for e in result.events if e["type"] == "TOOLS_SELECTED"]
    assert selected["offered"][0] == "search_nodes" and len(selected["offered"]) == 2
    assert {x["name"] for x in selected["not_offered"]} == set(FROM) - set(selected["offered"])
    assert selected["question"].startswith("Which stored procedure")
    (offered,) = [e for e in result.events if e["type"] == "TOOLS_OFFERED"]
    assert [t["name"] for t in offered["tools"]] == selected["offered"]
    calls = tool_events(result)
    assert calls[0]["error"] is None
    if "rehydrate" not in selected["offered"]:
        assert calls[1]["error"] == "TOOL_UNKNOWN"  # not offered: not callable either


def test_the_subjects_policy_removes_a_tool(tmp_path, sample_index):
    tools = {"select": "auto", "max": 4, "from": FROM}
    result = run_tools(
        tmp_path,
        sample_index,
        tools,
        [],
        tool_policy=lambda name: "no graph for contractors" if name.startswith("expand") else None,
    )
    (selected,) = [e for e in result.events if e["type"] == "TOOLS_SELECTED"]
    assert "expand_dependency_tree" not in selected["offered"]
    assert {
        "name": "expand_dependency_tree",
        "reason": "access policy: no graph for contractors",
    } in (selected["not_offered"])


def test_select_all_offers_every_tool_the_tags_allow(tmp_path, sample_index):
    tools = {"select": "all", "from": FROM, "deny_tags": ["scoped"]}
    result = run_tools(tmp_path, sample_index, tools, [])
    (offered,) = [e for e in result.events if e["type"] == "TOOLS_OFFERED"]
    assert [t["name"] for t in offered["tools"]] == ["rehydrate"]


def test_the_expected_tool_is_offered_for_95_percent_of_the_golden_questions():
    from benchmarks.tool_selection import measure

    result = measure()
    data = json.loads((ROOT / "benchmarks" / "data" / "tool_questions.json").read_text())
    assert result["questions"] == len(data["questions"]) >= 40
    assert result["hit_rate"] >= 0.95, result["misses"]


@pytest.mark.parametrize("bad", [{"select": "auto", "max": 0, "from": FROM}])
def test_a_bad_max_is_a_schema_error(bad, tmp_path):
    from runtime.format.validation import validate_paths

    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("x")
    path = tmp_path / "p.yaml"
    path.write_text(
        "settings: {entry_step_id: ask}\nsteps:\n  - id: ask\n    action: call_model\n"
        f"    prompt_key: sys\n    tools: {json.dumps(bad)}\n    end: true\n"
    )
    errors = [d for d in validate_paths([str(path)]).diagnostics if d.severity == "error"]
    assert errors and errors[0].line == 6


def test_a_cedar_policy_of_the_run_keeps_a_tool_from_being_offered(tmp_path, sample_index):
    pytest.importorskip("cedarpy")
    (tmp_path / "p.cedar").write_text(
        'permit (principal, action, resource);\nforbid (principal, action == Action::"expand", resource);\n'
    )
    tools = {"select": "auto", "max": 4, "from": FROM}
    settings = {"access": {"engine": "cedar", "policies": "p.cedar"}}
    result = run_tools(tmp_path, sample_index, tools, [], settings=settings)
    assert result.status == "completed", result.error
    (selected,) = [e for e in result.events if e["type"] == "TOOLS_SELECTED"]
    assert "expand_dependency_tree" not in selected["offered"]
    (refused,) = [x for x in selected["not_offered"] if x["name"] == "expand_dependency_tree"]
    assert refused["reason"].startswith("access policy: ")
    assert {"search_nodes", "fetch_node_texts", "rehydrate"} <= set(selected["offered"])


def test_the_yaml_examples_of_docs_tools_md_validate(tmp_path):
    import re

    import yaml

    from runtime.format.validation import validate_paths

    page = (ROOT / "docs" / "tools.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", page, re.S)
    assert len(blocks) == 2
    step = yaml.safe_load(blocks[0])[0]
    select = yaml.safe_load(blocks[1])["tools"]
    (tmp_path / "prompts" / "roles").mkdir(parents=True)
    (tmp_path / "prompts" / "roles" / "retriever.md").write_text("Find it.")
    for tools in (step["tools"], select):
        data = {
            "settings": {"entry_step_id": "retrieve"},
            "inputs": {"question": {"type": "string"}},
            "steps": [
                {**step, "tools": tools, "next": "draft"},
                {"id": "draft", "action": "finalize", "source": "last_model_response"},
            ],
        }
        path = tmp_path / "p.yaml"
        path.write_text(yaml.safe_dump(data))
        errors = [d for d in validate_paths([str(path)]).diagnostics if d.severity == "error"]
        assert errors == []
