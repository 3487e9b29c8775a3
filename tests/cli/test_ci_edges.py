"""`runtime validate` and `runtime graph` at the edges CI meets: missing and empty files,
repositories full of YAML that is not a pipeline, SARIF for code scanning, odd route keys."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from runtime import codes
from runtime.cli import cli

ROOT = Path(__file__).resolve().parents[2]

PIPELINE = """\
name: qa
settings: {entry_step_id: answer}
steps:
  - id: answer
    action: set_variables
    rules:
      - {set: answer, value: "42"}
    next: finish
  - id: finish
    action: finalize
"""
BROKEN = """\
settings: {entry_step_id: start}
steps:
  - id: start
    action: finalize
    next: nowhere
inputs: {answer: string}
"""
WORKFLOW = """\
name: ci
on: [push]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
"""
AZURE = "trigger: [main]\nsteps:\n  - script: echo hello\n"  # a top-level `steps:` of another tool
PRE_COMMIT_CONFIG = "repos:\n  - repo: local\n    hooks: []\n"


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# --- missing and empty files ---------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt,marker",
    [
        ("text", "missing.yaml:1:1: error FILE_NOT_FOUND no such file: missing.yaml"),
        ("github", "::error file=missing.yaml,line=1,col=1,title=FILE_NOT_FOUND::"),
        ("sarif", '"ruleId": "FILE_NOT_FOUND"'),
    ],
)
def test_a_missing_file_is_a_diagnostic_in_the_chosen_format(
    runner, tmp_path, monkeypatch, fmt, marker
):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"a.yaml": BROKEN})
    result = runner.invoke(cli, ["validate", "a.yaml", "missing.yaml", "--format", fmt])
    assert result.exit_code == 1
    assert marker in result.stdout
    assert "UNKNOWN_STEP" in result.stdout  # the file that exists was checked too
    assert result.stderr == ""


def test_a_missing_file_in_json_keeps_the_other_files_checked(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"a.yaml": PIPELINE, "b.yaml": BROKEN})
    result = runner.invoke(
        cli, ["validate", "a.yaml", "missing.yaml", "b.yaml", "--format", "json"]
    )
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["files"] == ["a.yaml", "missing.yaml", "b.yaml"]
    assert [(d["file"], d["code"], d["line"]) for d in report["diagnostics"]] == [
        ("b.yaml", "UNKNOWN_STEP", 5),
        ("missing.yaml", "FILE_NOT_FOUND", 1),
    ]
    assert (report["errors"], report["warnings"]) == (2, 0)


@pytest.mark.parametrize("text", ["", "  \n\n", "# only a comment\n"])
def test_an_empty_file_is_not_a_pipeline(runner, tmp_path, monkeypatch, text):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"empty.yaml": text})
    result = runner.invoke(cli, ["validate", "empty.yaml", "--format", "json"])
    assert result.exit_code == 1
    [diag] = json.loads(result.stdout)["diagnostics"]
    assert (diag["code"], diag["severity"], diag["message"], diag["line"]) == (
        "YAML_NOT_A_PIPELINE",
        "error",
        "the file is empty: it holds no YAML document",
        1,
    )


def test_exec_of_an_empty_file_names_the_problem(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"empty.yaml": ""})
    result = runner.invoke(cli, ["exec", "empty.yaml", "--store", str(tmp_path / "r.db")])
    assert result.exit_code == 2
    assert "empty.yaml:1:1: error YAML_NOT_A_PIPELINE the file is empty" in result.stderr


# --- repositories with other YAML: --only-pipelines and the pre-commit hooks ---------------

REPOSITORY = {
    ".github/workflows/ci.yml": WORKFLOW,
    ".pre-commit-config.yaml": PRE_COMMIT_CONFIG,
    "azure-pipelines.yml": AZURE,
    "mkdocs.yml": "site_name: docs\n",
    "empty.yaml": "",
    "pipelines/qa.yaml": PIPELINE,
}


def test_only_pipelines_skips_yaml_without_a_pipeline_root(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, REPOSITORY)
    names = sorted(REPOSITORY)
    result = runner.invoke(cli, ["validate", "--only-pipelines", *names])
    assert result.exit_code == 0, result.stdout
    assert result.stdout == "1 file(s) valid, 5 skipped (no pipeline root)\n"
    # Without the flag every one of them is checked as a pipeline.
    assert runner.invoke(cli, ["validate", *names]).exit_code == 1


def test_only_pipelines_still_reports_a_pipeline_that_does_not_parse(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(
        tmp_path,
        {
            "broken.yaml": "settings: {entry_step_id: a\nsteps:\n  - {id: a, action: finalize}\n",
            "other.yaml": "key: [unclosed\n",  # not a pipeline, and not parseable either
            "pack.yaml": "YAMLpipelines:\n  one: {settings: {entry_step_id: a}, steps: oops}\n",
        },
    )
    args = ["--only-pipelines", "--format", "json", "broken.yaml", "other.yaml", "pack.yaml"]
    result = runner.invoke(cli, ["validate", *args])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["files"] == ["broken.yaml", "pack.yaml"]
    assert {(d["file"], d["code"]) for d in report["diagnostics"]} == {
        ("broken.yaml", "YAML_SYNTAX"),
        ("pack.yaml", "SCHEMA_TYPE"),
    }


def _hooks() -> dict[str, dict]:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    return {h["id"]: h for h in hooks}


@pytest.mark.parametrize("hook_id", ["step-runtime-validate", "step-runtime-lint"])
def test_pre_commit_hook_checks_only_the_pipelines_of_a_repository(
    runner, tmp_path, monkeypatch, hook_id
):
    """The hook's files/exclude as pre-commit applies them (re.search), then its entry.

    .ci/pre-commit-try-repo.sh runs the real pre-commit on such a repository.
    """
    hook = _hooks()[hook_id]
    monkeypatch.chdir(tmp_path)
    write(tmp_path, REPOSITORY)
    staged = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    passed = [
        f
        for f in staged
        if re.search(hook["files"], f) and not re.search(hook.get("exclude", "^$"), f)
    ]
    assert passed == ["azure-pipelines.yml", "empty.yaml", "mkdocs.yml", "pipelines/qa.yaml"]
    program, *args = shlex.split(hook["entry"])
    assert program == "runtime"
    result = runner.invoke(cli, [*args, *passed])
    assert result.exit_code == 0, result.stdout
    assert result.stdout == "1 file(s) valid, 3 skipped (no pipeline root)\n"


def test_ci_job_runs_the_hooks_through_pre_commit_try_repo():
    script = (ROOT / ".ci" / "pre-commit-try-repo.sh").read_text()
    assert "pre_commit try-repo" in script
    assert "bash .ci/pre-commit-try-repo.sh" in (ROOT / ".ci" / "run").read_text()


# --- SARIF ---------------------------------------------------------------------------------

# The parts of the SARIF 2.1.0 schema that `--format sarif` writes, closed
# (additionalProperties: false) as the official schema closes them.
_MESSAGE = {
    "type": "object",
    "required": ["text"],
    "properties": {"text": {"type": "string", "minLength": 1}, "markdown": {"type": "string"}},
    "additionalProperties": False,
}
_ARTIFACT_LOCATION = {
    "type": "object",
    "required": ["uri"],
    "additionalProperties": False,
    "properties": {"uri": {"type": "string"}, "uriBaseId": {"type": "string"}},
}
_LOCATION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "physicalLocation": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"artifactLocation": _ARTIFACT_LOCATION, "region": {"type": "object"}},
        },
        "logicalLocations": {"type": "array"},
    },
}
_RULE = {
    "type": "object",
    "required": ["id", "shortDescription", "fullDescription", "help"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string"},
        "name": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9]*$"},
        "shortDescription": _MESSAGE,
        "fullDescription": _MESSAGE,
        "help": _MESSAGE,
        "properties": {
            "type": "object",
            "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
        },
    },
}
_RESULT = {
    "type": "object",
    "required": ["ruleId", "ruleIndex", "level", "message", "locations"],
    "additionalProperties": False,
    "properties": {
        "ruleId": {"type": "string"},
        "ruleIndex": {"type": "integer", "minimum": 0},
        "level": {"enum": ["none", "note", "warning", "error"]},
        "message": _MESSAGE,
        "locations": {"type": "array", "items": _LOCATION},
    },
}
SARIF_SUBSET = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "$schema": {"type": "string"},
        "version": {"enum": ["2.1.0"]},
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["tool", "results"],
                "additionalProperties": False,
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "additionalProperties": False,
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name", "rules"],
                                "properties": {"rules": {"type": "array", "items": _RULE}},
                            }
                        },
                    },
                    "results": {"type": "array", "items": _RESULT},
                },
            },
        },
    },
}
# RFC 3986: unreserved, sub-delims, ":", "@", "/" and percent-encodings; nothing else.
URI_CHARS = re.compile(r"^(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-F]{2})*$")


def test_sarif_rules_come_from_the_code_table_and_locations_are_uris(runner, tmp_path, monkeypatch):
    work = tmp_path / "work"
    write(
        tmp_path,
        {"work/inside.yaml": BROKEN, "work/sub dir/p #1.yaml": BROKEN, "outside.yaml": ""},
    )
    monkeypatch.chdir(work)
    absolute_inside = str(work / "sub dir" / "p #1.yaml")
    result = runner.invoke(
        cli, ["validate", "--format", "sarif", "inside.yaml", absolute_inside, "../outside.yaml"]
    )
    assert result.exit_code == 1
    log = json.loads(result.stdout)
    jsonschema.validate(log, SARIF_SUBSET)
    run = log["runs"][0]

    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert sorted(rules) == ["UNKNOWN_STEP", "YAML_NOT_A_PIPELINE"]
    entry = codes.CODES["YAML_NOT_A_PIPELINE"]
    explain = (
        "`runtime explain YAML_NOT_A_PIPELINE` prints this entry; docs/errors.md lists every code."
    )
    assert rules["YAML_NOT_A_PIPELINE"] == {
        "id": "YAML_NOT_A_PIPELINE",
        "name": "YamlNotAPipeline",
        "shortDescription": {"text": entry.summary},
        "fullDescription": {"text": f"{entry.summary} {entry.hint}"},
        "help": {
            "text": f"{entry.hint} {explain}",
            "markdown": f"**YAML_NOT_A_PIPELINE** (load): {entry.summary}\n\n{entry.hint} {explain}",
        },
        "properties": {"tags": ["load"]},
    }
    unknown = codes.CODES["UNKNOWN_STEP"]
    assert rules["UNKNOWN_STEP"]["fullDescription"] == {"text": unknown.summary}
    assert rules["UNKNOWN_STEP"]["help"]["text"] == (
        "`runtime explain UNKNOWN_STEP` prints this entry; docs/errors.md lists every code."
    )

    locations = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in run["results"]]
    assert sorted(locations, key=lambda loc: loc["uri"]) == [
        {"uri": (tmp_path / "outside.yaml").as_uri()},
        {"uri": "inside.yaml", "uriBaseId": "%SRCROOT%"},
        {"uri": "sub%20dir/p%20%231.yaml", "uriBaseId": "%SRCROOT%"},
    ]
    for loc in locations:
        parts = urlsplit(loc["uri"])
        assert URI_CHARS.match(loc["uri"]), loc["uri"]
        assert parts.scheme == ("" if "uriBaseId" in loc else "file")
        assert ".." not in parts.path.split("/")


MISSING_PROMPT = """\
settings: {entry_step_id: ask}
steps:
  - id: ask
    action: call_model
    prompt_key: qa/missing
    end: true
