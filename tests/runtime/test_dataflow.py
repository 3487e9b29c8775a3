"""Dataflow checks: a step that needs a variable no path from the entry writes is warned about.

Fixtures under tests/data/dataflow mark each expected warning with `# expect:` on its line;
the tests assert the exact (line, column) set, so a missed, extra or misplaced one fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

import runtime
from runtime.cli import cli
from runtime.contract.action import Action, Outcome, VariableRead
from runtime.contract.registry import Registry, default_registry
from runtime.format.dataflow import check_dataflow, variables_on_arrival
from runtime.format.validation import validate_paths

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "dataflow"
CODE = "VARIABLE_NEVER_WRITTEN"
_EXPECT = re.compile(r"#\s*expect:\s*" + CODE)


def expected_lines(path: Path) -> list[int]:
    return [n for n, line in enumerate(path.read_text().splitlines(), 1) if _EXPECT.search(line)]


def warned(report: runtime.Report) -> list[tuple[int, int, str]]:
    return [(d.line, d.column, d.path) for d in report.diagnostics if d.code == CODE]


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- the warning, positioned, in every format, and --strict ---------------------------------


def test_finalize_reading_a_variable_no_step_writes_is_a_warning_at_the_field(runner):
    path = DATA / "finalize_unwritten.yaml"
    result = runner.invoke(cli, ["validate", str(path), "--format", "json"])
    assert result.exit_code == 0  # a warning
    [diag] = json.loads(result.stdout)["diagnostics"]
    assert (diag["code"], diag["severity"], diag["line"], diag["column"], diag["path"]) == (
        CODE,
        "warning",
        16,
        13,
        "$.steps[1].source",
    )
    assert diag["line"] in expected_lines(path)
    assert diag["message"] == (
        "step 'finish' reads 'answr' (source), which no step writes on any path from 'ask' "
        "to it, and which is no declared input"
    )
    assert diag["hint"].startswith("did you mean 'answer'?")


def test_the_text_format_names_file_line_column_step_and_field(runner):
    path = DATA / "finalize_unwritten.yaml"
    result = runner.invoke(cli, ["validate", str(path)])
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"{path}:16:13: warning {CODE} step 'finish' reads 'answr' (source)")
    assert result.stdout.splitlines()[-1] == "0 error(s), 1 warning(s)"


def test_strict_makes_it_an_error(runner):
    path = str(DATA / "finalize_unwritten.yaml")
    assert runner.invoke(cli, ["validate", path]).exit_code == 0
    assert runner.invoke(cli, ["validate", "--strict", path]).exit_code == 1
    assert runner.invoke(cli, ["lint", path]).exit_code == 1


def test_a_bare_finalize_with_no_answer_source_written_warns_at_its_action(tmp_path):
    path = write(
        tmp_path,
        "settings: {entry_step_id: a}\n"
        "inputs: {question: string}\n"
        "steps:\n"
        "  - {id: a, action: set_variables, rules: [{set: note, from: question}], next: b}\n"
        "  - {id: b, action: finalize}\n",
    )
    [diag] = runtime.validate(path).diagnostics
    assert (diag.code, diag.line, diag.column, diag.path) == (CODE, 5, 21, "$.steps[1].action")
    assert diag.message.startswith(
        "step 'b' reads one of 'answer', 'answer_translated', 'answer_neutral', "
        "'last_model_response' (the default answer sources: no `source`), none of which"
    )
    # Any one source written is enough.
    fixed = path.replace("p.yaml", "q.yaml")
    Path(fixed).write_text(Path(path).read_text().replace("set: note", "set: answer_neutral"))
    assert runtime.validate(fixed).diagnostics == []


# --- what counts as written: loops, catch, inputs, defaults, branches -------------------------


def test_the_flows_fixture_warns_exactly_at_the_marked_reads():
    path = DATA / "flows.yaml"
    report = validate_paths([str(path)])
    assert [d.code for d in report.diagnostics if d.code != CODE] == []
    assert [line for line, _, _ in warned(report)] == expected_lines(path)
    assert warned(report) == [
        (15, 28, "$.steps[0].rules[2].from"),  # a later rule of the same step writes it
        (30, 27, "$.steps[2].rules[1].from"),  # only a failed attempt of `risky` writes it
        (42, 26, "$.steps[4].rules[1].from"),  # last_error on a path with no catch
        (51, 13, "$.steps[6].action"),  # the router's default source
        (72, 28, "$.steps[9].rules[1].from"),  # a misspelling
    ]


def test_variables_on_arrival_follow_loops_catch_and_branches():
    import yaml

    data = yaml.safe_load((DATA / "flows.yaml").read_text())
    seen = variables_on_arrival(data["steps"], data["settings"], data["inputs"], default_registry())
    assert "draft" in seen["top"]  # the loop's second pass
    assert "last_error" in seen["recover"] and "seen" not in seen["recover"]
    assert "last_error" not in seen["top"]
    assert "branch" in seen["join"] and "last_model_response" in seen["join"]
    assert {"question", "context_blocks"} <= set(seen["start"])  # input, action default
    assert "late" not in seen["start"]


LOOP = """\
settings: {entry_step_id: g}
inputs: {question: string}
steps:
  - id: g
    action: loop_guard
    on_allow: ask
    on_deny: done
  - id: ask
    action: json_decision_router
    source: reply
    routes: {more: g}
    on_other: write
  - id: write
    action: set_variables
    rules: [{set: reply, from: question}]
    next: g
  - id: done
    action: finalize
    source: reply
