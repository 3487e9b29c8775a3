"""The control actions, run through the engine on small real pipelines."""

from __future__ import annotations

from typing import Any

import pytest

from actions import _jsonish
from actions.set_variables import apply_transform
from runtime.contract.registry import default_registry
from runtime.engine import Engine
from runtime.errors import RunError
from runtime.format.pipeline import Pipeline
from runtime.format.source import SourceMap
from runtime.format.validation import check_pipeline


def run(steps: list[dict[str, Any]], inputs: dict[str, Any] | None = None, **settings: Any):
    data = {"settings": {"entry_step_id": steps[0]["id"], **settings}, "steps": steps}
    return Engine(Pipeline.from_dict(data)).run(inputs or {}, run_id="t")


def diags(steps: list[dict[str, Any]], **settings: Any) -> list[tuple[str, str]]:
    data = {"settings": {"entry_step_id": steps[0]["id"], **settings}, "steps": steps}
    return [
        (d.code, d.path)
        for d in check_pipeline(data, SourceMap(data, "p.yaml"), default_registry())
    ]


END = {"id": "end", "action": "finalize", "source": "x"}


# --- set_variables -------------------------------------------------------------


@pytest.mark.parametrize(
    "transform,value,current,expected",
    [
        ("copy", {"a": 1}, None, {"a": 1}),
        ("to_list", None, None, []),
        ("to_list", [1], None, [1]),
        ("to_list", "a", None, ["a"]),
        ("to_list", "  ", None, []),
        ("split_lines", " a \n\n b\n", None, ["a", "b"]),
        ("split_lines", None, None, []),
        ("parse_json", '{"a": [1]}', None, {"a": [1]}),
        ("to_context_blocks", None, None, []),
        ("to_context_blocks", " t ", None, [" t "]),
        ("to_context_blocks", ["a", " ", {"text": " b "}], None, ["a", "b"]),
        ("clear", "x", [1, 2], []),
        ("clear", "x", {"a": 1}, {}),
        ("clear", "x", "abc", ""),
        ("clear", "x", 5, None),
    ],
)
def test_transforms(transform, value, current, expected):
    assert apply_transform(transform, value, current) == expected


@pytest.mark.parametrize(
    "transform,value",
    [
        ("parse_json", "{nope"),
        ("parse_json", 3),
        ("split_lines", 3),
        ("to_context_blocks", [1]),
        ("to_context_blocks", 3),
    ],
)
def test_transform_errors(transform, value):
    with pytest.raises(RunError) as info:
        apply_transform(transform, value)
    assert info.value.code == "TRANSFORM_FAILED"


def test_set_variables_rules_apply_in_order_and_missing_from_fails():
    result = run(
        [
            {
                "id": "s",
                "action": "set_variables",
                "rules": [
                    {"set": "a", "value": "x\ny"},
                    {"set": "b", "from": "a", "transform": "split_lines"},
                    {"set": "x", "from": "b"},
                ],
                "next": "end",
            },
            END,
        ]
    )
    assert result.state["b"] == ["x", "y"] and result.output == {"final_answer": ["x", "y"]}
    failed = run(
        [
            {
                "id": "s",
                "action": "set_variables",
                "rules": [{"set": "a", "from": "nope"}],
                "next": "end",
            },
            END,
        ]
    )
    assert (failed.error.code, failed.error.step_id) == ("VARIABLE_MISSING", "s")


def test_set_variables_static_checks():
    found = diags(
        [
            {
                "id": "s",
                "action": "set_variables",
                "rules": [
                    {"set": "a", "value": 1, "from": "b"},
                    {"set": "last_error", "value": 1},
                    {"set": "a.b", "value": 1},
                ],
                "end": True,
            }
        ]
    )
    assert ("RULE_INVALID", "$.steps[0].rules[0]") in found
    assert ("PROTECTED_FIELD", "$.steps[0].rules[1].set") in found
    assert ("SCHEMA_PATTERN", "$.steps[0].rules[2].set") in found


# --- loop_guard ------------------------------------------------------------------


