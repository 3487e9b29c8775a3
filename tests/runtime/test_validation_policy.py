"""The validation policy, pinned with exact codes and positions.

What the validator accepts and rejects (engine-owned names, booleans where integers are
required, NaN and infinities, bad enum values), where each graph check points (line and
column), what a run of `runtime validate` exits with, what `runtime.load` and
`runtime.validate` hand back, and each output format checked by hand (the golden files in
test_diagnostics.py can be regenerated from the renderer's own output; these cannot).

Everything goes through the public surface: `runtime.validate` / `runtime.load` on files
written here or the annotated fixtures in tests/data/invalid, `runtime.Runner` for the run
side, and `runtime validate` through click's CliRunner. Positions below were counted by hand
from the YAML text in each test (1-based line and column of the value, or of the key when
the problem is the key itself).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import runtime
from runtime.cli import cli, main
from runtime.contract.action import Action
from runtime.format import diagnostics as render

DATA = Path(__file__).resolve().parent.parent / "data"
INVALID = DATA / "invalid"
VALID = DATA / "valid"

# The engine-owned state fields (DESIGN.md: "inbox, loop counters, step trace, run metadata").
ENGINE_OWNED = ("counters", "inbox", "last_error", "loop_counters", "run", "run_id", "step_trace")


def _write(tmp_path: Path, text: str, name: str = "p.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _found(diagnostics) -> list[tuple]:
    return [(d.line, d.column, d.severity, d.code, d.path) for d in diagnostics]


def _said(diagnostics) -> list[tuple]:
    return [(d.line, d.code, d.message, d.hint) for d in diagnostics]


def _linear(settings: dict) -> runtime.Pipeline:
    """a -> b -> z (three steps), built from data without validation."""
    return runtime.Pipeline.from_dict(
        {
            "settings": {"entry_step_id": "a", **settings},
            "steps": [
                {"id": "a", "action": "noop", "next": "b"},
                {"id": "b", "action": "noop", "next": "z"},
                {"id": "z", "action": "finish"},
            ],
        }
    )


# --- names that belong to the engine ------------------------------------------------------


def test_declared_inputs_named_like_engine_owned_fields_are_errors_at_their_key(tmp_path, registry):
    owned = "".join(f"  {name}: string\n" for name in ENGINE_OWNED)  # lines 6..12
    path = _write(
        tmp_path,
        "settings: {entry_step_id: a}\n"
        "inputs:\n"
        "  question: string\n"
        "  runs: string\n"  # near misses are ordinary names
        "  inbox_size: integer\n" + owned + "steps:\n  - {id: a, action: finish}\n",
    )
    report = runtime.validate(path, registry=registry)
    assert _found(report.diagnostics) == [
        (6 + i, 3, "error", "INPUT_SPEC_INVALID", f"$.inputs.{name}")
        for i, name in enumerate(ENGINE_OWNED)
    ]
    first = report.diagnostics[0]
    assert first.message == "input 'counters' is an engine-owned field; no input may set it"
    assert first.hint == "rename the input"


def test_an_engine_owned_input_with_a_default_cannot_be_loaded(tmp_path, registry):
    # Before validation refused it, the default was written into run state unchecked.
    path = _write(
        tmp_path,
        "settings: {entry_step_id: a}\n"
        "inputs:\n"
        "  run_id: {type: string, default: mine}\n"
        "steps:\n"
        "  - {id: a, action: finish}\n",
    )
    with pytest.raises(runtime.PipelineInvalidError) as caught:
        runtime.load(path, registry=registry)
    assert caught.value.code == "INPUT_SPEC_INVALID"
    assert _found(caught.value.diagnostics) == [
        (3, 3, "error", "INPUT_SPEC_INVALID", "$.inputs.run_id")
    ]


@pytest.mark.parametrize("name", ENGINE_OWNED)
def test_run_inputs_named_like_engine_owned_fields_are_refused(name, registry):
    runner = runtime.Runner(_linear({}), registry=registry)
    with pytest.raises(runtime.RunError) as caught:
        runner.run({name: 1})
    assert caught.value.code == "STATE_PROTECTED"
    assert caught.value.message == f"input {name!r} is an engine-owned field"


def test_run_inputs_with_ordinary_names_become_variables(registry):
    result = runtime.Runner(_linear({}), registry=registry).run({"runs": 1, "inbox_size": 2})
    assert result.status == "completed"
    assert (result.state["runs"], result.state["inbox_size"]) == (1, 2)


# --- `true` is not an integer -----------------------------------------------------------------


def test_booleans_are_rejected_where_integers_are_required(tmp_path, registry):
    path = _write(
        tmp_path,
        "settings:\n"
        "  entry_step_id: a\n"
        "  top_k: true\n"
        "  max_turn_loops: yes\n"
        "  flag: true\n"
        "steps:\n"
        "  - id: a\n"
        "    action: noop\n"
        "    count: true\n"
        "    count_from_settings: flag\n"
        "    retry: {max_attempts: false}\n"
        "    next: g\n"
        "  - id: g\n"
        "    action: guard\n"
        "    limit: no\n"
        "    on_allow: a\n"
        "    on_deny: z\n"
        "  - {id: z, action: finish}\n",
    )
    report = runtime.validate(path, registry=registry)
    assert _found(report.diagnostics) == [
        (3, 10, "error", "SCHEMA_TYPE", "$.settings.top_k"),
        (4, 19, "error", "SCHEMA_TYPE", "$.settings.max_turn_loops"),
        (9, 12, "error", "SCHEMA_TYPE", "$.steps[0].count"),
        (10, 26, "error", "SETTING_TYPE", "$.steps[0].count_from_settings"),
        (11, 27, "error", "SCHEMA_TYPE", "$.steps[0].retry.max_attempts"),
        (15, 12, "error", "SCHEMA_TYPE", "$.steps[1].limit"),
    ]
    assert [d.message for d in report.diagnostics] == [
        "`top_k` must be an integer, got boolean True",
        "`max_turn_loops` must be an integer, got boolean True",  # `yes` too: not a string field
        "`count` must be an integer, got boolean True",
        "setting 'flag' (read by count_from_settings) is invalid for count: "
        "True is not of type 'integer'",
        "`max_attempts` must be an integer, got boolean False",
        "`limit` must be an integer, got boolean False",
    ]


def test_type_messages_name_json_types_of_lists_and_mappings(tmp_path, registry):
    path = _write(
        tmp_path,
        "settings:\n"
        "  entry_step_id: a\n"
        "  top_k: [1]\n"
        "  max_steps: {n: 1}\n"
        "steps:\n"
        "  - {id: a, action: finish}\n",
    )
    report = runtime.validate(path, registry=registry)
    assert _said(report.diagnostics) == [
        (3, "SCHEMA_TYPE", "`top_k` must be an integer, got array [1]", ""),
        (4, "SCHEMA_TYPE", "`max_steps` must be an integer, got object {'n': 1}", ""),
    ]


CYCLE = (
    "settings:\n"
    "  entry_step_id: a\n"
    "  max_steps: {limit}\n"
    "steps:\n"
    "  - id: a\n"
    "    action: noop\n"
    "    next: b\n"
    "  - id: b\n"
    "    action: router\n"
    "    routes: {{again: a}}\n"
    "    on_other: z\n"
    "  - {{id: z, action: finish}}\n"
)


def test_max_steps_true_does_not_bound_a_cycle(tmp_path, registry):
    report = runtime.validate(_write(tmp_path, CYCLE.format(limit="true")), registry=registry)
    assert _found(report.diagnostics) == [
        (3, 14, "error", "SCHEMA_TYPE", "$.settings.max_steps"),
        (5, 9, "error", "UNBOUNDED_CYCLE", "$.steps[0].id"),
    ]
    assert report.diagnostics[1].message == "steps a, b form a cycle that passes no loop_guard"


def test_an_integer_max_steps_bounds_every_cycle(tmp_path, registry):
    report = runtime.validate(_write(tmp_path, CYCLE.format(limit="50")), registry=registry)
    assert report.diagnostics == []


def test_max_steps_true_in_pipeline_data_means_the_default_limit(registry):
    pipeline = _linear({"max_steps": True})
    assert pipeline.max_steps == 1000
    assert runtime.Runner(pipeline, registry=registry).run({}).status == "completed"
    limited = runtime.Runner(_linear({"max_steps": 2}), registry=registry).run({})
    assert (limited.status, limited.error.code) == ("failed", "MAX_STEPS_EXCEEDED")
    assert limited.error.message == "run took more than 2 steps"


# --- NaN and infinities -----------------------------------------------------------------------


NON_FINITE = (
    "settings:\n"
    "  entry_step_id: a\n"
    "  max_steps: .inf\n"
    "  budget: .nan\n"
    "inputs:\n"
    "  ratio: {type: number, default: -.inf}\n"
    "steps:\n"
    "  - id: a\n"
    "    action: sender\n"
    "    low: .nan\n"
    "    high: -.Inf\n"
    "    nots: .nan\n"
    "    retry: {max_attempts: 2, backoff: {initial_seconds: .NaN, multiplier: .inf}}\n"
    "    end: true\n"
)


def test_nan_and_infinities_are_no_numbers_anywhere(tmp_path, registry):
    path = _write(tmp_path, NON_FINITE)
    report = runtime.validate(path, registry=registry)
    # One diagnostic per value (max_steps gets no second "must be an integer"), and a value
    # under an unknown field is reported only as the unknown field.
    assert _found(report.diagnostics) == [
        (3, 14, "error", "SCHEMA_TYPE", "$.settings.max_steps"),
        (4, 11, "error", "SCHEMA_TYPE", "$.settings.budget"),
        (6, 34, "error", "SCHEMA_TYPE", "$.inputs.ratio.default"),
        (10, 10, "error", "SCHEMA_TYPE", "$.steps[0].low"),
        (11, 11, "error", "SCHEMA_TYPE", "$.steps[0].high"),
        (12, 5, "error", "SCHEMA_UNKNOWN_FIELD", "$.steps[0].nots"),
        (13, 57, "error", "SCHEMA_TYPE", "$.steps[0].retry.backoff.initial_seconds"),
        (13, 75, "error", "SCHEMA_TYPE", "$.steps[0].retry.backoff.multiplier"),
    ]
    messages = [d.message for d in report.diagnostics]
    assert messages[:5] == [
        "`max_steps`: .inf is not a finite number",
        "`budget`: .nan is not a finite number",
        "`default`: -.inf is not a finite number",
        "`low`: .nan is not a finite number",
        "`high`: -.Inf is not a finite number",
    ]
    assert messages[6:] == [
        "`initial_seconds`: .NaN is not a finite number",
        "`multiplier`: .inf is not a finite number",
    ]
    # A NaN backoff used to crash the run (time.sleep(nan)); now the pipeline never loads.
    with pytest.raises(runtime.PipelineInvalidError) as caught:
        runtime.load(path, registry=registry)
    loaded = caught.value.diagnostics
    assert _found(d for d in loaded if d.code != "ACTION_NOT_RUNNABLE") == _found(
        report.diagnostics
    )
    # Loading is for running: an action that cannot run yet is an error there too.
    assert _found(d for d in loaded if d.code == "ACTION_NOT_RUNNABLE") == [
        (9, 13, "error", "ACTION_NOT_RUNNABLE", "$.steps[0].action")
    ]


def test_finite_floats_are_numbers(tmp_path, registry):
    path = _write(
        tmp_path,
        "settings: {entry_step_id: a, budget: 1.5e3}\n"
        "steps:\n"
        "  - {id: a, action: sender, low: -0.5, high: 2.0, end: true}\n",
    )
    # No type error anywhere; the one warning says that nothing reads `budget`.
    found = runtime.validate(path, registry=registry).diagnostics
    assert [(d.code, d.path) for d in found] == [("SETTING_UNUSED", "$.settings.budget")]


# --- enum values: the choices and a did-you-mean ------------------------------------------


def test_bad_enum_values_list_the_choices_and_suggest_the_closest(tmp_path, registry):
    path = _write(
        tmp_path,
        "settings:\n"
        "  entry_step_id: a\n"
        "  search_type: bm52\n"
        "  tokenizer: o200k\n"
        "inputs:\n"
        "  q: strng\n"
        "  n: {type: intger}\n"
        "  c: 5\n"
        "inbox:\n"
        "  on_leftover: wrn\n"
        "steps:\n"
        "  - {id: a, action: finish}\n",
    )
    report = runtime.validate(path, registry=registry)
    types = "string, integer, number, boolean, array, object, any"
    assert _found(report.diagnostics) == [
        (3, 16, "error", "SCHEMA_ENUM", "$.settings.search_type"),
        (4, 14, "error", "SCHEMA_ENUM", "$.settings.tokenizer"),
        (6, 6, "error", "SCHEMA_ENUM", "$.inputs.q"),
        (7, 13, "error", "SCHEMA_ENUM", "$.inputs.n.type"),
        (8, 6, "error", "SCHEMA_TYPE", "$.inputs.c"),
        (10, 16, "error", "SCHEMA_ENUM", "$.inbox.on_leftover"),
    ]
    assert _said(report.diagnostics) == [
        (
            3,
            "SCHEMA_ENUM",
            "`search_type` must be one of bm25, semantic, hybrid; got 'bm52'",
            "did you mean 'bm25'?",
        ),
        (
            4,
            "SCHEMA_ENUM",
            "`tokenizer` must be one of cl100k_base, o200k_base; got 'o200k'",
            "did you mean 'o200k_base'?",
        ),
        (6, "SCHEMA_ENUM", f"`q` must be one of {types}; got 'strng'", "did you mean 'string'?"),
        (
            7,
            "SCHEMA_ENUM",
            f"`type` must be one of {types}; got 'intger'",
            "did you mean 'integer'?",
        ),
        (8, "SCHEMA_TYPE", "`c` must be a string or an object, got integer 5", ""),
        (
            10,
            "SCHEMA_ENUM",
            "`on_leftover` must be one of error, warn, ignore; got 'wrn'",
            "did you mean 'warn'?",
        ),
    ]


def test_a_non_string_enum_value_gets_no_suggestion(tmp_path, registry):
    path = _write(
        tmp_path,
        "settings: {entry_step_id: a, search_type: 25}\nsteps:\n  - {id: a, action: finish}\n",
    )
    report = runtime.validate(path, registry=registry)
    assert _said(report.diagnostics) == [
        (1, "SCHEMA_ENUM", "`search_type` must be one of bm25, semantic, hybrid; got 25", ""),
        (1, "SCHEMA_TYPE", "`search_type` must be a string, got integer 25", ""),
    ]


def test_a_real_action_field_enum_and_integer(tmp_path):
    # The default registry: search_nodes owns search_type (with `auto`) and top_k.
    path = _write(
        tmp_path,
        "settings: {entry_step_id: s}\n"
        "steps:\n"
        "  - id: s\n"
        "    action: search_nodes\n"
        "    search_type: bm52\n"
        "    top_k: true\n"
        "    next: f\n"
        "  - {id: f, action: finalize}\n",
    )
    report = runtime.validate(path)
    assert _found(report.diagnostics) == [
        (5, 18, "error", "SCHEMA_ENUM", "$.steps[0].search_type"),
        (6, 12, "error", "SCHEMA_TYPE", "$.steps[0].top_k"),
    ]
    assert _said(report.diagnostics) == [
        (
            5,
            "SCHEMA_ENUM",
            "`search_type` must be one of bm25, semantic, hybrid, auto; got 'bm52'",
            "did you mean 'bm25'?",
        ),
        (6, "SCHEMA_TYPE", "`top_k` must be an integer, got boolean True", ""),
    ]


# --- graph checks: code, line and column ------------------------------------------------------


def test_graph_fixture_every_check_at_its_position(registry):
    path = INVALID / "graph.yaml"
    report = runtime.validate(str(path), registry=registry)
    assert {d.file for d in report.diagnostics} == {str(path)}
    assert _found(report.diagnostics) == [
        (5, 3, "warning", "SETTING_UNUSED", "$.settings.budget"),
        (10, 26, "error", "SETTING_TYPE", "$.steps[0].count_from_settings"),
        (15, 15, "error", "UNKNOWN_STEP", "$.steps[1].routes.answer"),
        (24, 9, "error", "NO_TRANSITION", "$.steps[4].id"),
        (24, 9, "warning", "UNREACHABLE_STEP", "$.steps[4].id"),
        (26, 9, "error", "NO_PATH_TO_END", "$.steps[5].id"),
        (26, 9, "error", "UNBOUNDED_CYCLE", "$.steps[5].id"),
        (26, 9, "warning", "UNREACHABLE_STEP", "$.steps[5].id"),
        (28, 26, "error", "SETTING_MISSING", "$.steps[5].count_from_settings"),
        (30, 9, "error", "NO_PATH_TO_END", "$.steps[6].id"),
        (30, 9, "warning", "UNREACHABLE_STEP", "$.steps[6].id"),
        (33, 9, "warning", "UNREACHABLE_STEP", "$.steps[7].id"),
        (35, 10, "error", "BUDGET_CANNOT_FIT", "$.steps[7].low"),
        (37, 17, "error", "PROMPT_NOT_FOUND", "$.steps[7].prompt_key"),
        (39, 7, "error", "INBOX_TARGET_UNKNOWN", "$.steps[7].targets.nobody"),
        (41, 9, "error", "DUPLICATE_STEP_ID", "$.steps[8].id"),
    ]
    prompts = INVALID / "prompts"
    assert _said(report.diagnostics) == [
        (
            5,
            "SETTING_UNUSED",
            "setting 'budget' is read by nothing in this pipeline",
            "did you mean 'budgt'?",  # the name the misspelt reference asks for
        ),
        (
            10,
            "SETTING_TYPE",
            "setting 'label' (read by count_from_settings) is invalid for count: "
            "'text' is not of type 'integer'",
            "",
        ),
        (15, "UNKNOWN_STEP", "step 'route' route answer -> 'answr': no such step", ""),
        (24, "NO_TRANSITION", "step 'stuck' has no way on and no `end: true`", _NO_WAY_ON),
        (24, "UNREACHABLE_STEP", "step 'stuck' is never reached from 'start'", _UNREACHABLE),
        (26, "NO_PATH_TO_END", "no path from step 'spin_a' reaches an end", _NO_END),
        (
            26,
            "UNBOUNDED_CYCLE",
            "steps spin_a, spin_b form a cycle that passes no loop_guard",
            _GUARD,
        ),
        (26, "UNREACHABLE_STEP", "step 'spin_a' is never reached from 'start'", _UNREACHABLE),
        (
            28,
            "SETTING_MISSING",
            "count_from_settings names setting 'budgt', which is not set",
            "did you mean 'budget'?",
        ),
        (30, "NO_PATH_TO_END", "no path from step 'spin_b' reaches an end", _NO_END),
        (30, "UNREACHABLE_STEP", "step 'spin_b' is never reached from 'start'", _UNREACHABLE),
        (33, "UNREACHABLE_STEP", "step 'send' is never reached from 'start'", _UNREACHABLE),
        (35, "BUDGET_CANNOT_FIT", "low 5 is above high 1", ""),
        (
            37,
            "PROMPT_NOT_FOUND",
            f"prompt 'missing/prompt' not found under {prompts}",
            f"create {prompts / 'missing/prompt'}.md",
        ),
        (39, "INBOX_TARGET_UNKNOWN", "inbox rule targets unknown step 'nobody'", ""),
        (41, "DUPLICATE_STEP_ID", "step id 'start' is already used by step #1", ""),
    ]
    assert (report.errors, report.warnings) == (11, 5)


_NO_WAY_ON = "add `next:` or `end: true`"
_UNREACHABLE = "Remove the step or route to it."
_NO_END = "Every loop needs an exit that leads to an `end: true` step."
_GUARD = "Put a loop_guard step in the cycle or set settings.max_steps."


def test_entry_step_missing_and_unknown(registry):
    missing = runtime.validate(str(INVALID / "entry_missing.yaml"), registry=registry)
    assert _found(missing.diagnostics) == [(2, 1, "error", "ENTRY_STEP_MISSING", "$.settings")]
    assert _said(missing.diagnostics) == [
        (
            2,
            "ENTRY_STEP_MISSING",
            "settings.entry_step_id is not set",
            "add `entry_step_id: only` under settings",
        )
    ]
    unknown = runtime.validate(str(INVALID / "entry_unknown.yaml"), registry=registry)
    assert _found(unknown.diagnostics) == [
        (3, 18, "error", "ENTRY_STEP_UNKNOWN", "$.settings.entry_step_id")
    ]
    assert unknown.diagnostics[0].hint == "did you mean 'start'?"


def test_unknown_targets_catch_only_steps_and_self_loops(tmp_path, registry):
    path = _write(
        tmp_path,
        "settings: {entry_step_id: a}\n"
        "steps:\n"
        "  - id: a\n"
        "    action: noop\n"
        "    next: finsh\n"
        "    catch: {ALL: recovr}\n"
        "  - id: finish\n"
        "    action: finish\n"
        "  - id: recover\n"
        "    action: noop\n"
        "    catch: {ALL: finish}\n"
        "  - id: self\n"
        "    action: noop\n"
        "    next: self\n",
    )
    report = runtime.validate(path, registry=registry)
    # `a` names only unknown steps: it gets the benefit of the doubt (no NO_PATH_TO_END), and
    # `recover` has no way on besides its catch, so it is stuck rather than endless.
    assert _found(report.diagnostics) == [
        (5, 11, "error", "UNKNOWN_STEP", "$.steps[0].next"),
        (6, 18, "error", "UNKNOWN_STEP", "$.steps[0].catch.ALL"),
        (7, 9, "warning", "UNREACHABLE_STEP", "$.steps[1].id"),
        (9, 9, "error", "NO_TRANSITION", "$.steps[2].id"),
        (9, 9, "warning", "UNREACHABLE_STEP", "$.steps[2].id"),
        (12, 9, "error", "NO_PATH_TO_END", "$.steps[3].id"),
        (12, 9, "error", "UNBOUNDED_CYCLE", "$.steps[3].id"),
        (12, 9, "warning", "UNREACHABLE_STEP", "$.steps[3].id"),
    ]
    assert _said(report.diagnostics[:2]) == [
        (5, "UNKNOWN_STEP", "step 'a' next -> 'finsh': no such step", "did you mean 'finish'?"),
        (
            6,
            "UNKNOWN_STEP",
            "step 'a' catch ALL -> 'recovr': no such step",
            "did you mean 'recover'?",
        ),
    ]
    assert report.diagnostics[6].message == "steps self form a cycle that passes no loop_guard"


def test_a_step_reached_only_through_a_catch_is_reachable(tmp_path, registry):
    path = _write(
        tmp_path,
        "settings: {entry_step_id: a}\n"
        "steps:\n"
        "  - {id: a, action: noop, next: z, catch: {ALL: recover}}\n"
        "  - {id: recover, action: noop, next: z}\n"
        "  - {id: z, action: finish}\n",
    )
    assert runtime.validate(path, registry=registry).diagnostics == []


def test_a_loop_through_a_guard_is_bounded_but_one_around_it_is_not(tmp_path, registry):
    path = _write(
        tmp_path,
        "settings: {entry_step_id: a}\n"
        "steps:\n"
        "  - {id: a, action: noop, next: g}\n"
        "  - {id: g, action: guard, on_allow: b, on_deny: z}\n"
        "  - {id: b, action: router, routes: {back: a, spin: c}, on_other: z}\n"
        "  - {id: c, action: noop, next: b}\n"
        "  - {id: z, action: finish}\n",
    )
    report = runtime.validate(path, registry=registry)
    # a -> g -> b -> a passes the guard; b -> c -> b does not.
    assert _found(report.diagnostics) == [(5, 10, "error", "UNBOUNDED_CYCLE", "$.steps[2].id")]
    assert report.diagnostics[0].message == "steps b, c form a cycle that passes no loop_guard"


class Decide(Action):
    """A test action with two branches and no required fields."""

    name = "decide"
    summary = "Decide."
    fields = {"on_yes": {"type": "string"}, "on_no": {"type": "string"}}
    outcomes = ("yes", "no")


def test_no_transition_hint_names_the_actions_branches(tmp_path, registry):
    registry.register(Decide)
    path = _write(
        tmp_path,
        "settings: {entry_step_id: a}\nsteps:\n  - {id: a, action: decide}\n",
    )
    [d] = runtime.validate(path, registry=registry).diagnostics
    assert (d.line, d.column, d.code) == (3, 10, "NO_TRANSITION")
    assert d.hint == "add `next:`, on_yes, on_no or `end: true`"


def test_settings_refs_missing_and_of_the_right_type(tmp_path, registry):
    path = _write(
        tmp_path,
        "settings: {entry_step_id: a, budget: 3}\n"
        "steps:\n"
        "  - {id: a, action: noop, count_from_settings: budget, next: b}\n"
        "  - {id: b, action: noop, count_from_settings: zzz, next: z}\n"
        "  - {id: z, action: finish}\n",
    )
    report = runtime.validate(path, registry=registry)
    assert _said(report.diagnostics) == [
        (4, "SETTING_MISSING", "count_from_settings names setting 'zzz', which is not set", ""),
    ]
    assert _found(report.diagnostics) == [
        (4, 48, "error", "SETTING_MISSING", "$.steps[1].count_from_settings")
    ]


def test_a_pack_member_is_positioned_and_pathed_inside_the_pack(tmp_path, registry):
    path = _write(
        tmp_path,
        "YAMLpipelines:\n"
        "  - name: one\n"
        "    settings: {entry_step_id: a}\n"
        "    steps:\n"
        "      - {id: a, action: finish}\n"
        "  - name: two\n"
        "    settings: {entry_step_id: b}\n"
        "    steps:\n"
        "      - {id: a, action: finish}\n",
    )
    report = runtime.validate(path, registry=registry)
    assert _found(report.diagnostics) == [
        (7, 31, "error", "ENTRY_STEP_UNKNOWN", "$.YAMLpipelines[1].settings.entry_step_id")
    ]


def test_yaml_traps_and_extends_problems_at_their_positions(registry):
    traps = runtime.validate(str(INVALID / "yaml_traps.yaml"), registry=registry)
    assert _found(traps.diagnostics) == [
        (8, 7, "warning", "YAML_BOOLEAN_KEY", "$.steps[0].routes.yes"),
        (13, 5, "error", "YAML_BOOLEAN_KEY", "$.steps[1].on"),
        (15, 5, "error", "YAML_DUPLICATE_KEY", "$.steps[1].end"),
    ]
    assert traps.diagnostics[2].message == "duplicate key 'end' (first at line 14)"
    cycle = runtime.validate(str(INVALID / "cycle_a.yaml"), registry=registry)
    assert _said(cycle.diagnostics) == [
        (
            1,
            "EXTENDS_CYCLE",
            "extends cycle: cycle_a.yaml#cycle_a -> cycle_b.yaml#cycle_b -> cycle_a.yaml#cycle_a",
            "Break the cycle; `extends` must form a chain.",
        )
    ]
    unknown = runtime.validate(str(INVALID / "extends_unknown.yaml"), registry=registry)
    assert _found(unknown.diagnostics) == [(1, 10, "error", "EXTENDS_TARGET_UNKNOWN", "$.extends")]
    assert unknown.diagnostics[0].message == (
        "../valid/pack.yaml has no pipeline named 'nonexistent' (it has: first, second)"
    )


def test_a_boolean_key_hint_quotes_the_key_as_written(registry):
    # The hint said `"on":` whatever the key was; it quotes the key the file holds.
    report = runtime.validate(str(INVALID / "yaml_traps.yaml"), registry=registry)
    hints = {d.path: d.hint for d in report.diagnostics if d.code == "YAML_BOOLEAN_KEY"}
    assert hints == {
        "$.steps[0].routes.yes": 'Quote the key ("yes":) so every YAML tool reads it as a string.',
        "$.steps[1].on": 'Quote the key ("on":) so every YAML tool reads it as a string.',
    }


@pytest.mark.parametrize("key", ["off", "Yes", "TRUE", "no"])
def test_a_boolean_key_hint_names_each_spelling(tmp_path, registry, key):
    path = _write(
        tmp_path,
        f"settings: {{entry_step_id: a}}\nsteps:\n  - id: a\n    action: finish\n    {key}: 1\n",
    )
    (found,) = [d for d in runtime.validate(path, registry=registry).diagnostics]
    assert (found.code, found.line, found.column) == ("YAML_BOOLEAN_KEY", 5, 5)
    assert found.hint == f'Quote the key ("{key}":) so every YAML tool reads it as a string.'


# --- severity and exit status of `runtime validate` ---------------------------------------------


# The answer comes in as an input: a finalize with nothing to read warns (VARIABLE_NEVER_WRITTEN).
CLEAN = (
    "inputs: {answer: string}\nsettings: {entry_step_id: a}\nsteps:\n"
    "  - {id: a, action: finalize}\n"
)
WARNS = CLEAN + "  - {id: b, action: finalize}\n"
FAILS = CLEAN + "  - {id: b, action: finalize, top_k: 3}\n"


@pytest.fixture
def files(tmp_path):
    """Three pipelines over the real actions: clean, one warning, one error and one warning."""
    return {
        name: _write(tmp_path, text, f"{name}.yaml")
        for name, text in (("clean", CLEAN), ("warns", WARNS), ("fails", FAILS))
    }


def test_exit_0_when_clean_or_only_warnings(files):
    runner = CliRunner()
    clean = runner.invoke(cli, ["validate", files["clean"]], catch_exceptions=False)
    assert (clean.exit_code, clean.stdout) == (0, "1 file(s) valid\n")
    warns = runner.invoke(cli, ["validate", files["warns"]], catch_exceptions=False)
    assert warns.exit_code == 0
    assert warns.stdout.splitlines()[0] == (
        f"{files['warns']}:5:10: warning UNREACHABLE_STEP step 'b' is never reached from 'a'"
    )
    assert warns.stdout.splitlines()[-1] == "0 error(s), 1 warning(s)"


def test_warnings_exit_1_under_strict_and_lint(files):
    runner = CliRunner()
    assert runner.invoke(cli, ["validate", "--strict", files["warns"]]).exit_code == 1
    assert runner.invoke(cli, ["lint", files["warns"]]).exit_code == 1
    assert runner.invoke(cli, ["validate", "--strict", files["clean"]]).exit_code == 0
    assert runner.invoke(cli, ["lint", files["clean"]]).exit_code == 0


def test_errors_exit_1_with_or_without_strict(files):
    runner = CliRunner()
    result = runner.invoke(cli, ["validate", "--format", "json", files["fails"]])
    assert result.exit_code == 1
    obj = json.loads(result.stdout)
    assert (obj["errors"], obj["warnings"]) == (1, 1)
    assert [(d["line"], d["column"], d["severity"], d["code"]) for d in obj["diagnostics"]] == [
        (5, 10, "warning", "UNREACHABLE_STEP"),
        (5, 31, "error", "SCHEMA_UNKNOWN_FIELD"),
    ]
    assert runner.invoke(cli, ["validate", "--strict", files["fails"]]).exit_code == 1
    both = runner.invoke(cli, ["validate", files["clean"], files["fails"]])
    assert both.exit_code == 1 and both.stdout.splitlines()[-1] == "1 error(s), 1 warning(s)"


def test_usage_errors_exit_2(files, tmp_path):
    runner = CliRunner()
    assert runner.invoke(cli, ["validate", "--format", "xml", files["clean"]]).exit_code == 2
    # A missing file is a FILE_NOT_FOUND diagnostic (exit 1), not a usage error.
    assert runner.invoke(cli, ["validate", str(tmp_path / "none.yaml")]).exit_code == 1
    assert runner.invoke(cli, ["validate", "--bogus", files["clean"]]).exit_code == 2
    for argv, status in (
        (["validate"], 2),
        (["validate", files["fails"]], 1),
        (["validate", files["warns"]], 0),
    ):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == status


# --- the embedding API: runtime.load and runtime.validate ----------------------------------------


def test_validate_reports_every_file_in_one_report(registry):
    report = runtime.validate(
        str(INVALID / "entry_unknown.yaml"), str(INVALID / "graph.yaml"), registry=registry
    )
    assert isinstance(report, runtime.Report)
    assert report.files == [str(INVALID / "entry_unknown.yaml"), str(INVALID / "graph.yaml")]
    assert (report.errors, report.warnings) == (12, 5)
    # Sorted by file, then line and column.
    assert [(Path(d.file).name, d.line) for d in report.diagnostics[:3]] == [
        ("entry_unknown.yaml", 3),
        ("graph.yaml", 5),
        ("graph.yaml", 10),
    ]


def test_validate_a_folder_yields_its_runnable_pipelines(registry):
    report = runtime.validate(str(VALID), registry=registry)
    assert report.diagnostics == []
    assert [Path(f).name for f in report.files] == [
        "base.yaml",
        "child.yaml",
        "from_pack.yaml",
        "pack.yaml",
        "single_root.yaml",
    ]
    # base.yaml is abstract: checked, but not a pipeline to run.
    assert [p.name for p in report.pipelines] == [
        "child",
        "from_pack",
        "first",
        "second",
        "wrapped",
    ]


def test_load_raises_with_every_diagnostic(registry):
    path = str(INVALID / "graph.yaml")
    with pytest.raises(runtime.PipelineInvalidError) as caught:
        runtime.load(path, registry=registry)
    err = caught.value
    runnable = [d for d in err.diagnostics if d.code != "ACTION_NOT_RUNNABLE"]
    assert runnable == runtime.validate(path, registry=registry).diagnostics
    assert _said(d for d in err.diagnostics if d.code == "ACTION_NOT_RUNNABLE") == [
        (13, "ACTION_NOT_RUNNABLE", "action 'router' cannot run yet", ""),
        (34, "ACTION_NOT_RUNNABLE", "action 'sender' cannot run yet", ""),
    ]
    assert len(err.diagnostics) == 18
    assert err.code == "SETTING_TYPE"
    assert err.exit_code == 2
    assert err.message == (
        f"pipeline invalid: 13 error(s); first: {path}:10:26 SETTING_TYPE setting 'label' "
        "(read by count_from_settings) is invalid for count: 'text' is not of type 'integer'"
    )


def test_load_returns_a_pipeline_carrying_its_warnings(tmp_path, registry):
    path = _write(
        tmp_path,
        "settings: {entry_step_id: a}\nsteps:\n  - {id: a, action: finish}\n"
        "  - {id: b, action: finish}\n",
    )
    pipeline = runtime.load(path, registry=registry)
    assert isinstance(pipeline, runtime.Pipeline)
    assert [s.id for s in pipeline.steps] == ["a", "b"]
    assert _found(pipeline.warnings) == [(4, 10, "warning", "UNREACHABLE_STEP", "$.steps[1].id")]
    clean = runtime.load(str(VALID / "child.yaml"), registry=registry)
    assert clean.warnings == []


def test_load_chooses_a_pack_member_by_name(registry):
    pack = str(VALID / "pack.yaml")
    assert runtime.load(f"{pack}#second", registry=registry).name == "second"
    with pytest.raises(runtime.StepRuntimeError) as several:
        runtime.load(pack, registry=registry)
    assert (several.value.code, several.value.exit_code) == ("USAGE", 2)
    assert several.value.message == (
        f"{pack} holds several pipelines (first, second); choose one with {pack}#NAME"
    )
    with pytest.raises(runtime.StepRuntimeError) as absent:
        runtime.load(f"{pack}#third", registry=registry)
    assert absent.value.message == f"{pack} has no pipeline named 'third'"


def test_load_refuses_what_cannot_run(tmp_path, registry):
    cases = [
        (str(VALID / "base.yaml"), ("YAML_NOT_A_PIPELINE", 1, 1)),  # abstract
        (str(INVALID / "syntax.yaml"), ("YAML_SYNTAX", 5, 4)),
        (str(INVALID / "not_a_pipeline.yaml"), ("YAML_NOT_A_PIPELINE", 1, 1)),
        (str(tmp_path / "missing.yaml"), ("FILE_NOT_FOUND", 1, 1)),
    ]
    for path, expected in cases:
        with pytest.raises(runtime.PipelineInvalidError) as caught:
            runtime.load(path, registry=registry)
        assert [(d.code, d.line, d.column) for d in caught.value.diagnostics] == [expected]


# --- every output format, checked by hand ---------------------------------------------------


@pytest.fixture
def schema_diags(registry, monkeypatch):
    """The schema fixture's diagnostics, with the file path relative to tests/data."""
    monkeypatch.chdir(DATA)
    return runtime.validate("invalid/schema.yaml", registry=registry).diagnostics