"""


def test_a_loop_that_writes_on_its_first_pass_what_it_reads_on_the_next_is_no_warning(tmp_path):
    # `reply` is written at the end of the loop body: some path reaches both readers with it.
    assert warned(runtime.validate(write(tmp_path, LOOP))) == []
    # Without the loop's way back, the router reads it before anything writes it.
    straight = LOOP.replace("    next: g\n  - id: done", "    next: done\n  - id: done")
    straight = straight.replace("on_allow: ask", "on_allow: ask\n    max_turn_loops: 1")
    assert warned(runtime.validate(write(tmp_path, straight, "s.yaml"))) == [
        (11, 13, "$.steps[1].source")
    ]


def test_the_writes_of_a_caught_step_do_not_reach_its_catch_target(tmp_path):
    text = """\
settings: {entry_step_id: a}
steps:
  - id: a
    action: set_variables
    rules: [{set: answer, value: 1}]
    catch: {ALL: b}
    next: c
  - id: b
    action: finalize
    source: last_error
  - id: c
    action: finalize
"""
    assert warned(runtime.validate(write(tmp_path, text))) == []
    # b reads what a writes: on the catch edge a's writes were dropped.
    text2 = text.replace("source: last_error", "source: answer")
    assert warned(runtime.validate(write(tmp_path, text2, "b.yaml"))) == [
        (10, 13, "$.steps[1].source")
    ]
    # c reads last_error: only a normal transition leads there.
    text3 = text.replace("    action: finalize\n", "    action: finalize\n    source: last_error\n")
    assert warned(runtime.validate(write(tmp_path, text3, "c.yaml"))) == [
        (14, 13, "$.steps[2].source")
    ]


@pytest.mark.parametrize(
    ("inputs", "warnings"),
    [
        ("inputs: {reply: string}\n", []),  # declared
        ("inputs: {reply: {type: string, required: false}}\n", []),  # optional still declared
        ("inputs: {question: string}\n", [(8, 13, "$.steps[0].source")]),  # another input
        ("", [(8, 13, "$.steps[0].source")]),  # none declared: only the request fields
    ],
)
def test_declared_inputs_count_as_written(tmp_path, inputs, warnings):
    text = f"""\
{inputs or "name: undeclared" + chr(10)}settings: {{entry_step_id: r}}
steps:
  - id: r
    action: prefix_router
    routes: {{sql: {{prefix: "SQL:", next: f}}}}
    on_other: f
    source: reply
  - id: f
    action: finalize
    source: reply
"""
    # Each read is its own warning: the router and finalize both need `reply`.
    got = warned(runtime.validate(write(tmp_path, text)))
    assert got == ([] if not warnings else [*warnings, (11, 13, "$.steps[1].source")])


def test_a_pipeline_without_inputs_takes_the_older_engines_request_fields(tmp_path):
    text = """\
settings: {entry_step_id: t}
steps:
  - id: t
    action: translate_in_if_needed
    next: h
  - id: h
    action: load_conversation_history
    source: history
    next: f
  - id: f
    action: finalize
    source: user_question_neutral
"""
    assert warned(runtime.validate(write(tmp_path, text))) == []
    # With inputs declared, the request fields are no longer assumed.
    declared = "inputs: {question: string}\n" + text
    assert warned(runtime.validate(write(tmp_path, declared, "d.yaml"))) == [
        (5, 13, "$.steps[0].action"),  # translate_in's default source, user_query
        (9, 13, "$.steps[1].source"),
    ]


def test_call_model_parts_history_search_and_router_sources_are_reads(tmp_path):
    text = """\
