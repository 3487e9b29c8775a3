"""Long-form transitions ({step, fidelity, thread_id}) through the format layer.

`outgoing` is the one reader of a step's edges (graph checks, `runtime graph`, the
engine); the schema accepts the long form wherever a target is written; validation
positions fidelity, key and target problems; THREAD_WITHOUT_FULL follows the
fidelity resolution order (transition, step, settings.default_fidelity, compact).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runtime.contract.action import Action
from runtime.contract.registry import Registry, default_registry
from runtime.format.graph import to_dot, to_mermaid
from runtime.format.schema import document_schema
from runtime.format.transitions import FIDELITY_MODES, Edge, outgoing, short_config
from runtime.format.validation import load_pipeline, validate_paths

REG = default_registry()


def edges(step: dict[str, Any]) -> list[Edge]:
    return outgoing(step, REG.get(step["action"]))


# --- outgoing and short_config ------------------------------------------------------------


def test_every_kind_of_target_in_both_forms():
    step = {
        "id": "r",
        "action": "prefix_router",
        "routes": {
            "sql": {"prefix": "SQL:", "next": {"step": "q", "fidelity": "full", "thread_id": "t"}},
            "code": {"prefix": "CODE:", "next": "c"},
        },
        "on_other": {"step": "o", "thread_id": "side"},
        "next": {"step": "n", "fidelity": "summary:low"},
        "catch": {"ALL": {"step": "h", "fidelity": "truncate"}, "MODEL_TIMEOUT": "m"},
    }
    assert edges(step) == [
        Edge("next", "n", {"fidelity": "summary:low"}, ("next", "step")),
        Edge("other", "o", {"thread_id": "side"}, ("on_other", "step")),
        Edge("catch ALL", "h", {"fidelity": "truncate"}, ("catch", "ALL", "step")),
        Edge("catch MODEL_TIMEOUT", "m", {}, ("catch", "MODEL_TIMEOUT")),
        Edge(
            "route sql",
            "q",
            {"fidelity": "full", "thread_id": "t"},
            ("routes", "sql", "next", "step"),
        ),
        Edge("route code", "c", {}, ("routes", "code", "next")),
    ]


def test_json_router_routes_take_the_long_form_as_the_value():
    step = {
        "id": "j",
        "action": "json_decision_router",
        "routes": {"fix": {"step": "f", "fidelity": "full"}, "done": "d"},
        "on_other": "d",
    }
    assert [(e.label, e.target, e.attrs, e.path) for e in edges(step)] == [
        ("other", "d", {}, ("on_other",)),
        ("route fix", "f", {"fidelity": "full"}, ("routes", "fix", "step")),
        ("route done", "d", {}, ("routes", "done")),
    ]


def test_short_config_gives_actions_plain_step_ids_and_leaves_the_step_alone():
    step = {
        "id": "j",
        "action": "json_decision_router",
        "routes": {"fix": {"step": "f", "fidelity": "full"}, "done": "d"},
        "on_other": {"step": "d"},
        "catch": {"ALL": {"step": "h", "thread_id": "t"}},
    }
    before = json.loads(json.dumps(step))
    short = short_config(step, REG.get("json_decision_router"))
    assert short["routes"] == {"fix": "f", "done": "d"}
    assert short["on_other"] == "d"
    assert short["catch"] == {"ALL": "h"}
    assert step == before  # the pipeline's own configuration is not rewritten


class Holder(Action):
    """A test action with an object field that happens to hold a `step` key."""

    name = "holder"
    fields = {"meta": {"type": "object"}}
    outcomes = ("ok",)


def test_a_mapping_that_is_no_transition_keeps_its_shape():
    step = {"id": "x", "action": "holder", "meta": {"step": "y"}, "on_ok": {"step": "z"}}
    assert [e.target for e in outgoing(step, Holder)] == ["z"]
    assert short_config(step, Holder) == {
        "id": "x",
        "action": "holder",
        "meta": {"step": "y"},
        "on_ok": "z",
    }


def test_an_unknown_action_still_shows_its_long_form_branches():
    step = {"id": "x", "action": "nope", "on_yes": {"step": "y", "fidelity": "full"}}
    assert outgoing(step, None) == [Edge("yes", "y", {"fidelity": "full"}, ("on_yes", "step"))]


# --- schema ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schema_validator():
    from jsonschema import Draft202012Validator

    return Draft202012Validator(document_schema(REG))


LONG = {
    "name": "long",
    # What the routers and finalize read comes in (else VARIABLE_NEVER_WRITTEN warnings).
    "inputs": {"last_model_response": "string", "answer": "string"},
    "settings": {
        "entry_step_id": "g",
        "default_fidelity": "compact",
        "default_thread": "main",
        "fidelity": {"include": ["draft"], "exclude": ["secret_notes"]},
    },
    "steps": [
        {
            "id": "g",
            "action": "loop_guard",
            "on_allow": {"step": "r", "fidelity": "full", "thread_id": "coding"},
            "on_deny": {"step": "end"},
            "catch": {"ALL": {"step": "end", "fidelity": "truncate"}},
            "group": "review",
        },
        {
            "id": "r",
            "action": "json_decision_router",
            "routes": {"again": {"step": "g", "fidelity": "summary:high"}, "done": "p"},
            "on_other": "p",
            "fidelity": "summary:medium",
            "thread_id": "coding",
        },
        {
            "id": "p",
            "action": "prefix_router",
            "routes": {"x": {"prefix": "X", "next": {"step": "end", "fidelity": "summary:low"}}},
            "on_other": "end",
        },
        {"id": "end", "action": "finalize"},
    ],
}


def test_the_document_schema_accepts_the_long_form_everywhere(schema_validator):
    assert list(schema_validator.iter_errors(LONG)) == []


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("steps", 0, "on_allow"), {"step": "r", "fidelty": "full"}),
        (("steps", 0, "on_allow"), {"step": "r", "fidelity": "summary"}),
        (("steps", 0, "catch", "ALL"), {"fidelity": "full"}),
        (("steps", 1, "routes", "again"), {"step": "g", "thread_id": ""}),
        (("steps", 2, "routes", "x", "next"), {"step": "end", "extra": 1}),
        (("steps", 1, "fidelity"), "summary:hi"),
        (("settings", "default_fidelity"), "ful"),
        (("settings", "fidelity"), {"include": ["a"], "only": ["b"]}),
    ],
)
def test_the_document_schema_rejects_a_broken_long_form(schema_validator, where, value):
    doc = json.loads(json.dumps(LONG))
    node = doc
    for seg in where[:-1]:
        node = node[seg]
    node[where[-1]] = value
    assert list(schema_validator.iter_errors(doc)) != []


def test_the_checked_in_schema_has_the_six_modes():
    text = (Path(__file__).resolve().parents[2] / "schemas" / "pipeline.schema.json").read_text()
    step_fields = json.loads(text)["$defs"]["action_call_model"]["properties"]
    assert step_fields["fidelity"]["enum"] == list(FIDELITY_MODES)
    assert "thread_id" in step_fields and "group" in step_fields


# --- validation: positioned diagnostics ---------------------------------------------------


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(textwrap.dedent(text).lstrip())
    return str(path)


def found(path: str) -> list[tuple[str, int, int, str]]:
    report = validate_paths([path], registry=REG)
    return [(d.code, d.line, d.column, d.hint) for d in report.diagnostics]


def test_the_long_form_example_validates_clean(tmp_path):
    path = tmp_path / "long.json"
    path.write_text(json.dumps(LONG))
    yaml_path = tmp_path / "long.yaml"
    yaml_path.write_text(path.read_text())  # JSON is YAML
    # The example puts fidelity on steps of every kind; only model steps read it, so each
    # of those is a FIDELITY_WITHOUT_MODEL warning (tests/runtime/test_fidelity_fields.py).
    assert [
        (d.severity, d.code, d.path)
        for d in validate_paths([str(yaml_path)], registry=REG).diagnostics
    ] == [
        ("warning", "FIDELITY_WITHOUT_MODEL", path)
        for path in (
            "$.steps[0].on_allow.fidelity",
            "$.steps[0].on_allow.thread_id",
            "$.steps[0].catch.ALL.fidelity",
            "$.steps[1].routes.again.fidelity",
            "$.steps[1].fidelity",
            "$.steps[1].thread_id",
            "$.steps[2].routes.x.next.fidelity",
        )
    ]
    pipeline = load_pipeline(str(yaml_path), registry=REG)
    assert pipeline.step("g").next is None
    assert [s.id for s in pipeline.steps] == ["g", "r", "p", "end"]


def test_unknown_modes_are_positioned_at_the_value_with_did_you_mean(tmp_path):
    path = write(
        tmp_path,
        """
        settings:
          entry_step_id: a
          default_fidelity: summary:meduim
        steps:
          - id: a
            action: loop_guard
            on_allow: {step: b, fidelity: summary:hi}
            on_deny: b
          - id: b
            action: finalize
            fidelity: ful
        """,
    )
    assert found(path) == [
        ("FIDELITY_UNKNOWN", 3, 21, "did you mean 'summary:medium'?"),
        ("FIDELITY_UNKNOWN", 7, 35, "did you mean 'summary:high'?"),
        ("FIDELITY_UNKNOWN", 11, 15, "did you mean 'full'?"),
    ]


def test_unknown_keys_of_the_long_form_are_positioned_at_the_key(tmp_path):
    # The misspelt key fails alone: the edge to c stays, so c is not reported unreachable.
    path = write(
        tmp_path,
        """
        settings: {entry_step_id: a}
        steps:
          - id: a
            action: loop_guard
            on_allow: c
            on_deny:
              step: c
              thread: coding
          - id: c
            action: finalize
        """,
    )
    assert found(path) == [("TRANSITION_UNKNOWN_KEY", 8, 7, "did you mean 'thread_id'?")]


def test_a_bad_attribute_keeps_the_edge_in_the_graph(tmp_path):
    path = write(
        tmp_path,
        """
        settings: {entry_step_id: a}
        steps:
          - id: a
            action: loop_guard
            on_allow: {step: b, fidelity: everything}
            on_deny: {step: c, fidelty: full}
          - id: b
            action: finalize
          - id: c
            action: finalize
        """,
    )
    assert [code for code, *_ in found(path)] == ["FIDELITY_UNKNOWN", "TRANSITION_UNKNOWN_KEY"]


def test_unknown_targets_of_the_long_form_are_unknown_steps(tmp_path):
    path = write(
        tmp_path,
        """
        settings: {entry_step_id: a}
        steps:
          - id: a
            action: json_decision_router
            routes:
              fix: {step: reveiw, fidelity: full}
            on_other: {step: review}
            next: {step: reveiw}
            catch:
              ALL: {step: revew, fidelity: truncate}
          - id: review
            action: finalize
        inputs: {last_model_response: string, answer: string}
        """,
    )
    assert found(path) == [
        ("UNKNOWN_STEP", 6, 19, "did you mean 'review'?"),
        ("UNKNOWN_STEP", 8, 18, "did you mean 'review'?"),
        ("UNKNOWN_STEP", 10, 19, "did you mean 'review'?"),
    ]


def test_a_long_form_with_no_step_is_a_missing_field(tmp_path):
    path = write(
        tmp_path,
        """
        settings: {entry_step_id: a}
        steps:
          - id: a
            action: loop_guard
            on_allow: {fidelity: full}
            on_deny: b
          - id: b
            action: finalize
        """,
    )
    assert [code for code, *_ in found(path)] == ["SCHEMA_MISSING_FIELD"]


# --- THREAD_WITHOUT_FULL -------------------------------------------------------------------

THREADS = """
settings:
  entry_step_id: a
  {settings}
