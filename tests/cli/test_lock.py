"""`runtime lock` and the lock checks of validate and exec (docs/lock.md, issue 32).

Every kind of drift is found and named where it happened; a resolution that is byte
identical but reached another way (key order, comments, whitespace) is no drift; the
lock file is deterministic; the older engine's lock files are read and upgraded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runtime.cli import cli

ROOT = Path(__file__).resolve().parents[2]
LEGACY = ROOT / "tests" / "data" / "legacy" / "pipelines"

PARENT = """\
name: base
abstract: true
settings:
  entry_step_id: answer
  models:
    small: {provider: extractive, context_window: 8192}
  context_policy: {enabled: true, summary_tokens: 160}
steps:
  - id: answer
    action: call_model
    model: small
    prompt_key: answer
    max_output_tokens: 200
    user_parts:
      question: {source: question}
    next: done
  - id: done
    action: finalize
    end: true
"""

CHILD = """\
name: qa
extends: base.yaml
settings:
  top_k: 4
inputs:
  question: {type: string}
"""

PROMPT = "Answer the question.\nCite the evidence.\nBe brief.\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "answer.md").write_text(PROMPT)
    (tmp_path / "base.yaml").write_text(PARENT)
    (tmp_path / "qa.yaml").write_text(CHILD)
    return tmp_path


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def locked_check(project: Path) -> tuple[int, list[dict]]:
    code, out = run("validate", "--locked", str(project / "qa.yaml"), "--format", "json")
    return code, [d for d in json.loads(out)["diagnostics"] if d["code"].startswith("LOCK_")]


def test_lock_writes_a_deterministic_reviewable_file(project):
    code, out = run("lock", str(project / "qa.yaml"))
    assert code == 0 and "wrote" in out
    lock_file = project / "qa.lock.json"
    first = lock_file.read_bytes()
    data = json.loads(first)
    assert data["lock_version"] == 2 and data["pipeline"] == "qa"
    assert [s["id"] for s in data["resolved"]["steps"]] == ["answer", "done"]  # after extends
    assert data["actions"]["call_model"]["behavior_version"] == "1"
    assert data["actions"]["call_model"]["source"] == "builtin"
    assert data["prompts"]["answer"]["path"] == "prompts/answer.md"
    assert len(data["prompts"]["answer"]["lines"]) == PROMPT.count("\n") + 1
    assert data["models"]["small"]["tokenizer"]["name"] == "cl100k_base"
    assert data["models"]["small"]["tokenizer"]["vocabulary_sha256"]
    assert data["policies"] == {"context_policy": {"enabled": True, "summary_tokens": 160}}
    assert first.endswith(b"\n") and json.dumps(data, indent=2, sort_keys=True).encode() in first
    lock_file.unlink()
    assert run("lock", str(project / "qa.yaml"))[0] == 0
    assert lock_file.read_bytes() == first  # the same resolution, the same bytes
    code, out = run("lock", str(project / "qa.yaml"))
    assert code == 0 and "is current" in out


def test_a_changed_prompt_word_is_drift_at_its_line_in_every_format(project):
    assert run("lock", str(project / "qa.yaml"))[0] == 0
    assert locked_check(project) == (0, [])
    (project / "prompts" / "answer.md").write_text(PROMPT.replace("evidence", "sources"))
    code, found = locked_check(project)
    assert code == 1
    [drift] = found
    assert (drift["code"], drift["severity"], drift["line"]) == ("LOCK_DRIFT", "error", 2)
    assert drift["file"].endswith("prompts/answer.md")
    assert "prompt 'answer' changed at line 2" in drift["message"]
    code, out = run("validate", "--locked", str(project / "qa.yaml"), "--format", "github")
    assert code == 1
    assert out.startswith("::error file=") and "answer.md,line=2," in out and "LOCK_DRIFT" in out
    code, out = run("validate", "--locked", str(project / "qa.yaml"), "--format", "sarif")
    assert code == 1 and "LOCK_DRIFT" in out
    code, out = run("lock", "--check", str(project / "qa.yaml"))
    assert code == 1 and "LOCK_DRIFT" in out
    code, out = run("lock", "--diff", str(project / "qa.yaml"))
    assert code == 1 and '-      "sha256"' in out and '+      "sha256"' in out
    assert run("lock", "--update", str(project / "qa.yaml"))[0] == 0
    assert locked_check(project) == (0, [])
    assert run("lock", "--check", str(project / "qa.yaml"))[0] == 0


def test_an_edited_parent_is_drift_named_in_the_parent(project):
    run("lock", str(project / "qa.yaml"))
    (project / "base.yaml").write_text(
        PARENT.replace("max_output_tokens: 200", "max_output_tokens: 300")
    )
    code, found = locked_check(project)
    assert code == 1
    [drift] = found
    assert drift["file"].endswith("base.yaml")
    assert drift["line"] == PARENT.splitlines().index("    max_output_tokens: 200") + 1
    assert "step 'answer' field max_output_tokens changed: 200 -> 300" in drift["message"]


def test_a_new_setting_a_removed_step_and_a_changed_model_are_each_named(project):
    run("lock", str(project / "qa.yaml"))
    child = CHILD.replace("  top_k: 4\n", "  top_k: 4\n  max_steps: 50\n")
    (project / "qa.yaml").write_text(child)
    code, found = locked_check(project)
    assert code == 1
    [drift] = found
    assert (
        drift["path"] == "$.settings.max_steps"
        and "settings.max_steps was added: 50" in (drift["message"])
    )
    assert drift["line"] == child.splitlines().index("  max_steps: 50") + 1
    (project / "qa.yaml").write_text(CHILD)
    (project / "base.yaml").write_text(
        PARENT.replace("context_window: 8192", "context_window: 4096")
    )
    code, found = locked_check(project)
    messages = " | ".join(d["message"] for d in found)
    assert code == 1
    assert "context_window changed: 8192 -> 4096" in messages  # the resolved settings
    assert "models.small.context_window: 8192 -> 4096" in messages  # the model in effect


def test_a_changed_tokenizer_is_drift(project):
    run("lock", str(project / "qa.yaml"))
    (project / "base.yaml").write_text(
        PARENT.replace("context_window: 8192}", "context_window: 8192, tokenizer: o200k_base}")
    )
    code, found = locked_check(project)
    assert code == 1
    messages = " | ".join(d["message"] for d in found)
    assert 'models.small.tokenizer.name: "cl100k_base" -> "o200k_base"' in messages
    assert "models.small.tokenizer.vocabulary_sha256" in messages


def test_a_bumped_action_version_is_drift_at_the_step(project, monkeypatch):
    run("lock", str(project / "qa.yaml"))
    from actions.call_model import CallModel

    monkeypatch.setattr(CallModel, "behavior_version", "2")
    code, found = locked_check(project)
    assert code == 1
    [drift] = found
    assert 'action \'call_model\' behaviour version changed: "1" -> "2"' in drift["message"]
    assert drift["path"] == "$.steps[0].action" and drift["file"].endswith("base.yaml")
    monkeypatch.setattr(CallModel, "behavior_version", "1")
    monkeypatch.setitem(CallModel.defaults, "context_blocks", ["changed"])
    code, found = locked_check(project)
    assert code == 1 and "action 'call_model' defaults changed" in found[0]["message"]


def test_the_runtime_version_is_locked(project, monkeypatch):
    run("lock", str(project / "qa.yaml"))
    from runtime.format import lock

    monkeypatch.setattr(lock, "runtime_version", lambda: "99.0")
    code, found = locked_check(project)
    assert code == 1 and [d["message"] for d in found] == [
        "runtime version "
        + json.loads((project / "qa.lock.json").read_text())["runtime"]
        + " -> 99.0 (locked in qa.lock.json)"
    ]


def test_the_same_resolution_reached_another_way_is_no_drift(project):
    run("lock", str(project / "qa.yaml"))
    data = yaml.safe_load(PARENT)
    # Keys in another order, flow style, comments and blank lines: the same pipeline.
    reordered = {k: data[k] for k in reversed(list(data))}
    reordered["steps"] = [{k: s[k] for k in reversed(list(s))} for s in data["steps"]]
    text = "# the same base, written otherwise\n\n" + yaml.safe_dump(
        reordered, sort_keys=False, default_flow_style=True, width=60
    )
    (project / "base.yaml").write_text(text)
    (project / "qa.yaml").write_text(
        "# child\n" + CHILD.replace("  top_k: 4", "  top_k:    4  # four")
    )
    assert locked_check(project) == (0, [])
    assert run("lock", "--check", str(project / "qa.yaml"))[0] == 0


def test_compat_mode_locked_makes_validate_and_exec_refuse_drift(project):
    child = CHILD.replace("settings:\n", "settings:\n  compat_mode: locked\n")
    (project / "qa.yaml").write_text(child)
    code, out = run("validate", str(project / "qa.yaml"), "--format", "json")
    [missing] = [d for d in json.loads(out)["diagnostics"] if d["code"] == "LOCK_MISSING"]
    assert code == 1 and missing["line"] == 4  # at compat_mode
    assert run("lock", str(project / "qa.yaml"))[0] == 0
    store = str(project / "runs.db")
    args = ["exec", str(project / "qa.yaml"), "--input", "question=What?", "--store", store]
    code, out = run(*args)
    assert code == 0, out
    (project / "prompts" / "answer.md").write_text(PROMPT + "New line.\n")
    code, out = run(*args)
    assert code == 2 and "LOCK_DRIFT" in out and "answer.md" in out
    # --locked on a pipeline that does not ask for it
    (project / "qa.yaml").write_text(CHILD)
    assert run(*args)[0] == 0
    assert run(*args, "--locked")[0] == 2


def test_an_unknown_compat_mode_is_a_schema_error(project):
    (project / "qa.yaml").write_text(
        CHILD.replace("settings:\n", "settings:\n  compat_mode: lockd\n")
    )
    code, out = run("validate", str(project / "qa.yaml"))
    assert code == 1 and "compat_mode" in out and "lockd" in out


@pytest.mark.parametrize(
    "content, reason",
    [
        ("not json", "is not JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"lock_version": 7}', "lock_version 7"),
        ('{"lock_version": 2, "resolved": [], "actions": {}, "prompts": {}}', "'resolved'"),
        ('{"lock_version": 1, "actions": {"a": {"allowed_keys": "x"}}}', "allowed_keys"),
    ],
)
def test_a_damaged_lock_is_lock_invalid_not_a_traceback(project, content, reason):
    (project / "qa.lock.json").write_text(content)
    code, found = locked_check(project)
    assert code == 1 and [d["code"] for d in found] == ["LOCK_INVALID"]
    assert reason in found[0]["message"]
    code, out = run("lock", "--check", str(project / "qa.yaml"))
    assert code == 1 and "LOCK_INVALID" in out and "Traceback" not in out


def test_the_older_engines_locks_are_read_and_upgraded(tmp_path):
    shutil.copytree(LEGACY.parent, tmp_path / "legacy")
    pipelines = tmp_path / "legacy" / "pipelines"
    code, out = run("validate", str(pipelines / "chuck.yaml"), "--format", "json")
    diags = json.loads(out)["diagnostics"]
    [legacy] = [d for d in diags if d["code"] == "LOCK_LEGACY"]
    assert code == 0 and "allowed step keys were checked" in legacy["message"]
    # A key the old lock does not allow is drift, at that key.
    text = (pipelines / "chuck.yaml").read_text()
    marker = 'prompt_key: "chuck/direct_answer_v1"'
    assert marker in text
    (pipelines / "chuck.yaml").write_text(
        text.replace(marker, marker + "\n      temperature: 0.5", 1)
    )
    code, out = run("validate", str(pipelines / "chuck.yaml"), "--format", "json")
    drift = [d for d in json.loads(out)["diagnostics"] if d["code"] == "LOCK_DRIFT"]
    assert code == 1 and len(drift) == 1 and "'temperature' is not allowed" in drift[0]["message"]
    code, out = run("lock", "--upgrade", str(pipelines / "chuck.yaml"))
    assert code == 1 and "LOCK_DRIFT" in out  # the pipeline no longer satisfies its lock
    assert json.loads((pipelines / "chuck.lock.json").read_text())["lock_version"] == 1
    (pipelines / "chuck.yaml").write_text(text)
    code, out = run("lock", "--upgrade", str(pipelines / "chuck.yaml"))
    assert code == 0 and "upgraded" in out
    assert json.loads((pipelines / "chuck.lock.json").read_text())["lock_version"] == 2
    assert run("validate", str(pipelines / "chuck.yaml"))[0] == 0
    assert run("lock", "--check", str(pipelines / "chuck.yaml"))[0] == 0


def test_a_folder_checks_only_pipelines_with_locks(project):
    code, out = run("lock", "--check", str(project))
    assert code == 0  # nothing locked yet: nothing to check
    run("lock", str(project / "qa.yaml"))
    (project / "prompts" / "answer.md").write_text("Changed.\n")
    code, out = run("lock", "--check", str(project))
    assert code == 1 and "LOCK_DRIFT" in out


def test_a_lock_path_that_is_a_folder_or_unwritable_is_coded_not_a_traceback(project, tmp_path):
    (project / "qa.lock.json").mkdir()  # e.g. a checkout that made a folder of that name
    code, found = locked_check(project)
    assert code == 1
    [diag] = found  # it exists: not LOCK_MISSING ("does not exist" would mislead)
    assert diag["code"] == "LOCK_INVALID"
    assert diag["message"].endswith("qa.lock.json is a folder, not a regular file")
    for mode in ((), ("--update",), ("--check",)):
        result = CliRunner().invoke(cli, ["lock", *mode, str(project / "qa.yaml")])
        assert result.exit_code in (1, 2) and not isinstance(result.exception, OSError), mode
        assert "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["lock", "--update", str(project / "qa.yaml")])
    assert "cannot write the lock to" in result.output and "Is a directory" in result.output
    missing = tmp_path / "no" / "such" / "dir" / "qa.lock.json"
    result = CliRunner().invoke(cli, ["lock", str(project / "qa.yaml"), "--out", str(missing)])
    assert result.exit_code == 2 and not isinstance(result.exception, OSError)
    assert f"cannot write the lock to {missing}" in result.output


def test_a_prompt_used_only_inside_a_map_branch_is_locked(project):
    # The lock froze the top-level steps' prompts only: an edit of a branch's prompt
    # passed `lock --check` as current.
    (project / "prompts" / "inner.md").write_text("Say what the item is.\nBriefly.\n")
    data = yaml.safe_load(PARENT)
    data.update(name="fan", settings={**data["settings"], "entry_step_id": "each"})
    data.pop("abstract")
    inner = dict(data["steps"][0], id="ask", prompt_key="inner", next="fin")
    inner["user_parts"] = {"question": {"source": "item"}}
    data["inputs"] = {"items": {"type": "array"}}
    data["steps"] = [
        {
            "id": "each",
            "type": "map",
            "items_from": "items",
            "with": {},
            "results_to": "res",
            "steps": [inner, {"id": "fin", "action": "finalize", "end": True}],
            "next": "done",
        },
        {"id": "done", "action": "finalize", "source": "res", "end": True},
    ]
    (project / "fan.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    assert run("lock", str(project / "fan.yaml"))[0] == 0
    lock = json.loads((project / "fan.lock.json").read_text())
    assert list(lock["prompts"]) == ["inner"]
    (project / "prompts" / "inner.md").write_text("Say what the item is.\nAt length.\n")
    code, out = run("lock", "--check", str(project / "fan.yaml"))
    assert code == 1 and "prompt 'inner' changed at line 2" in out


def test_turning_compat_mode_on_after_locking_is_no_drift(project):
    assert run("lock", str(project / "qa.yaml"))[0] == 0
    (project / "qa.yaml").write_text(
        CHILD.replace("settings:\n", "settings:\n  compat_mode: locked\n")
    )
    code, out = run("validate", str(project / "qa.yaml"), "--format", "json")
    assert code == 0 and not [
        d for d in json.loads(out)["diagnostics"] if d["code"].startswith("LOCK")
    ]


def test_update_replaces_a_drifting_older_engine_lock(tmp_path):
    shutil.copytree(LEGACY.parent, tmp_path / "legacy")
    pipelines = tmp_path / "legacy" / "pipelines"
    text = (pipelines / "chuck.yaml").read_text()
    marker = 'prompt_key: "chuck/direct_answer_v1"'
    (pipelines / "chuck.yaml").write_text(
        text.replace(marker, marker + "\n      temperature: 0.5", 1)
    )
    assert run("validate", str(pipelines / "chuck.yaml"))[0] == 1  # the old lock forbids the key
    code, out = run("lock", "--update", str(pipelines / "chuck.yaml"))
    assert code == 0 and "replaced" in out
    assert json.loads((pipelines / "chuck.lock.json").read_text())["lock_version"] == 2
    assert run("validate", str(pipelines / "chuck.yaml"))[0] == 0


BRANCHED = """\
name: fan
settings:
  entry_step_id: p
