"""`runtime validate` and `runtime exec` on `redact:` and `exceptions:` (docs/access.md)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from runtime.cli import cli

PIPELINE = """\
settings:
  entry_step_id: answer
{settings}
steps:
  - id: answer
    action: call_model
    prompt_key: sys
    user_parts: {{q: {{source: question}}}}
{step}
    next: done
  - id: done
    action: finalize
    source: last_model_response
"""


def write(tmp_path, settings: str = "", step: str = "") -> str:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer.\n")
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(settings=settings, step=step))
    return str(path)


def validate(runner, path):
    result = runner.invoke(cli, ["validate", "--format", "json", path])
    diags = json.loads(result.stdout)["diagnostics"]
    # The pipeline's own warnings (an undeclared input's budget) are not what is tested.
    mine = [d for d in diags if d["code"].startswith(("REDACTION_", "EXCEPTION_", "SCHEMA_"))]
    return result.exit_code, mine


def exception(expires: str, rule: str = "redaction", steps: str = "[answer]") -> str:
    return f"""\
  exceptions:
    - id: legacy-audit
      rule: {rule}
      steps: {steps}
      owner: sec-team
      expires: {expires}
      rollback: a reply quoting a card number"""


def test_a_bad_custom_regex_is_an_error_at_its_line(runner, tmp_path):
    settings = "  redact:\n    patterns:\n      - {name: emp, regex: 'EMP-(\\d+'}"
    code, diags = validate(runner, write(tmp_path, settings))
    assert code == 1
    [d] = diags
    assert d["code"] == "REDACTION_PATTERN_INVALID" and d["line"] == 5
    assert "not a valid regular expression" in d["message"]


def test_a_catastrophic_regex_on_a_step_is_an_error_at_its_line(runner, tmp_path):
    step = "    redact:\n      patterns:\n        - name: slow\n          regex: '(a|aa)+$'"
    code, diags = validate(runner, write(tmp_path, step=step))
    assert code == 1
    [d] = diags
    assert d["code"] == "REDACTION_PATTERN_INVALID" and d["line"] == 12
    assert "backtracks" in d["message"]


def test_an_unknown_kind_is_an_error(runner, tmp_path):
    code, diags = validate(runner, write(tmp_path, "  redact: {kinds: [email, ssn]}"))
    assert code == 1 and [d["code"] for d in diags] == ["REDACTION_INVALID"]
    assert diags[0]["line"] == 3


def test_a_good_redact_setting_validates_clean(runner, tmp_path):
    settings = "  redact:\n    kinds: [email, card, secret]\n    patterns: [{name: emp, regex: 'EMP-\\d{6}'}]"
    code, diags = validate(runner, write(tmp_path, settings, "    redact: false"))
    assert code == 0 and diags == []


def test_an_exception_is_a_warning_with_owner_and_expiry(runner, tmp_path):
    code, diags = validate(runner, write(tmp_path, exception("2999-12-31")))
    assert code == 0
    [d] = diags
    assert d["code"] == "EXCEPTION_DECLARED" and d["severity"] == "warning" and d["line"] == 4
    assert "sec-team" in d["message"] and "2999-12-31" in d["message"]
    assert "a reply quoting a card number" in d["hint"]


def test_an_expired_exception_is_an_error_at_its_expiry(runner, tmp_path):
    code, diags = validate(runner, write(tmp_path, exception("2020-01-31")))
    assert code == 1
    [d] = diags
    assert d["code"] == "EXCEPTION_EXPIRED" and d["severity"] == "error" and d["line"] == 8
    assert "sec-team" in d["message"] and "2020-01-31" in d["message"]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (exception("2999-12-31", rule="everything"), "unknown rule"),
        (exception("2999-12-31", steps="[answer, nowhere]"), "'nowhere'"),
        (exception("2999-13-45"), "not a date"),
    ],
)
def test_a_malformed_exception_is_an_error(runner, tmp_path, text, where):
    code, diags = validate(runner, write(tmp_path, text))
    assert code == 1
    errors = [d for d in diags if d["severity"] == "error"]
    assert [d["code"] for d in errors] in (["EXCEPTION_INVALID"], ["SCHEMA_PATTERN"])
    assert where in errors[0]["message"] or errors[0]["code"] == "SCHEMA_PATTERN"


def test_exec_refuses_an_expired_exception_before_the_first_step(runner, tmp_path):
    path = write(tmp_path, exception("2020-01-31"))
    store = str(tmp_path / "runs.db")
    result = runner.invoke(cli, ["exec", path, "--input", "question=hi", "--store", store])
    assert result.exit_code == 2  # a pipeline that does not validate: nothing runs
    assert "EXCEPTION_EXPIRED" in result.output
    if (tmp_path / "runs.db").exists():
        rows = sqlite3.connect(tmp_path / "runs.db").execute("SELECT count(*) FROM runs")
        assert rows.fetchone() == (0,)


def test_resume_refuses_an_exception_that_expired_since_the_run_started(runner, tmp_path):
    path = write(tmp_path, exception("2999-12-31"))
    store = str(tmp_path / "runs.db")
    args = ["--store", store]
    started = runner.invoke(cli, ["exec", path, "--input", "question=hi", "--run-id", "r1", *args])
    assert started.exit_code == 0, started.output
    Path(path).write_text(Path(path).read_text().replace("2999-12-31", "2020-01-31"))
    resumed = runner.invoke(cli, ["resume", "r1", *args])
    assert resumed.exit_code == 2 and "EXCEPTION_EXPIRED" in resumed.output


def test_a_redact_steps_bad_pattern_is_an_error_at_its_line(runner, tmp_path):
    (tmp_path / "p.yaml").write_text(
        "settings: {entry_step_id: mask}\n"
        "steps:\n"
        "  - id: mask\n"
        "    action: redact\n"
        "    source: text\n"
        "    target: masked\n"
        "    kinds: [email, passport]\n"
        "    patterns:\n"
        "      - {name: emp, regex: '[unclosed'}\n"
        "    next: done\n"
        "  - {id: done, action: finalize, source: masked}\n"
    )
    code, diags = validate(runner, str(tmp_path / "p.yaml"))
    assert code == 1
    assert sorted((d["code"], d["line"]) for d in diags) == [
        ("REDACTION_INVALID", 7),
        ("REDACTION_PATTERN_INVALID", 9),
    ]