def test_loop_guard_counters_are_per_guard_step():
    steps = [
        {
            "id": "g1",
            "action": "loop_guard",
            "max_turn_loops": 2,
            "on_allow": "c1",
            "on_deny": "g2",
        },
        {"id": "c1", "action": "set_variables", "rules": [{"set": "x", "value": 1}], "next": "g1"},
        {"id": "g2", "action": "loop_guard", "on_allow": "c2", "on_deny": "end"},
        {"id": "c2", "action": "set_variables", "rules": [{"set": "x", "value": 2}], "next": "g2"},
        END,
    ]
    result = run(steps, max_turn_loops=3)
    assert result.steps == [
        "g1",
        "c1",
        "g1",
        "c1",
        "g1",
        "g2",
        "c2",
        "g2",
        "c2",
        "g2",
        "c2",
        "g2",
        "end",
    ]


def test_loop_guard_limit_from_settings_and_default():
    guard = {
        "id": "g",
        "action": "loop_guard",
        "max_turn_loops_from_settings": "n",
        "on_allow": "g",
        "on_deny": "end",
    }
    assert run([guard, END], {"x": 1}, n=1).steps == ["g", "g", "end"]
    plain = {"id": "g", "action": "loop_guard", "on_allow": "g", "on_deny": "end"}
    assert run([plain, END], {"x": 1}).steps.count("g") == 5
    assert ("SETTING_TYPE", "$.steps[0].max_turn_loops_from_settings") in diags([guard, END], n="x")


# --- json_decision_router ----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"decision": "Retrieve", "query": "orders"}',
        '```json\n{"decision": "retrieve", "query": "orders"}\n```',
        "{decision: 'retrieve', query: 'orders',}",
        'Sure! {"route": "RETRIEVE", "query": "orders"} hope that helps',
        "{'mode': 'retrieve', 'query': 'orders'}",
    ],
)
def test_router_tolerant_parsing(text):
    steps = [
        {
            "id": "r",
            "action": "json_decision_router",
            "routes": {"retrieve": "a", "answer": "b"},
            "on_other": "b",
        },
        {"id": "a", "action": "finalize", "source": "last_model_response"},
        {"id": "b", "action": "finalize", "source": "x"},
    ]
    result = run(steps, {"last_model_response": text, "x": "other"})
    assert result.steps == ["r", "a"]
    assert result.state["last_model_response"] == '{"query":"orders"}'


@pytest.mark.parametrize("text", ["not json at all", '{"decision": "dance"}', None])
def test_router_unknown_or_unparsable_goes_to_on_other(text):
    steps = [
        {"id": "r", "action": "json_decision_router", "routes": {"go": "a"}, "on_other": "b"},
        {"id": "a", "action": "finalize", "source": "x"},
        {"id": "b", "action": "finalize", "source": "x"},
    ]
    inputs = {"x": 1} if text is None else {"last_model_response": text, "x": 1}
    assert run(steps, inputs).steps == ["r", "b"]


def test_jsonish_keeps_quotes_inside_strings():
    assert _jsonish.parse("{'a': \"it's\", b: 'say \"hi\"',}") == {"a": "it's", "b": 'say "hi"'}


# --- inbox_dispatcher --------------------------------------------------------------


def test_dispatcher_allowlist_rename_rule_topic_and_unknown_targets():
    model = (
        '{"dispatch": ['
        '{"target": "fetch", "topic": "evil", "payload": {"prioritization_mode": "seed_first", '
        '"secret": 1}},'
        '{"target_step_id": "nowhere", "payload": {"a": 1}},'
        '{"id": "fetch", "mode": "graph_first"},'
        '{"target": "fetch", "payload": {"secret": 2}}]}'
    )
    steps = [
        {
            "id": "d",
            "action": "inbox_dispatcher",
            "next": "fetch",
            "rules": {
                "fetch": {
                    "topic": "tune",
                    "allow_keys": ["prioritization_mode", "mode"],
                    "rename": {"mode": "prioritization_mode"},
                }
            },
        },
        {
            "id": "fetch",
            "action": "set_variables",
            "rules": [{"set": "x", "value": 1}],
            "next": "end",
        },
        END,
    ]
    result = run(steps, {"last_model_response": model})
    consumed = [e["message"] for e in result.events if e["type"] == "INBOX_CONSUME"]
    assert [(m["topic"], m["payload"], m["sender_step_id"]) for m in consumed] == [
        ("tune", {"prioritization_mode": "seed_first"}, "d"),
        ("tune", {"prioritization_mode": "graph_first"}, "d"),
    ]
    [dispatch] = [e for e in result.events if e["type"] == "INBOX_DISPATCH"]
    assert dispatch["sent"] == 2 and len(dispatch["dropped"]) == 2


