"""`type: map` and `type: parallel` steps (issue 31): branches really run at once, on
isolated state, with results in order, fail vs collect, cancellation, max_concurrency,
checks inside the branches, and a killed map that resumes only its unfinished branches."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
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

BARRIER = threading.Barrier(2)
ACTIVE = {"now": 0, "max": 0}
LOCK = threading.Lock()
THREADS: list[str] = []  # the threads Work ran on


class Work(Action):
    """Test work: waits on the barrier, sleeps, fails or loops as its item says."""

    name = "work"
    summary = "Test work."
    fields: ClassVar[dict[str, dict[str, Any]]] = {"of": {"type": "string"}}
    runnable = True

    def run(self, ctx: Any) -> None:
        item = ctx.get(ctx.step.get("of", "item"))
        with LOCK:
            ACTIVE["now"] += 1
            ACTIVE["max"] = max(ACTIVE["max"], ACTIVE["now"])
        try:
            if item.get("barrier"):
                BARRIER.wait(timeout=10)  # a sequential engine never gets past this
            time.sleep(item.get("sleep", 0))
            if item.get("fail"):
                raise RunError(f"item {item['n']} fails", code="ACTION_FAILED", step_id=ctx.step_id)
        finally:
            with LOCK:
                ACTIVE["now"] -= 1
        THREADS.append(threading.current_thread().name)
        ctx.set("answer", f"done {item['n']}")


class Spin(Action):
    """Loops (with a short sleep per visit) until cancelled or out of steps."""

    name = "spin"
    summary = "Spin."
    runnable = True
    bounds_loops = True  # (a test action: the step limit bounds it)
    outcomes: ClassVar[tuple[str, ...]] = ("again",)
    fields: ClassVar[dict[str, dict[str, Any]]] = {"on_again": {"type": "string"}}

    def run(self, ctx: Any) -> Any:
        from runtime.contract.action import Outcome

        time.sleep(0.01)
        return Outcome("again")


def registry() -> Registry:
    base = default_registry()
    names = ("set_variables", "finalize", "map", "parallel", "loop_guard")
    return Registry.from_classes(Work, Spin, *(base.get(n) for n in names))


def load(tmp_path: Path, data: dict[str, Any]) -> Any:
    path = tmp_path / "p.json.yaml"
    path.write_text(json.dumps(data))
    return runtime.load(str(path), registry=registry())


def map_pipeline(items: list[dict[str, Any]], **step: Any) -> dict[str, Any]:
    return {
        "name": "fan",
        "settings": {"entry_step_id": "prep"},
        "steps": [
            {
                "id": "prep",
                "action": "set_variables",
                "rules": [{"set": "items", "value": items}],
                "next": "each",
            },
            {
                "id": "each",
                "type": "map",
                "items_from": "items",
                "as": "item",
                "output": ["answer"],
                "results_to": "results",
                "next": "done",
                "steps": [
                    {"id": "w", "action": "work", "next": "fin"},
                    {"id": "fin", "action": "finalize", "end": True},
                ],
                **step,
            },
            {"id": "done", "action": "finalize", "source": "results", "end": True},
        ],
    }


def run(tmp_path: Path, data: dict[str, Any]) -> Any:
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    return Engine(load(tmp_path, data), registry=registry(), store=store).run({}), store


def test_two_branches_that_wait_for_each_other_complete(tmp_path):
    items = [{"n": 0, "barrier": True}, {"n": 1, "barrier": True}]
    result, _ = run(tmp_path, map_pipeline(items, max_concurrency=2))
    assert result.status == "completed", result.error
    assert result.state["results"] == ["done 0", "done 1"]


def test_results_are_in_item_order_whatever_finishes_first(tmp_path):
    items = [{"n": i, "sleep": 0.05 * (3 - i)} for i in range(4)]
    result, store = run(tmp_path, map_pipeline(items, max_concurrency=4))
    assert result.state["results"] == [f"done {i}" for i in range(4)]
    branches = [e for e in store.events(result.run_id) if e["type"] == "BRANCH"]
    assert [e["branch"] for e in branches] == ["0", "1", "2", "3"]
    assert all(e["status"] == "completed" for e in branches)


def test_max_concurrency_is_honoured(tmp_path):
    ACTIVE.update(now=0, max=0)
    items = [{"n": i, "sleep": 0.03} for i in range(6)]
    result, _ = run(tmp_path, map_pipeline(items, max_concurrency=2))
    assert result.status == "completed"
    assert ACTIVE["max"] == 2


def test_collect_records_each_failed_branch_and_goes_on(tmp_path):
    items = [{"n": 0}, {"n": 1, "fail": True}, {"n": 2}]
    result, _ = run(tmp_path, map_pipeline(items, on_failure="collect"))
    assert result.status == "completed", result.error
    first, failed, last = result.state["results"]
    assert (first, last) == ("done 0", "done 2")
    assert (
        failed["error"]["code"] == "ACTION_FAILED" and "item 1 fails" in failed["error"]["message"]
    )


def test_fail_cancels_the_other_branches_and_fails_the_step(tmp_path):
    data = {
        "name": "par",
        "settings": {"entry_step_id": "both", "max_steps": 100000},
        "steps": [
            {
                "id": "both",
                "type": "parallel",
                "results_to": "r",
                "next": "done",
                "branches": {
                    "bad": [
                        {
                            "id": "w",
                            "action": "set_variables",
                            "rules": [
                                {"set": "item", "value": {"n": 9, "fail": True, "sleep": 0.05}}
                            ],
                            "next": "x",
                        },
                        {"id": "x", "action": "work", "next": "f"},
                        {"id": "f", "action": "finalize", "end": True},
                    ],
                    "slow": [
                        {"id": "s", "action": "spin", "on_again": "s", "next": "e"},
                        {"id": "e", "action": "finalize", "end": True},
                    ],
                },
            },
            {"id": "done", "action": "finalize", "end": True},
        ],
    }
    started = time.monotonic()
    result, store = run(tmp_path, data)
    assert time.monotonic() - started < 30  # the spinning branch was cancelled
    assert result.status == "failed"
    assert result.error.code == "ACTION_FAILED" and "branch 'bad' failed" in result.error.message
    slow = store.load(f"{result.run_id}.both.slow")
    assert slow["status"] == "failed"
    events = {e["branch"]: e for e in store.events(result.run_id) if e["type"] == "BRANCH"}
    assert events["slow"]["error"] == "RUN_CANCELLED"


def test_a_branch_sees_only_what_with_passes(tmp_path):
    data = map_pipeline([{"n": 0}])
    data["steps"][1]["steps"][0] = {
        "id": "w",
        "action": "set_variables",
        "rules": [{"set": "answer", "from": "items"}],
        "next": "fin",
    }
    pipeline_path = tmp_path / "p.json.yaml"
    pipeline_path.write_text(json.dumps(data))
    report = runtime.validate(str(pipeline_path), registry=registry())
    [warning] = [d for d in report.diagnostics if d.code == "VARIABLE_NEVER_WRITTEN"]
    assert "branch 'item'" in warning.message and warning.path.startswith("$.steps[1].steps[0]")
    result, _ = run(tmp_path, data)
    assert result.status == "failed" and result.error.code == "VARIABLE_MISSING"


def test_checks_see_into_branches_with_positions_in_the_parent_file(tmp_path):
    text = """\
