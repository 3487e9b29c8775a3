"""A prompt file edited between a crash and `resume` is a changed pipeline."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import runtime

FAIL: set[str] = set()


class Ask(runtime.Action):
    """Stands for call_model: names a prompt; fails while its id is in FAIL."""

    name = "ask"
    runnable = True
    fields = {"prompt_key": {"type": "string"}}

    def run(self, ctx: Any) -> runtime.Outcome | None:
        if ctx.step_id in FAIL:
            raise runtime.RunError("injected", code="ACTION_FAILED")
        ctx.set("prompt", ctx.pipeline.prompt_path(ctx.step["prompt_key"]).read_text())
        return None


REG = runtime.Registry.from_classes(Ask)
YAML = """\
name: asks
settings: {entry_step_id: first}
steps:
  - {id: first, action: ask, prompt_key: system, next: second}
  - {id: second, action: ask, prompt_key: system, end: true}
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, Path, str]:
    FAIL.clear()
    (tmp_path / "prompts").mkdir()
    prompt = tmp_path / "prompts" / "system.md"
    prompt.write_text("Answer briefly.\n")
    path = tmp_path / "asks.yaml"
    path.write_text(YAML)
    return str(path), prompt, str(tmp_path / "runs.db")


def _failed_run(path: str, db: str) -> None:
    """A run that stops at its second step, as after a crash there."""
    FAIL.add("second")
    pipeline = runtime.load(path, registry=REG)
    runner = runtime.Runner(pipeline, store=runtime.SqliteRunStore(db), registry=REG)
    assert runner.run({}, run_id="r").status == "failed"
    FAIL.clear()


def _resume(path: str, db: str, force: bool = False) -> runtime.RunResult:
    pipeline = runtime.load(path, registry=REG)  # loaded anew, as `runtime resume` does
    return runtime.Runner(pipeline, store=runtime.SqliteRunStore(db), registry=REG).resume(
        "r", force=force
    )


def test_an_edited_prompt_refuses_resume_unless_forced(files):
    path, prompt, db = files
    _failed_run(path, db)
    prompt.write_text("Answer at length.\n")
    with pytest.raises(runtime.RunError) as info:
        _resume(path, db)
    assert info.value.code == "PIPELINE_CHANGED"
    result = _resume(path, db, force=True)
    assert (result.status, result.state) == ("completed", {"prompt": "Answer at length.\n"})


def test_an_unchanged_prompt_resumes(files):
    path, _prompt, db = files
    _failed_run(path, db)
    result = _resume(path, db)
    assert (result.status, result.state) == ("completed", {"prompt": "Answer briefly.\n"})


def test_a_prompt_that_appears_or_disappears_is_a_change(files):
    path, prompt, _db = files
    pipeline = runtime.load(path, registry=REG)
    with_prompt = pipeline.content_hash
    prompt.unlink()  # validation would now refuse the pipeline; a resume compares the hash
    without = pipeline.content_hash
    assert pipeline.prompt_files() == {"system": None}
    assert without != with_prompt
    prompt.write_text("Answer briefly.\n")
    assert pipeline.content_hash == with_prompt


def test_a_pipeline_without_prompts_keeps_the_hash_stored_runs_have(tmp_path):
    raw = {"name": "p", "settings": {"entry_step_id": "a"}, "steps": [{"id": "a", "action": "x"}]}
    expected = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()
    assert runtime.Pipeline.from_dict(raw).content_hash == expected