steps:
  - id: a
    action: loop_guard
    on_allow: {allow}
    on_deny: c
  - id: b
    action: finalize
    {b}
  - id: c
    action: finalize
"""


def threads(tmp_path: Path, allow: str = "b", b: str = "", settings: str = "") -> list[str]:
    text = THREADS.replace("{allow}", allow).replace("{b}", b).replace("{settings}", settings)
    path = tmp_path / "t.yaml"
    path.write_text(text)
    return [
        f"{d.line}:{d.column}"
        for d in validate_paths([str(path)], registry=REG).diagnostics
        if d.code == "THREAD_WITHOUT_FULL"
    ]


@pytest.mark.parametrize(
    ("allow", "b", "settings", "warned"),
    [
        # A step's thread: some arrival must resolve to full.
        ("b", "thread_id: t", "", ["12:16"]),
        ("b", "thread_id: t\n    fidelity: full", "", []),
        ("{step: b, fidelity: full}", "thread_id: t", "", []),
        ("b", "thread_id: t", "default_fidelity: full", []),
        # The transition's fidelity wins over the step's and the default.
        ("{step: b, fidelity: truncate}", "thread_id: t\n    fidelity: full", "", ["12:16"]),
        ("{step: b, fidelity: compact}", "thread_id: t", "default_fidelity: full", ["12:16"]),
        # A transition's thread: its own arrival must resolve to full.
        ("{step: b, thread_id: t}", "", "", ["8:36"]),
        ("{step: b, thread_id: t, fidelity: full}", "", "", []),
        ("{step: b, thread_id: t}", "fidelity: full", "", []),
        ("{step: b, thread_id: t}", "", "default_fidelity: full", []),
        ("{step: b, thread_id: t, fidelity: summary:high}", "fidelity: full", "", ["8:36"]),
        # The pipeline's default thread: full somewhere.
        ("b", "", "default_thread: main", ["4:19"]),
        ("b", "fidelity: full", "default_thread: main", []),
    ],
)
def test_a_thread_without_full_on_the_way_is_a_warning(tmp_path, allow, b, settings, warned):
    assert threads(tmp_path, allow, b, settings) == warned


def test_the_entry_step_is_arrived_at_without_a_transition(tmp_path):
    # The loop back arrives with truncate; the start, with no transition, arrives full.
    path = write(
        tmp_path,
        """
        settings: {entry_step_id: a}
        steps:
          - id: a
            action: loop_guard
            thread_id: t
            fidelity: full
            on_allow: {step: a, fidelity: truncate}
            on_deny: z
          - id: z
            action: finalize
        inputs: {answer: string}
        """,
    )
    # No THREAD_WITHOUT_FULL; a loop_guard reads neither field (FIDELITY_WITHOUT_MODEL).
    assert [code for code, *_ in found(path)] == ["FIDELITY_WITHOUT_MODEL"] * 3


# --- runtime graph ------------------------------------------------------------------------

GRAPH = """
settings: {entry_step_id: a}
steps:
  - id: a
    action: loop_guard
    on_allow: {step: r, fidelity: full, thread_id: coding}
    on_deny: z
    catch:
      ALL: {step: z, fidelity: summary:high}
  - id: r
    action: json_decision_router
    routes:
      fix: {step: a, fidelity: truncate}
      done: z
    on_other: z
    next: {step: z, thread_id: side}
  - id: z
    action: finalize