"""


def test_sarif_message_text_names_files_relative_to_the_root_like_the_locations(
    runner, tmp_path, monkeypatch
):
    # Files given by absolute path inside the working directory: the locations were relative
    # to %SRCROOT%, the message text (and the hint in it) named /tmp/.../work/...
    work = tmp_path / "work"
    write(tmp_path, {"work/sub/p.yaml": MISSING_PROMPT, "outside.yaml": MISSING_PROMPT})
    monkeypatch.chdir(work)
    args = [str(work / "sub" / "p.yaml"), str(work / "nope.yaml"), str(tmp_path / "outside.yaml")]
    result = runner.invoke(cli, ["validate", "--format", "sarif", *args])
    assert result.exit_code == 1
    texts = sorted(r["message"]["text"] for r in json.loads(result.stdout)["runs"][0]["results"])
    assert texts == [
        "no such file: nope.yaml",
        # outside the root: absolute, as its location is (a file:// URI)
        f"prompt 'qa/missing' not found under {tmp_path / 'prompts'}"
        f" Hint: create {tmp_path / 'prompts' / 'qa' / 'missing'}.md",
        "prompt 'qa/missing' not found under sub/prompts Hint: create sub/prompts/qa/missing.md",
    ]


BASE = """\
name: base
settings: {entry_step_id: a}
steps:
  - id: a
    action: call_model
    prompt_key: qa/missing
    next: b
  - id: b
    action: finalize
