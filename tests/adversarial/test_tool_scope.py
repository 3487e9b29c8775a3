"""A model never widens the run's scope through a tool's arguments (docs/tools.md).

The scripted model asks, through search_nodes / expand_dependency_tree / fetch_node_texts,
for another repository, snapshot or labels, for a path outside the author's filter, for
more results than allowed: each is refused (an error the model reads) or narrowed, and the
trace says which; nothing outside the caller's scope reaches a tool result.
"""

from __future__ import annotations

import pytest

from tests.actions.tool_support import call, run_tools, tool_events, tool_messages

CONFIDENTIAL = "eshop::main::procedure::dbo.usp_CapturePayment"
SCOPED = {"repository": "eshop", "snapshot": "main", "allowed_labels": []}


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": "CapturePayment", "repository": "other"},
        {"query": "CapturePayment", "snapshot": "dev"},
        {"query": "CapturePayment", "allowed_labels": ["confidential"]},
        {"query": "CapturePayment", "labels": ["confidential"]},
        {"query": "CapturePayment", "scope": {"repository": "other"}},
        {"query": "CapturePayment", "filters": {"repository": "other"}},
        {"query": "CapturePayment", "filters": {"labels": ["confidential"]}},
    ],
)
def test_scope_arguments_are_refused_and_nothing_runs(tmp_path, sample_index, arguments):
    turns = [{"tool_calls": [{"name": "search_nodes", "arguments": arguments}]}]
    result = run_tools(tmp_path, sample_index, ["search_nodes"], turns, inputs=SCOPED)
    (event,) = tool_events(result)
    assert event["error"] == "TOOL_ARGUMENTS_INVALID"
    assert "not allowed" in event["message"]
    assert not [e for e in result.events if e["type"] == "SEARCH"]


def test_labelled_nodes_stay_out_of_every_tool_result(tmp_path, sample_index):
    turns = [
        call("search_nodes", query="usp_CapturePayment CapturePayment payment"),
        call("expand_dependency_tree", max_depth=3, direction="both"),
        call("fetch_node_texts"),
    ]
    tools = ["search_nodes", "expand_dependency_tree", "fetch_node_texts"]
    settings = {"max_context_tokens": 6000}
    hidden = run_tools(tmp_path, sample_index, tools, turns, inputs=SCOPED, settings=settings)
    assert all(e["error"] is None for e in tool_events(hidden))
    assert CONFIDENTIAL not in "\n".join(tool_messages(hidden))
    assert CONFIDENTIAL not in str(hidden.state)
    (search,) = [e for e in hidden.events if e["type"] == "SEARCH"]
    assert search["scope"] == {"repository": "eshop", "snapshot": "main", "allowed_labels": []}
    # The same calls with the label allowed do find it: the test can tell right from wrong.
    allowed = {**SCOPED, "allowed_labels": ["confidential"]}
    shown = run_tools(tmp_path, sample_index, tools, turns, inputs=allowed, settings=settings)
    assert CONFIDENTIAL in "\n".join(tool_messages(shown))


def test_a_model_path_prefix_outside_the_authors_filter_is_ignored_and_traced(
    tmp_path, sample_index
):
    tools = [{"name": "search_nodes", "with": {"filters": {"path_prefix": "Database/"}}}]
    turns = [call("search_nodes", query="Order", filters={"path_prefix": "src/"})]
    result = run_tools(tmp_path, sample_index, tools, turns, inputs=SCOPED)
    (search,) = [e for e in result.events if e["type"] == "SEARCH"]
    assert search["ignored_model_filters"] == ["path_prefix"]
    assert search["filters"] == {"path_prefix": "Database/"}
    assert search["hits"] > 0
    (event,) = tool_events(result)
    assert all("::" in i for i in event["shown"])
    # Narrowing further (inside the author's prefix) is taken.
    turns = [call("search_nodes", query="Order", filters={"path_prefix": "Database/Tables/"})]
    result = run_tools(tmp_path, sample_index, tools, turns, inputs=SCOPED)
    (search,) = [e for e in result.events if e["type"] == "SEARCH"]
    assert search["filters"] == {"path_prefix": "Database/Tables/"}
    assert search["ignored_model_filters"] == []


def test_a_scope_in_the_query_text_is_only_words(tmp_path, sample_index):
    turns = [call("search_nodes", query="repository:other snapshot:dev Orders")]
    result = run_tools(tmp_path, sample_index, ["search_nodes"], turns, inputs=SCOPED)
    (search,) = [e for e in result.events if e["type"] == "SEARCH"]
    assert search["scope"]["repository"] == "eshop" and search["scope"]["snapshot"] == "main"


def test_a_tool_that_would_set_an_engine_owned_variable_is_refused():
    from types import SimpleNamespace

    from actions._tools import ToolContext
    from runtime.errors import StateError

    def refuse(name, value):
        raise StateError(f"may not overwrite {name}", code="STATE_PROTECTED")

    sub = ToolContext(SimpleNamespace(set=refuse), {}, {})
    with pytest.raises(StateError):
        sub.set("run_id", "x")
    assert sub.writes == {}
