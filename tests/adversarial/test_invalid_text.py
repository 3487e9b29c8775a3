"""Text that is not valid Unicode is refused where it enters, with a code and a position.

One policy (runtime/contract/text.py): a lone surrogate (JSON `"\\ud800"`) or a byte that
is not UTF-8 is never carried into a run to fail later as ACTION_FAILED or a traceback.
Inputs are INPUT_INVALID_TEXT, a model reply is MODEL_PROVIDER_ERROR, an indexed file is
reported as not indexed, a tool's arguments are answered to the model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import runtime
from runtime.cli import cli
from runtime.engine.services import Services
from runtime.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


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


def exec_(runner, pipeline: Path, *args: str):
    store = str(pipeline.parent / "runs.db")
    return runner.invoke(cli, ["exec", str(pipeline), "--store", store, "--json", *args])


def refused(result: Any, first_line: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines()[0] == first_line
    assert "Traceback" not in result.output and result.stdout == ""


# --- the command line ----------------------------------------------------------------------


def test_a_byte_that_is_not_utf8_in_an_input_value_is_refused(runner, pipeline):
    # Python reads argv with surrogateescape: byte 0xFF arrives as U+DCFF.
    refused(
        exec_(runner, pipeline, "--input", "question=ab\udcffc"),
        "error: INPUT_INVALID_TEXT: --input 'question' is not UTF-8 text: "
        "byte 0xFF at byte 2 is not UTF-8",
    )
    refused(
        exec_(runner, pipeline, "--input", "qu\udce9=1"),
        "error: INPUT_INVALID_TEXT: --input 'qu\\udce9' is not UTF-8 text: "
        "byte 0xE9 at byte 2 is not UTF-8",
    )


def test_a_lone_surrogate_escape_in_an_input_is_refused(runner, pipeline, tmp_path):
    (tmp_path / "in.json").write_text('{"question": "a\\ud800b", "x": 1}')
    refused(
        exec_(runner, pipeline, "--inputs", str(tmp_path / "in.json")),
        f"error: INPUT_INVALID_TEXT: --inputs {tmp_path / 'in.json'} is not valid Unicode "
        "text: at ['question']: a lone surrogate U+D800 at character 1",
    )
    # A value given as JSON on the command line: decoded, then checked.
    refused(
        exec_(runner, pipeline, "--input", 'question=["ok", {"k": "\\udc00"}]'),
        "error: INPUT_INVALID_TEXT: --input 'question' is not valid Unicode text: "
        "at [1]['k']: a lone surrogate U+DC00 at character 0",
    )


def test_an_inputs_file_that_is_not_utf8_names_the_byte_and_line(runner, pipeline, tmp_path):
    (tmp_path / "in.json").write_bytes(b'{\n  "question": "caf\xe9"\n}')
    refused(
        exec_(runner, pipeline, "--inputs", str(tmp_path / "in.json")),
        f"error: INPUT_INVALID_TEXT: --inputs {tmp_path / 'in.json'} is not UTF-8 text: "
        "byte 0xE9 at byte 20 (line 2) is not UTF-8",
    )


def test_a_surrogate_pair_and_a_character_beyond_the_bmp_are_fine(runner, pipeline, tmp_path):
    (tmp_path / "in.json").write_text('{"question": "smile \\ud83d\\ude00 \U0001f600"}')
    done = exec_(runner, pipeline, "--inputs", str(tmp_path / "in.json"))
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["state"]["question"] == "smile \U0001f600 \U0001f600"


def test_a_real_process_given_invalid_bytes_prints_a_coded_error_not_a_traceback(pipeline):
    done = subprocess.run(
        [
            *(sys.executable, "-m", "runtime", "exec", str(pipeline), "--json"),
            *("--store", str(pipeline.parent / "r.db"), "--input", b"question=a\xffb"),
        ],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=pipeline.parent,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().startswith(
        "error: INPUT_INVALID_TEXT: --input 'question' is not UTF-8 text: byte 0xFF at byte 1"
    )
    assert b"Traceback" not in done.stderr + done.stdout


# --- the embedding API -----------------------------------------------------------------


@pytest.mark.parametrize(
    "inputs,where",
    [
        ({"question": "a\ud800"}, "input 'question' is not valid Unicode text: "),
        ({"question": {"k": ["x", "\udfff!"]}}, "input 'question' is not valid Unicode text: "),
        ({"question": {"\ud800": 1}}, "input 'question' is not valid Unicode text: "),
    ],
)
def test_the_embedding_api_refuses_invalid_text_before_a_run(pipeline, tmp_path, inputs, where):
    store = runtime.SqliteRunStore(str(tmp_path / "api.db"))
    runner = runtime.Runner(runtime.load(str(pipeline)), store=store)
    with pytest.raises(InputError) as caught:
        runner.run(inputs, run_id="x")
    assert caught.value.code == "INPUT_INVALID_TEXT"
    assert caught.value.message.startswith(where) and "lone surrogate U+D" in caught.value.message
    assert store.runs() == []
    store.close()


# --- model replies ---------------------------------------------------------------------


def _reply(content: str = "fine", calls: str = "") -> str:
    message = '{"role": "assistant", "content": ' + content + (calls and f', "tool_calls": {calls}')
    return '{"choices": [{"message": ' + message + '}, "finish_reason": "stop"}]}'


@pytest.mark.parametrize(
    "raw,where",
    [
        (_reply('"half \\ud83d of a pair"'), "text"),
        (
            _reply(
                "null",
                '[{"id": "c\\udc01", "type": "function", '
                '"function": {"name": "rehydrate", "arguments": "{}"}}]',
            ),
            "tool call 0's id",
        ),
        (
            _reply(
                "null",
                '[{"id": "c1", "type": "function", '
                '"function": {"name": "rehydrate", "arguments": "{\\"pointer_id\\": \\"\\ud800\\"}"}}]',
            ),
            "tool call 0's arguments",
        ),
    ],
)
def test_a_reply_holding_a_lone_surrogate_is_a_provider_error(
    runner, chat_server, pipeline, tmp_path, raw, where
):
    chat_server.script = [{"raw": raw}]
    cassette = tmp_path / "c.jsonl"
    done = exec_(
        runner,
        pipeline,
        "--model",
        f"openai:m@{chat_server.url}",
        "--record",
        str(cassette),
        "--input",
        "question=q",
    )
    assert done.exit_code == 1, done.output
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "MODEL_PROVIDER_ERROR"
    assert (
        f"the reply's {where} is not valid Unicode text: a lone surrogate U+D" in error["message"]
    )
    assert "Traceback" not in done.output
    assert not cassette.exists() or cassette.read_text() == ""


def test_a_streamed_reply_holding_a_lone_surrogate_is_a_provider_error(chat_server, pipeline):
    chat_server.script = [{"chunks": ["ok ", "\ud800", " end"]}]
    pieces: list[str] = []
    loaded = runtime.load(str(pipeline))
    services = Services(
        settings=loaded.settings,
        model_spec=f"openai:m@{chat_server.url}",
        base_dir=str(pipeline.parent),
        on_model_chunk=pieces.append,
    )
    result = runtime.Runner(loaded, services=services).run({"question": "q"})
    assert result.status == "failed" and result.error.code == "MODEL_PROVIDER_ERROR"
    assert "the reply's text is not valid Unicode text" in result.error.message
    json.dumps(result.to_dict(), ensure_ascii=False).encode("utf-8")  # printable as it is


def test_a_cassette_holding_a_lone_surrogate_replays_as_a_provider_error(
    runner, pipeline, tmp_path
):
    old = tmp_path / "old.jsonl"
    old.write_text('{"step_id": "ask", "response": "bad \\udead"}\n')
    done = exec_(runner, pipeline, "--model", f"replay:{old}", "--input", "question=q")
    assert done.exit_code == 1
    assert json.loads(done.stdout)["error"]["code"] == "MODEL_PROVIDER_ERROR"


# --- a tool's arguments ----------------------------------------------------------------


def test_tool_arguments_decoding_to_a_lone_surrogate_are_answered_to_the_model(
    chat_server, tmp_path
):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("Answer.\n")
    path = tmp_path / "t.yaml"
    path.write_text(
        "settings: {entry_step_id: ask}\n"
        "steps:\n"
        "  - {id: ask, action: call_model, prompt_key: sys, next: done, tools: [rehydrate],\n"
        "     user_parts: {q: {source: question}}}\n"
        "  - {id: done, action: finalize, source: last_model_response}\n"
    )
    arguments = json.dumps({"pointer_id": "p1", "slice": "lines 1-2"}).replace("p1", "\\ud800")
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "rehydrate", "arguments": arguments},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    chat_server.script = [
        {"raw": json.dumps({"choices": [{"message": message, "finish_reason": "tool_calls"}]})},
        {"reply": "answered"},
    ]
    loaded = runtime.load(str(path))
    services = Services(
        settings=loaded.settings, model_spec=f"openai:m@{chat_server.url}", base_dir=str(tmp_path)
    )
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    result = runtime.Runner(loaded, services=services, store=store).run(
        {"question": "q"}, run_id="t"
    )
    events = store.events("t")
    store.close()
    assert result.status == "completed", result.error
    [tool] = [e for e in events if e["type"] == "MODEL_TOOL_CALL"]
    assert tool["error"] == "TOOL_ARGUMENTS_INVALID"
    assert "lone surrogate U+D800" in tool["message"] and "pointer_id" in tool["message"]
    answer = chat_server.requests[1]["body"]["messages"][-1]
    assert answer["role"] == "tool" and answer["content"].startswith("error TOOL_ARGUMENTS_INVALID")
    json.dumps([result.to_dict(), events], ensure_ascii=False).encode("utf-8")


# --- indexed files ---------------------------------------------------------------------


def test_a_file_that_is_no_text_the_indexer_reads_is_reported_not_skipped(runner, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.sql").write_text("CREATE TABLE dbo.T (Id int);\n")
    # 0x81 is neither UTF-8 here nor defined in Windows-1252.
    (src / "bad.sql").write_bytes(b"CREATE TABLE dbo.U (Id int);\n-- caf\x81\n")
    # UTF-16 with its byte-order mark, holding a lone high surrogate.
    (src / "half.sql").write_bytes(b"\xff\xfe" + "-- a".encode("utf-16-le") + b"\x3d\xd8!\x00")
    (src / "blob.sql").write_bytes(b"\x00\x01binary\x00")  # binary: skipped, as before
    index = tmp_path / "i.db"
    done = runner.invoke(cli, ["index", str(src), "--index", str(index), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout.splitlines()[-1])
    assert (report["files"], report["skipped"]) == (1, 1)
    assert sorted(report["failed"], key=lambda f: f["path"]) == [
        {
            "path": "bad.sql",
            "error": "INPUT_INVALID_TEXT: byte 0x81 at byte 35 (line 2) is neither UTF-8 nor "
            "Windows-1252",
        },
        {
            "path": "half.sql",
            "error": "INPUT_INVALID_TEXT: the bytes at byte 10 (line 1) are not UTF-16: "
            "illegal UTF-16 surrogate",
        },
    ]
    assert "warning: bad.sql not indexed: INPUT_INVALID_TEXT" in done.stderr


def test_an_action_writing_a_lone_surrogate_into_state_gets_a_coded_error(tmp_path):
    # Third-party code can build such a string itself (bytes decoded with surrogateescape):
    # the write is refused where it happens, naming the step, so nothing later (the store,
    # `exec --json`) meets it.
    from runtime.contract.action import Action, Outcome
    from runtime.contract.registry import Registry
    from runtime.engine import Engine
    from runtime.format.pipeline import Pipeline

    class Decoder(Action):
        name = "decoder"
        summary = "Decode bytes carelessly."
        runnable = True

        def run(self, ctx):
            ctx.set("decoded", b"caf\xe9".decode("utf-8", "surrogateescape"))
            return Outcome.end()

    pipe = Pipeline.from_dict(
        {"settings": {"entry_step_id": "d"}, "steps": [{"id": "d", "action": "decoder"}]},
        file=str(tmp_path / "p.yaml"),
    )
    result = Engine(pipe, registry=Registry.from_classes(Decoder)).run({})
    assert (result.error.code, result.error.step_id) == ("STATE_NOT_SERIALIZABLE", "d")
    assert "lone surrogate U+DCE9 at character 3" in result.error.message
    json.dumps(result.to_dict(), ensure_ascii=False).encode("utf-8")  # printable as --json
