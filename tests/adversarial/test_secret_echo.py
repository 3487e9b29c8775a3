"""No configured secret reaches stdout, a cassette or the run store, even when a server echoes it.

The `chat_server` fixture replaces `{key}` in a scripted reply with the key the request
carried, so the server really echoes what it was sent. Keys in a base URL's query string
are refused before anything is sent, like user-info credentials.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import runtime
from runtime.cli import cli
from runtime.engine.services import Services

KEY = "sk-live-echoed-7f3a9c21e4"
OTHER = "sk-other-model-55d0b7e2a1"  # the key of another model in settings.models


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Answer.\n")
    path = tmp_path / "p.yaml"
    path.write_text(
        "settings:\n"
        "  entry_step_id: ask\n"
        "steps:\n"
        "  - {id: ask, action: call_model, prompt_key: sys, next: done,\n"
        "     user_parts: {q: {source: question}}}\n"
        "  - {id: done, action: finalize, source: last_model_response}\n"
    )
    return path


def leaked(secret: str, *texts: str, files: list[Path] = ()) -> list[str]:
    """Where secret appears: 'text N' or a file name."""
    where = [f"text {n}" for n, t in enumerate(texts) if secret in t]
    return where + [f.name for f in files if secret.encode() in f.read_bytes()]


def store_files(tmp_path: Path) -> list[Path]:
    files = sorted(tmp_path.glob("runs.db*"))
    assert files, "the run store was not written"
    return files


@pytest.mark.parametrize("as_json", [True, False])
def test_a_key_echoed_in_a_reply_reaches_no_output_cassette_or_store(
    runner, chat_server, pipeline, tmp_path, monkeypatch, as_json
):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    chat_server.script = [{"reply": "you sent {key}, keep it safe"}]
    cassette = tmp_path / "c.jsonl"
    args = ["exec", str(pipeline), "--model", f"openai:m@{chat_server.url}"]
    args += ["--record", str(cassette), "--store", str(tmp_path / "runs.db")]
    args += ["--input", "question=what is my key?"] + (["--json"] if as_json else [])
    done = runner.invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert chat_server.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"
    files = [cassette, *store_files(tmp_path)]
    assert leaked(KEY, done.stdout, done.stderr, files=files) == []
    assert "you sent [redacted], keep it safe" in done.stdout
    [line] = cassette.read_text().splitlines()
    assert json.loads(line)["response"] == "you sent [redacted], keep it safe"


def test_a_key_split_across_streamed_pieces_is_never_passed_on(chat_server, pipeline, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    # The key arrives in three pieces; a prefix of it that never completes is plain text.
    chunks = [f"key: {KEY[:4]}", KEY[4:11], f"{KEY[11:]} and {KEY[:6]}", " done"]
    chat_server.script = [{"chunks": chunks}]
    pieces: list[str] = []
    loaded = runtime.load(str(pipeline))
    services = Services(
        settings=loaded.settings,
        model_spec=f"openai:m@{chat_server.url}",
        base_dir=str(pipeline.parent),
        on_model_chunk=pieces.append,
    )
    result = runtime.Runner(loaded, services=services).run({"question": "q"}, run_id="s")
    expected = f"key: [redacted] and {KEY[:6]} done"
    assert result.status == "completed"
    assert "".join(pieces) == expected == result.state["last_model_response"]
    assert all(KEY not in p and "[redacted]" not in p[:5] for p in pieces)
    assert leaked(KEY, *pieces, json.dumps(result.to_dict()), json.dumps(result.events)) == []


def settings_with_two_models(url: str) -> dict[str, Any]:
    return {
        "entry_step_id": "ask",
        "default_model": "a",
        "models": {
            "a": {"provider": "openai", "model": "m", "base_url": url, "api_key_env": "KEY_A"},
            "b": {"provider": "openai", "model": "m", "base_url": url, "api_key_env": "KEY_B"},
        },
    }


@pytest.mark.parametrize(
    "behaviour,code",
    [
        ({"reply": f"the other key is {OTHER}"}, None),
        ({"raw": f"not json, but {OTHER} and {{key}}"}, "MODEL_PROVIDER_ERROR"),
    ],
)
def test_every_configured_key_is_scrubbed_from_replies_and_errors(
    chat_server, pipeline, tmp_path, monkeypatch, behaviour, code
):
    monkeypatch.setenv("KEY_A", KEY)
    monkeypatch.setenv("KEY_B", OTHER)
    chat_server.script = [behaviour]
    loaded = runtime.load(str(pipeline))
    settings = settings_with_two_models(chat_server.url)
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    services = Services(settings=settings, base_dir=str(pipeline.parent))
    result = runtime.Runner(loaded, services=services, store=store).run({"question": "q"})
    store.close()
    assert chat_server.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"
    seen = json.dumps([result.to_dict(), result.events])
    assert leaked(OTHER, seen, files=store_files(tmp_path)) == []
    assert leaked(KEY, seen, files=store_files(tmp_path)) == []
    if code is None:
        assert result.state["last_model_response"] == "the other key is [redacted]"
    else:
        assert result.error.code == code
        assert "not json, but [redacted] and [redacted]" in result.error.message


def test_a_cassette_recorded_with_a_key_in_it_replays_scrubbed(
    runner, pipeline, tmp_path, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"step_id": "ask", "response": f"recorded {KEY}"}) + "\n")
    args = ["exec", str(pipeline), "--model", f"replay:{old}", "--store", str(tmp_path / "runs.db")]
    done = runner.invoke(cli, [*args, "--input", "question=q", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["output"] == {"final_answer": "recorded [redacted]"}
    assert leaked(KEY, done.stdout, done.stderr, files=store_files(tmp_path)) == []


# --- credentials in a base URL ------------------------------------------------------------


@pytest.mark.parametrize(
    "suffix", [f"?api_key={KEY}", f"?key={KEY}&v=1", f"/?token={KEY}", f"#{KEY}", "?"]
)
def test_a_query_string_credential_in_the_model_spec_is_refused_unsent(
    runner, chat_server, pipeline, tmp_path, suffix
):
    args = ["exec", str(pipeline), "--model", f"openai:m@{chat_server.url}{suffix}"]
    done = runner.invoke(
        cli, [*args, "--store", str(tmp_path / "runs.db"), "--input", "question=q"]
    )
    assert done.exit_code != 0
    assert "MODEL_CONFIG_INVALID" in done.stderr
    assert "put the key in api_key_env" in done.stderr
    assert chat_server.requests == []
    stored = sorted(tmp_path.glob("runs.db*"))
    assert leaked(KEY, done.stdout, done.stderr, files=stored) == []


def test_a_query_string_credential_in_settings_is_a_validation_error(runner, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        "settings:\n"
        "  entry_step_id: done\n"
        "  models:\n"
        f"    m: {{provider: openai, model: x, base_url: 'http://127.0.0.1:1/v1?api_key={KEY}'}}\n"
        "steps:\n  - {id: done, action: finalize, source: question}\n"
    )
    for output in ("json", "github", "sarif"):
        done = runner.invoke(cli, ["validate", str(path), "--format", output])
        assert done.exit_code != 0
        assert "base_url must not have a query string" in done.stdout
        assert leaked(KEY, done.stdout, done.stderr) == []
    # The text format quotes the offending line of the file itself under the message.
    done = runner.invoke(cli, ["validate", str(path)])
    message = done.stdout.splitlines()[0]
    assert "MODEL_CONFIG_INVALID" in message and KEY not in message


def test_a_query_string_credential_for_the_embeddings_endpoint_is_refused(runner, tmp_path):
    index = tmp_path / "i.db"
    code = tmp_path / "src"
    code.mkdir()
    (code / "a.sql").write_text("CREATE TABLE dbo.T (Id int);\n")
    embedder = f"openai:e@http://127.0.0.1:1/v1?api_key={KEY}"
    done = runner.invoke(cli, ["index", str(code), "--index", str(index), "--embedder", embedder])
    assert done.exit_code == 1
    assert done.stderr.startswith("error: MODEL_CONFIG_INVALID: embedder openai:e@...: base_url")
    assert leaked(KEY, done.stdout, done.stderr) == [] and not index.exists()