"""
CHILD = """\
extends: ../shared/base.yaml
name: child
steps:
  - id: b
    action: finalize
    top_k: 3
"""


@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_a_child_pipeline_given_relative_is_reported_with_relative_paths(
    runner, tmp_path, monkeypatch, fmt
):
    # The parent's diagnostics named its file by absolute path (the resolved extends target).
    write(tmp_path, {"repo/shared/base.yaml": BASE, "repo/pipes/child.yaml": CHILD})
    monkeypatch.chdir(tmp_path / "repo")
    result = runner.invoke(cli, ["validate", "--format", fmt, "pipes/child.yaml"])
    assert result.exit_code == 1
    assert str(tmp_path) not in result.stdout
    if fmt == "json":
        found = json.loads(result.stdout)["diagnostics"]
        assert sorted((d["file"], d["code"]) for d in found) == [
            ("pipes/child.yaml", "SCHEMA_UNKNOWN_FIELD"),
            ("shared/base.yaml", "PROMPT_NOT_FOUND"),
        ]
        (prompt,) = [d for d in found if d["code"] == "PROMPT_NOT_FOUND"]
        assert prompt["message"] == "prompt 'qa/missing' not found under pipes/prompts"
    elif fmt == "sarif":
        results = json.loads(result.stdout)["runs"][0]["results"]
        uris = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in results]
        assert sorted(u["uri"] for u in uris) == ["pipes/child.yaml", "shared/base.yaml"]
    else:
        assert "shared/base.yaml:6:17" in result.stdout or "file=shared/base.yaml" in result.stdout


# --- graph drawings -------------------------------------------------------------------------

ROUTES = """\
name: 'na"me\\'
settings: {entry_step_id: route}
steps:
  - id: route
    action: json_decision_router
    routes:
      'say "hi"': a
      '<b>bold</b>': b
      'a|b #quot; & c\\d': a
      plain key: b
    on_other: b
  - id: a
    action: finalize
  - id: b
    action: finalize
