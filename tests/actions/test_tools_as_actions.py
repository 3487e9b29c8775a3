"""Actions as tools (docs/tools.md): faces, argument validation, budget of results, rounds."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from actions import _tools
from runtime.context.tokens import get_counter
from runtime.contract.action import Action
from runtime.contract.registry import default_registry
from runtime.contract.tool import ToolFace, face_problems
from runtime.format.validation import validate_paths
from runtime.models.base import ToolCall
from tests.actions.tool_support import call, raw_call, run_tools, tool_events, tool_messages

COUNT = get_counter("cl100k_base").count
FACED = ("search_nodes", "expand_dependency_tree", "fetch_node_texts", "rehydrate")


@pytest.mark.parametrize("name", FACED)
def test_the_retrieval_actions_and_rehydrate_have_a_usable_face(name):
    cls = default_registry().get(name)
    assert cls is not None and cls.tool is not None and cls.tool.name == name
    assert face_problems(cls.tool, cls.fields) == []
    spec = cls.tool.spec()["function"]
    assert spec["parameters"]["additionalProperties"] is False
    for scope in ("repository", "snapshot", "allowed_labels"):
        assert scope not in spec["parameters"].get("properties", {})


def test_a_face_that_names_a_scope_field_or_an_unknown_field_is_reported():
    face = ToolFace(
        "x",
        "d",
        {
            "type": "object",
            "properties": {"repository": {"type": "string"}, "nope": {"type": "string"}},
            "additionalProperties": False,
        },
    )
    problems = face_problems(face, {"repository": {}})
    assert any("scope field" in p for p in problems)
    assert any("'nope' is neither" in p for p in problems)


def test_search_expand_fetch_through_tools_in_several_rounds(tmp_path, sample_index):
    turns = [
        call("search_nodes", query="OrderLines"),
        call("search_nodes", query="usp_PlaceOrder"),
        call("expand_dependency_tree", max_depth=1),
        call("fetch_node_texts"),
    ]
    tools = ["search_nodes", "expand_dependency_tree", "fetch_node_texts"]
    result = run_tools(tmp_path, sample_index, tools, turns, settings={"max_context_tokens": 4000})
    assert result.status == "completed", result.error
    events = tool_events(result)
    assert [e["tool"] for e in events] == [
        "search_nodes",
        "search_nodes",
        "expand_dependency_tree",
        "fetch_node_texts",
    ]
    assert [e["round"] for e in events] == [1, 2, 3, 4]
    assert all(e["error"] is None and e["tokens"] > 0 for e in events)
    # Each result's tokens are the real tokenizer's count of what the model was sent.
    sent = tool_messages(result)
    assert [e["tokens"] for e in events] == [COUNT(t) for t in sent]
    # The two searches' seeds accumulate; the fetched texts are evidence, framed as data.
    seeds = result.state["retrieval_seed_nodes"]
    assert "eshop::main::table::dbo.OrderLines" in seeds
    assert "eshop::main::procedure::dbo.usp_PlaceOrder" in seeds
    assert "<evidence>" in sent[-1] and "--- NODE ---" in sent[-1]
    fetched = [t["id"] for t in result.state["node_texts"]]
    assert fetched == events[-1]["shown"] and fetched
    offered = [e for e in result.events if e["type"] == "TOOLS_OFFERED"]
    assert [t["name"] for t in offered[0]["tools"]] == [
        "search_nodes",
        "expand_dependency_tree",
        "fetch_node_texts",
    ]
    assert all(t["tokens"] > 20 for t in offered[0]["tools"])


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"top_k": 3}', "'query' is a required property"),
        ('{"query": 7}', "query: 7 is not of type 'string'"),
        ('{"query": "x", "top_k": 0}', "top_k: 0 is less than the minimum of 1"),
        ('{"query": "x", "limit": 3}', "Additional properties are not allowed ('limit'"),
        ('{"query": "x", "filters": {"kind": 5}}', "filters/kind: 5 is not of type"),
        ("[1, 2]", "the arguments are not a JSON object"),
        ("{not json", "the arguments are not a JSON object"),
    ],
)
def test_bad_arguments_are_an_error_the_model_reads_and_nothing_runs(
    tmp_path, sample_index, arguments, expected
):
    result = run_tools(
        tmp_path, sample_index, ["search_nodes"], [raw_call("search_nodes", arguments)]
    )
    assert result.status == "completed", result.error
    (event,) = tool_events(result)
    assert event["error"] == "TOOL_ARGUMENTS_INVALID" and expected in event["message"]
    (message,) = tool_messages(result)
    assert message.startswith("error TOOL_ARGUMENTS_INVALID") and expected in message
    assert not [e for e in result.events if e["type"] == "SEARCH"]  # the action never ran
    assert "retrieval_seed_nodes" not in result.state


def test_a_tool_not_offered_is_refused(tmp_path, sample_index):
    result = run_tools(tmp_path, sample_index, ["search_nodes"], [call("fetch_node_texts")])
    (event,) = tool_events(result)
    assert event["error"] == "TOOL_UNKNOWN"
    assert not [e for e in result.events if e["type"] == "FETCH_NODE_TEXTS"]


def test_a_failing_tool_call_keeps_nothing_it_staged(tmp_path, sample_index):
    # search_type auto with no type anywhere: the action fails after its checks
    tools = [{"name": "search_nodes", "with": {"search_type": "auto"}}]
    result = run_tools(tmp_path, sample_index, tools, [call("search_nodes", query="Orders")])
    (event,) = tool_events(result)
    assert event["error"] == "SEARCH_TYPE_UNRESOLVED"
    assert "retrieval_hits" not in result.state


def test_ceilings_only_lower_and_fixed_fields_stay(tmp_path, sample_index):
    tools = [
        {"name": "search_nodes", "with": {"top_k": 3}},
        {"name": "expand_dependency_tree", "with": {"max_depth": 1, "direction": "out"}},
    ]
    turns = [
        call("search_nodes", query="Orders", top_k=40),
        call("expand_dependency_tree", max_depth=5, direction="both"),
    ]
    result = run_tools(tmp_path, sample_index, tools, turns)
    search, expand = tool_events(result)
    (searched,) = [e for e in result.events if e["type"] == "SEARCH"]
    assert searched["top_k"] == 3 and len(search["shown"]) <= 3  # a payload never raises it
    (expanded,) = [e for e in result.events if e["type"] == "EXPAND"]
    assert expanded["max_depth"] == 1 and expanded["direction"] == "out"
    assert expand["narrowed"] == {
        "max_depth": {"asked": 5, "given": 1},
        "direction": {"asked": '"both"', "given": "out"},
    }


def test_rounds_stay_bounded(tmp_path, sample_index):
    turns = [call("search_nodes", query=f"q{n}") for n in range(5)]
    result = run_tools(tmp_path, sample_index, ["search_nodes"], turns, rounds=2)
    assert len(tool_events(result)) == 2
    assert result.status == "failed" and result.error.code == "MODEL_TOOL_ROUNDS_EXCEEDED"


# --- budget accounting of tool results ------------------------------------------------


class Lister(Action):
    """A third-party action with a tool face: writes `found`, a list of node records."""

    name = "lister"
    fields = {"n": {"type": "integer", "minimum": 1}}
    writes = ("found",)
    runnable = True
    tool = ToolFace(
        "lister",
        "List n nodes.",
        {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 50}},
            "additionalProperties": False,
        },
        result=("found",),
        items="found",
    )

    def run(self, ctx: Any) -> None:
        n = int(ctx.step.get("n", 5))
        ctx.set("found", [{"id": f"node-{i}", "text": f"text of node {i} " * 3} for i in range(n)])


def _ctx() -> tuple[Any, list[tuple[str, dict[str, Any]]]]:
    state: dict[str, Any] = {}
    events: list[tuple[str, dict[str, Any]]] = []
    ctx = SimpleNamespace(
        step_id="s",
        run_id="r",
        settings={},
        inputs={},
        get=lambda name, default=...: state[name] if default is ... else state.get(name, default),
        has=lambda name: name in state,
        set=state.__setitem__,
        trace=lambda event, **data: events.append((event, data)),
    )
    return ctx, events


def _call(room: int) -> tuple[str, dict[str, Any]]:
    ctx, events = _ctx()
    offered = {"lister": _tools.Offered("lister", Lister.tool, Lister, {})}
    text = _tools._run(
        ctx, ToolCall("c1", "lister", json.dumps({"n": 5})), 1, room, COUNT, offered, {}
    )
    ((_, event),) = [e for e in events if e[0] == "MODEL_TOOL_CALL"]
    return text, event


def test_a_result_at_the_budget_is_whole_and_one_token_over_is_cut_and_traced():
    whole, event = _call(10_000)
    exact = COUNT(whole)
    assert event["tokens"] == exact and "cut" not in event
    at_limit, event = _call(exact)
    assert at_limit == whole and event["shown"] == [f"node-{i}" for i in range(5)]
    assert "cut" not in event
    over, event = _call(exact - 1)
    assert COUNT(over) <= exact - 1 and event["tokens"] == COUNT(over)
    assert event["cut"] and event["shown"] + event["cut"] == [f"node-{i}" for i in range(5)]
    assert "over the" in event["cut_reason"]
    # The model is told what was cut, by id: never a silent cut.
    assert all(i in over for i in event["cut"]) and "cut to fit the prompt budget" in over


def test_a_result_that_cannot_fit_even_empty_is_refused():
    text, event = _call(5)
    assert event["error"] == "CONTEXT_OVERFLOW" and text.startswith("error CONTEXT_OVERFLOW")


# --- validation -----------------------------------------------------------------------

PIPE = """\
settings: {{entry_step_id: ask}}
steps:
  - id: ask
    action: call_model
    prompt_key: sys
    tools: {tools}
    next: done
  - id: done
    action: finalize
    source: last_model_response
