"""Cassettes: record through a real server, replay identically, fail with named steps and lines."""

from __future__ import annotations

import json
import threading

import pytest

from runtime.errors import ModelError
from runtime.models import ModelRequest, resolve_provider

KEY = "sk-never-recorded-42"


def ask(provider, step, text, **kw):
    return provider.complete(ModelRequest([{"role": "user", "content": text}], step_id=step, **kw))


def test_record_then_replay_gives_identical_responses(tmp_path, chat_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    cassette = tmp_path / "sub" / "c.jsonl"
    chat_server.script = [
        {"reply": "one"},
        {"chunks": ["t", "wo"]},
        {"reply": "three\u2028line", "usage": None},
    ]
    rec = resolve_provider(
        None, settings={}, cli_spec=f"openai:m@{chat_server.url}", record_path=str(cassette)
    )
    try:
        live = [ask(rec, "x", "a", temperature=0.2)]
        assert len(cassette.read_text().splitlines()) == 1  # flushed per call
        live.append(
            rec.complete(
                ModelRequest([{"role": "user", "content": "b"}], step_id="y"),
                on_chunk=lambda s: None,
            )
        )
        live.append(ask(rec, "x", "c"))
    finally:
        rec.close()
    assert chat_server.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"
    text = cassette.read_text(encoding="utf-8")
    assert KEY not in text and "Authorization" not in text
    lines = [json.loads(line) for line in text.split("\n") if line]
    assert [line["step_id"] for line in lines] == ["x", "y", "x"]
    assert lines[0]["request"] == {
        "messages": [{"role": "user", "content": "a"}],
        "model": "",
        "max_output_tokens": 512,
        "temperature": 0.2,
        "top_p": None,
        "json_mode": False,
        "json_schema": None,
    }
    replay = resolve_provider(None, settings={}, cli_spec=f"replay:{cassette}")
    seen: list[str] = []
    again = [
        ask(replay, "x", "ignored"),
        replay.complete(ModelRequest([], step_id="y"), on_chunk=seen.append),
        ask(replay, "x", "ignored"),
    ]
    key = lambda r: (r.text, r.tokens_in, r.tokens_out, r.model, r.finish_reason)  # noqa: E731
    assert [key(r) for r in again] == [key(r) for r in live]
    assert [r.text for r in again] == ["one", "two", "three\u2028line"] and seen == ["two"]
    assert {r.provider for r in again} == {"replay"}


def test_replay_exhaustion_names_the_step(tmp_path):
    cassette = tmp_path / "c.jsonl"
    cassette.write_text('{"step_id": "route", "response": "r"}\n')
    replay = resolve_provider(None, settings={}, cli_spec=f"replay:{cassette}")
    assert ask(replay, "route", "q").text == "r"
    for step in ("route", "answer"):
        with pytest.raises(ModelError) as info:
            ask(replay, step, "q")
        assert info.value.code == "CASSETTE_EXHAUSTED" and repr(step) in info.value.message
        assert info.value.step_id == step


@pytest.mark.parametrize(
    "content,line,words",
    [
        (b'{"step_id": "a", "response": "x"}\nnot json\n', 2, "not JSON"),
        (b'\n\n["a", "x"]\n', 3, "not a JSON object"),
        (b'{"step_id": "a"}\n', 1, "`response`"),
        (b'{"step_id": 1, "response": "x"}\n', 1, "`step_id`"),
        (b'{"step_id": "a", "response": "x", "tokens_in": -1}\n', 1, "tokens_in"),
        (b'{"step_id": "a", "response": "x", "cached_tokens": -2}\n', 1, "cached_tokens"),
        (b'{"step_id": "a", "response": "x", "retries": [1]}\n', 1, "retries"),
        (b'{"step_id": "a", "response": "x", "response_format": "json"}\n', 1, "response_format"),
        (b'{"step_id": "a", "response": "x", "usage_from": 3}\n', 1, "usage_from"),
        (b'{"step_id": "a", "response": "x"}\n{"step_id": "b", "response": "\xff"}\n', 2, "UTF-8"),
    ],
)
def test_malformed_cassette_names_the_line(tmp_path, content, line, words):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    with pytest.raises(ModelError) as info:
        resolve_provider(None, settings={}, cli_spec=f"replay:{bad}")
    assert info.value.code == "CASSETTE_INVALID"
    assert f"line {line}:" in info.value.message and words in info.value.message


def test_missing_cassette_is_invalid(tmp_path):
    with pytest.raises(ModelError) as info:
        resolve_provider(None, settings={}, cli_spec=f"replay:{tmp_path / 'none.jsonl'}")
    assert info.value.code == "CASSETTE_INVALID" and "does not exist" in info.value.message


def test_replay_is_thread_safe(tmp_path):
    cassette = tmp_path / "c.jsonl"
    cassette.write_text(
        "".join(json.dumps({"step_id": "s", "response": str(n)}) + "\n" for n in range(400))
    )
    replay = resolve_provider(None, settings={}, cli_spec=f"replay:{cassette}")
    got: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(50):
            text = ask(replay, "s", "q").text
            with lock:
                got.append(text)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got, key=int) == [str(n) for n in range(400)]
    assert replay.remaining("s") == 0