"""


def test_graph_edges_show_fidelity_and_thread(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(GRAPH)
    pipeline = load_pipeline(str(path), registry=REG, for_execution=False)
    mermaid = to_mermaid(pipeline, REG).splitlines()
    assert '  s0 -->|"allow, fidelity full, thread coding"| s1' in mermaid
    assert "  s0 -->|deny| s2" in mermaid
    assert '  s0 -.->|"catch ALL, fidelity summary:high"| s2' in mermaid
    assert '  s1 -->|"route fix, fidelity truncate"| s0' in mermaid
    assert "  s1 -->|route done| s2" in mermaid
    assert "  s1 -->|thread side| s2" in mermaid  # `next` has no label of its own
    dot = to_dot(pipeline, REG).splitlines()
    assert '  "a" -> "r" [label="allow, fidelity full, thread coding"];' in dot
    assert '  "a" -> "z" [label="catch ALL, fidelity summary:high", style=dashed];' in dot
    assert '  "r" -> "a" [label="route fix, fidelity truncate"];' in dot
    assert '  "r" -> "z" [label="thread side"];' in dot
    assert '  "r" -> "z" [label="route done"];' in dot


def test_registry_fixture_actions_keep_their_short_forms(registry: Registry):
    # Test-only actions (tests/conftest.py) declare plain-string branches; the long form
    # reaches them as well.
    step = {"id": "g", "action": "guard", "on_allow": {"step": "a", "fidelity": "full"}}
    assert [e.attrs for e in outgoing(step, registry.get("guard"))] == [{"fidelity": "full"}]


def test_runtime_graph_command_labels_long_form_edges(tmp_path):
    from click.testing import CliRunner

    from runtime.cli import cli

    path = tmp_path / "g.yaml"
    path.write_text(GRAPH)
    runner = CliRunner()
    mermaid = runner.invoke(cli, ["graph", str(path)], catch_exceptions=False)
    assert mermaid.exit_code == 0
    assert '  s0 -->|"allow, fidelity full, thread coding"| s1' in mermaid.stdout.splitlines()
    dot = runner.invoke(cli, ["graph", "--format", "dot", str(path)], catch_exceptions=False)
    assert dot.exit_code == 0
    assert '  "r" -> "a" [label="route fix, fidelity truncate"];' in dot.stdout.splitlines()
