"""No configured secret reaches stdout, a cassette or the run store, even when a server echoes it.

The `chat_server` fixture replaces `{key}` in a scripted reply with the key the request
carried, so the server really echoes what it was sent. Keys in a base URL's query string
are refused before anything is sent, like user-info credentials.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from chat_support import LocalServer, QuietHandler

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


# --- every field a provider returns, in every escape (issue 25) ---------------------------
#
# EchoServer writes the key the request carried (KEY_A) or another model's key (KEY_B)
# into one field of its reply, in one form: a JSON escape at the wire, an escape inside a
# tool call's JSON arguments, split across streamed deltas, or encoded whole. No artifact
# of the run may then hold the key in any form a reader could turn back into it.

KEY_A = "sk-proj/Echo+7f3a9c21e4/x"  # '/' in it: JSON may write it `\/`
KEY_B = "sk-emoji-\U0001f600-5d0b7e2a1"  # non-BMP: JSON writes it as a surrogate pair


def _hex_u(c: str, case: Callable[[str], str]) -> str:
    units = c.encode("utf-16-be")
    return "".join("\\u" + case(units[i : i + 2].hex()) for i in range(0, len(units), 2))


def _mixed(h: str) -> str:
    return "".join(d.upper() if i % 2 else d for i, d in enumerate(h))


# Forms of a piece of the key inside a JSON string: each keeps JSON valid and decodes to
# the piece, so a key split between deltas can be written in any of them.
ESCAPES: dict[str, Callable[[str], str]] = {
    "plain": lambda s: s,
    "u-lower": lambda s: "".join(_hex_u(c, str.lower) for c in s),
    "u-upper": lambda s: "".join(_hex_u(c, str.upper) for c in s),
    # every other character escaped, hex digits in mixed case (`\u006B`, `\u002f`)
    "u-mixed": lambda s: "".join(c if i % 2 else _hex_u(c, _mixed) for i, c in enumerate(s)),
    "solidus": lambda s: s.replace("/", "\\/"),
}


def _b64(key: str, skip: int, alphabet: bytes | None = None) -> str:
    return base64.b64encode(b"ab"[:skip] + key.encode(), alphabet).decode()


# The whole key encoded: plain ASCII in JSON, but a reader decodes it in one step.
ENCODINGS: dict[str, Callable[[str], str]] = {
    "percent": lambda k: urllib.parse.quote(k, safe=""),
    "percent-all": lambda k: "".join(f"%{b:02X}" for b in k.encode()),
    "base64": lambda k: _b64(k, 0),
    "base64+1": lambda k: _b64(k, 1),
    "base64url+2": lambda k: _b64(k, 2, b"-_"),
    "hex": lambda k: k.encode().hex(),
    "html": lambda k: "".join(f"&#x{ord(c):x};" for c in k),
}


def _escaped(form: str, key: str) -> str:
    """The key in form, as it stands inside a JSON string."""
    if form in ESCAPES:
        return ESCAPES[form](key)
    return ENCODINGS[form](key)


class Raw:
    """Text spliced verbatim into a JSON string (escapes json.dumps would never write)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _dumps(value: Any) -> str:
    """json.dumps where a string may be a list of str and Raw parts."""
    splices: dict[str, str] = {}

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if (
            isinstance(v, list)
            and v
            and all(isinstance(p, str | Raw) for p in v)
            and any(isinstance(p, Raw) for p in v)
        ):
            out = []
            for part in v:
                if isinstance(part, Raw):
                    marker = f"RAW{len(splices):04d}MARK"
                    splices[marker] = part.text
                    out.append(marker)
                else:
                    out.append(part)
            return "".join(out)
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    text = json.dumps(walk(value), ensure_ascii=False)
    for marker, raw in splices.items():
        text = text.replace(marker, raw)
    return text


