"""Fuzz what a model's tool call and an author's `tools:` parse: any arguments string is a
result or an error the model reads (never an exception, bounded size); any `tools:` value is
diagnostics (never a traceback)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actions import _tools
from runtime.context.tokens import get_counter
from runtime.models.base import ToolCall
from tests.actions.test_tools_as_actions import Lister, _ctx

COUNT = get_counter("cl100k_base").count
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
ARGUMENTS = st.one_of(
    st.text(max_size=200),
    JSONISH.map(lambda v: json.dumps(v)),
    st.dictionaries(st.sampled_from(["n", "repository", "x", "n "]), JSONISH, max_size=3).map(
        json.dumps
    ),
    st.integers(0, 20_000).map(lambda n: '{"n": ' + "[" * n + "]" * n + "}"),
)


def _one(arguments: str, name: str = "lister") -> tuple[str, dict[str, Any]]:
    ctx, events = _ctx()
    offered = {"lister": _tools.Offered("lister", Lister.tool, Lister, {})}
    text = _tools._run(ctx, ToolCall("c", name, arguments), 1, 2_000, COUNT, offered, {})
    ((_, event),) = [e for e in events if e[0] == "MODEL_TOOL_CALL"]
    return text, event


def check(arguments: str, name: str = "lister") -> None:
    text, event = _one(arguments, name)
    assert len(json.dumps(event)) < 4_000
    if event["error"] is None:
        assert COUNT(text) <= 2_000 and text.startswith("lister result:")
    else:
        assert text.startswith(f"error {event['error']}") and len(text) < 1_000


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ARGUMENTS, st.sampled_from(["lister", "lister ", "", "x" * 300]))
def test_any_arguments_are_a_result_or_an_error_the_model_reads(arguments, name):
    check(arguments, name)


@pytest.mark.slow
@settings(max_examples=2_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ARGUMENTS)
def test_any_arguments_over_more_examples(arguments):
    check(arguments)


TOOLS = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from(["search_nodes", "rehydrate", "loop_guard", "nope", "auto", ""]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["select", "max", "from", "name", "with", "deny_tags", "x"]),
            inner,
            max_size=3,
        )
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TOOLS)
def test_any_tools_value_is_diagnostics_never_a_traceback(tmp_path_factory, tools):
    from runtime.format.validation import validate_paths

    folder = tmp_path_factory.mktemp("fz")
    (folder / "prompts").mkdir()
    (folder / "prompts" / "sys.md").write_text("x")
    path = folder / "p.yaml"
    path.write_text(
        "settings: {entry_step_id: ask}\nsteps:\n  - id: ask\n    action: call_model\n"
        f"    prompt_key: sys\n    tools: {json.dumps(tools)}\n    end: true\n"
    )
    report = validate_paths([str(path)])
    assert all(d.code != "VALIDATION_CRASHED" for d in report.diagnostics), report.diagnostics
