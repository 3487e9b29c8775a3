"""The older engine's pipelines (LocalAI-RAG, checked in under tests/data/legacy) validate and run.

Every one of its ten YAML files goes through `runtime validate` unchanged: seven validate
(with warnings for what nothing here acts on), the three genuinely broken ones each fail
with one clear error. Its smoke pipeline runs offline end to end. Its lock files
(lock_version 1, beside the pipelines) are read: allowed step keys enforced (the base
pipeline's lock predates its add_commands step, which the older engine refuses too).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from runtime.cli import cli

ROOT = Path(__file__).resolve().parent.parent
LEGACY = Path(__file__).resolve().parent / "data" / "legacy"
E2E = LEGACY / "tests" / "e2e" / "data" / "pipelines"

# The seven files that validate unchanged -> their warnings, by code. Their model steps read
# inputs with no maxLength or undeclared: each warns BUDGET_MAY_OVERFLOW (static budget checks).
OVERFLOW_WARNINGS = {
    "pipelines/ada.yaml": 4,
    "pipelines/base/marian_rejewski_code_analysis_base.yaml": 7,
    "pipelines/chuck.yaml": 1,
    "pipelines/rejewski.yaml": 7,
    "pipelines/rejewski_assesment.yaml": 7,
    "pipelines/shannon.yaml": 3,
    "tests/e2e/data/pipelines/e2e_smoke.yaml": 2,
    "tests/e2e/data/pipelines/pipeline_pack.yaml": 8,
}
# ada and the rejewski family read variables the older engine derived on its own
# (composed_context_for_prompt, history_for_prompt, sufficiency_search_mode_constraint) and
# nothing here writes: a run fails there with VARIABLE_MISSING unless they come in as
# inputs, and the dataflow checks say so before a run (VARIABLE_NEVER_WRITTEN, one per read).
VALID = {
    "pipelines/ada.yaml": {
        "COMMAND_UNSUPPORTED": 1,
        "LOCK_LEGACY": 1,
        "SETTING_UNUSED": 4,
        "VARIABLE_NEVER_WRITTEN": 8,
    },
    "pipelines/chuck.yaml": {"COMMAND_UNSUPPORTED": 1, "LOCK_LEGACY": 1, "SETTING_UNUSED": 4},
    "pipelines/rejewski.yaml": {
        "COMMAND_UNSUPPORTED": 1,
        "FIELD_IGNORED": 2,
        "LOCK_LEGACY": 1,
        "SETTING_UNUSED": 7,
        "VARIABLE_NEVER_WRITTEN": 5,
    },
    "pipelines/rejewski_assesment.yaml": {
        "COMMAND_UNSUPPORTED": 1,
        "FIELD_IGNORED": 2,
        "LOCK_LEGACY": 1,
        "SETTING_UNUSED": 6,
        "VARIABLE_NEVER_WRITTEN": 5,
    },
    "pipelines/shannon.yaml": {
        "COMMAND_UNSUPPORTED": 1,
        "SETTING_UNUSED": 4,
        "VARIABLE_NEVER_WRITTEN": 1,  # composed_context_for_prompt (its snapshot trio runs)
    },
    "tests/e2e/data/pipelines/e2e_smoke.yaml": {"SETTING_UNUSED": 1},
    "tests/e2e/data/pipelines/pipeline_pack.yaml": {"SETTING_UNUSED": 22},
}
BROKEN = {
    # Its lock (lock_version 1) lists no add_command_action: the older engine's
    # apply_lockfile raises "lockfile missing action entry" for it as well.
    "pipelines/base/marian_rejewski_code_analysis_base.yaml": ("LOCK_DRIFT", 314),
    "tests/e2e/data/pipelines/e2e_graph_search_expand_fetch.yaml": ("BUDGET_SETTING_MISSING", 66),
    "tests/e2e/data/pipelines/e2e_scenarios_runner.yaml": ("YAML_NOT_A_PIPELINE", 1),
}


def validate(runner, path: Path) -> tuple[int, dict]:
    result = runner.invoke(cli, ["validate", str(path), "--format", "json"])
    return result.exit_code, json.loads(result.stdout)


def test_of_the_older_engines_ten_files_seven_validate_and_three_are_broken(runner):
    found = sorted(str(p.relative_to(LEGACY)) for p in LEGACY.rglob("*.yaml"))
    assert found == sorted([*VALID, *BROKEN])
    assert (LEGACY / "LICENSE").read_text().startswith("MIT License")
    exits = {name: validate(runner, LEGACY / name)[0] for name in found}
    assert exits == {**dict.fromkeys(VALID, 0), **dict.fromkeys(BROKEN, 1)}


@pytest.mark.parametrize("name", sorted(VALID))
def test_seven_files_validate_unchanged(runner, name, monkeypatch, tmp_path):
    # From an unrelated working directory: the prompts are found above the pipeline file.
    monkeypatch.chdir(tmp_path)
    code, report = validate(runner, LEGACY / name)
    assert code == 0, report["diagnostics"]
    assert report["errors"] == 0
    assert {d["severity"] for d in report["diagnostics"]} <= {"warning"}
    expected = Counter(VALID[name]) + Counter({"BUDGET_MAY_OVERFLOW": OVERFLOW_WARNINGS[name]})
    assert Counter(d["code"] for d in report["diagnostics"]) == expected


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_three_broken_files_each_get_one_clear_error(runner, name):
    code, report = validate(runner, LEGACY / name)
    assert code == 1
    errors = [
        (d["code"], d["file"], d["line"]) for d in report["diagnostics"] if d["severity"] == "error"
    ]
    assert errors == [(*BROKEN[name][:1], str(LEGACY / name), BROKEN[name][1])]


def test_a_pipeline_without_the_budget_its_engine_demands(runner):
    path = E2E / "e2e_graph_search_expand_fetch.yaml"
    _, report = validate(runner, path)
    found = [
        (d["severity"], d["code"], d["line"], d["message"])
        for d in report["diagnostics"]
        if d["code"] != "BUDGET_MAY_OVERFLOW"  # its model steps' inputs are unbounded
    ]
    # Its fetch_node_texts has no budget and settings.max_context_tokens is not set: the
    # older engine fails there at run time too. The settings nothing reads are warnings.
    assert found == [
        (
            "warning",
            "SETTING_UNUSED",
            10,
            "setting 'test' (the older engine's test-mode flag) is read by nothing in this "
            "pipeline",
        ),
        (
            "error",
            "BUDGET_SETTING_MISSING",
            66,
            "no budget given and settings.max_context_tokens is not set (the default budget "
            "is 70% of it)",
        ),
    ]


def test_a_scenario_index_is_one_not_a_pipeline_error(runner):
    _, report = validate(runner, E2E / "e2e_scenarios_runner.yaml")
    [diag] = report["diagnostics"]
    assert (diag["code"], diag["line"], diag["column"], diag["path"]) == (
        "YAML_NOT_A_PIPELINE",
        1,
        1,
        "$.YAMLpipelines",
    )
    assert diag["message"] == (
        "YAMLpipelines holds no pipeline: none of its 5 entries has steps, extends or "
        "settings (their fields: name, pipeline_file, pipeline_name, scenario_file); this "
        "looks like an index of other files, such as the older engine's scenario runner list"
    )


def test_prompts_are_found_the_older_engines_way_from_its_root(runner, monkeypatch):
    # The older engine ran from its project root: prompts_dir relative to the working directory.
    monkeypatch.chdir(LEGACY)
    code, report = validate(runner, Path("tests/e2e/data/pipelines/e2e_smoke.yaml"))
    found = sorted(d["code"] for d in report["diagnostics"])
    assert code == 0 and found == ["BUDGET_MAY_OVERFLOW"] * 2 + ["SETTING_UNUSED"]


# --- the smoke pipeline, offline end to end ----------------------------------------------


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from click.testing import CliRunner

    path = tmp_path_factory.mktemp("legacy") / "index.db"
    result = CliRunner().invoke(
        cli,
        ["index", str(ROOT / "pipelines" / "sample" / "eshop"), "--index", str(path)],
    )
    assert result.exit_code == 0, result.output
    return str(path)


def smoke(runner, tmp_path, *extra: str) -> dict:
    result = runner.invoke(
        cli,
        [
            "exec",
            str(E2E / "e2e_smoke.yaml"),
            "--store",
            str(tmp_path / "r.db"),
            "--input",
            "user_query=Where is the basket total computed?",
            "--input",
            "translate_chat=true",
            # Nothing in this file writes context_blocks: call_model's state default
            # (an empty list) stands in for the older engine's always-present variable.
            "--json",
            *extra,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_smoke_pipeline_runs_offline_with_the_extractive_responder(runner, tmp_path):
    out = smoke(runner, tmp_path)
    assert (out["status"], out["error"]) == ("completed", None)
    assert out["steps"] == [
        "translate_in",
        "load_history",
        "call_router",
        "handle_router",
        "call_answer",
        "handle_answer",
        "set_answer_from_last_model_response",
        "finalize",
    ]
    state = out["state"]
    # No translator offline: the question is kept as asked, and the trace says so.
    assert state["user_question_neutral"] == "Where is the basket total computed?"
    assert state["answer_translated"] is None
    assert state["final_answer"] == state["answer_neutral"] == state["last_model_response"]
    assert state["final_answer"].startswith("No language model was used")
    events = runner.invoke(
        cli, ["trace", out["run_id"], "--store", str(tmp_path / "r.db"), "--format", "jsonl"]
    )
    assert events.exit_code == 0
    [note] = [e for e in map(json.loads, events.stdout.splitlines()) if e["type"] == "TRANSLATE"]
    assert (note["step_id"], note["translated"], note["reason"]) == (
        "translate_in",
        False,
        "no translator is configured (a step `model:`, `use_main_model: true` or "
        "settings.translator_model)",
    )


def test_the_smoke_pipeline_searches_and_answers_from_a_cassette(runner, tmp_path, index):
    cassette = tmp_path / "smoke.jsonl"
    cassette.write_text(
        json.dumps({"step_id": "call_router", "response": "[BM25:] basket total"})
        + "\n"
        + json.dumps(
            {"step_id": "call_answer", "response": "[Answer:] Basket.Total sums the lines."}
        )
        + "\n"
    )
    out = smoke(runner, tmp_path, "--model", f"replay:{cassette}", "--index", index)
    assert out["status"] == "completed"
    assert out["steps"] == [
        "translate_in",
        "load_history",
        "call_router",
        "handle_router",
        "fetch",
        "call_answer",
        "handle_answer",
        "set_answer_from_last_model_response",
        "finalize",
    ]
    state = out["state"]
    assert state["retrieval_mode"] == "bm25"
    assert state["retrieval_query"] == "[BM25:] basket total"
    assert state["retrieval_seed_nodes"][:1] == [
        "eshop::main::method::Eshop.Core.Services.BasketService.Total"
    ]
    assert state["final_answer"] == "[Answer:] Basket.Total sums the lines."