def test_dispatcher_unparsable_is_a_noop_and_rule_targets_are_validated():
    steps = [
        {
            "id": "d",
            "action": "inbox_dispatcher",
            "rules": {"ghost": {"topic": "t"}},
            "next": "end",
        },
        END,
    ]
    assert ("INBOX_TARGET_UNKNOWN", "$.steps[0].rules.ghost") in diags(steps)
    ok = [
        {"id": "d", "action": "inbox_dispatcher", "rules": {"end": {"topic": "t"}}, "next": "end"},
        END,
    ]
    result = run(ok, {"last_model_response": "no json here", "x": 1})
    assert result.status == "completed"


# --- prefix_router, repeat_query_guard, finalize, history ------------------------------


def test_prefix_router():
    steps = [
        {
            "id": "p",
            "action": "prefix_router",
            "on_other": "o",
            "routes": {
                "sql": {"prefix": "SQL:", "next": "s"},
                "cs": {"prefix": "CODE:", "next": "c"},
            },
        },
        {"id": "s", "action": "finalize", "source": "x"},
        {"id": "c", "action": "finalize", "source": "x"},
        {"id": "o", "action": "finalize", "source": "x"},
    ]
    assert run(steps, {"last_model_response": "  sql: select", "x": 1}).steps == ["p", "s"]
    assert run(steps, {"last_model_response": "CODE: x", "x": 1}).steps == ["p", "c"]
    assert run(steps, {"last_model_response": "other", "x": 1}).steps == ["p", "o"]


@pytest.mark.parametrize(
    "reply,repeat",
    [('{"query": "Orders  Table!"}', True), ('{"query": "customers"}', False), ("", True)],
)
def test_repeat_query_guard(reply, repeat):
    steps = [
        {"id": "g", "action": "repeat_query_guard", "on_ok": "ok", "on_repeat": "rep"},
        {"id": "ok", "action": "finalize", "source": "x"},
        {"id": "rep", "action": "finalize", "source": "x"},
    ]
    result = run(
        steps, {"last_model_response": reply, "retrieval_queries_asked": ["orders table"], "x": 1}
    )
    assert result.steps[-1] == ("rep" if repeat else "ok")


def test_finalize_sources_and_missing_answer():
    answer = run([{"id": "f", "action": "finalize"}], {"answer": "A"})
    assert answer.output == {"final_answer": "A"}
    last = run([{"id": "f", "action": "finalize"}], {"last_model_response": "L"})
    assert last.output == {"final_answer": "L"}
    # No answer: completed with a null answer and a NO_ANSWER warning event ...
    empty = run([{"id": "f", "action": "finalize"}], {"q": 1})
    assert (empty.status, empty.output) == ("completed", {"final_answer": None})
    [event] = [e for e in empty.events if e["type"] == "NO_ANSWER"]
    assert (event["severity"], event["step_id"]) == ("warning", "f")
    # ... unless the step requires one: then it fails as before.
    failed = run([{"id": "f", "action": "finalize", "require_answer": True}], {"q": 1})
    assert (failed.status, failed.error.code) == ("failed", "VARIABLE_MISSING")


def test_load_conversation_history():
    steps = [
        {"id": "h", "action": "load_conversation_history", "max_turns": 1, "next": "f"},
        {"id": "f", "action": "finalize", "source": "conversation_history"},
    ]
    turns = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    last_turn = [{"role": "assistant", "content": "b"}]
    assert run(steps, {"history": turns}).output == {"final_answer": last_turn}
    assert run(steps, {"q": 1}).output == {"final_answer": []}
    assert run(steps, {"history": [{"role": "robot"}]}).error.code == "VARIABLE_TYPE"
