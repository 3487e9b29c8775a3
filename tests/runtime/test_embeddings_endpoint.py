"""The OpenAI-compatible /embeddings provider against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from runtime.errors import StoreError
from runtime.retrieval.embeddings import make_embedder
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.node import Scope
from runtime.retrieval.nodestore import open_store

SAMPLE_ROOT = Path(__file__).resolve().parent.parent.parent / "pipelines" / "sample" / "eshop"


@pytest.fixture
def server(hashing_embedder):
    """Answers /embeddings with hashing vectors, in reverse order (the client must sort)."""
    seen: list[dict] = []
    fail = {"status": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
            if fail["status"]:
                self.send_response(fail["status"])
                self.end_headers()
                self.wfile.write(b'{"error": "overloaded"}')
                return
            vectors = hashing_embedder.embed(body["input"])
            data = [{"index": i, "embedding": v} for i, v in enumerate(vectors)][::-1]
            payload = json.dumps({"data": data, "model": body["model"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", seen, fail
    httpd.shutdown()
    httpd.server_close()


def test_vectors_come_back_in_input_order_with_the_key(server, monkeypatch, hashing_embedder):
    url, seen, _ = server
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    emb = make_embedder(f"openai:text-embed@{url}")
    texts = ["basket items", "stored procedure", "payment capture"]
    assert emb.embed(texts) == hashing_embedder.embed(texts)
    assert seen[0]["path"] == "/v1/embeddings" and seen[0]["model"] == "text-embed"
    assert seen[0]["auth"] == "Bearer sk-test"


def test_index_and_semantic_search_through_the_endpoint(server, tmp_path):
    url, seen, _ = server
    emb = make_embedder(f"openai:text-embed@{url}")
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(SAMPLE_ROOT / "src")], repository="r", embedder=emb)
    hits = store.search(
        "basket items", scope=Scope("r"), top_k=3, search_type="semantic", embedder=emb
    )
    assert len(hits) == 3 and seen  # the store ranked vectors the server produced
    assert emb.name == "openai:text-embed"


def test_a_failing_endpoint_is_a_coded_error(server):
    url, _, fail = server
    fail["status"] = 503
    with pytest.raises(StoreError) as info:
        make_embedder(f"openai:text-embed@{url}").embed(["x"])
    assert info.value.code == "EMBEDDINGS_UNAVAILABLE" and "503" in str(info.value)


def test_the_hashing_double_is_not_offered_by_name(runner, tmp_path):
    from runtime.cli import cli

    index = tmp_path / "i.db"
    args = ["index", str(SAMPLE_ROOT / "Database"), "--index", str(index), "--embedder"]
    done = runner.invoke(cli, [*args, "hashing"])
    assert done.exit_code == 1
    assert done.stderr.startswith(
        "error: EMBEDDINGS_UNAVAILABLE: unknown embedder 'hashing'; use minilm or openai:MODEL@URL\n"
    )
    assert not index.exists()  # refused before the index is created