name: fan
settings: {entry_step_id: each}
inputs: {items: {type: array}}
steps:
  - id: each
    type: map
    items_from: items
    results_to: out
    steps:
      - id: w
        action: work
        of: item
        next: nowhere
      - id: w
        action: finalize
    next: done
  - id: done
    action: finalize
"""
    path = tmp_path / "p.yaml"
    path.write_text(text)
    report = runtime.validate(str(path), registry=registry())
    found = sorted((d.code, d.line) for d in report.diagnostics if d.severity == "error")
    assert found == [("DUPLICATE_STEP_ID", 14), ("UNKNOWN_STEP", 13)]
    messages = [d.message for d in report.diagnostics if d.severity == "error"]
    assert all(m.startswith("branch 'item': ") for m in messages)


PIPELINE = """\
name: killmap
settings: {entry_step_id: prep}
inputs: {question: {type: string}}
steps:
  - id: prep
    action: set_variables
    rules:
      - {set: names, value: [a, b, c, d]}
    next: each
  - id: each
    type: map
    items_from: names
    as: name
    max_concurrency: 1
    with: {q: question}
    output: [answer]
    steps:
      - id: one
        action: set_variables
        rules:
          - {set: first, from: name}
        next: two
      - id: two
        action: set_variables
        rules:
          - {set: answer, from: first}
        next: fin
      - id: fin
        action: finalize
        end: true
    results_to: results
    next: done
  - id: done
    action: finalize
    source: results
    end: true
