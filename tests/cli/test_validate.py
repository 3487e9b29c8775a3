"""`runtime validate`, `lint`, `schema`, `graph`, `explain`, `actions` through CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.cli import COMMANDS, cli

DATA = Path(__file__).resolve().parent.parent / "data"
VALID = DATA / "valid"
INVALID = DATA / "invalid"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_for_every_command(runner, name):
    result = runner.invoke(cli, [name, "--help"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "Usage:" in result.output


def test_top_level_help_lists_commands(runner):
    result = runner.invoke(cli, ["--help"], catch_exceptions=False)
    assert result.exit_code == 0
    assert all(name in result.output for name in COMMANDS)


def test_valid_file_exits_0(runner, test_registry):
    result = runner.invoke(cli, ["validate", str(VALID / "pack.yaml")], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stdout.strip() == "1 file(s) valid"


def test_errors_exit_1_with_positions(runner, test_registry):
    path = str(INVALID / "entry_unknown.yaml")
    result = runner.invoke(cli, ["validate", path], catch_exceptions=False)
    assert result.exit_code == 1
    assert f"{path}:3:18: error ENTRY_STEP_UNKNOWN" in result.stdout
    assert "did you mean 'start'?" in result.stdout


def test_usage_errors_exit_2(runner, tmp_path, test_registry):
    # A missing file is a FILE_NOT_FOUND diagnostic, exit 1 (tests/cli/test_ci_edges.py).
    assert runner.invoke(cli, ["validate", "--format", "xml", str(VALID)]).exit_code == 2
    assert runner.invoke(cli, ["validate"]).exit_code == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(cli, ["validate", str(empty)])
    assert result.exit_code == 2 and "no *.yaml" in result.stderr


def test_folder_expands_to_yaml_files_only(runner, tmp_path, test_registry):
    for name in ("a.yaml", "b.yml"):
        (tmp_path / name).write_text(
            "settings: {entry_step_id: x}\nsteps:\n  - {id: x, action: finish}\n"
        )
    (tmp_path / "notes.txt").write_text("not yaml")
    result = runner.invoke(cli, ["validate", "--format", "json", str(tmp_path)])
    assert result.exit_code == 0
    files = json.loads(result.stdout)["files"]
    assert [Path(f).name for f in files] == ["a.yaml", "b.yml"]


def test_json_format_counts_everything_in_one_pass(runner, test_registry):
    result = runner.invoke(cli, ["validate", "--format", "json", str(INVALID)])
    assert result.exit_code == 1
    obj = json.loads(result.stdout)
    assert obj["errors"] == sum(1 for x in obj["diagnostics"] if x["severity"] == "error")
    assert {Path(x["file"]).name for x in obj["diagnostics"]} >= {"graph.yaml", "schema.yaml"}


def test_strict_and_lint_fail_on_warnings(runner, tmp_path, test_registry):
    p = tmp_path / "warn.yaml"
    p.write_text(
        "settings: {entry_step_id: a}\nsteps:\n  - {id: a, action: finish}\n"
        "  - {id: b, action: finish}\n"
    )
    assert runner.invoke(cli, ["validate", str(p)]).exit_code == 0
    assert runner.invoke(cli, ["validate", "--strict", str(p)]).exit_code == 1
    result = runner.invoke(cli, ["lint", str(p)])
    assert result.exit_code == 1 and "UNREACHABLE_STEP" in result.stdout


@pytest.mark.parametrize(
    "fmt,marker", [("github", "::error file="), ("sarif", '"version": "2.1.0"')]
)
def test_machine_formats(runner, fmt, marker, test_registry):
    result = runner.invoke(cli, ["validate", "--format", fmt, str(INVALID / "entry_unknown.yaml")])
    assert result.exit_code == 1
    assert marker in result.stdout


def test_schema_prints_and_writes(runner, tmp_path, test_registry):
    result = runner.invoke(cli, ["schema"], catch_exceptions=False)
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"].endswith("2020-12/schema")
    assert "action_noop" in schema["$defs"]
    out = tmp_path / "s.json"
    assert runner.invoke(cli, ["schema", "--output", str(out)]).exit_code == 0
    assert json.loads(out.read_text()) == schema


def test_graph_mermaid_and_dot(runner, test_registry):
    path = str(VALID / "single_root.yaml")
    mermaid = runner.invoke(cli, ["graph", path], catch_exceptions=False)
    assert mermaid.exit_code == 0
    assert mermaid.stdout.startswith("flowchart TD")
    assert "s0 -->|allow| s0" in mermaid.stdout and "s0 -->|deny| s1" in mermaid.stdout
    dot = runner.invoke(cli, ["graph", "--format", "dot", path], catch_exceptions=False)
    assert dot.exit_code == 0
    assert '"a" -> "b" [label="deny"];' in dot.stdout


def test_graph_of_invalid_pipeline_reports_error(runner, test_registry):
    result = runner.invoke(cli, ["graph", str(INVALID / "entry_unknown.yaml")])
    assert result.exit_code == 2
    assert "ENTRY_STEP_UNKNOWN" in result.stderr


def test_graph_pack_member(runner, test_registry):
    result = runner.invoke(cli, ["graph", f"{VALID / 'pack.yaml'}#second"], catch_exceptions=False)
    assert result.exit_code == 0 and "s0 --> s1" in result.stdout


def test_explain(runner):
    result = runner.invoke(cli, ["explain", "unbounded_cycle"], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stdout.startswith("UNBOUNDED_CYCLE (graph)")
    bad = runner.invoke(cli, ["explain", "UNBOUNDED_CYCEL"])
    assert bad.exit_code == 2 and "UNBOUNDED_CYCLE" in bad.stderr


def test_actions_lists_source_and_runnable(runner, test_registry):
    result = runner.invoke(cli, ["actions", "--json"], catch_exceptions=False)
    assert result.exit_code == 0
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["noop"]["runnable"] is True and rows["router"]["runnable"] is False
