"""The run's subject: from `--subject` (JSON or @file) and the embedding API only, recorded
with the run, kept by resume, never a variable a step can write (docs/access.md)."""

from __future__ import annotations

import json
import sqlite3

import pytest

import runtime
from runtime.cli import cli
from tests.test_access_e2e import ALLOWED, LABELS, PIPELINES, QUESTION, write_tree

SUBJECT = {"tenant": "a", "clearance": ["public"], "attributes": {"team": "support"}}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from click.testing import CliRunner

    base = tmp_path_factory.mktemp("subjects")
    write_tree(base / "tree")
    (base / "labels.json").write_text(json.dumps(LABELS))
    path = base / "index.db"
    args = ["index", str(base / "tree"), "--index", str(path), "--repository", "shop"]
    result = CliRunner().invoke(cli, [*args, "--labels", str(base / "labels.json")])
    assert result.exit_code == 0, result.output
    return str(path)


def exec_(runner, index, store, *extra):
    args = ["exec", str(PIPELINES / "code_qa.yaml"), "--index", index, "--store", str(store)]
    return runner.invoke(cli, [*args, "--input", f"question={QUESTION}", "--json", *extra])


def cited(out):
    blocks = out["state"].get("context_blocks") or []
    return sorted(b.split("\n")[1][4:] for b in blocks if b.startswith("--- NODE ---"))


@pytest.mark.parametrize(
    "given,words",
    [
        ("not json", "not JSON"),
        ("[1, 2]", "must be an object"),
        ('{"tenant": ""}', "tenant"),
        ('{"clearance": "public"}', "list of strings"),
        ('{"clearance": ["public", "tenant:b"]}', "tenant label"),
        ('{"tenant": "a", "role": "admin"}', "unknown key"),
        ('{"roles": [" admin"]}', "whitespace"),
    ],
)
def test_a_bad_subject_is_subject_invalid_before_a_run_exists(
    runner, index, tmp_path, given, words
):
    result = exec_(runner, index, tmp_path / "r.db", "--subject", given)
    assert result.exit_code == 2, result.output
    assert "SUBJECT_INVALID" in result.output and words in result.output
    assert (
        not (tmp_path / "r.db").exists()
        or not sqlite3.connect(tmp_path / "r.db")
        .execute("SELECT count(*) FROM sqlite_master WHERE name = 'runs'")
        .fetchone()[0]
    )


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_subject_file_is_read(runner, index, tmp_path, suffix):
    file = tmp_path / f"subject{suffix}"
    file.write_text(json.dumps(SUBJECT))  # JSON is YAML too
    result = exec_(runner, index, tmp_path / "r.db", "--subject", f"@{file}")
    assert result.exit_code == 0, result.output
    assert cited(json.loads(result.stdout)) == [ALLOWED]


def test_the_subject_is_recorded_kept_by_resume_and_a_different_one_refused(
    runner, index, tmp_path
):
    store = tmp_path / "r.db"
    first = exec_(runner, index, store, "--subject", json.dumps(SUBJECT), "--max-steps", "3")
    assert first.exit_code == 1, first.output
    run_id = json.loads(first.stdout)["run_id"]
    row = sqlite3.connect(store).execute(
        "SELECT subject FROM run_subjects WHERE run_id = ?", (run_id,)
    )
    assert json.loads(row.fetchone()[0])["tenant"] == "a"
    other = {"tenant": "b", "clearance": ["public", "internal"]}
    refused = runner.invoke(
        cli, ["resume", run_id, "--store", str(store), "--subject", json.dumps(other), "--force"]
    )
    assert refused.exit_code == 2 and "SUBJECT_CHANGED" in refused.output
    resumed = runner.invoke(cli, ["resume", run_id, "--store", str(store), "--json"])
    assert resumed.exit_code == 0, resumed.output
    out = json.loads(resumed.stdout)
    assert out["status"] == "completed" and cited(out) == [ALLOWED]
    assert "subject" not in out["state"]  # never a variable


def test_the_same_subject_may_be_repeated_on_resume(runner, index, tmp_path):
    store = tmp_path / "r.db"
    first = exec_(runner, index, store, "--subject", json.dumps(SUBJECT), "--max-steps", "3")
    run_id = json.loads(first.stdout)["run_id"]
    same = json.dumps({**SUBJECT, "clearance": ["public", "public"]})  # the same, respelled
    resumed = runner.invoke(cli, ["resume", run_id, "--store", str(store), "--subject", same])
    assert resumed.exit_code == 0, resumed.output


def test_the_embedding_api_takes_a_subject(index, tmp_path):
    pipeline = runtime.load(str(PIPELINES / "code_qa.yaml"))
    services = runtime.Services(settings=pipeline.settings, index_path=index)
    runner = runtime.Runner(pipeline, services=services)
    result = runner.run({"question": QUESTION}, subject=SUBJECT)
    assert result.status == "completed", result.error
    assert cited({"state": result.state}) == [ALLOWED]
    started = next(e for e in result.events if e["type"] == "RUN_STARTED")
    assert started["subject"]["tenant"] == "a"
    with pytest.raises(runtime.StepRuntimeError) as info:
        runner.run({"question": QUESTION, "subject": {"tenant": "b"}}, subject=SUBJECT)
    assert info.value.code == "SUBJECT_INVALID"


def test_a_step_writing_subject_is_refused_before_the_run(tmp_path):
    file = tmp_path / "p.yaml"
    file.write_text(
        "name: widen\nsettings: {entry_step_id: widen}\nsteps:\n"
        "  - id: widen\n    action: set_variables\n"
        "    rules: [{set: subject, value: {tenant: b, clearance: [internal]}}]\n"
        "    end: true\n"
    )
    # Refused before the run: `subject` is engine-owned (a step of a third-party action
    # writing it at run time gets STATE_PROTECTED, as for every engine-owned name).
    with pytest.raises(runtime.PipelineInvalidError) as info:
        runtime.load(str(file))
    assert "PROTECTED_FIELD" in str(info.value) and "'subject'" in str(info.value)
