"""State defaults: a run starts with the variables its pipeline's actions declare (docs/format.md)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

import runtime
from runtime import docgen
from runtime.contract.action import Action, Outcome
from runtime.contract.registry import Registry, default_registry
from runtime.engine import Engine
from runtime.errors import ActionContractError
from runtime.format.pipeline import Pipeline


class Collect(Action):
    """Appends the step id to `blocks` in place (as careless actions do) and reads `mode`."""

    name = "collect"
    runnable = True
    defaults: ClassVar[dict[str, Any]] = {"blocks": [], "mode": "plain"}

    def run(self, ctx: Any) -> Outcome | None:
        blocks = ctx.get("blocks")
        blocks.append(ctx.step_id)
        ctx.set("blocks", blocks)
        ctx.set("seen_mode", ctx.get("mode"))
        return None


class Unused(Action):
    """Registered but not used by the pipelines below."""

    name = "unused"
    runnable = True
    defaults: ClassVar[dict[str, Any]] = {"other": 1}


class SameBlocks(Action):
    name = "same_blocks"
    runnable = True
    defaults: ClassVar[dict[str, Any]] = {"blocks": []}

    def run(self, ctx: Any) -> Outcome | None:
        return None


class OtherBlocks(Action):
    name = "other_blocks"
    runnable = True
    defaults: ClassVar[dict[str, Any]] = {"blocks": {}}


class Owned(Action):
    name = "owned"
    runnable = True
    defaults: ClassVar[dict[str, Any]] = {"last_error": None}


class NotJson(Action):
    name = "not_json"
    runnable = True
    defaults: ClassVar[dict[str, Any]] = {"when": {1, 2}}


REG = Registry.from_classes(Collect, Unused, SameBlocks, OtherBlocks, Owned, NotJson)


def pipeline(*actions: str, inputs: dict[str, Any] | None = None) -> Pipeline:
    steps = [{"id": f"s{i}", "action": a, "next": f"s{i + 1}"} for i, a in enumerate(actions)]
    steps[-1] = {"id": steps[-1]["id"], "action": steps[-1]["action"], "end": True}
    data: dict[str, Any] = {"name": "p", "settings": {"entry_step_id": "s0"}, "steps": steps}
    if inputs is not None:
        data["inputs"] = inputs
    return Pipeline.from_dict(data)


def test_a_run_starts_with_the_defaults_of_the_actions_it_uses_only():
    result = Engine(pipeline("collect"), registry=REG).run({})
    assert result.status == "completed", result.error
    assert result.state == {"blocks": ["s0"], "mode": "plain", "seen_mode": "plain"}
    assert "other" not in result.state  # `unused` declares it, but no step uses `unused`
    [started] = [e for e in result.events if e["type"] == "RUN_STARTED"]
    assert (started["inputs"], started["defaults"]) == ([], ["blocks", "mode"])


def test_an_input_wins_over_a_default():
    result = Engine(pipeline("collect"), registry=REG).run({"mode": "strict", "blocks": ["x"]})
    assert result.state == {"blocks": ["x", "s0"], "mode": "strict", "seen_mode": "strict"}
    [started] = [e for e in result.events if e["type"] == "RUN_STARTED"]
    assert (started["inputs"], started["defaults"]) == (["blocks", "mode"], [])


def test_a_declared_input_default_wins_over_an_action_default():
    p = pipeline("collect", inputs={"mode": {"type": "string", "default": "declared"}})
    assert Engine(p, registry=REG).run({}).state["seen_mode"] == "declared"


def test_every_run_gets_its_own_copy_of_a_default():
    engine = Engine(pipeline("collect", "collect"), registry=REG)
    assert engine.run({}).state["blocks"] == ["s0", "s1"]
    assert engine.run({}).state["blocks"] == ["s0", "s1"]  # not ["s0", "s1", "s0", "s1"]


def test_two_actions_agreeing_on_a_default_share_it():
    result = Engine(pipeline("same_blocks", "collect"), registry=REG).run({})
    assert result.state["blocks"] == ["s1"]


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        (
            ("collect", "other_blocks"),
            "actions 'collect' and 'other_blocks' declare different defaults for 'blocks': "
            "[] and {}",
        ),
        (("owned",), "action 'owned' declares a default for engine-owned 'last_error'"),
        (
            ("not_json",),
            "action 'not_json': default of 'when' is not JSON: "
            "Object of type set is not JSON serializable",
        ),
    ],
)
def test_a_broken_default_is_refused_before_the_first_step(actions, message):
    with pytest.raises(ActionContractError) as info:
        Engine(pipeline(*actions), registry=REG)
    assert (info.value.code, info.value.message) == ("ACTION_FAILED", message)


def test_a_run_killed_before_its_first_checkpoint_resumes_with_the_defaults(tmp_path):
    p = pipeline("collect")
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    store.create_run("k", p, {"mode": "strict"})  # as if killed before the first checkpoint
    resumed = Engine(p, registry=REG, store=store).resume("k")
    assert resumed.status == "completed", resumed.error
    assert resumed.state == {"blocks": ["s0"], "mode": "strict", "seen_mode": "strict"}


def test_the_defaults_table_in_the_format_docs_is_generated_from_the_actions():
    page = (docgen.ROOT / "docs" / "format.md").read_text(encoding="utf-8")
    table = docgen.defaults_table()
    assert table in page
    assert "| `context_blocks` | `[]` | `call_model`, `manage_context_budget` |" in table


def test_the_built_in_retrieval_actions_declare_their_defaults():
    reg = default_registry()
    assert reg.get("manage_context_budget").defaults == {"context_blocks": [], "node_texts": []}
    assert reg.get("search_nodes").defaults == {"retrieval_queries_asked": []}
