"""minLength and pattern of a string input: refused before the first step, checked in
validation, and what the shipped question answering pipeline does with a blank question."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.cli import cli
from runtime.engine.state import apply_inputs
from runtime.errors import InputError
from runtime.format.pipeline import Pipeline
from runtime.format.validation import validate_paths

ROOT = Path(__file__).resolve().parent.parent.parent


def _spec(**spec):
    return Pipeline.from_dict({"steps": [], "inputs": {"q": {"type": "string", **spec}}})


def test_minlength_refuses_a_shorter_string_at_its_limit():
    pipeline = _spec(minLength=3)
    assert apply_inputs(pipeline, {"q": "abc"}) == {"q": "abc"}
    with pytest.raises(InputError) as info:
        apply_inputs(pipeline, {"q": "ab"})
    assert info.value.code == "INPUT_TOO_SHORT" and "2 characters" in info.value.message


@pytest.mark.parametrize(
    ("value", "ok"), [("x", True), ("  a  ", True), ("", False), (" \t\n", False)]
)
def test_a_pattern_must_match_somewhere(value, ok):
    pipeline = _spec(pattern=r"\S")
    if ok:
        assert apply_inputs(pipeline, {"q": value}) == {"q": value}
        return
    with pytest.raises(InputError) as info:
        apply_inputs(pipeline, {"q": value})
    assert info.value.code == "INPUT_PATTERN" and "`\\S`" in info.value.message


def test_an_input_left_to_its_default_is_not_checked():
    pipeline = Pipeline.from_dict(
        {"steps": [], "inputs": {"q": {"type": "string", "default": "", "minLength": 1}}}
    )
    assert apply_inputs(pipeline, {}) == {"q": ""}


PIPELINE = """settings: {{entry_step_id: s}}
inputs:
  q: {{{spec}}}
steps:
  - {{id: s, action: finalize, source: q}}
"""


@pytest.mark.parametrize(
    ("spec", "found"),
    [
        ("type: array, minLength: 1", "minLength applies to `type: string` inputs only"),
        ("type: integer, pattern: 'x'", "pattern applies to `type: string` inputs only"),
        ("type: string, pattern: '(unclosed'", "pattern '(unclosed' is not a regular expression"),
        ("type: string, minLength: 5, maxLength: 4", "minLength 5 is over maxLength 4"),
        ("type: string, minLength: -1", "minLength"),
    ],
)
def test_a_constraint_that_cannot_apply_is_a_validation_error(tmp_path, spec, found):
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(spec=spec))
    report = validate_paths([str(path)])
    assert report.errors >= 1
    messages = [d.message for d in report.diagnostics]
    assert any(found in m for m in messages), messages
    assert all(d.line == 3 for d in report.diagnostics if d.severity == "error")


def test_the_question_pipeline_refuses_a_blank_question_before_any_step(runner, tmp_path):
    index = str(tmp_path / "i.db")
    sample = str(ROOT / "pipelines" / "sample" / "eshop")
    assert runner.invoke(cli, ["index", sample, "--index", index]).exit_code == 0
    store = tmp_path / "runs.db"
    args = ["exec", str(ROOT / "pipelines" / "code_qa.yaml"), "--index", index]
    for blank in ("", "   "):
        result = runner.invoke(cli, [*args, "--store", str(store), "--input", f"question={blank}"])
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("error: INPUT_PATTERN: input 'question'")
    assert not store.exists()  # refused before a run was stored


def test_a_string_input_after_a_non_string_one_is_still_checked():
    pipeline = Pipeline.from_dict(
        {
            "steps": [],
            "inputs": {"n": {"type": "integer"}, "q": {"type": "string", "minLength": 2}},
        }
    )
    with pytest.raises(InputError) as info:
        apply_inputs(pipeline, {"n": 1, "q": "x"})
    assert info.value.code == "INPUT_TOO_SHORT"


def test_one_exact_length_is_a_valid_declaration(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(spec="type: string, minLength: 4, maxLength: 4"))
    assert validate_paths([str(path)]).errors == 0
