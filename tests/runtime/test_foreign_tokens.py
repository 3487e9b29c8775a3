"""A model's own tokenizer: `hf:PATH` (a tokenizer.json) and `server` (llama.cpp /tokenize).

The tokenizer.json files are trained here with the `tokenizers` library (tiny byte-level
BPEs); the server is a real HTTP server on 127.0.0.1 that answers /tokenize and
/detokenize with one of them, so every count can be checked against the tokenizer's own.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from runtime.context.foreign_tokens import ServerTokenCounter, server_root
from runtime.context.tokens import counter_for, get_counter
from runtime.engine.services import Services
from runtime.errors import TokenizerError
from runtime.models.base import ModelConfig

CORPUS = [
    "def count(text):\n    return len(text)\n",
    "Größenordnung der Bestellung: 東京都の注文テーブル\n",
    "SELECT * FROM dbo.Orders WHERE id = 1;\nend\nbegin\n",
] * 40
TEXTS = [
    "",
    "a",
    "def count(text):\n    return Größenordnung 東京都\nx",
    "end\nbegin\nend\nbegin",
    "line one\n\nline two\n  indented\n/slash\n",
    "<|endoftext|> special text is text",
]


def train(path: Path, *, byte_level: bool = True, truncate: int | None = None) -> Path:
    """A tiny BPE tokenizer.json: byte-level, or with no pre-tokenizer (merges cross newlines)."""
    if byte_level:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok = Tokenizer(models.BPE())
        alphabet = []
    trainer = trainers.BpeTrainer(vocab_size=420, initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(CORPUS if byte_level else ["end\nbegin"] * 200 + CORPUS, trainer)
    if truncate:
        tok.enable_truncation(truncate)  # as embedding models' files do
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def tok_file(tmp_path_factory) -> Path:
    return train(tmp_path_factory.mktemp("tok") / "tokenizer.json")


def own(path: Path, text: str) -> list[int]:
    tok = Tokenizer.from_file(str(path))
    tok.no_truncation()
    return list(tok.encode(text, add_special_tokens=False).ids)


# --- hf:PATH --------------------------------------------------------------------------


def test_foreign_counters_have_the_token_counters_interface():
    import inspect

    from runtime.context.foreign_tokens import ForeignCounter
    from runtime.context.tokens import TokenCounter

    public = [n for n in vars(TokenCounter) if not n.startswith("_")]
    for name in public:
        ours, theirs = getattr(ForeignCounter, name), getattr(TokenCounter, name)
        assert inspect.signature(ours) == inspect.signature(theirs), name


def test_hf_counts_are_the_tokenizers_own(tok_file):
    counter = get_counter(f"hf:{tok_file}")
    for text in TEXTS:
        assert counter.count(text) == counter.count_cached(text) == len(own(tok_file, text))
    assert counter.encoding_name.startswith("hf:")
    assert counter.encoding_name not in ("cl100k_base", "o200k_base")


def test_a_truncation_in_the_file_does_not_cut_the_count(tmp_path):
    path = train(tmp_path / "tokenizer.json", truncate=4)
    long = TEXTS[2] * 3
    assert get_counter(f"hf:{path}").count(long) == len(own(path, long)) > 4


def test_joined_and_block_counts_are_exact_where_pieces_cross_newlines(tmp_path):
    """Without a pre-tokenizer, "end\\nbegin" is one token: a cut at that newline would
    count it as two. A foreign tokenizer reports no cuts, so every count is the whole's."""
    path = train(tmp_path / "tokenizer.json", byte_level=False)
    counter = get_counter(f"hf:{path}")
    assert len(own(path, "end\nbegin")) == 1
    blocks = ["x\nend\nbegin\nend", "begin\nend\nbegin", "end\nbegin"]
    for sep in ("\n\n", "\n"):
        whole = sep.join(blocks)
        assert counter.count_joined(blocks, sep) == len(own(path, whole))
        assert counter.count_joined(blocks[:2], sep) == len(own(path, sep.join(blocks[:2])))
    assert counter.count_block(blocks[0], "\nbegin") == len(own(path, blocks[0] + "\nbegin"))
    assert counter.parts(blocks[0]) == (len(blocks[0]), len(blocks[0]), 0)