def test_recording_wraps_the_offline_responder_too(tmp_path):
    cassette = tmp_path / "c.jsonl"
    rec = resolve_provider(None, settings={}, record_path=str(cassette))
    live = ask(rec, "a", "Question: what?")
    entry = json.loads(cassette.read_text())
    assert entry["step_id"] == "a" and entry["response"] == live.text
    assert entry["tokens_out"] == live.tokens_out and entry["model"] == "extractive"


def test_a_settings_cassette_resolves_against_the_pipeline_folder(tmp_path):
    (tmp_path / "tapes").mkdir()
    (tmp_path / "tapes" / "a.jsonl").write_text('{"step_id": "s", "response": "taped"}\n')
    settings = {"models": {"tape": {"provider": "replay", "cassette": "tapes/a.jsonl"}}}
    replay = resolve_provider("tape", settings=settings, base_dir=str(tmp_path))
    assert ask(replay, "s", "q").text == "taped"


def test_a_replay_budgets_with_the_recording_models_window_and_tokenizer(tmp_path):
    from runtime.models import config_from_spec
    from runtime.models.base import REPLAY_CONTEXT_WINDOW
    from runtime.models.cassette import RecordingProvider

    live = config_from_spec("extractive", {})
    cassette = tmp_path / "c.jsonl"
    recorder = RecordingProvider(resolve_provider("extractive", settings={}), str(cassette))
    recorder.complete(ModelRequest(messages=[{"role": "user", "content": "q"}], step_id="s"))
    entry = json.loads(cassette.read_text().splitlines()[0])
    assert (entry["context_window"], entry["tokenizer"]) == (live.context_window, live.tokenizer)
    replay = config_from_spec(f"replay:{cassette}", {})
    assert replay.context_window == live.context_window != REPLAY_CONTEXT_WINDOW
    assert replay.tokenizer == live.tokenizer
    old = tmp_path / "old.jsonl"  # recorded before the profile was kept
    old.write_text('{"step_id": "s", "response": "x"}\n')
    assert config_from_spec(f"replay:{old}", {}).context_window == REPLAY_CONTEXT_WINDOW
    odd = tmp_path / "odd.jsonl"
    odd.write_text(
        '{"step_id": "s", "response": "x", "context_window": 1000, "tokenizer": "o200k_base"}\n'
    )
    assert (
        config_from_spec(f"replay:{odd}", {}).context_window,
        config_from_spec(f"replay:{odd}", {}).tokenizer,
    ) == (1000, "o200k_base")


