"""The embedding API's resume holds to the run's recorded model like `runtime resume` does."""

from __future__ import annotations

import pytest
from chat_support import Server

import runtime
from runtime.engine.services import Services
from runtime.errors import UsageError

PIPELINE = """\
name: two_calls
settings: {entry_step_id: first}
steps:
  - id: first
    action: call_model
    prompt_key: sys
    user_parts: {q: {source: question}}
    next: second
  - id: second
    action: call_model
    prompt_key: sys
    user_parts: {q: {source: question}}
    next: done
  - id: done
    action: finalize
    source: last_model_response
"""


@pytest.fixture
def pipeline(tmp_path, monkeypatch):
    for name in ("OPENAI_BASE_URL", "RUNTIME_CONTEXT_WINDOW", "RUNTIME_INDEX"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Answer briefly.\n")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    return runtime.load(str(tmp_path / "p.yaml"))


@pytest.fixture
def server():
    s = Server(["one", 400, "three"])
    yield s
    s.close()


def runner(pipeline, store, **services):
    given = Services(settings=pipeline.settings, base_dir=str(pipeline.base_dir), **services)
    return runtime.Runner(pipeline, store=store, services=given), given


def test_runner_resume_without_a_model_uses_the_recorded_one(pipeline, server, tmp_path):
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    spec = f"openai:m@{server.url}"
    first, _ = runner(pipeline, store, model_spec=spec)
    failed = first.run({"question": "why?"}, run_id="a1")
    assert failed.error.code == "MODEL_PROVIDER_ERROR"
    second, shared = runner(pipeline, store)
    done = second.resume("a1")
    assert done.status == "completed" and done.output == {"final_answer": "three"}
    assert len(server.bodies) == 3
    # The runner's services, shared by its other runs, are not changed by one resume.
    assert shared.model_spec is None
    other = second.run({"question": "new"}, run_id="a2")
    assert other.status == "completed" and len(server.bodies) == 3  # extractive, as given


def test_runner_resume_with_another_model_is_refused_unless_forced(pipeline, server, tmp_path):
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    spec = f"openai:m@{server.url}"
    first, _ = runner(pipeline, store, model_spec=spec)
    assert first.run({"question": "why?"}, run_id="b1").status == "failed"
    second, _ = runner(pipeline, store, model_spec="extractive")
    with pytest.raises(UsageError) as info:
        second.resume("b1")
    assert info.value.code == "RESUME_CHOICE_CHANGED" and info.value.exit_code == 2
    assert f"--model: recorded {spec!r}, given 'extractive'" in info.value.message
    done = second.resume("b1", force=True)
    assert done.status == "completed" and len(server.bodies) == 2  # answered offline
    [resumed] = [e for e in store.events("b1") if e["type"] == "RUN_RESUMED"]
    assert resumed["changed"] == [{"what": "--model", "recorded": spec, "given": "extractive"}]
    assert store.choices("b1")["model"] == "extractive"


def test_the_recorded_index_is_the_one_a_search_opens(tmp_path, monkeypatch):
    from runtime.engine import choices
    from runtime.retrieval.nodestore import default_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUNTIME_INDEX", raising=False)
    services = Services()
    assert choices.record(services, [None])["index"] == str(tmp_path / default_path())
    monkeypatch.setenv("RUNTIME_INDEX", "elsewhere/i.db")
    assert choices.record(services, [None])["index"] == str(tmp_path / default_path())
    given = Services(index_path="given.db")
    assert choices.record(given, [None])["index"] == str(tmp_path / "given.db")


NAMED = """\
name: named
settings:
  entry_step_id: first
  models:
    spare: {provider: openai, model: s}
steps:
  - id: first
    action: call_model
    prompt_key: sys
    model: "openai:f"
    user_parts: {q: {source: question}}
    next: done
  - id: done
    action: finalize
    source: last_model_response
"""


def test_a_step_model_is_recorded_with_the_url_the_environment_gave_it(
    tmp_path, monkeypatch, server
):
    for name in ("OPENAI_BASE_URL", "RUNTIME_CONTEXT_WINDOW", "RUNTIME_INDEX"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Answer briefly.\n")
    (tmp_path / "named.yaml").write_text(NAMED)
    pipeline = runtime.load(str(tmp_path / "named.yaml"))
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    server.script = [400, "fine"]  # 400 is not retried
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    first, _ = runner(pipeline, store)
    assert first.run({"question": "why?"}, run_id="n1").error.code == "MODEL_PROVIDER_ERROR"
    recorded = store.choices("n1")
    assert recorded["models"]["openai:f"]["base_url"] == server.url
    assert recorded["models"]["spare"]["base_url"] == server.url  # named by no step
    assert recorded["main"] == "extractive" and "extractive" in recorded["models"]
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    with pytest.raises(UsageError) as info:
        runner(pipeline, store)[0].resume("n1")
    assert f"model 'openai:f' base_url: recorded {server.url!r}" in info.value.message
    assert f"model 'spare' base_url: recorded {server.url!r}" in info.value.message
    monkeypatch.delenv("OPENAI_BASE_URL")
    done = runner(pipeline, store)[0].resume("n1")
    assert done.output == {"final_answer": "fine"} and len(server.bodies) == 2


def test_another_tokenizer_at_resume_is_refused(pipeline, server, tmp_path):
    class O200k:  # refused before it counts anything: no need to load the encoding
        encoding_name = "o200k_base"

    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    first, _ = runner(pipeline, store, model_spec=f"openai:m@{server.url}")
    assert first.run({"question": "why?"}, run_id="t1").status == "failed"
    other, _ = runner(pipeline, store, token_counter=O200k())
    with pytest.raises(UsageError) as info:
        other.resume("t1")
    assert "tokenizer: recorded 'cl100k_base', given 'o200k_base'" in info.value.message


def test_a_credential_in_the_environment_is_not_recorded(monkeypatch):
    from runtime.engine import choices

    monkeypatch.setenv("OPENAI_BASE_URL", "http://user:s3cret@127.0.0.1:9/v1")
    got = choices.record(Services(model_spec="openai:m"), [None])
    assert "s3cret" not in repr(got)
    assert got["models"] == {"openai:m": {"error": "MODEL_CONFIG_INVALID"}}