"""


@pytest.mark.parametrize("kill_at", ["checkpoint:5", "checkpoint:9", "checkpoint:12"])
def test_a_map_killed_midway_resumes_only_its_unfinished_branches(tmp_path, kill_at):
    folder = write_folder(tmp_path, PIPELINE, {}, {"question": "q"})
    args = ("--inputs", "in.json", "--run-id", "r", "--json")
    ref = cli(folder, "exec", "p.yaml", "--store", "ref.db", *args)
    assert ref.returncode == 0, ref.stderr
    killed = cli(folder, "exec", "p.yaml", "--store", "k.db", *args, kill_at=kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = runtime.SqliteRunStore(str(folder / "k.db"))
    done_before = {
        r["run_id"]
        for r in store.runs()
        if r["run_id"].startswith("r.") and r["status"] == "completed"
    }
    resumed = cli(folder, "resume", "r", "--store", "k.db", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["state"] == json.loads(ref.stdout)["state"]
    assert json.loads(resumed.stdout)["state"]["results"] == ["a", "b", "c", "d"]
    for branch in done_before:  # read back, not run again
        assert not any(e["type"] == "RUN_RESUMED" for e in store.events(branch))
        assert sum(e["type"] == "RUN_COMPLETED" for e in store.events(branch)) == 1


def test_graph_draws_branches_as_subgraphs(tmp_path):
    from click.testing import CliRunner

    from runtime.cli import cli as runtime_cli

    (tmp_path / "p.yaml").write_text(PIPELINE)
    mermaid = CliRunner().invoke(runtime_cli, ["graph", str(tmp_path / "p.yaml")]).output
    assert 'subgraph s1b0_g["map each: each name"]' in mermaid  # the item's name (`as`)
    assert '    s1b0_0["one<br/><i>set_variables</i>"]' in mermaid
    assert "    s1b0_0 --> s1b0_1" in mermaid and "s1 -.->|each| s1b0_0" in mermaid
    dot = CliRunner().invoke(runtime_cli, ["graph", str(tmp_path / "p.yaml"), "--format", "dot"])
    assert 'subgraph "cluster_0" {' in dot.output
    assert '"each" -> "each/item/one" [style=dotted];' in dot.output


def test_a_branch_prompt_is_found_beside_the_parent_and_its_budget_checked(tmp_path):
    text = """\
name: pr
settings: {entry_step_id: each, models: {m: {provider: extractive, context_window: 4096}}}
inputs: {items: {type: array}, question: {type: string}}
steps:
  - id: each
    type: map
    items_from: items
    with: {question: question}
    steps:
      - id: ask
        action: call_model
        model: m
        prompt_key: nope
        user_parts: {q: {source: question}}
        next: fin
      - id: fin
        action: finalize
        end: true
    results_to: out
    next: done
  - id: done
    action: finalize
    source: out
