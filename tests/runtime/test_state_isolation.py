"""State a branch or a failed attempt cannot corrupt (issue 31, state isolation first).

A value an action reads from the run state is the run's, not the action's: an action that
changes a list or mapping it read in place and then fails leaves no trace of the change
for its retry or its catch; one that succeeds without writing the value back changes
nothing either. And a resumed run ends with the same state, in the same key order, and
prints the same `--json` as an uninterrupted one.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adversarial"))
from kill_support import cli, write_folder

import runtime
from runtime.contract.action import Action
from runtime.contract.registry import Registry, default_registry
from runtime.engine import Engine
from runtime.errors import RunError


class Mutate(Action):
    """Appends to the list it reads, in place; fails on its first attempt when told to."""

    name = "mutate"
    summary = "Append in place."
    fields: ClassVar[dict[str, dict[str, Any]]] = {
        "target": {"type": "string"},
        "fail_first": {"type": "boolean"},
        "write_back": {"type": "boolean"},
    }
    runnable = True
    outcomes: ClassVar[tuple[str, ...]] = ()

    def run(self, ctx: Any) -> None:
        items = ctx.get(ctx.step["target"])
        inner = items[0]
        if isinstance(inner, dict):
            inner["touched"] = ctx.attempt  # a nested mapping, changed in place
        items.append(f"attempt {ctx.attempt}")
        if ctx.step.get("fail_first") and ctx.attempt == 1:
            raise RunError("first attempt fails", code="ACTION_FAILED", step_id=ctx.step_id)
        if ctx.step.get("write_back"):
            ctx.set(ctx.step["target"], items)


def registry() -> Registry:
    base = default_registry()
    return Registry.from_classes(Mutate, *(base.get(n) for n in ("set_variables", "finalize")))


def pipeline(tmp_path: Path, step: dict[str, Any]) -> Any:
    data = {
        "name": "iso",
        "settings": {"entry_step_id": "prep"},
        "steps": [
            {
                "id": "prep",
                "action": "set_variables",
                "rules": [{"set": "items", "value": [{"k": 1}, "first"]}],
                "next": "m",
            },
            {"id": "m", "action": "mutate", "target": "items", **step, "next": "done"},
            {"id": "done", "action": "finalize", "end": True},
        ],
    }
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(data))
    return runtime.load(str(path), registry=registry())


def run(tmp_path: Path, step: dict[str, Any]) -> Any:
    p = pipeline(tmp_path, step)
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    return Engine(p, store=store, registry=registry()).run({}), store


def test_a_failed_attempt_that_mutated_its_input_leaves_state_unchanged(tmp_path):
    retry = {"retry": {"max_attempts": 2, "on": ["ACTION_FAILED"]}}
    result, _ = run(tmp_path, {"fail_first": True, "write_back": True, **retry})
    assert result.status == "completed", result.error
    # The retry saw the state as it was before the failed attempt, not with its append.
    assert result.state["items"] == [{"k": 1, "touched": 2}, "first", "attempt 2"]


def test_a_caught_failure_leaves_state_unchanged(tmp_path):
    catch = {"catch": {"ACTION_FAILED": "done"}}
    result, store = run(tmp_path, {"fail_first": True, **catch})
    assert result.status == "completed", result.error
    assert result.state["items"] == [{"k": 1}, "first"]
    assert store.load(result.run_id)["variables"]["items"] == [{"k": 1}, "first"]


def test_a_change_in_place_that_is_not_written_back_changes_nothing(tmp_path):
    result, store = run(tmp_path, {})
    assert result.status == "completed", result.error
    assert result.state["items"] == [{"k": 1}, "first"]
    assert store.load(result.run_id)["variables"]["items"] == [{"k": 1}, "first"]


PIPELINE = """\
name: order
settings: {entry_step_id: one}
inputs:
  question: {type: string}
steps:
  - id: one
    action: set_variables
    rules:
      - {set: a, value: 1}
      - {set: b, value: 2}
    next: two
  - id: two
    action: set_variables
    rules:
      - {set: a, value: 3}
      - {set: c, value: [x]}
    next: three
  - id: three
    action: set_variables
    rules:
      - {set: d, value: 4}
    next: done
  - id: done
    action: finalize
    end: true
"""


@pytest.mark.parametrize(
    "kill_at", ["checkpoint:1", "checkpoint:2", "checkpoint:3", "checkpoint:4", "checkpoint:5"]
)
def test_a_resumed_run_prints_the_same_json_as_an_uninterrupted_one(tmp_path, kill_at):
    folder = write_folder(tmp_path, PIPELINE, {}, {"question": "q"})
    args = ("--inputs", "in.json", "--run-id", "r", "--json")
    ref = cli(folder, "exec", "p.yaml", "--store", "ref.db", *args)
    assert ref.returncode == 0, ref.stderr
    killed = cli(folder, "exec", "p.yaml", "--store", "k.db", *args, kill_at=kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = cli(folder, "resume", "r", "--store", "k.db", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert list(json.loads(resumed.stdout)["state"]) == list(json.loads(ref.stdout)["state"])
    assert resumed.stdout == ref.stdout


def test_the_variables_view_hands_out_copies(tmp_path):
    from runtime.engine.step_context import _View

    data = {"items": [{"k": 1}], "n": 1}
    view = _View(data)
    got = view["items"]
    got[0]["k"] = 2
    got.append("x")
    assert data == {"items": [{"k": 1}], "n": 1}
    assert dict(view.items()) == data and len(view) == 2 and "n" in view
    with pytest.raises(TypeError):
        view["n"] = 2  # type: ignore[index]


def test_a_literal_is_the_runs_own_plain_value_not_the_pipelines(tmp_path):
    from runtime.format.source import LList, LMap

    p = pipeline(tmp_path, {})
    [rule] = p.step("prep").config["rules"]
    result, _ = run(tmp_path, {})
    items = result.state["items"]
    assert type(items) is list and type(items[0]) is dict  # not the loader's LList / LMap
    assert isinstance(rule["value"], LList) and isinstance(rule["value"][0], LMap)
