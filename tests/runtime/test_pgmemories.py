"""Memories on Postgres (issue 34): SQLite's ranking, access inside the query, the opener,
migrations, a server that is down or goes away.

The contract both backends keep is in tests/runtime/test_memories.py (parametrised); here
what only a server has, and the two backends compared on one corpus of real text: the
sentences of this repository's docs/retrieval.md and docs/assembly.md.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runtime.errors import StoreError
from runtime.retrieval.memories import SqliteMemoryStore, open_memory_store
from runtime.retrieval.memory_store import EmptyMemoryStore
from runtime.retrieval.pgmemories import PostgresMemoryStore
from runtime.retrieval.values import rebuild_values

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DOCS = Path(__file__).resolve().parents[2] / "docs"
QUERIES = [
    "label allowed scope",
    "BasketService",
    "place_order",
    "token budget",
    "memories decay half life",
    "search the index with labels",
    "experience axis strategy surprise",
    "vector embedder hybrid",
    "snapshot repository",
    "expired memory",
    "the",
    "",
    "zzzz nothing matches this",
]


def _sentences() -> list[str]:
    """Real sentences (this repository's retrieval and assembly docs), 20 to 400 chars."""
    out: list[str] = []
    for name in ("retrieval.md", "assembly.md"):
        text = (DOCS / name).read_text()
        for part in re.split(r"(?<=[.!?])\s+|\n\n", text):
            part = " ".join(part.split())
            if 20 <= len(part) <= 400 and part not in out:
                out.append(part)
    return out[:240]


def _memories(sentences: list[str], secret: bool = False) -> list[dict[str, Any]]:
    items = []
    for i, text in enumerate(sentences[:160]):
        item: dict[str, Any] = {"type": "semantic", "text": text, "labels": [], "id": f"m{i:03}"}
        if i % 7 == 3:
            item["half_life_days"] = 5 + i % 11
            item["created_at"] = f"2026-02-{1 + i % 27:02}T08:00:00Z"
        if i % 5 == 1:
            item["scope"] = {"repository": "shop" if i % 2 else "crm"}
        if secret and i % 4 == 0:
            item["labels"] = ["secret"]
        items.append(item)
    return items


def _experiences(sentences: list[str]) -> list[dict[str, Any]]:
    items = []
    tail = sentences[160:]
    for i in range(0, len(tail) - 3, 4):
        items.append(
            {
                "id": f"e{i:03}",
                "domain": ("retrieval", "assembly")[i % 2],
                "strategy": ("hybrid", "bm25", "rerank")[i % 3],
                "goal": tail[i],
                "action": tail[i + 1],
                "surprise": tail[i + 2],
                "lesson": tail[i + 3] if i % 8 else tail[3],
                "outcome_status": ("success", "failure")[i % 2],
                "labels": [],
            }
        )
    return items


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresMemoryStore]:
    store = PostgresMemoryStore(pg_url, create=True)
    yield store
    store.close()


def _ranked(hits: list[Any]) -> list[tuple[str, float]]:
    return [(h.id, h.score) for h in hits]


