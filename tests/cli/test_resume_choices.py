"""A run records the choices that shape it (model, index, tokenizer) and resume keeps them.

Issue 23 item 3: `runtime resume ID`, exactly as the failure line prints it, went on with
the offline extractive responder because the run did not remember `--model`, and the run
then showed as completed. Each test here talks to a small chat server on 127.0.0.1.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from chat_support import Server

from runtime.cli import cli

PIPELINE = """\
name: two_calls
settings: {entry_step_id: first}
inputs:
  question: string
steps:
  - id: first
    action: call_model
    prompt_key: sys
    user_parts: {q: {source: question, template: "Q: {}"}}
    next: keep
  - id: keep
    action: set_variables
    rules:
      - {set: first_answer, from: last_model_response}
    next: second
  - id: second
    action: call_model
    prompt_key: sys
    user_parts: {q: {source: question, template: "Again: {}"}}
    next: done
  - id: done
    action: finalize
    source: last_model_response
"""


@pytest.fixture
def server():
    """A server whose second request fails (400: not retried), then answers again."""
    s = Server(["one", 400, "three"])
    yield s
    s.close()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Answer briefly.\n")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    for name in ("OPENAI_BASE_URL", "RUNTIME_CONTEXT_WINDOW", "RUNTIME_INDEX", "RUNTIME_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def exec_(runner, folder: Path, *args: str, question: str = "why?"):
    return runner.invoke(
        cli,
        [
            "exec",
            str(folder / "p.yaml"),
            "--input",
            f"question={question}",
            "--run-id",
            "r1",
            *args,
        ],
    )


def resume(runner, *args: str):
    return runner.invoke(cli, ["resume", "r1", "--json", *args])


def events(runner, run_id: str = "r1") -> list[dict[str, Any]]:
    out = runner.invoke(cli, ["trace", run_id, "--format", "jsonl"], catch_exceptions=False)
    assert out.exit_code == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def failed_on_the_server(runner, folder: Path, spec: str) -> None:
    """exec with --model spec: the first call answers, the second fails (resumable)."""
    result = exec_(runner, folder, "--model", spec)
    assert result.exit_code == 1, result.stderr
    assert "MODEL_PROVIDER_ERROR" in result.stderr
    # The line a user copies, exactly as printed.
    assert "resume with: runtime resume r1]" in result.stderr


def test_resume_without_model_continues_on_the_model_the_run_started_with(runner, folder, server):
    spec = f"openai:m@{server.url}"
    failed_on_the_server(runner, folder, spec)
    assert len(server.bodies) == 2
    done = resume(runner)
    assert done.exit_code == 0, done.stderr
    # The resumed call went to the same server (was: the offline extractive responder).
    assert len(server.bodies) == 3 and server.bodies[2]["model"] == "m"
    assert json.loads(done.stdout)["state"]["final_answer"] == "three"
    resumed = [e for e in events(runner) if e["type"] == "RUN_RESUMED"]
    assert resumed[0]["choices"]["model"] == spec
    assert "changed" not in resumed[0]


def test_a_different_model_at_resume_is_refused_naming_both(runner, folder, server):
    spec = f"openai:m@{server.url}"
    failed_on_the_server(runner, folder, spec)
    other = f"openai:other@{server.url}"
    refused = resume(runner, "--model", other)
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error: RESUME_CHOICE_CHANGED: ")
    assert f"--model: recorded {spec!r}, given {other!r}" in refused.stderr
    assert "--force" in refused.stderr
    assert len(server.bodies) == 2  # nothing was sent
    assert [e["type"] for e in events(runner)][-1] == "RUN_FAILED"  # the run is untouched


def test_force_takes_the_model_given_and_the_trace_says_so(runner, folder, server):
    spec = f"openai:m@{server.url}"
    failed_on_the_server(runner, folder, spec)
    other = f"openai:other@{server.url}"
    done = resume(runner, "--model", other, "--force")
    assert done.exit_code == 0, done.stderr
    assert server.bodies[2]["model"] == "other"
    out = json.loads(done.stdout)
    assert any("--force" in w and other in w for w in out.get("warnings", [])), out
    [resumed] = [e for e in events(runner) if e["type"] == "RUN_RESUMED"]
    assert resumed["forced"] is True
    assert {"what": "--model", "recorded": spec, "given": other} in resumed["changed"]
    assert resumed["choices"]["model"] == other
    # The forced model is now the run's: `runs` shows it.
    listed = runner.invoke(cli, ["runs", "--json"], catch_exceptions=False)
    assert json.loads(listed.stdout)[0]["model"] == other


def test_the_model_of_the_pipeline_is_kept_against_a_model_given_at_resume(runner, folder, server):
    # No --model at exec: the pipeline's own model. `resume --model` is a change too.
    text = PIPELINE.replace(
        "settings: {entry_step_id: first}",
        "settings:\n  entry_step_id: first\n  default_model: local\n"
        f"  models:\n    local: {{provider: openai, model: m, base_url: '{server.url}',"
        " max_retries: 0}",
    )
    (folder / "p.yaml").write_text(text)
    result = exec_(runner, folder)
    assert result.exit_code == 1, result.stderr
    refused = resume(runner, "--model", "extractive")
    assert refused.exit_code == 2
    assert "--model: recorded none (the pipeline's 'local'), given 'extractive'" in refused.stderr
    done = resume(runner)
    assert done.exit_code == 0, done.stderr
    assert len(server.bodies) == 3


def test_environment_chosen_url_is_kept_and_a_different_one_refused(
    runner, folder, server, monkeypatch
):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    failed_on_the_server(runner, folder, "openai:m")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    refused = resume(runner)
    assert refused.exit_code == 2
    assert (
        f"model 'openai:m' base_url: recorded {server.url!r}, given 'http://127.0.0.1:9/v1'"
        in refused.stderr
    )
    assert "$OPENAI_BASE_URL" in refused.stderr
    # A new shell without the variable: the recorded URL is used.
    monkeypatch.delenv("OPENAI_BASE_URL")
    done = resume(runner)
    assert done.exit_code == 0, done.stderr
    assert len(server.bodies) == 3


def test_environment_chosen_context_window_is_kept(runner, folder, server, monkeypatch):
    monkeypatch.setenv("RUNTIME_CONTEXT_WINDOW", "4000")
    spec = f"openai:m@{server.url}"
    failed_on_the_server(runner, folder, spec)
    monkeypatch.setenv("RUNTIME_CONTEXT_WINDOW", "9000")
    refused = resume(runner)
    assert refused.exit_code == 2
    assert f"model {spec!r} context_window: recorded 4000, given 9000" in refused.stderr
    monkeypatch.delenv("RUNTIME_CONTEXT_WINDOW")
    done = resume(runner)
    assert done.exit_code == 0, done.stderr
    [resumed] = [e for e in events(runner) if e["type"] == "RUN_RESUMED"]
    assert resumed["choices"]["models"][spec]["context_window"] == 4000


INDEXED = """\
name: search_after
settings: {entry_step_id: first}
inputs:
  question: string