settings: {entry_step_id: s, models: {m: {provider: extractive}}}
inputs: {q: {type: string, maxLength: 100}}
steps:
  - id: s
    action: search_nodes
    query_from: qq
    next: m
  - id: m
    action: call_model
    model: m
    prompt_key: p
    use_history: true
    user_parts:
      question: {source: q}
      evidence: {source: node_txts}
    next: r
  - id: r
    action: json_decision_router
    source: last_model_response
    routes: {yes: f}
    on_other: f
  - id: f
    action: finalize
"""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "p.md").write_text("Answer.")
    report = runtime.validate(write(tmp_path, text))
    assert warned(report) == [
        (6, 17, "$.steps[0].query_from"),
        (12, 18, "$.steps[1].use_history"),  # conversation_history: load it first
        (15, 26, "$.steps[1].user_parts.evidence.source"),
    ]
    messages = [d.message for d in report.diagnostics if d.code == CODE]
    assert "'node_txts' (user_parts.evidence.source)" in messages[2]
    hints = [d.hint for d in report.diagnostics if d.code == CODE]
    assert hints[0].startswith("did you mean 'q'?")


def test_steps_not_reached_or_after_an_unknown_action_are_not_judged(tmp_path):
    text = """\
settings: {entry_step_id: a}
steps:
  - id: a
    action: shiny_new_action
    next: b
  - id: b
    action: finalize
    source: anything
  - id: lost
    action: finalize
    source: nothing
"""
    report = runtime.validate(write(tmp_path, text))
    codes = sorted(d.code for d in report.diagnostics)
    assert codes == ["UNKNOWN_ACTION", "UNREACHABLE_STEP"]


def test_a_misspelt_entry_step_skips_the_check(tmp_path):
    text = "settings: {entry_step_id: x}\nsteps:\n  - {id: a, action: finalize, source: v}\n"
    codes = [d.code for d in runtime.validate(write(tmp_path, text)).diagnostics]
    assert codes == ["ENTRY_STEP_UNKNOWN"]


# --- third-party actions take part ---------------------------------------------------------


class Produce(Action):
    """Writes `draft` (static writes)."""

    name = "produce"
    writes: ClassVar[tuple[str, ...]] = ("draft",)
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        ctx.set("draft", "text")
        return None


class Consume(Action):
    """Needs `draft` (static reads) and the variable its `field` names (step_reads)."""

    name = "consume"
    fields: ClassVar[dict[str, dict[str, Any]]] = {"field": {"type": "string"}}
    reads: ClassVar[tuple[str, ...]] = ("draft",)
    terminal = True
    runnable = True

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        yield from super().step_reads(step)
        if isinstance(step.get("field"), str):
            yield VariableRead((step["field"],), ("field",))

    def run(self, ctx: Any) -> Outcome | None:
        return Outcome.end()


THIRD = """\
settings: {entry_step_id: p}
steps:
  - id: p
    action: produce
    next: c
  - id: c
    action: consume
    field: draft
"""


def test_third_party_actions_declare_reads_and_writes(tmp_path):
    registry = Registry.from_classes(Produce, Consume)
    assert validate_paths([write(tmp_path, THIRD)], registry=registry).diagnostics == []
    # The consumer first: its static read of `draft` comes before the only writer.
    first = """\
settings: {entry_step_id: c}
steps:
  - id: c
    action: consume
    next: p
  - id: p
    action: produce
    end: true
"""
    report = validate_paths([write(tmp_path, first, "f.yaml")], registry=registry)
    assert [(d.code, d.line, d.path) for d in report.diagnostics] == [
        (CODE, 4, "$.steps[0].action")  # a static read: positioned at the action
    ]
    # A variable the step's own field names (step_reads), misspelt.
    named = THIRD.replace("field: draft", "field: drat")
    [diag] = validate_paths([write(tmp_path, named, "n.yaml")], registry=registry).diagnostics
    assert (diag.code, diag.path) == (CODE, "$.steps[1].field")
    assert diag.hint.startswith("did you mean 'draft'? Or")


def test_the_long_form_and_router_routes_are_followed(tmp_path):
    text = """\
settings: {entry_step_id: a}
steps:
  - id: a
    action: set_variables
    rules: [{set: answer, value: 1}]
    next: {step: r, fidelity: compact}
  - id: r
    action: json_decision_router
    source: answer
    routes: {x: {step: f, fidelity: truncate}}
    on_other: f
  - id: f
    action: finalize