def _same(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> None:
    assert [i for i, _ in a] == [i for i, _ in b]
    for (_, x), (_, y) in zip(a, b, strict=True):
        assert x == pytest.approx(y, rel=1e-6, abs=1e-12)


def test_every_search_ranks_as_sqlite_does(pg: PostgresMemoryStore, tmp_path: Path) -> None:
    sentences = _sentences()
    assert len(sentences) >= 200  # wide enough to tell a wrong statistic from a right one
    lite = SqliteMemoryStore(str(tmp_path / "m.db"), create=True)
    for store in (lite, pg):
        store.remember(_memories(sentences), now=NOW)
        store.record_experiences(_experiences(sentences), now=NOW)
        rebuild_values(store)
    assert lite.counts() == pg.counts() and pg.counts()["value"] >= 1
    compared = 0
    for query in QUERIES:
        for scope in (None, {"repository": "shop"}):
            _same(
                _ranked(lite.search_memories(query, limit=12, scope=scope, now=NOW)),
                _ranked(pg.search_memories(query, limit=12, scope=scope, now=NOW)),
            )
        for axis in ("full", "strategy", "surprise", "root_cause"):
            for filters in (None, {"domain": "retrieval", "outcome": "success"}):
                _same(
                    _ranked(lite.search_experiences(query, axis=axis, limit=8, filters=filters)),
                    _ranked(pg.search_experiences(query, axis=axis, limit=8, filters=filters)),
                )
        _same(
            _ranked(lite.search_values(query, limit=5)), _ranked(pg.search_values(query, limit=5))
        )
        compared += len(pg.search_memories(query, limit=12, now=NOW))
    assert compared > 60


def test_a_denied_memory_is_never_returned_counted_nor_scoring(
    pg: PostgresMemoryStore, tmp_path: Path
) -> None:
    sentences = _sentences()
    items = _memories(sentences, secret=True)
    pg.remember(items, now=NOW)
    # SQLite holding only what the caller may see: the scores a denied item must not move.
    public = SqliteMemoryStore(str(tmp_path / "public.db"), create=True)
    public.remember([i for i in items if not i["labels"]], now=NOW)
    secret_ids = {i["id"] for i in items if i["labels"]}
    seen, unlocked = 0, set()
    for query in QUERIES:
        hits = pg.search_memories(query, limit=40, now=NOW)
        assert not {h.id for h in hits} & secret_ids
        _same(_ranked(hits), _ranked(public.search_memories(query, limit=40, now=NOW)))
        seen += len(hits)
        allowed = pg.search_memories(query, limit=40, labels=frozenset({"secret"}), now=NOW)
        unlocked |= {h.id for h in allowed} & secret_ids
    assert seen > 40 and len(unlocked) > 5  # the secret ones match too, when allowed


def test_vectors_find_what_shares_no_word_with_the_query(pg_url: str) -> None:
    from tests.runtime.test_memories import ConceptEmbedder, mem

    with_vectors = PostgresMemoryStore(pg_url, create=True, embedder=ConceptEmbedder())
    with_vectors.remember(
        [mem("the basket is kept for 30 days", id="basket"), mem("shopping hours", id="hours")],
        now=NOW,
    )
    hits = with_vectors.search_memories("empty the cart", limit=2, now=NOW)
    assert hits[0].id == "basket"
    bm25_only = PostgresMemoryStore(pg_url, embedder=None)
    assert "basket" not in [h.id for h in bm25_only.search_memories("empty the cart", limit=2)]
    with_vectors.close()
    bm25_only.close()


def test_the_opener_chooses_by_url_and_a_postgres_index_keeps_the_memories(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RUNTIME_MEMORIES", raising=False)
    empty = open_memory_store(pg_url)  # nothing remembered yet: read as empty, nothing made
    assert isinstance(empty, EmptyMemoryStore) and empty.path == pg_url
    writer = open_memory_store(None, index_path=pg_url, create=True)
    assert isinstance(writer, PostgresMemoryStore)
    writer.remember([{"type": "semantic", "text": "carts expire", "labels": []}], now=NOW)
    from runtime.engine.services import Services

    services = Services(index_path=pg_url)
    assert [h.text for h in services.memory_store.search_memories("cart", limit=3)] == [
        "carts expire"
    ]
    assert services.memory_writer().counts()["memory"] == 1
    writer.close()


def test_a_database_of_another_kind_is_refused(pg_url: str) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE memory_store_info (key text PRIMARY KEY, value text)")
        conn.execute("INSERT INTO memory_store_info VALUES ('format', 'something else')")
    with pytest.raises(StoreError) as err:
        PostgresMemoryStore(pg_url)
    assert err.value.code == "MEMORY_STORE_ERROR"


def test_a_down_server_is_a_coded_error_with_the_password_hidden() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql://bob:hunter2-pw@127.0.0.1:{port}/m"
    for opened in (
        lambda: PostgresMemoryStore(url, create=True, timeout=1),
        lambda: open_memory_store(url),
    ):
        with pytest.raises(StoreError) as err:
            opened()
        assert err.value.code == "MEMORY_STORE_UNAVAILABLE"
        assert "hunter2" not in str(err.value) and "bob:***@" in err.value.message


def test_a_server_that_goes_away_is_a_coded_error_and_comes_back(pg_private_server: Any) -> None:
    url = pg_private_server.create_database("gone")
    store = PostgresMemoryStore(url, create=True, timeout=2)
    store.remember([{"type": "semantic", "text": "orders ship daily", "labels": []}], now=NOW)
    pg_private_server.stop("fast")  # the test server runs without fsync
    for call in (
        lambda: store.search_memories("orders", limit=3, now=NOW),
        lambda: store.remember([{"type": "semantic", "text": "lost", "labels": []}], now=NOW),
    ):
        with pytest.raises(StoreError) as err:
            call()
        assert err.value.code == "MEMORY_STORE_UNAVAILABLE"
    pg_private_server.restart()
    for _ in range(20):  # the pool replaces its broken connections as they are returned
        try:
            hits = store.search_memories("orders", limit=3, now=NOW)
            break
        except StoreError as exc:
            assert exc.code == "MEMORY_STORE_UNAVAILABLE"
    assert [h.text for h in hits] == ["orders ship daily"]
    assert store.counts()["memory"] == 1  # the write that failed stored nothing
    store.close()


def test_several_processes_may_open_a_new_database_and_write_at_once(pg_url: str) -> None:
    stores: list[PostgresMemoryStore] = []
    errors: list[BaseException] = []

    def open_and_write(n: int) -> None:
        try:
            store = PostgresMemoryStore(pg_url, create=True)
            stores.append(store)
            store.remember(
                [
                    {"type": "semantic", "text": f"note {n} {j}", "labels": [], "id": f"n{n}-{j}"}
                    for j in range(5)
                ],
                now=NOW,
            )
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_and_write, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    import psycopg

    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT name FROM memory_store_migrations").fetchall() == [
            ("pgm001_memories",)
        ]
        rows = conn.execute("SELECT rowid FROM memories ORDER BY rowid").fetchall()
    assert [r[0] for r in rows] == list(range(1, 31))
    for store in stores:
        store.close()
