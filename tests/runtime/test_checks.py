"""Graph checks as pure functions over plain data (no files, no YAML)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import codes
from runtime.format import checks


def _codes(steps, settings_, registry):
    return sorted((f.code, f.path) for f in checks.run_all(steps, settings_, registry))


def test_cycle_through_a_guard_is_bounded(registry):
    steps = [
        {"id": "a", "action": "noop", "next": "g"},
        {"id": "g", "action": "guard", "on_allow": "a", "on_deny": "z"},
        {"id": "z", "action": "finish"},
    ]
    assert _codes(steps, {"entry_step_id": "a"}, registry) == []


def test_cycle_that_bypasses_the_guard_is_reported(registry):
    # a -> b -> a never passes g, even though g is in the same strongly connected part.
    steps = [
        {"id": "a", "action": "router", "routes": {"x": "b", "y": "g"}, "on_other": "z"},
        {"id": "b", "action": "noop", "next": "a"},
        {"id": "g", "action": "guard", "on_allow": "a", "on_deny": "z"},
        {"id": "z", "action": "finish"},
    ]
    found = _codes(steps, {"entry_step_id": "a"}, registry)
    assert found == [("UNBOUNDED_CYCLE", ("steps", 0, "id"))]


def test_max_steps_setting_accepts_unbounded_cycles(registry):
    steps = [
        {"id": "a", "action": "router", "routes": {"x": "a"}, "on_other": "z"},
        {"id": "z", "action": "finish"},
    ]
    assert _codes(steps, {"entry_step_id": "a"}, registry) == [
        ("UNBOUNDED_CYCLE", ("steps", 0, "id"))
    ]
    assert _codes(steps, {"entry_step_id": "a", "max_steps": 50}, registry) == []


def test_catch_targets_are_transitions(registry):
    steps = [
        {"id": "a", "action": "noop", "next": "z", "catch": {"ALL": "recover"}},
        {"id": "recover", "action": "finish"},
        {"id": "z", "action": "finish"},
    ]
    assert _codes(steps, {"entry_step_id": "a"}, registry) == []


def test_a_step_with_only_a_catch_has_no_way_on(registry):
    steps = [{"id": "a", "action": "noop", "catch": {"ALL": "z"}}, {"id": "z", "action": "finish"}]
    assert ("NO_TRANSITION", ("steps", 0, "id")) in _codes(steps, {"entry_step_id": "a"}, registry)


def test_unknown_action_does_not_cascade_into_flow_errors(registry):
    steps = [{"id": "a", "action": "mystery", "on_done": "z"}, {"id": "z", "action": "finish"}]
    assert _codes(steps, {"entry_step_id": "a"}, registry) == []


def test_did_you_mean():
    assert checks.did_you_mean("serch", ["search", "answer"]) == "did you mean 'search'?"
    assert checks.did_you_mean("zzz", ["search"]) == ""


def test_large_linear_pipeline_has_no_findings(registry):
    steps = [{"id": f"s{i}", "action": "noop", "next": f"s{i + 1}"} for i in range(2000)]
    steps.append({"id": "s2000", "action": "finish"})
    assert _codes(steps, {"entry_step_id": "s0"}, registry) == []


_ids = st.sampled_from(["a", "b", "c", "d", "zz"])
_step = st.fixed_dictionaries(
    {"id": _ids, "action": st.sampled_from(["noop", "guard", "router", "finish", "bogus", 3])},
    optional={
        "next": _ids,
        "on_allow": _ids,
        "on_deny": _ids,
        "end": st.booleans(),
        "routes": st.dictionaries(st.text(max_size=3), _ids, max_size=3),
        "on_other": _ids,
        "catch": st.dictionaries(st.sampled_from(["ALL", "X"]), _ids, max_size=2),
    },
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(_step, max_size=8),
    st.dictionaries(
        st.sampled_from(["entry_step_id", "max_steps"]), st.one_of(_ids, st.integers()), max_size=2
    ),
)
@pytest.mark.slow
def test_fuzz_checks_only_yield_coded_findings(registry, steps, settings_):
    for f in checks.run_all(steps, settings_, registry):
        assert f.code in codes.CODES