"""
    (tmp_path / "p.yaml").write_text(text)
    found = {(d.code, d.line) for d in runtime.validate(str(tmp_path / "p.yaml")).diagnostics}
    assert ("PROMPT_NOT_FOUND", 13) in found and ("BUDGET_MAY_OVERFLOW", 10) in found
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "nope.md").write_text("Answer.\n")
    found = {(d.code, d.line) for d in runtime.validate(str(tmp_path / "p.yaml")).diagnostics}
    assert ("PROMPT_NOT_FOUND", 13) not in found


@pytest.mark.parametrize("name", ["run_id", "counters", "inbox", "last_error"])
def test_results_to_an_engine_owned_name_is_refused_by_validate(tmp_path, name):
    # It failed only at run time (STATE_PROTECTED), after the branches had all run.
    data = map_pipeline([{"n": 0}], results_to=name)
    data["steps"][2]["source"] = name
    path = tmp_path / "p.json.yaml"
    path.write_text(json.dumps(data))
    report = runtime.validate(str(path), registry=registry())
    [error] = [d for d in report.diagnostics if d.severity == "error"]
    assert error.code == "PROTECTED_FIELD" and error.path == "$.steps[1].results_to"
    assert repr(name) in error.message
    data = map_pipeline([{"n": 0}], results_to="fine")
    path.write_text(json.dumps(data))
    report = runtime.validate(str(path), registry=registry())
    assert not [d for d in report.diagnostics if d.severity == "error"]


def test_a_branch_name_with_other_characters_is_refused_by_validate(tmp_path):
    # docs/parallel.md: letters, digits, '_', '.' and '-'; it failed only at run time.
    fin = [{"id": "f", "action": "finalize", "end": True}]
    data = {
        "name": "par",
        "settings": {"entry_step_id": "p"},
        "steps": [
            {
                "id": "p",
                "type": "parallel",
                "branches": {"ok-1.a_b": fin, "x y": fin, 'q"]; click': fin},
                "results_to": "res",
                "end": True,
            }
        ],
    }
    path = tmp_path / "p.json.yaml"
    path.write_text(json.dumps(data))
    report = runtime.validate(str(path), registry=registry())
    errors = [d for d in report.diagnostics if d.severity == "error"]
    assert [d.code for d in errors] == ["SCHEMA_PATTERN", "SCHEMA_PATTERN"], errors
    assert sorted("x y" in d.message for d in errors) == [False, True]
    assert sorted("click" in d.message for d in errors) == [False, True]
    assert not any("ok-1.a_b" in d.message for d in errors)


def test_a_map_without_items_from_is_a_coded_error_not_a_crash(tmp_path):
    # Found by tests/adversarial/test_fuzz_validate.py: it named a code that does not
    # exist, and validate stopped with VALIDATION_CRASHED.
    data = map_pipeline([{"n": 0}])
    del data["steps"][1]["items_from"]
    path = tmp_path / "p.json.yaml"
    path.write_text(json.dumps(data))
    report = runtime.validate(str(path), registry=registry())
    errors = [(d.code, d.path) for d in report.diagnostics if d.severity == "error"]
    assert errors == [("SCHEMA_MISSING_FIELD", "$.steps[1]")], errors


def test_a_prompt_key_no_file_can_have_is_prompt_not_found(tmp_path):
    """A 5,000-character key (the validator fuzzer found it: the OS refuses the name)."""
    key = "a" * 5000
    text = f"""\
name: p
settings: {{entry_step_id: ask}}
steps:
  - id: ask
    action: call_model
    prompt_key: {key}
    next: done
  - id: done
    action: finalize
