"""`runtime exec`, `resume`, `runs`, `trace` through CliRunner."""

from __future__ import annotations

import json

import pytest

from runtime.cli import cli

PIPELINE = """
name: echo
settings: {entry_step_id: a}
inputs:
  question: string
  n: {type: integer, default: 1}
outputs: [final_answer]
steps:
  - id: a
    action: set_variables
    rules:
      - {set: answer, from: question}
    next: b
  - id: b
    action: finalize
"""

LOOP = """
settings: {entry_step_id: a, max_steps: 1000}
steps:
  - id: a
    action: json_decision_router
    routes: {stop: done}
    on_other: a
  - id: done
    action: finalize
"""


@pytest.fixture
def files(tmp_path):
    (tmp_path / "p.yaml").write_text(PIPELINE)
    (tmp_path / "loop.yaml").write_text(LOOP)
    return tmp_path


def test_exec_json_contract(runner, files):
    store = str(files / "runs.db")
    result = runner.invoke(
        cli,
        [
            "exec",
            str(files / "p.yaml"),
            "--input",
            "question=42",
            "--store",
            store,
            "--run-id",
            "r1",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0
    obj = json.loads(result.stdout)
    assert obj == {
        "run_id": "r1",
        "status": "completed",
        "steps": ["a", "b"],
        "state": {"question": "42", "n": 1, "answer": "42", "final_answer": "42"},
        "output": {"final_answer": "42"},
        "error": None,
    }


def test_exec_human_output_and_inputs_file(runner, files):
    (files / "in.json").write_text(json.dumps({"question": "from file", "n": 2}))
    result = runner.invoke(
        cli,
        [
            "exec",
            str(files / "p.yaml"),
            "--inputs",
            str(files / "in.json"),
            "--store",
            str(files / "runs.db"),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0
    assert result.stdout == "final_answer: from file\n"
    assert "completed in 2 steps" in result.stderr


def test_exec_invalid_pipeline_exits_2_without_running(runner, files):
    (files / "bad.yaml").write_text(PIPELINE.replace("next: b", "next: bb"))
    result = runner.invoke(cli, ["exec", str(files / "bad.yaml"), "--store", str(files / "r.db")])
    assert result.exit_code == 2
    assert "UNKNOWN_STEP" in result.stderr and "did you mean 'b'?" in result.stderr
    assert not (files / "r.db").exists()


def test_exec_failure_exits_1_with_error_object(runner, files):
    result = runner.invoke(
        cli,
        [
            "exec",
            str(files / "loop.yaml"),
            "--max-steps",
            "5",
            "--json",
            "--store",
            str(files / "runs.db"),
            "--run-id",
            "loop1",
        ],
    )
    assert result.exit_code == 1
    obj = json.loads(result.stdout)
    assert obj["status"] == "failed" and len(obj["steps"]) == 5
    assert obj["error"] == {
        "code": "MAX_STEPS_EXCEEDED",
        "message": "run took more than 5 steps",
        "step_id": "a",
    }
    resumed = runner.invoke(cli, ["resume", "loop1", "--store", str(files / "runs.db"), "--json"])
    assert resumed.exit_code == 1  # the loop never stops: it fails again at max_steps
    assert json.loads(resumed.stdout)["run_id"] == "loop1"


def test_missing_input_is_coded(runner, files):
    result = runner.invoke(cli, ["exec", str(files / "p.yaml"), "--store", str(files / "r.db")])
    assert result.exit_code == 2  # an input error is the command line's, like usage: no run
    assert result.stderr == "error: INPUT_MISSING: required input 'question' is missing\n"
    assert not (files / "r.db").exists()


def test_bad_input_syntax_is_usage_error(runner, files):
    result = runner.invoke(cli, ["exec", str(files / "p.yaml"), "--input", "novalue"])
    assert result.exit_code == 2


def test_runs_and_trace(runner, files):
    store = str(files / "runs.db")
    runner.invoke(
        cli,
        [
            "exec",
            str(files / "p.yaml"),
            "--input",
            "question=q",
            "--store",
            store,
            "--run-id",
            "t1",
        ],
        catch_exceptions=False,
    )
    listed = runner.invoke(cli, ["runs", "--store", store, "--json"], catch_exceptions=False)
    assert listed.exit_code == 0
    [row] = json.loads(listed.stdout)
    assert (row["run_id"], row["status"], row["steps"]) == ("t1", "completed", 2)
    jsonl = runner.invoke(cli, ["trace", "t1", "--store", store, "--format", "jsonl"])
    events = [json.loads(line) for line in jsonl.stdout.splitlines()]
    assert [e["type"] for e in events] == ["RUN_STARTED", "STEP", "STEP", "RUN_COMPLETED"]
    text = runner.invoke(cli, ["trace", "t1", "--store", store])
    assert text.exit_code == 0 and "STEP" in text.stdout
    missing = runner.invoke(cli, ["trace", "zzz", "--store", store])
    assert missing.exit_code == 1 and "RUN_NOT_FOUND" in missing.stderr
