"""`fidelity` and `thread_id` where no model call reads them: FIDELITY_WITHOUT_MODEL.

The schema accepts both fields on every step and on every long-form transition, but
only an action whose prompt takes a fidelity preamble or a thread (`call_model`,
`PromptEnvelope.fidelity`) reads them; anywhere else they are silently inert, so
validation warns at the field. Positions were counted by hand from the YAML below.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from runtime.contract.registry import default_registry
from runtime.format.validation import validate_paths

REG = default_registry()

PIPELINE = """\
inputs: {question: {type: string, maxLength: 200}}
settings: {entry_step_id: ask}
steps:
  - id: ask
    action: call_model
    prompt_key: qa
    fidelity: summary:low
    user_parts: {q: {source: question}}
    next: {step: note, fidelity: full, thread_id: x}
  - id: note
    action: set_variables
    fidelity: truncate
    thread_id: side
    rules:
      - {set: answer, value: "42"}
    next: {step: again, fidelity: summary:low}
  - id: again
    action: call_model
    prompt_key: qa
    user_parts: {q: {source: question}}
    fidelity: compact
    next: done
  - id: done
    action: finalize
"""


def _validate(tmp_path: Path, text: str) -> list[tuple[int, int, str, str, str]]:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "qa.md").write_text("Answer the question.\n")
    path = tmp_path / "p.yaml"
    path.write_text(textwrap.dedent(text))
    return [
        (d.line, d.column, d.severity, d.code, d.message)
        for d in validate_paths([str(path)], registry=REG).diagnostics
    ]


def test_fidelity_and_thread_on_a_step_that_calls_no_model_are_warnings(tmp_path):
    assert _validate(tmp_path, PIPELINE) == [
        (
            9,
            24,
            "warning",
            "FIDELITY_WITHOUT_MODEL",
            "step 'ask' next -> 'note' sets fidelity, but 'note' (set_variables) makes no "
            "model call that reads it: it has no effect",
        ),
        (
            9,
            40,
            "warning",
            "FIDELITY_WITHOUT_MODEL",
            "step 'ask' next -> 'note' sets thread_id, but 'note' (set_variables) makes no "
            "model call that reads it: it has no effect",
        ),
        (
            12,
            5,
            "warning",
            "FIDELITY_WITHOUT_MODEL",
            "step 'note' sets fidelity, but its action set_variables makes no model call "
            "that reads it: it has no effect",
        ),
        (
            13,
            5,
            "warning",
            "FIDELITY_WITHOUT_MODEL",
            "step 'note' sets thread_id, but its action set_variables makes no model call "
            "that reads it: it has no effect",
        ),
    ]


def test_model_steps_and_transitions_into_them_are_not_warned(tmp_path):
    # `note -> again` sets fidelity on a transition into a model step, and `again` sets both.
    found = _validate(tmp_path, PIPELINE)
    assert [line for line, *_ in found] == [9, 9, 12, 13]


@pytest.mark.parametrize(
    "field,value", [("fidelity", "compact"), ("thread_id", "t"), ("fidelity", "full")]
)
def test_each_field_alone_on_a_finalize_step(tmp_path, field, value):
    text = (
        "inputs: {answer: string}\nsettings: {entry_step_id: done}\nsteps:\n"
        f"  - id: done\n    action: finalize\n    {field}: {value}\n"
    )
    codes = [(line, col, code) for line, col, _, code, _ in _validate(tmp_path, text)]
    assert (6, 5, "FIDELITY_WITHOUT_MODEL") in codes