"""
    (tmp_path / "p.yaml").write_text(text)
    codes = {d.code for d in runtime.validate(str(tmp_path / "p.yaml")).diagnostics}
    assert "PROMPT_NOT_FOUND" in codes and "VALIDATION_CRASHED" not in codes


# --- one max_steps for the run and its branches ---------------------------------------------


@pytest.mark.parametrize(
    ("max_steps", "status", "where"),
    # prep, the map, 3 branches of 2 steps, done: 9 steps in all
    [(9, "completed", None), (8, "failed", "done"), (7, "failed", "each")],
)
def test_branches_count_their_steps_against_the_runs_max_steps(tmp_path, max_steps, status, where):
    data = map_pipeline([{"n": i} for i in range(3)], max_concurrency=3)
    data["settings"]["max_steps"] = max_steps
    result, _ = run(tmp_path, data)
    assert result.status == status
    if where is not None:
        assert (result.error.code, result.error.step_id) == ("MAX_STEPS_EXCEEDED", where)


def test_a_runaway_branch_is_stopped_by_the_shared_budget_not_its_own(tmp_path):
    # Each spinning branch alone has max_steps 40; together they may take 40 minus the
    # parent's steps, so the map fails long before 2 x 40 branch steps.
    data = map_pipeline([{"n": 0}, {"n": 1}], max_concurrency=2)
    data["settings"]["max_steps"] = 40
    data["steps"][1]["steps"] = [
        {"id": "s", "action": "spin", "on_again": "s", "next": "e"},
        {"id": "e", "action": "finalize", "end": True},
    ]
    result, store = run(tmp_path, data)
    assert (result.status, result.error.code) == ("failed", "MAX_STEPS_EXCEEDED")
    branch_steps = sum(
        len(store.load(f"{result.run_id}.each.{i}")["engine"].get("step_trace", [])) for i in (0, 1)
    )
    assert branch_steps <= 38


# --- branches given as pipelines (`pipeline: file.yaml#name`) ------------------------------

PACK = {
    "YAMLpipelines": {
        "one": {
            "settings": {"entry_step_id": "w"},
            "inputs": {"item": {"type": "object"}, "tag": {"type": "string", "default": "-"}},
            "outputs": ["answer"],
            "steps": [
                {"id": "w", "action": "work", "next": "fin"},
                {"id": "fin", "action": "finalize", "end": True},
            ],
        }
    }
}


def write_pack(tmp_path: Path, pack: dict[str, Any] = PACK) -> None:
    (tmp_path / "sub").mkdir(exist_ok=True)
    (tmp_path / "sub" / "pack.json.yaml").write_text(json.dumps(pack))


def ref_map(items: list[dict[str, Any]], ref: str = "sub/pack.json.yaml#one", **step: Any):
    data = map_pipeline(items, **step)
    del data["steps"][1]["steps"]
    data["steps"][1]["pipeline"] = ref
    return data


def test_a_map_runs_a_pipeline_of_a_pack_per_item(tmp_path):
    write_pack(tmp_path)
    result, store = run(tmp_path, ref_map([{"n": 0}, {"n": 1, "barrier": False}]))
    assert result.status == "completed", result.error
    assert result.state["results"] == ["done 0", "done 1"]
    branch = store.load(f"{result.run_id}.each.1")
    assert branch["status"] == "completed"


def test_a_parallel_step_mixes_inline_and_pipeline_branches(tmp_path):
    write_pack(tmp_path)
    data = {
        "name": "both",
        "settings": {"entry_step_id": "p"},
        "steps": [
            {
                "id": "p",
                "type": "parallel",
                "with": {"item": "thing"},
                "results_to": "out",
                "branches": {
                    "inline": [
                        {"id": "x", "action": "work", "next": "f"},
                        {"id": "f", "action": "finalize", "end": True},
                    ],
                    "packed": {"pipeline": "sub/pack.json.yaml#one"},
                },
                "next": "done",
            },
            {"id": "done", "action": "finalize", "source": "out", "end": True},
        ],
    }
    data["steps"].insert(
        0,
        {
            "id": "prep",
            "action": "set_variables",
            "rules": [{"set": "thing", "value": {"n": 7}}],
            "next": "p",
        },
    )
    data["settings"]["entry_step_id"] = "prep"
    result, _ = run(tmp_path, data)
    assert result.status == "completed", result.error
    assert result.state["out"] == {"inline": "done 7", "packed": "done 7"}


def _codes(tmp_path: Path, data: dict[str, Any]) -> list[tuple[str, str, int]]:
    path = tmp_path / "p.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False))
    report = runtime.validate(str(path), registry=registry())
    lines = path.read_text().splitlines()
    return [
        (d.code, d.message, lines[d.line - 1].strip().split(":")[0])
        for d in report.diagnostics
        if d.severity == "error"
    ]


def test_a_pipeline_branch_that_does_not_load_is_refused_at_its_line(tmp_path):
    [(code, message, field)] = _codes(tmp_path, ref_map([], "sub/missing.yaml"))
    assert (code, field) == ("BRANCH_PIPELINE_INVALID", "pipeline")
    assert "branch 'item': 'sub/missing.yaml' is not a valid pipeline" in message


def test_a_pipeline_branch_must_take_what_with_and_the_item_pass(tmp_path):
    write_pack(tmp_path)
    data = ref_map([], with_={})  # placeholder replaced below
    del data["steps"][1]["with_"]
    data["steps"][1]["with"] = {"colour": "x"}
    data["steps"][0]["rules"].append({"set": "x", "value": 1})
    found = _codes(tmp_path, data)
    assert [(c, f) for c, _, f in found] == [("BRANCH_PIPELINE_INVALID", "pipeline")]
    assert "takes no input 'colour'" in found[0][1]
    data["steps"][1]["as"] = "thing"
    del data["steps"][1]["with"]
    messages = [m for _, m, _ in _codes(tmp_path, data)]
    assert any("takes no input 'thing'" in m for m in messages)
    assert any("requires 'item'" in m for m in messages)


def test_a_pipeline_branch_that_runs_itself_is_refused_not_recursed(tmp_path):
    pack = {
        "YAMLpipelines": {
            "loop": {
                "settings": {"entry_step_id": "each"},
                "steps": [
                    {
                        "id": "each",
                        "type": "map",
                        "items_from": "items",
                        "pipeline": "pack.json.yaml#loop",
                        "next": "done",
                    },
                    {"id": "done", "action": "finalize", "end": True},
                ],
            }
        }
    }
    write_pack(tmp_path, pack)
    found = _codes(tmp_path, ref_map([], "sub/pack.json.yaml#loop"))
    assert found and all(c == "BRANCH_PIPELINE_INVALID" for c, _, _ in found)
    assert "already being checked" in " ".join(m for _, m, _ in found)


def test_a_map_with_both_steps_and_pipeline_is_refused(tmp_path):
    write_pack(tmp_path)
    data = map_pipeline([])
    data["steps"][1]["pipeline"] = "sub/pack.json.yaml#one"
    found = _codes(tmp_path, data)
    assert ("SCHEMA_INVALID", "a map step runs `steps` or a `pipeline`: give exactly one") in [
        (c, m) for c, m, _ in found
    ]


def test_an_edited_branch_pipeline_changes_what_a_resume_compares(tmp_path):
    write_pack(tmp_path)
    pipeline = load(tmp_path, ref_map([{"n": 0}]))
    before = pipeline.content_hash
    changed = json.loads(json.dumps(PACK))
    changed["YAMLpipelines"]["one"]["inputs"]["tag"]["default"] = "+"
    write_pack(tmp_path, changed)
    assert pipeline.content_hash != before


# --- cancelling the run reaches its branches; the asyncio path ---------------------------


def spinning_map(n: int) -> dict[str, Any]:
    data = map_pipeline([{"n": i} for i in range(n)], max_concurrency=n)
    # (enough to spin for seconds; were a cancel lost, the shared budget ends them instead)
    data["settings"]["max_steps"] = 1500
    data["steps"][1]["steps"] = [
        {"id": "s", "action": "spin", "on_again": "s", "next": "e"},
        {"id": "e", "action": "finalize", "end": True},
    ]
    return data


def test_cancelling_the_run_cancels_every_branch(tmp_path):
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    engine = Engine(load(tmp_path, spinning_map(3)), registry=registry(), store=store)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    result = engine.run({}, cancel=cancel)
    assert time.monotonic() - started < 30  # (the branches spin until max_steps otherwise)
    assert (result.status, result.error.code) == ("failed", "RUN_CANCELLED")
    for i in range(3):
        assert store.load(f"{result.run_id}.each.{i}")["status"] == "failed"
    events = [e for e in store.events(result.run_id) if e["type"] == "BRANCH"]
    assert [e["error"] for e in events] == ["RUN_CANCELLED"] * 3


def test_under_arun_the_branches_are_tasks_of_the_callers_loop(tmp_path):
    import asyncio

    # (each branch stays 0.3 s after the barrier: the watcher, every 5 ms, sees its task)
    items = [{"n": i, "barrier": True, "sleep": 0.3} for i in (0, 1)]
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    runner = runtime.Runner(
        load(tmp_path, map_pipeline(items, max_concurrency=2)), registry=registry(), store=store
    )
    seen: list[set[str]] = []

    async def main() -> Any:
        async def watch() -> None:  # the loop's own tasks while the run is going on
            for _ in range(200):
                names = {t.get_name() for t in asyncio.all_tasks()}
                seen.append(names)
                await asyncio.sleep(0.005)

        watcher = asyncio.create_task(watch())
        result = await runner.arun({})
        watcher.cancel()
        return result

    THREADS.clear()
    result = asyncio.run(main())
    assert result.status == "completed", result.error
    assert result.state["results"] == ["done 0", "done 1"]  # (the barrier: at once)
    assert sorted(THREADS) and all(t.startswith("branch-task") for t in THREADS)
    assert any({"branch 0", "branch 1"} <= names for names in seen)
    # the same pipeline run without a loop: threads of the step's own pool
    THREADS.clear()
    assert runner.run({}).status == "completed"
    assert all(t.startswith("branch_") or t.startswith("branch-") for t in THREADS)
    assert not any(t.startswith("branch-task") for t in THREADS)