"""


def _problems(tools: str, tmp_path: Any) -> list[Any]:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer.")
    path = tmp_path / "p.yaml"
    path.write_text(PIPE.format(tools=tools))
    report = validate_paths([str(path)])
    return [d for d in report.diagnostics if d.severity == "error"]


@pytest.mark.parametrize(
    ("tools", "code", "line", "col"),
    [
        ("[search_nodez]", "TOOL_UNKNOWN", 6, 13),
        ("[loop_guard]", "TOOL_NOT_A_TOOL", 6, 13),
        ("[search_nodes, search_nodes]", "TOOL_CONFIG_INVALID", 6, 27),
        ("[{name: search_nodes, with: {repository: other}}]", "TOOL_CONFIG_INVALID", 6, 41),
        ("[{name: search_nodes, with: {top_kk: 3}}]", "TOOL_CONFIG_INVALID", 6, 41),
        ("[{name: search_nodes, with: {top_k: 0}}]", "TOOL_CONFIG_INVALID", 6, 48),
        ("{select: auto, max: 2, from: [nope]}", "TOOL_UNKNOWN", 6, 42),
        ("rehydrate", "SCHEMA_TYPE", 6, 12),
        ("{select: auto}", "SCHEMA_MISSING_FIELD", 6, 12),
        ("[{tool: search_nodes}]", "SCHEMA_INVALID", 6, 13),
        ("[fetch_node_texts]", "BUDGET_SETTING_MISSING", 6, 13),
    ],
)
def test_tools_validation_errors_are_at_their_line(tools, code, line, col, tmp_path):
    problems = _problems(tools, tmp_path)
    assert problems, tools
    first = problems[0]
    assert first.code == code, problems
    assert (first.line, first.column) == (line, col), first


def test_a_third_party_action_with_a_face_is_offered_through_the_registry(tmp_path):
    registry = default_registry()
    registry.register(Lister, source="third-party")
    try:
        assert _problems("[lister]", tmp_path) == []
        assert [t.name for t in _tools.resolve(["lister"])] == ["lister"]
    finally:
        registry._infos.pop("lister", None)


def test_the_offered_specs_count_against_the_room_of_a_result(tmp_path, sample_index):
    turns = [call("search_nodes", query="OrderLines")]

    def first(tools: list[str]) -> tuple[int, int]:
        result = run_tools(tmp_path, sample_index, tools, turns)
        (offered,) = [e for e in result.events if e["type"] == "TOOLS_OFFERED"]
        return tool_events(result)[0]["room"], sum(t["tokens"] for t in offered["tools"])

    room_one, specs_one = first(["search_nodes"])
    room_three, specs_three = first(["search_nodes", "expand_dependency_tree", "fetch_node_texts"])
    assert specs_three > specs_one
    assert room_one - room_three == specs_three - specs_one
