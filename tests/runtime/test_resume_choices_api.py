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