def test_text_rendering_by_hand(schema_diags):
    lines = render.render_text(schema_diags).splitlines()
    assert lines[:4] == [
        "invalid/schema.yaml:3:1: error SCHEMA_UNKNOWN_FIELD unknown field 'descripton'",
        "     3 | descripton: typo at the top level   # expect: SCHEMA_UNKNOWN_FIELD",
        "       | ^^^^^^^^^^",
        "       = hint: did you mean 'description'?",
    ]
    # A region over several lines gets one caret; a code without a hint gets no hint line.
    i = lines.index(
        "invalid/schema.yaml:16:5: error SCHEMA_MISSING_FIELD "
        "missing required field 'on_deny' in step 'third'"
    )
    assert lines[i + 1 : i + 4] == [
        "    16 |   - id: third                       # expect: SCHEMA_MISSING_FIELD",
        "       |     ^",
        "invalid/schema.yaml:23:12: error YAML_BOOLEAN_VALUE "
        "`topic`: unquoted 'yes' is read as a boolean; a string is expected",
    ]
    j = lines.index(
        "invalid/schema.yaml:36:9: warning UNREACHABLE_STEP "
        "step 'orphan' is never reached from 'first'"
    )
    assert lines[j + 1 : j + 4] == [
        "    36 |   - id: orphan                      # expect: UNREACHABLE_STEP",
        "       |         ^^^^^^",
        "       = hint: Remove the step or route to it.",
    ]
    assert lines[-1] == "9 error(s), 1 warning(s)"


