"""`runtime resume` against a changed pipeline: PIPELINE_CHANGED names what changed.

The run store keeps the pipeline part by part as short hashes beside its content hash
(runtime/format/changes.py), so the refusal says which steps, settings, other fields and
prompt files differ, instead of only that something did.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runtime.cli import cli
from runtime.format.changes import describe

PIPELINE = """\
settings: {entry_step_id: a, max_steps: 1000}
steps:
  - id: a
    action: json_decision_router
    routes: {stop: done}
    on_other: a
  - id: ask
    action: call_model
    prompt_key: sys
    next: done
  - id: done
    action: finalize
"""
HINT = "hint: Pass --force to resume against the changed pipeline.\n"


@pytest.fixture
def failed(runner, tmp_path: Path) -> Path:
    """A run of PIPELINE stopped by --max-steps: resumable."""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Answer.\n")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    store = ["--store", str(tmp_path / "runs.db")]
    args = ["exec", str(tmp_path / "p.yaml"), *store, "--run-id", "r1", "--max-steps", "2"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 1, result.output
    return tmp_path


def _resume(runner, folder: Path, *args: str):
    return runner.invoke(cli, ["resume", "r1", "--store", str(folder / "runs.db"), *args])


def test_pipeline_changed_names_the_steps_settings_fields_and_prompts_that_changed(runner, failed):
    edited = (
        PIPELINE.replace("max_steps: 1000", "max_steps: 500")
        .replace("routes: {stop: done}", "routes: {stop: done, halt: done}")
        .replace("settings:", "description: edited\nsettings:")
        + "  - id: extra\n    action: finalize\n"
    )
    (failed / "p.yaml").write_text(edited)
    (failed / "prompts" / "sys.md").write_text("Answer at length.\n")
    result = _resume(runner, failed)
    assert result.exit_code == 1
    assert result.stderr == (
        "error: PIPELINE_CHANGED: pipeline changed since run r1 started: step 'a' changed, "
        "step 'extra' added, settings.max_steps changed, `description` added, "
        "prompt 'sys' changed\n" + HINT
    )


def test_a_removed_step_and_a_new_order_are_named(runner, failed):
    a, ask, done = PIPELINE.split("  - id: ")[1:]
    head = PIPELINE.split("  - id: ")[0]
    (failed / "p.yaml").write_text(head + "  - id: " + done + "  - id: " + a)
    result = _resume(runner, failed)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        "error: PIPELINE_CHANGED: pipeline changed since run r1 started: step 'ask' removed, "
        "the order of the steps changed, prompt 'sys' removed"
    )
    assert ask  # the call_model step, left out above


def test_a_run_stored_before_the_parts_were_recorded_says_it_cannot_tell(runner, failed):
    db = sqlite3.connect(failed / "runs.db")
    db.execute("UPDATE runs SET pipeline_parts = NULL")
    db.commit()
    db.close()
    (failed / "p.yaml").write_text(PIPELINE.replace("max_steps: 1000", "max_steps: 500"))
    result = _resume(runner, failed)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        "error: PIPELINE_CHANGED: pipeline changed since run r1 started: the run was stored "
        "before runs recorded their pipeline part by part, so what changed cannot be told"
    )
    assert _resume(runner, failed, "--force").exit_code == 1  # forced: runs on, to max_steps


def test_describe_is_empty_for_equal_parts_and_names_settings_removed():
    parts = {"steps": {"a": "1"}, "order": ["a"], "settings": {"x": "1", "y": "2"}}
    assert describe(parts, parts) == ""
    fewer = {**parts, "settings": {"x": "1"}}
    assert describe(parts, fewer) == "settings.y removed"


@pytest.mark.parametrize(
    "record", ["not json", "[1, 2]", '{"steps": 5}', '{"order": [1]}', '{"settings": {"a": []}}']
)
def test_a_damaged_record_of_the_pipeline_is_said_so_not_a_traceback(runner, failed, record):
    db = sqlite3.connect(failed / "runs.db")
    db.execute("UPDATE runs SET pipeline_parts = ?", (record,))
    db.commit()
    db.close()
    (failed / "p.yaml").write_text(PIPELINE.replace("max_steps: 1000", "max_steps: 500"))
    result = _resume(runner, failed)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        "error: PIPELINE_CHANGED: pipeline changed since run r1 started: the run's record of "
        "its pipeline is unreadable, so what changed cannot be told"
    )