def test_what_the_wire_reported_is_recorded_and_replayed(tmp_path, chat_server, monkeypatch):
    monkeypatch.setenv("RUNTIME_TOKEN_MARGIN", "0.25")
    monkeypatch.setattr("time.sleep", lambda s: None)
    cassette = tmp_path / "c.jsonl"
    chat_server.script = [{"status": 503}, {"reply": '{"a": 1}'}]
    rec = resolve_provider(
        None, settings={}, cli_spec=f"openai:m@{chat_server.url}", record_path=str(cassette)
    )
    schema = {"type": "object"}
    live = ask(rec, "s", "q", json_mode=True, json_schema=schema)
    rec.close()
    assert (live.usage_from, [r["retry"] for r in live.retries]) == ("server", [1])
    assert live.response_format["json_schema"]["schema"] == schema
    [line] = [json.loads(x) for x in cassette.read_text().splitlines()]
    assert line["token_margin"] == 0.25 and line["usage_from"] == "server"
    monkeypatch.delenv("RUNTIME_TOKEN_MARGIN")
    replay = resolve_provider(None, settings={}, cli_spec=f"replay:{cassette}")
    assert replay.config.token_margin == 0.25  # budgets as the recording did
    again = ask(replay, "s", "ignored")
    assert (again.usage_from, again.retries, again.response_format) == (
        live.usage_from,
        live.retries,
        live.response_format,
    )


# --- calls of one step in flight at once (branches) ----------------------------------------


def _line(step: str, text: str, reply: str) -> str:
    request = {"messages": [{"role": "user", "content": text}], "model": "m"}
    return json.dumps({"step_id": step, "response": reply, "request": request})


def test_a_replayed_call_takes_the_recording_of_its_own_request(tmp_path):
    cassette = tmp_path / "c.jsonl"
    # recorded as the branches finished: b's call first
    lines = [_line("answer", "about b", "B"), _line("answer", "about a", "A")]
    cassette.write_text("\n".join(lines) + "\n")
    replay = resolve_provider(None, settings={}, cli_spec=f"replay:{cassette}")
    assert ask(replay, "answer", "about a").text == "A"
    assert ask(replay, "answer", "about b").text == "B"


def test_a_request_no_recording_matches_takes_the_steps_next_in_order(tmp_path):
    cassette = tmp_path / "c.jsonl"
    lines = [_line("answer", "old prompt 1", "one"), _line("answer", "old prompt 2", "two")]
    cassette.write_text("\n".join(lines) + "\n")
    replay = resolve_provider(None, settings={}, cli_spec=f"replay:{cassette}")
    assert [ask(replay, "answer", "edited").text for _ in range(2)] == ["one", "two"]


def test_a_map_recorded_at_once_replays_at_once_to_the_same_results(tmp_path, chat_server, runner):
    from runtime.cli import cli

    pipeline = tmp_path / "p.yaml"
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "say.txt").write_text("You say one thing.")
    pipeline.write_text(
        """
settings: {entry_step_id: each}
inputs: {things: {type: array}}
steps:
  - id: each
    type: map
    items_from: things
    as: thing
    max_concurrency: 4
    results_to: answers
    steps:
      - id: ask
        action: call_model
        prompt_key: say
        user_parts: {thing: {source: thing, template: "Say something about {}"}}
        next: keep
      - {id: keep, action: set_variables, rules: [{set: answer, from: last_model_response}], end: true}
    next: done
  - {id: done, action: finalize, source: answers, end: true}
"""
    )
    things = json.dumps(["apples", "bees", "clocks", "dunes"])
    chat_server.script = [{"reply": f"reply {i}"} for i in range(4)]
    cassette = tmp_path / "c.jsonl"
    base = ["exec", str(pipeline), "--input", f"things={things}", "--json", "--store"]
    record = ["--model", f"openai:m@{chat_server.url}", "--record", str(cassette)]
    live = runner.invoke(cli, [*base, str(tmp_path / "r.db"), *record])
    assert live.exit_code == 0, live.output
    recorded = json.loads(live.stdout)["output"]["final_answer"]
    assert sorted(recorded) == [f"reply {i}" for i in range(4)]
    for attempt in range(4):  # the branches call in whatever order they get to
        again = runner.invoke(
            cli, [*base, str(tmp_path / f"r{attempt}.db"), "--model", f"replay:{cassette}"]
        )
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["output"]["final_answer"] == recorded