def test_json_rendering_by_hand(schema_diags):
    obj = json.loads(render.render_json(schema_diags, ["invalid/schema.yaml"]))
    assert (obj["files"], obj["errors"], obj["warnings"]) == (["invalid/schema.yaml"], 9, 1)
    assert obj["diagnostics"][0] == {
        "code": "SCHEMA_UNKNOWN_FIELD",
        "severity": "error",
        "message": "unknown field 'descripton'",
        "file": "invalid/schema.yaml",
        "line": 3,
        "column": 1,
        "path": "$.descripton",
        "hint": "did you mean 'description'?",
    }
    assert obj["diagnostics"][9] == {
        "code": "UNREACHABLE_STEP",
        "severity": "warning",
        "message": "step 'orphan' is never reached from 'first'",
        "file": "invalid/schema.yaml",
        "line": 36,
        "column": 9,
        "path": "$.steps[6].id",
        "hint": "Remove the step or route to it.",
    }


def test_github_rendering_by_hand(schema_diags):
    lines = render.render_github(schema_diags).splitlines()
    assert len(lines) == 10
    assert lines[0] == (
        "::error file=invalid/schema.yaml,line=3,col=1,title=SCHEMA_UNKNOWN_FIELD::"
        "unknown field 'descripton' (hint: did you mean 'description'?)"
    )
    assert lines[5] == (
        "::error file=invalid/schema.yaml,line=16,col=5,title=SCHEMA_MISSING_FIELD::"
        "missing required field 'on_deny' in step 'third'"
    )
    assert lines[9] == (
        "::warning file=invalid/schema.yaml,line=36,col=9,title=UNREACHABLE_STEP::"
        "step 'orphan' is never reached from 'first' (hint: Remove the step or route to it.)"
    )