steps:
  - id: first
    action: call_model
    prompt_key: sys
    user_parts: {q: {source: question}}
    next: find
  - id: find
    action: search_nodes
    query_from: question
    next: done
  - id: done
    action: finalize
    source: retrieval_seed_nodes
"""


def test_resume_from_another_folder_searches_the_index_the_run_started_with(
    runner, folder, monkeypatch, tmp_path_factory
):
    from runtime.retrieval.indexer import index_paths
    from runtime.retrieval.nodestore import open_store

    (folder / "src").mkdir()
    (folder / "src" / "Basket.cs").write_text(
        "namespace Shop\n{\n    public class Basket\n    {\n"
        "        public void Checkout()\n        {\n        }\n    }\n}\n"
    )
    (folder / ".runtime").mkdir()
    index_paths(
        open_store(str(folder / ".runtime" / "index.db"), create=True),
        [str(folder / "src")],
        repository="shop",
    )
    (folder / "p.yaml").write_text(INDEXED)
    s = Server([400, "ok"])
    try:
        store = str(folder / "runs.db")
        spec = f"openai:m@{s.url}"
        first = exec_(runner, folder, "--model", spec, "--store", store, question="basket checkout")
        assert first.exit_code == 1, first.stderr
        elsewhere = tmp_path_factory.mktemp("elsewhere")
        monkeypatch.chdir(elsewhere)  # no .runtime/index.db here
        refused = resume(runner, "--store", store, "--index", str(elsewhere / "other.db"))
        assert refused.exit_code == 2
        recorded = str(folder / ".runtime" / "index.db")
        assert f"--index: recorded {recorded!r}" in refused.stderr
        done = resume(runner, "--store", store)
        assert done.exit_code == 0, done.stderr
        hits = json.loads(done.stdout)["state"]["final_answer"]
        assert any("Basket" in json.dumps(h) for h in hits), done.stdout
    finally:
        s.close()


def test_runs_shows_the_model(runner, folder, server):
    spec = f"openai:m@{server.url}"
    failed_on_the_server(runner, folder, spec)
    (folder / "q.yaml").write_text(PIPELINE.replace("two_calls", "other"))
    runner.invoke(
        cli,
        ["exec", str(folder / "q.yaml"), "--input", "question=q", "--run-id", "r2"],
        catch_exceptions=False,
    )
    listed = runner.invoke(cli, ["runs"], catch_exceptions=False)
    assert listed.exit_code == 0
    header, *rows = listed.stdout.splitlines()
    assert "MODEL" in header.split()
    row = {line.split()[0]: line for line in rows}
    assert spec in row["r1"] and "extractive" in row["r2"]
    as_json = json.loads(runner.invoke(cli, ["runs", "--json"]).stdout)
    assert {r["run_id"]: r["model"] for r in as_json} == {"r1": spec, "r2": "extractive"}


def test_a_run_from_before_choices_were_recorded_resumes_with_what_is_given(runner, folder, server):
    spec = f"openai:m@{server.url}"
    failed_on_the_server(runner, folder, spec)
    with sqlite3.connect(folder / ".runtime" / "runs.db") as db:  # as an older version left it
        db.execute("DELETE FROM run_choices")
    listed = json.loads(runner.invoke(cli, ["runs", "--json"]).stdout)
    assert listed[0]["model"] is None
    done = resume(runner, "--model", spec)
    assert done.exit_code == 0, done.stderr
    assert len(server.bodies) == 3
    warnings = json.loads(done.stdout)["warnings"]
    assert any("before runs recorded their choices" in w for w in warnings), warnings
    [resumed] = [e for e in events(runner) if e["type"] == "RUN_RESUMED"]
    assert resumed["choices_recorded"] is False and resumed["choices"]["model"] == spec
    # What it resumed with is recorded now: `runs` shows it.
    listed = json.loads(runner.invoke(cli, ["runs", "--json"]).stdout)
    assert listed[0]["model"] == spec


def test_run_started_records_the_choices(runner, folder, server):
    spec = f"openai:m@{server.url}"
    failed_on_the_server(runner, folder, spec)
    [started] = [e for e in events(runner) if e["type"] == "RUN_STARTED"]
    choices = started["choices"]
    assert choices["model"] == spec
    assert choices["models"][spec] == {
        "provider": "openai",
        "model": "m",
        "base_url": server.url,
        "context_window": 8192,
        "tokenizer": "cl100k_base",
    }
    assert choices["index"] == str(folder / ".runtime" / "index.db")
    assert choices["tokenizer"] == "cl100k_base"


def test_the_printed_resume_line_names_the_store_it_was_given(runner, folder, server):
    store = str(folder / "elsewhere" / "my runs.db")
    result = exec_(runner, folder, "--model", f"openai:m@{server.url}", "--store", store)
    assert result.exit_code == 1
    [line] = [ln for ln in result.stderr.splitlines() if "resume with:" in ln]
    printed = shlex.split(line.split("resume with: ", 1)[1].rstrip("]"))
    assert printed == ["runtime", "resume", "r1", "--store", store]
    done = runner.invoke(cli, printed[1:])
    assert done.exit_code == 0, done.stderr
    assert len(server.bodies) == 3