"""


def test_mermaid_escapes_quotes_markup_and_entities_in_route_keys(runner, tmp_path):
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES)
    result = runner.invoke(cli, ["graph", str(path)], catch_exceptions=False)
    assert result.exit_code == 0
    edges = [line for line in result.stdout.splitlines() if line.startswith("  s0 -->")]
    assert edges == [
        "  s0 -->|other| s2",
        '  s0 -->|"route say #quot;hi#quot;"| s1',
        '  s0 -->|"route #lt;b#gt;bold#lt;/b#gt;"| s2',
        '  s0 -->|"route a|b #35;quot; #amp; c\\d"| s1',
        "  s0 -->|route plain key| s2",
    ]
    # Every label is plain words or one quoted string holding no quote and no markup.
    for line in edges:
        assert re.fullmatch(r'  s0 -->\|(?:[A-Za-z0-9_ ]+|"[^"<>]*")\| s[12]', line), line


def test_dot_escapes_quotes_and_backslashes(runner, tmp_path):
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES)
    result = runner.invoke(cli, ["graph", "--format", "dot", str(path)], catch_exceptions=False)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == 'digraph "na\\"me\\\\" {'
    assert '  "route" -> "a" [label="route say \\"hi\\""];' in lines
    assert '  "route" -> "b" [label="route <b>bold</b>"];' in lines  # a quoted string is text
    assert '  "route" -> "a" [label="route a|b #quot; & c\\\\d"];' in lines
    # Inside every quoted string, a quote is escaped and a backslash escapes something.
    for line in lines:
        for quoted in re.findall(r'"((?:[^"\\]|\\.)*)"', line):
            assert re.fullmatch(r'(?:[^"\\]|\\["\\n])*', quoted), line


def test_ci_run_runs_the_readme_test_command_exactly() -> None:
    """CI runs what the README tells a new user to run: the Quickstart's second shell block."""
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", quick, flags=re.S)
    assert len(blocks) >= 2
    test_command = blocks[1].strip()
    assert "bash .ci/system-deps.sh" in test_command  # Chromium and Postgres for their tests
    run_lines = [
        ln
        for ln in (ROOT / ".ci" / "run").read_text().splitlines()
        if ln and not ln.startswith(("#", "set ", "cd "))
    ]
    assert run_lines == [test_command]