FIELDS = [
    "content",
    "tool-id",
    "tool-name",
    "arguments",  # escaped inside the arguments' own JSON text (decoded by the tool)
    "arguments-wire",  # escaped in the reply's JSON (decoded with the reply)
    "arguments-key",  # a key of the arguments object
    "finish-reason",
    "model",
    "usage",
]
ERRORS = ["status-400", "status-500", "error-body", "stream-error", "not-json"]


def _at_wire(form: str, key: str, split: bool) -> list[Any]:
    """The key in form as parts of a JSON string; split: in two halves (two deltas)."""
    if not split or form not in ESCAPES:
        return [Raw(_escaped(form, key))]
    return [Raw(_escaped(form, key[:7])), Raw(_escaped(form, key[7:]))]


def _arguments(form: str, key: str, as_key: bool = False) -> str:
    """JSON arguments text holding the key in form inside it (escaped at that level)."""
    inner = {"MARKER": 1} if as_key else {"pointer_id": "MARKER", "slice": "lines 1-2"}
    return json.dumps(inner).replace("MARKER", _escaped(form, key))


def _chunks(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def scripted(field: str, form: str, key: str, stream: bool) -> tuple[int, str, list[bytes]]:
    """(status, content type, body pieces) of a reply with key in field, in form."""
    secret = _at_wire(form, key, split=stream)
    call: dict[str, Any] = {"id": "call_1", "name": "rehydrate", "arguments": '{"pointer_id": "p"}'}
    content: list[Any] = ["all done"]
    finish: Any = "stop"
    model: Any = "m"
    usage: dict[str, Any] = {"prompt_tokens": 11, "completion_tokens": 3}
    if field == "content":
        content = ["you sent ", *secret, ", keep it safe"]
    elif field == "tool-id":
        call["id"] = ["id-", *_at_wire(form, key, False)]
    elif field == "tool-name":
        call["name"] = _at_wire(form, key, False)
    elif field == "arguments":
        call["arguments"] = _arguments(form, key)
    elif field == "arguments-key":
        call["arguments"] = _arguments(form, key, as_key=True)
    elif field == "arguments-wire":
        call["arguments"] = ['{"pointer_id": "', *secret, '"}']
    elif field == "finish-reason":
        finish = _at_wire(form, key, False)
    elif field == "model":
        model = _at_wire(form, key, False)
    elif field == "usage":
        usage = {"prompt_tokens": _at_wire(form, key, False), "completion_tokens": ["x"]}
    elif field == "status-400" or field == "status-500":
        body = _dumps({"error": {"message": ["bad key ", *secret]}})
        return int(field[-3:]), "application/json", [body.encode()]
    elif field == "error-body":
        body = _dumps({"error": {"message": ["refused ", *secret], "type": secret}})
        return 200, "application/json", [body.encode()]
    elif field == "not-json":
        return 200, "application/json", [f"<html>{_escaped(form, key)}</html>".encode()]
    elif field == "stream-error" and not stream:
        return 200, "application/json", [_dumps({"error": ["mid ", *secret]}).encode()]
    calls = [] if field == "content" else [call]
    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": content if not calls else None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls
            ]
        reply = {
            "model": model,
            "choices": [{"message": message, "finish_reason": finish}],
            "usage": usage,
        }
        return 200, "application/json", [_dumps(reply).encode()]
    events: list[Any] = [
        {"model": model, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    ]
    if field == "stream-error":
        events.append({"error": {"message": ["mid-stream ", *secret]}})
    if not calls:
        events += [{"choices": [{"index": 0, "delta": {"content": [p]}}]} for p in content]
    for c in calls:
        head = {"index": 0, "id": c["id"], "type": "function", "function": {"name": c["name"]}}
        events.append({"choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
        args = c["arguments"]
        # The arguments arrive in pieces of 3 characters (an escape is cut between them),
        # or, escaped at the wire, as the halves of the key.
        pieces = _chunks(args) if isinstance(args, str) else [[p] for p in args]
        for piece in pieces:
            delta = {"index": 0, "function": {"arguments": piece}}
            events.append({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]})
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    events.append({"choices": [], "usage": usage})
    body = [f"data: {_dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]
    return 200, "text/event-stream", body


class EchoServer(LocalServer):
    """A chat-completions server on 127.0.0.1: the first reply carries the key, later ones don't.

    `key_b` is the other model's key, which this server knows without being sent it.
    """

    def __init__(self, field: str, form: str, which: str, stream: bool) -> None:
        self.field, self.form, self.which, self.stream = field, form, which, stream
        self.requests = 0
        self.asked_to_stream: list[bool] = []
        server = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.json_body()
                sent = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                server.requests += 1
                server.asked_to_stream.append(bool(body.get("stream")))
                if server.requests == 1:
                    key = sent if server.which == "a" else KEY_B
                    # A JSON reply answers a streamed request too (a server may ignore
                    # `stream`); a stream answers only one that asked for it.
                    status, kind, pieces = scripted(server.field, server.form, key, server.stream)
                else:
                    status, kind, pieces = scripted("content", "plain", "nothing", False)
                    pieces = [p.replace(b"you sent nothing", b"answered") for p in pieces]
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.end_headers()
                for piece in pieces:
                    self.wfile.write(piece)
                    self.wfile.flush()

        self.listen(Handler)

    def __enter__(self) -> EchoServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_SHORT = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescaped(text: str) -> str:
    """text with JSON escapes decoded, three levels deep (surrogate pairs joined), then
    %XX and HTML character references."""

    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        return chr(int(code[1:], 16)) if code[0] == "u" else _SHORT.get(code, code)

    for _ in range(3):
        text = re.sub(r"\\(u[0-9a-fA-F]{4}|[\"\\/bfnrt])", one, text)
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return html.unescape(urllib.parse.unquote(text))


def _whole_encodings(key: str) -> list[str]:
    """Substrings any base64 or hex text holding key must contain (every alignment)."""
    raw = key.encode()
    out = [raw.hex()]
    for skip in range(3):
        for alphabet in (None, b"-_"):
            text = base64.b64encode(b"\0" * skip + raw, alphabet).decode()
            start = (skip * 4 + 2) // 3  # past the characters the prefix bytes touch
            end = (skip + len(raw)) // 3 * 4  # before the last, padded group
            out.append(text[start:end])
    return out


def readable(key: str, *texts: str, files: list[Path] = ()) -> list[str]:
    """Where key can be read back (in any form above): 'text N' or a file name."""
    named = [(f"text {n}", t) for n, t in enumerate(texts)]
    named += [(f.name, f.read_bytes().decode("utf-8", "replace")) for f in files]
    where = []
    for name, text in named:
        if (
            key in text
            or key in _unescaped(text)
            or any(e in text or e.lower() in text.lower() for e in _whole_encodings(key))
        ):
            where.append(name)
    return where


def echo_pipeline(tmp_path: Path, url: str) -> Path:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer.\n")
    path = tmp_path / "echo.yaml"
    common = f"provider: openai, model: m, base_url: '{url}', max_retries: 0"
    path.write_text(
        "settings:\n"
        "  entry_step_id: ask\n"
        "  default_model: a\n"
        "  models:\n"
        f"    a: {{{common}, api_key_env: KEY_A}}\n"
        f"    b: {{{common}, api_key_env: KEY_B}}\n"
        "steps:\n"
        "  - {id: ask, action: call_model, prompt_key: sys, next: done, tools: [rehydrate],\n"
        "     user_parts: {q: {source: question}}}\n"
        "  - {id: done, action: finalize, source: last_model_response}\n"
    )
    return path


def echo_run(
    runner,
    tmp_path,
    monkeypatch,
    field: str,
    form: str,
    which: str,
    stream: bool,
    store_url: str | None = None,
):
    """Run the pipeline against an echoing server; every artifact it left, by name (with
    store_url, a Postgres run store: the whole database dumped as one artifact)."""
    monkeypatch.setenv("KEY_A", KEY_A)
    monkeypatch.setenv("KEY_B", KEY_B)
    store: Any = store_url or tmp_path / "runs.db"
    cassette = tmp_path / "c.jsonl"
    shown = io.StringIO()
    if stream:
        # As on a terminal: replies stream to the screen (here, to `shown`) as they come.
        from runtime.cli import run as run_command
        from runtime.cli._progress import Progress

        def progress(pipeline: Any, as_json: bool, first: str | None) -> Progress:
            actions = {s.id: s.action for s in pipeline.steps}
            return Progress(actions, first_step=first, spinner=False, stream=True, out=shown)

        monkeypatch.setattr(run_command, "_progress", progress)
    with EchoServer(field, form, which, stream) as server:
        args = ["exec", str(echo_pipeline(tmp_path, server.url)), "--store", str(store)]
        args += ["--record", str(cassette), "--run-id", "r1", "--input", "question=q"]
        done = runner.invoke(cli, args + ([] if stream else ["--json"]))
        assert server.requests >= 1 and (server.asked_to_stream[0] or not stream)
    texts = {"stdout": done.stdout, "stderr": done.stderr, "streamed": shown.getvalue()}
    for extra in (["--format", "jsonl"], ["--messages"], ["--threads"]):
        shown = runner.invoke(cli, ["trace", "r1", "--store", str(store), *extra])
        texts[" ".join(["trace", *extra])] = shown.stdout + shown.stderr
    # What the run's context packs and its ledger show (docs/packs.md, docs/runs.md).
    for command in (["context", "r1"], ["context", "r1", "--json"], ["verify", "r1", "--json"]):
        shown = runner.invoke(cli, [*command, "--store", str(store)])
        assert shown.exit_code == 0, (command, shown.output)
        texts[" ".join(command)] = shown.stdout + shown.stderr
    files = sorted(tmp_path.glob("runs.db*")) + ([cassette] if cassette.exists() else [])
    if store_url:
        files.append(pg_dump(store_url, tmp_path / "runs.pg.sql"))
    return done, texts, files


def pg_dump(url: str, out: Path) -> Path:
    """Every row of a Postgres database as pg_dump writes it (one file to search)."""
    import subprocess

    from tests.postgres import bin_dir

    bindir = bin_dir()
    assert bindir is not None
    subprocess.run(
        [str(bindir / "pg_dump"), "--data-only", "--file", str(out), url],
        check=True,
        capture_output=True,
    )
    assert out.stat().st_size > 1000 and b"run_vars" in out.read_bytes()
    return out


def _check_echo(
    runner,
    tmp_path,
    monkeypatch,
    field: str,
    form: str,
    which: str,
    stream: bool,
    store_url: str | None = None,
):
    done, texts, files = echo_run(
        runner, tmp_path, monkeypatch, field, form, which, stream, store_url
    )
    failing = field in ERRORS or (field == "stream-error" and stream)
    assert done.exit_code == (1 if failing else 0), done.output
    if failing:
        assert "MODEL_PROVIDER_ERROR" in done.output
    stored = "runs.pg.sql" if store_url else "runs.db"
    assert files and any(f.name == stored for f in files)
    for key in (KEY_A, KEY_B):
        shown = [name for name, text in texts.items() if readable(key, text)]
        assert shown + readable(key, files=files) == [], (field, form, which, stream)
    # The check above would find the key in what the server sent.
    key = KEY_A if which == "a" else KEY_B
    assert readable(key, served(*scripted(field, form, key, stream)[1:])) == ["text 0"]


def served(kind: str, pieces: list[bytes]) -> str:
    """A reply's body; for a stream, every string of its events joined (deltas rejoined)."""
    body = b"".join(pieces).decode()
    if kind != "text/event-stream":
        return body
    strings: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            strings.append(v)
        elif isinstance(v, dict | list):
            for x in v.values() if isinstance(v, dict) else v:
                walk(x)

    for line in body.splitlines():
        if line.startswith("data: {"):
            walk(json.loads(line[6:]))
    return "".join(strings)


# Each case in the fast subset tries several fields at once is not possible (one reply has
# one shape); these are the ones that leaked before the guard scrubbed every field.
FAST_CASES = [
    ("tool-id", "plain", "a", False),
    ("tool-name", "u-upper", "a", True),
    ("arguments", "u-mixed", "a", True),
    ("arguments", "solidus", "a", False),
    ("arguments-key", "u-lower", "b", False),
    ("content", "base64+1", "a", False),
]


@pytest.mark.parametrize("field,form,which,stream", FAST_CASES)
def test_a_key_in_any_field_and_escape_reaches_no_artifact(
    runner, tmp_path, monkeypatch, field, form, which, stream
):
    _check_echo(runner, tmp_path, monkeypatch, field, form, which, stream)


@pytest.mark.postgres
@pytest.mark.parametrize("field,form,which,stream", FAST_CASES[:4])
def test_a_key_in_any_field_reaches_no_row_of_a_postgres_store(
    runner, tmp_path, monkeypatch, pg_url, field, form, which, stream
):
    """The same echoes into a Postgres run store: no row of the database holds the key."""
    _check_echo(runner, tmp_path, monkeypatch, field, form, which, stream, store_url=pg_url)


def _matrix() -> list[Any]:
    cases = []
    for field in FIELDS + ERRORS:
        for stream in (False, True):
            for form in ESCAPES:
                cases.append((field, form, "a", stream))
                if form != "solidus":
                    cases.append((field, form, "b", stream))
            if field in ("content", "arguments", "error-body", "not-json"):
                cases += [(field, form, "a", stream) for form in ENCODINGS]
    return [pytest.param(*c, id="-".join(map(str, c))) for c in cases if c not in FAST_CASES]


@pytest.mark.slow
@pytest.mark.parametrize("field,form,which,stream", _matrix())
def test_every_field_escape_and_stream_reaches_no_artifact(
    runner, tmp_path, monkeypatch, field, form, which, stream
):
    _check_echo(runner, tmp_path, monkeypatch, field, form, which, stream)


def test_a_key_in_the_question_reaches_no_pack_ledger_row_or_their_commands(
    runner, pipeline, tmp_path, monkeypatch
):
    """The question is the user's (kept as the run's input, for resume); the context packs,
    the ledger (run_ledger and the events' ledger_* columns) and what `runtime context` and
    `runtime verify` print hold ids, counts and hashes only."""
    import sqlite3

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    store = str(tmp_path / "runs.db")
    done = runner.invoke(
        cli,
        [
            *("exec", str(pipeline), "--store", store, "--run-id", "r1"),
            *("--input", f"question=why {KEY} and {json.dumps(KEY)[1:-1]}?"),
        ],
    )
    assert done.exit_code == 0, done.output
    db = sqlite3.connect(store)
    queries = {
        "packs": "SELECT * FROM run_context_packs",
        "ledger": "SELECT * FROM run_ledger",
        "events.ledger_*": "SELECT ledger_seq, ledger_kind, ledger_content, ledger_content_hash,"
        " ledger_prev, ledger_hash, ledger_mac FROM events",
    }
    rows = {name: db.execute(sql).fetchall() for name, sql in queries.items()}
    inputs = db.execute("SELECT * FROM run_inputs").fetchall()
    db.close()
    assert rows["packs"] and rows["ledger"] and any(r[2] for r in rows["events.ledger_*"])
    assert readable(KEY, repr(inputs)) == ["text 0"]  # the check finds the key where it is
    texts = {name: json.dumps(r) for name, r in rows.items()}
    for command in (["context", "r1"], ["context", "r1", "--json"], ["verify", "r1", "--json"]):
        shown = runner.invoke(cli, [*command, "--store", store])
        assert shown.exit_code == 0, (command, shown.output)
        texts[" ".join(command)] = shown.stdout + shown.stderr
    assert [name for name, text in texts.items() if readable(KEY, text)] == []
