"""`catch` and `retry.on` name codes of the closed code table: a typo is an error, never a no-op.

Positions were counted by hand from the YAML text (1-based line and column of the catch key,
or of the list entry under `retry.on`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import runtime
from runtime import codes
from runtime.cli import cli

STEPS = """\
name: typo
settings:
  entry_step_id: a
steps:
  - id: a
    action: noop
    retry:
      max_attempts: 2
      on: [MODEL_TIMEOUT, TRANSFORM_FAIL, ALL]
    catch:
      TRANSFORM_FAILD: z
      ALL: z
    next: z
  - id: z
    action: finish
"""


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return str(path)


def _said(report: runtime.Report) -> list[tuple]:
    return [(d.line, d.column, d.severity, d.code, d.message, d.hint) for d in report.diagnostics]


def test_a_typo_in_catch_and_retry_on_is_an_error_with_a_suggestion(tmp_path, registry):
    report = runtime.validate(_write(tmp_path, STEPS), registry=registry)
    assert _said(report) == [
        (
            9,
            27,
            "error",
            "ERROR_CODE_UNKNOWN",
            "step 'a' retries on 'TRANSFORM_FAIL', which is not an error code",
            "did you mean 'TRANSFORM_FAILED'?",
        ),
        (
            11,
            7,
            "error",
            "ERROR_CODE_UNKNOWN",
            "step 'a' catches 'TRANSFORM_FAILD', which is not an error code",
            "did you mean 'TRANSFORM_FAILED'?",
        ),
    ]
    assert [d.path for d in report.diagnostics] == [
        "$.steps[0].retry.on[1]",
        "$.steps[0].catch.TRANSFORM_FAILD",
    ]


def test_a_code_far_from_any_gets_the_codes_own_hint(tmp_path, registry):
    text = STEPS.replace("TRANSFORM_FAILD:", "NOPE:").replace("TRANSFORM_FAIL,", "")
    [d] = runtime.validate(_write(tmp_path, text), registry=registry).diagnostics
    assert (d.line, d.column, d.code, d.message) == (
        11,
        7,
        "ERROR_CODE_UNKNOWN",
        "step 'a' catches 'NOPE', which is not an error code",
    )
    assert d.hint == codes.CODES["ERROR_CODE_UNKNOWN"].hint


def test_a_retired_code_never_fires_so_it_is_an_error(tmp_path, registry, monkeypatch):
    monkeypatch.setitem(
        codes.CODES, "OLD_FAILURE", codes.Code("OLD_FAILURE", "run", "Retired.", removed=True)
    )
    text = STEPS.replace("TRANSFORM_FAILD:", "OLD_FAILURE:").replace("TRANSFORM_FAIL,", "")
    [d] = runtime.validate(_write(tmp_path, text), registry=registry).diagnostics
    assert (d.line, d.column, d.code, d.message) == (
        11,
        7,
        "ERROR_CODE_UNKNOWN",
        "step 'a' catches 'OLD_FAILURE', which was removed and is never raised",
    )


def test_a_lower_case_code_is_reported_once_by_the_schema(tmp_path, registry):
    text = STEPS.replace("TRANSFORM_FAIL, ALL]", "TRANSFORM_FAIL, all]")
    found = [
        (d.line, d.column, d.code)
        for d in runtime.validate(_write(tmp_path, text), registry=registry).diagnostics
    ]
    assert found == [
        (9, 27, "ERROR_CODE_UNKNOWN"),
        (9, 43, "SCHEMA_PATTERN"),
        (11, 7, "ERROR_CODE_UNKNOWN"),
    ]


def test_a_typo_stops_the_run_before_it_starts(tmp_path, registry):
    with pytest.raises(runtime.PipelineInvalidError) as info:
        runtime.load(_write(tmp_path, STEPS), registry=registry)
    assert [(d.line, d.code) for d in info.value.diagnostics] == [
        (9, "ERROR_CODE_UNKNOWN"),
        (11, "ERROR_CODE_UNKNOWN"),
    ]


def test_runtime_validate_reports_it_with_exit_1(runner, tmp_path):
    # The answer finalize reads is written (else a VARIABLE_NEVER_WRITTEN warning too).
    text = STEPS.replace(
        "action: noop", "action: set_variables\n    rules: [{set: answer, value: 1}]"
    )
    text = text.replace("action: finish", "action: finalize")
    result = runner.invoke(cli, ["validate", _write(tmp_path, text), "--format", "json"])
    assert result.exit_code == 1, result.output
    found = [
        (d["line"], d["column"], d["code"], d["hint"])
        for d in json.loads(result.stdout)["diagnostics"]
    ]
    assert found == [
        (10, 27, "ERROR_CODE_UNKNOWN", "did you mean 'TRANSFORM_FAILED'?"),
        (12, 7, "ERROR_CODE_UNKNOWN", "did you mean 'TRANSFORM_FAILED'?"),
    ]