"""
    assert warned(runtime.validate(write(tmp_path, text))) == []


def test_check_dataflow_is_a_pure_function_of_plain_data():
    steps = [
        {"id": "a", "action": "set_variables", "rules": [{"set": "x", "from": "y"}], "next": "b"},
        {"id": "b", "action": "finalize", "source": "x"},
    ]
    found = list(check_dataflow(steps, {"entry_step_id": "a"}, {"y": "any"}, default_registry()))
    assert found == []
    found = list(check_dataflow(steps, {"entry_step_id": "a"}, {}, default_registry()))
    assert [(f.code, f.path, f.severity) for f in found] == [
        (CODE, ("steps", 0, "rules", 0, "from"), "warning")
    ]


# --- no false warnings on what ships --------------------------------------------------------

LEGACY = ROOT / "tests" / "data" / "legacy"
# The older engine derived these itself; nothing here writes them and a run fails reading
# them (VARIABLE_MISSING), so each read is a true warning: (file, line, variable).
LEGACY_FINDINGS = (
    {
        ("ada.yaml", line, var)
        for line, var in [
            (34, "composed_context_for_prompt"),
            (37, "history_for_prompt"),
            (68, "composed_context_for_prompt"),
            (71, "history_for_prompt"),
            (85, "composed_context_for_prompt"),
            (88, "history_for_prompt"),
            (102, "composed_context_for_prompt"),
            (105, "history_for_prompt"),
        ]
    }
    | {
        ("marian_rejewski_code_analysis_base.yaml", line, var)
        for line, var in [
            (188, "sufficiency_search_mode_constraint"),
            (191, "composed_context_for_prompt"),
            (235, "composed_context_for_prompt"),
            (254, "composed_context_for_prompt"),
            (276, "history_for_prompt"),
        ]
    }
    | {("shannon.yaml", 89, "composed_context_for_prompt")}
)  # (its snapshot trio runs now)


def test_shipped_pipelines_have_no_dataflow_warnings():
    report = validate_paths([str(ROOT / "pipelines")], only_pipelines=True)
    assert len(report.pipelines) >= 4
    assert [d for d in report.diagnostics if d.code == CODE] == []


def test_valid_fixtures_have_no_dataflow_warnings(registry):
    report = validate_paths([str(ROOT / "tests" / "data" / "valid")], registry=registry)
    assert [d for d in report.diagnostics if d.code == CODE] == []


def test_the_older_engines_pipelines_warn_only_where_a_run_would_fail():
    report = validate_paths([str(LEGACY)])
    found = {
        (Path(d.file).name, d.line, re.search(r"reads '(\w+)'", d.message).group(1))  # type: ignore[union-attr]
        for d in report.diagnostics
        if d.code == CODE
    }
    assert found == LEGACY_FINDINGS


# --- finalize with no answer at run time ------------------------------------------------------

NO_ANSWER = """\
settings: {entry_step_id: a}
inputs: {question: string}
steps:
  - {id: a, action: set_variables, rules: [{set: note, from: question}], next: b}
  - {id: b, action: finalize}
"""


def test_finalize_without_an_answer_completes_null_with_a_trace_warning(tmp_path):
    from runtime.engine import Engine

    pipeline = runtime.load(write(tmp_path, NO_ANSWER))
    # Validation warned before the run; the run still completes.
    assert [d.code for d in pipeline.warnings] == [CODE]  # type: ignore[attr-defined]
    result = Engine(pipeline).run({"question": "hi"}, run_id="t")
    assert (result.status, result.output) == ("completed", {"final_answer": None})
    [event] = [e for e in result.events if e["type"] == "NO_ANSWER"]
    assert (event["severity"], event["step_id"]) == ("warning", "b")
    assert event["tried"] == ["answer", "answer_neutral", "last_model_response"]


def test_require_answer_fails_as_before(tmp_path):
    from runtime.engine import Engine

    text = NO_ANSWER.replace("action: finalize}", "action: finalize, require_answer: true}")
    result = Engine(runtime.load(write(tmp_path, text))).run({"question": "hi"}, run_id="t")
    assert (result.status, result.error.code, result.error.step_id) == (
        "failed",
        "VARIABLE_MISSING",
        "b",
    )
    assert [e for e in result.events if e["type"] == "NO_ANSWER"] == []
    # With the answer there, require_answer changes nothing.
    given = text.replace("set: note", "set: answer")
    result = Engine(runtime.load(write(tmp_path, given, "g.yaml"))).run({"question": "hi"})
    assert (result.status, result.output) == ("completed", {"final_answer": "hi"})


def test_require_answer_is_a_boolean_field(tmp_path):
    text = NO_ANSWER.replace("action: finalize}", "action: finalize, require_answer: 1}")
    [diag] = [d for d in runtime.validate(write(tmp_path, text)).diagnostics]
    assert (diag.code, diag.line, diag.path) == ("SCHEMA_TYPE", 5, "$.steps[1].require_answer")