def test_sarif_rendering_by_hand(schema_diags):
    run = json.loads(render.render_sarif(schema_diags, version="t"))["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == [
        "SCHEMA_MISSING_FIELD",
        "SCHEMA_PATTERN",
        "SCHEMA_RANGE",
        "SCHEMA_TYPE",
        "SCHEMA_UNKNOWN_FIELD",
        "UNKNOWN_ACTION",
        "UNREACHABLE_STEP",
        "YAML_BOOLEAN_VALUE",
    ]
    results = run["results"]
    assert len(results) == 10
    missing, warning = results[5], results[9]
    assert (missing["ruleId"], missing["ruleIndex"], missing["level"]) == (
        "SCHEMA_MISSING_FIELD",
        0,
        "error",
    )
    assert missing["message"] == {"text": "missing required field 'on_deny' in step 'third'"}
    where = missing["locations"][0]
    assert where["physicalLocation"]["artifactLocation"] == {
        "uri": "invalid/schema.yaml",
        "uriBaseId": "%SRCROOT%",
    }
    # The step mapping spans from its first key to where the next item starts.
    assert where["physicalLocation"]["region"] == {
        "startLine": 16,
        "startColumn": 5,
        "endLine": 19,
        "endColumn": 3,
    }
    assert where["logicalLocations"] == [{"fullyQualifiedName": "$.steps[2]"}]
    assert (warning["ruleId"], warning["ruleIndex"], warning["level"]) == (
        "UNREACHABLE_STEP",
        6,
        "warning",
    )
    assert warning["message"]["text"] == (
        "step 'orphan' is never reached from 'first' Hint: Remove the step or route to it."
    )
    assert warning["locations"][0]["physicalLocation"]["region"] == {
        "startLine": 36,
        "startColumn": 9,
        "endLine": 36,
        "endColumn": 15,
    }