steps:
  - id: p
    type: parallel
    with: {item: question}
    results_to: out
    branches:
      inline:
        - {id: x, action: finalize, source: item, end: true}
      packed:
        pipeline: sub/pack.yaml#one
    next: done
  - id: done
    action: finalize
    source: out
    end: true
inputs:
  question: {type: string}
"""

SUB = """\
YAMLpipelines:
  one:
    settings: {entry_step_id: w}
    inputs: {item: {type: string}}
    steps:
      - {id: w, action: finalize, source: item, end: true}
"""


def test_an_edited_branch_pipeline_file_is_drift_at_the_step_that_names_it(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pack.yaml").write_text(SUB)
    (tmp_path / "fan.yaml").write_text(BRANCHED)
    code, out = run("lock", str(tmp_path / "fan.yaml"))
    assert code == 0, out
    data = json.loads((tmp_path / "fan.lock.json").read_text())
    assert list(data["branch_pipelines"]) == ["sub/pack.yaml#one"]
    code, out = run("validate", "--locked", str(tmp_path / "fan.yaml"), "--format", "json")
    assert code == 0, out
    (tmp_path / "sub" / "pack.yaml").write_text(SUB.replace("source: item", "source: question"))
    code, out = run("validate", "--locked", str(tmp_path / "fan.yaml"), "--format", "json")
    drifts = [d for d in json.loads(out)["diagnostics"] if d["code"] == "LOCK_DRIFT"]
    assert code == 1 and len(drifts) == 1, out
    [drift] = drifts
    assert "branch pipeline 'sub/pack.yaml#one' changed" in drift["message"]
    assert drift["line"] == BRANCHED.splitlines().index("        pipeline: sub/pack.yaml#one") + 1
    # a lock written before branch files were locked has none to compare: no drift
    del data["branch_pipelines"]
    (tmp_path / "fan.lock.json").write_text(json.dumps(data))
    code, out = run("validate", "--locked", str(tmp_path / "fan.yaml"), "--format", "json")
    assert [d for d in json.loads(out)["diagnostics"] if d["code"] == "LOCK_DRIFT"] == []