def test_counts_carried_under_another_tokenizer_are_never_used(tok_file):
    cl100k, hf = get_counter("cl100k_base"), get_counter(f"hf:{tok_file}")
    text = "first line\nsecond line\nthird line\n" * 20
    record = cl100k.carry(text)
    assert cl100k.carried(text, record) is not None
    assert hf.carried(text, record) is None
    # A record under the foreign tokenizer's own name is not trusted either: counted whole.
    forged = {**record, "parts": {hf.encoding_name: record["parts"]["cl100k_base"]}}
    assert hf.carried(text, forged) is None
    assert (
        hf.take_blocks([text], {**cl100k.carry_blocks([text]), "encoding": hf.encoding_name}) == 0
    )
    assert hf.count_joined([text, text]) == len(own(tok_file, text + "\n\n" + text))


def test_two_files_are_two_tokenizers(tmp_path, tok_file):
    other = train(tmp_path / "other.json", byte_level=False)
    assert get_counter(f"hf:{tok_file}").encoding_name != get_counter(f"hf:{other}").encoding_name


@pytest.mark.parametrize("limit", [1, 3, 7, 12])
def test_hf_truncate_keeps_the_longest_prefix_within_the_limit(tok_file, limit):
    counter = get_counter(f"hf:{tok_file}")
    text = TEXTS[2]
    cut = counter.truncate(text, limit)
    assert text.startswith(cut) and counter.count(cut) <= limit
    assert counter.count(text[: len(cut) + 1]) > limit  # one character more is over
    assert counter.truncate(text, 10_000) == text and counter.truncate(text, 0) == ""


def test_a_missing_or_bad_file_is_tokenizer_unavailable(tmp_path):
    with pytest.raises(TokenizerError) as missing:
        get_counter(f"hf:{tmp_path / 'nope.json'}")
    assert missing.value.code == "TOKENIZER_UNAVAILABLE" and "nope.json" in missing.value.message
    assert missing.value.hint
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": "not a tokenizer"}')
    with pytest.raises(TokenizerError) as broken:
        get_counter(f"hf:{bad}")
    assert broken.value.code == "TOKENIZER_UNAVAILABLE" and "bad.json" in broken.value.message


def test_without_the_tokenizers_package_the_hint_names_the_extra(tmp_path, monkeypatch):
    path = train(tmp_path / "t.json")
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(TokenizerError) as exc:
        get_counter(f"hf:{path}")
    assert exc.value.code == "TOKENIZER_UNAVAILABLE"
    assert "tokenizers" in exc.value.message and "embeddings" in exc.value.hint


# --- server ---------------------------------------------------------------------------


