"""The action registry: given classes, entry points, failing plugins."""

from __future__ import annotations

from runtime.contract.action import ActionInfo
from runtime.contract.registry import Registry, default_registry
from runtime.format.source import SourceMap
from runtime.format.validation import check_pipeline

BUILTINS = {
    "search_nodes",
    "expand_dependency_tree",
    "fetch_node_texts",
    "manage_context_budget",
    "loop_guard",
    "set_variables",
    "json_decision_router",
    "inbox_dispatcher",
    "call_model",
    "repeat_query_guard",
    "prefix_router",
    "load_conversation_history",
    "finalize",
}


def test_builtins_load_through_the_entry_point_group():
    reg = Registry.from_entry_points()
    infos = {i.name: i for i in reg.infos()}
    assert set(infos) >= BUILTINS
    for name in BUILTINS:
        assert infos[name].error is None, infos[name].error
        assert infos[name].source == "builtin"
        assert infos[name].cls is not None and infos[name].cls.name == name


def test_default_registry_is_loaded_once():
    assert default_registry() is default_registry()


def test_a_failing_plugin_becomes_a_diagnostic_naming_its_distribution(registry):
    broken = Registry(
        [
            *registry.infos(),
            ActionInfo("fancy", None, "acme-actions", error="ImportError: no module named acme"),
        ]
    )
    data = {
        "settings": {"entry_step_id": "a"},
        "steps": [{"id": "a", "action": "fancy", "next": "b"}, {"id": "b", "action": "finish"}],
    }
    [d] = check_pipeline(data, SourceMap(data, "p.yaml"), broken)
    assert d.code == "ACTION_LOAD_FAILED"
    assert "acme-actions" in d.message and "ImportError" in d.message
    assert d.path == "$.steps[0].action"


def test_non_runnable_actions_are_refused_for_execution_only(registry):
    data = {
        "settings": {"entry_step_id": "a"},
        "steps": [
            {"id": "a", "action": "router", "routes": {}, "on_other": "b"},
            {"id": "b", "action": "finish"},
        ],
    }
    assert check_pipeline(data, SourceMap(data, "p.yaml"), registry) == []
    [d] = check_pipeline(data, SourceMap(data, "p.yaml"), registry, for_execution=True)
    assert d.code == "ACTION_NOT_RUNNABLE"