class TokenizeServer:
    """llama.cpp's /tokenize and /detokenize over a tokenizer.json; records every request."""

    def __init__(
        self, path: Path, *, missing: bool = False, hang: bool = False, usage: bool = True
    ) -> None:
        tok = Tokenizer.from_file(str(path))
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), **body}
                )
                if hang:
                    server.release.wait(10)
                if self.path == "/v1/chat/completions":
                    answer = {
                        "choices": [
                            {
                                "message": {"role": "assistant", "content": "ok"},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                    }
                    if not usage:
                        del answer["usage"]
                    self._send(answer)
                    return
                if missing or self.path not in ("/tokenize", "/detokenize"):
                    self.send_response(404)
                    self.end_headers()
                    return
                if self.path == "/tokenize":
                    ids = tok.encode(body["content"], add_special_tokens=body["add_special"]).ids
                    answer: dict[str, Any] = {"tokens": ids}
                else:
                    answer = {"content": tok.decode(body["tokens"])}
                self._send(answer)

            def _send(self, answer: dict[str, Any]) -> None:
                payload = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        ).start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def chats(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == "/v1/chat/completions"]

    def sent(self, path: str = "/tokenize") -> list[str]:
        return [r["content"] for r in self.requests if r["path"] == path]


@pytest.fixture
def serve(tok_file) -> Iterator[Any]:
    servers: list[TokenizeServer] = []

    def start(**kw: Any) -> TokenizeServer:
        servers.append(TokenizeServer(tok_file, **kw))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def model(url: str, **kw: Any) -> ModelConfig:
    return ModelConfig("local", "openai", model="m", base_url=url, tokenizer="server", **kw)


def test_server_counts_are_its_answers_and_each_text_is_sent_once(serve, tok_file, monkeypatch):
    monkeypatch.setenv("TOKENIZE_KEY", "sk-local")
    server = serve()
    counter = counter_for(model(server.url, api_key_env="TOKENIZE_KEY"))
    assert isinstance(counter, ServerTokenCounter)
    for _ in range(3):
        for text in TEXTS:
            assert counter.count(text) == counter.count_cached(text) == len(own(tok_file, text))
    blocks = TEXTS[2:5]
    assert counter.count_joined(blocks) == len(own(tok_file, "\n\n".join(blocks)))
    assert counter.count_block(blocks[0], "\n\n") == len(own(tok_file, blocks[0] + "\n\n"))
    sent = server.sent()
    assert len(sent) == len(set(sent))  # each distinct text once
    assert "" not in sent  # an empty text is 0 without asking
    assert {(r["path"], r["add_special"], r["auth"]) for r in server.requests} == {
        ("/tokenize", False, "Bearer sk-local")
    }
    assert counter.encoding_name == f"server:{server.url[: -len('/v1')]}"
    assert counter.parts(TEXTS[4]) == (len(TEXTS[4]), len(TEXTS[4]), 0)


def test_server_truncate_goes_through_detokenize(serve, tok_file):
    server = serve()
    counter = counter_for(model(server.url))
    text = TEXTS[2]
    cut = counter.truncate(text, 5)
    assert text.startswith(cut) and len(own(tok_file, cut)) <= 5
    assert len(own(tok_file, text[: len(cut) + 1])) > 5
    first = next(r["tokens"] for r in server.requests if r["path"] == "/detokenize")
    assert first == own(tok_file, text)[:5]
    assert server.sent().count(text) == 1  # the ids of the counted text were kept


def test_a_server_without_the_endpoint_is_tokenizer_unavailable(serve):
    server = serve(missing=True)
    with pytest.raises(TokenizerError) as exc:
        counter_for(model(server.url)).count("hello")
    assert exc.value.code == "TOKENIZER_UNAVAILABLE"
    assert f"{server.url[: -len('/v1')]}/tokenize" in exc.value.message
    assert "404" in exc.value.message and "hf:PATH" in exc.value.hint


def test_a_server_that_does_not_answer_is_cut_at_the_models_deadline(serve):
    server = serve(hang=True)
    config = model(server.url, deadline_seconds=0.3, timeout_seconds=0.3)
    with pytest.raises(TokenizerError) as exc:
        counter_for(config).count("hello")
    assert "deadline_seconds=0.3" in exc.value.message


def test_an_unreachable_server_is_tokenizer_unavailable():
    with pytest.raises(TokenizerError) as exc:
        counter_for(model("http://127.0.0.1:9/v1", connect_timeout_seconds=1)).count("x")
    assert "http://127.0.0.1:9/tokenize" in exc.value.message


def test_the_root_is_the_base_url_without_v1():
    assert server_root("http://h:8080/v1") == "http://h:8080"
    assert server_root("http://h:8080/v1/") == "http://h:8080"
    assert server_root("http://h:8080/api") == "http://h:8080/api"


def test_services_resolve_server_through_the_models_config(serve, tok_file):
    server = serve()
    services = Services()
    config = model(server.url)
    counter = services.tokens_for(config)
    assert counter.count("abc def") == len(own(tok_file, "abc def"))
    assert services.tokens_for(config) is counter
    hf = ModelConfig("h", "extractive", tokenizer=f"hf:{tok_file}")
    assert services.tokens_for(hf) is get_counter(f"hf:{tok_file}")
    with pytest.raises(TokenizerError) as exc:
        get_counter("server")  # a name alone cannot say which server
    assert exc.value.code == "TOKENIZER_UNAVAILABLE"
    replay = ModelConfig("r", "replay", tokenizer="server")
    with pytest.raises(TokenizerError) as exc:
        services.tokens_for(replay)
    assert "RUNTIME_TOKENIZER" in exc.value.hint


# --- through a run ----------------------------------------------------------------------


def run_against(server: TokenizeServer, root: Path, window: int, tokenizer: str = "server"):
    import runtime

    entry = {"provider": "openai", "model": "m", "base_url": server.url}
    settings = {
        "entry_step_id": "m",
        "models": {"local": {**entry, "tokenizer": tokenizer, "context_window": window}},
    }
    step = {
        "id": "m",
        "action": "call_model",
        "prompt_key": "sys",
        "model": "local",
        "max_output_tokens": 30,
        "user_parts": {"q": {"source": "question"}},
        "next": "end",
    }
    data = {"settings": settings, "steps": [step, {"id": "end", "action": "finalize"}]}
    pipeline = runtime.Pipeline.from_dict(data, file=str(root / "p.yaml"))
    services = runtime.Services(settings=settings, base_dir=str(root))
    question = "Größenordnung der Bestellung: 東京都の注文テーブル, and who calls it?"
    return runtime.Runner(pipeline, services=services).run({"question": question}, run_id="t")


def test_a_run_counts_its_prompt_with_the_servers_tokenizer(serve, tok_file, tmp_path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("You answer from evidence.\n")
    server = serve()
    r = run_against(server, tmp_path, 10_000)
    assert r.status == "completed"
    [chat] = server.chats()
    counted = sum(len(own(tok_file, m["content"])) + 4 for m in chat["messages"])
    cl100k = sum(get_counter().count(m["content"]) + 4 for m in chat["messages"])
    assert counted != cl100k  # the prompt tells the two tokenizers apart
    [decision] = [e for e in r.events if e["type"] == "CONTEXT_BUDGET_DECISION"]
    assert (decision["prompt_tokens"], decision["tokenizer"]) == (counted, "server")
    sent = server.sent()
    assert len(sent) == len(set(sent))
    # The window check holds with the server's count: at the limit it runs, one under not.
    assert run_against(server, tmp_path, counted + 30).status == "completed"
    r = run_against(server, tmp_path, counted + 29)
    assert r.error.code == "CONTEXT_OVERFLOW" and len(server.chats()) == 2


def test_a_run_on_a_server_without_tokenize_fails_with_the_url(serve, tmp_path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text("You answer.\n")
    server = serve(missing=True)
    r = run_against(server, tmp_path, 10_000)
    assert (r.error.code, r.error.step_id) == ("TOKENIZER_UNAVAILABLE", "m")
    assert "/tokenize" in r.error.message and server.chats() == []


def test_counts_a_server_did_not_send_are_estimated_with_its_own_tokenizer(serve, tok_file):
    from runtime.models import ModelRequest
    from runtime.models.openai import OpenAIProvider

    server = serve(usage=False)
    provider = OpenAIProvider(model(server.url, stream=False))
    text = "How is a payment captured?\nSee usp_CapturePayment."
    reply = provider.complete(ModelRequest([{"role": "user", "content": text}], step_id="s"))
    assert reply.usage_from == "estimate"
    assert (reply.tokens_in, reply.tokens_out) == (
        len(own(tok_file, text)),
        len(own(tok_file, "ok")),
    )
    assert text in server.sent()  # counted by the server's /tokenize, not cl100k_base
