"""The memory store on both backends (SQLite, Postgres): validation on write, expiry, decay,
scope, labels, axes, filters."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runtime.errors import RunError, StoreError
from runtime.retrieval.memories import SqliteMemoryStore, open_memory_store
from runtime.retrieval.memory_items import checksum
from runtime.retrieval.memory_store import MemoryStore

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def mem(text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "semantic", "text": text, "labels": [], **extra}


def exp(goal: str, **extra: Any) -> dict[str, Any]:
    base = {
        "domain": "orders",
        "strategy": "retry",
        "goal": goal,
        "outcome_status": "failure",
        "labels": [],
    }
    return base | extra


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """An empty store on each backend: a SQLite file, then a fresh Postgres database (the
    contract every MemoryStore keeps; tests/runtime/test_pgmemories.py has Postgres' own)."""
    if request.param == "sqlite":
        yield SqliteMemoryStore(str(tmp_path / "m.db"), create=True, embedder=None)
        return
    from runtime.retrieval.pgmemories import PostgresMemoryStore

    opened = PostgresMemoryStore(str(request.getfixturevalue("pg_url")), create=True)
    yield opened
    opened.close()


def ids(hits: list[Any]) -> list[str]:
    return [h.id for h in hits]


# --- validation on write ------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"text": "x", "labels": []}, "type"),
        (mem("x", type="belief"), "type"),
        (mem(""), "text"),
        (mem("   "), "text"),
        (mem(7), "text"),
        (mem("x" * 20_001), "text"),
        (mem("bad \ud800 text"), "text"),
        (mem("x", importance=1.5), "importance"),
        (mem("x", importance=-0.1), "importance"),
        (mem("x", importance=True), "importance"),
        (mem("x", importance=float("nan")), "importance"),
        (mem("x", confidence="high"), "confidence"),
        (mem("x", created_at="yesterday"), "created_at"),
        (mem("x", created_at="2026-01-01T00:00:00"), "created_at"),
        (
            mem("x", created_at="2026-02-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z"),
            "updated_at",
        ),
        (mem("x", ttl_seconds=0), "ttl_seconds"),
        (mem("x", ttl_seconds=1e300), "ttl_seconds"),
        (mem("x", ttl_seconds=5, expires_at="2027-01-01T00:00:00Z"), "expires_at"),
        (mem("x", half_life_days=-1), "half_life_days"),
        (mem("x", scope={"tenant": "a"}), "scope"),
        (mem("x", scope={"repository": ""}), "scope.repository"),
        (mem("x", scope={"repository": " shop"}), "scope.repository"),
        (mem("x", scope="shop"), "scope"),
        (mem("x", labels="secret"), "labels"),
        (mem("x", labels=[""]), "labels"),
        (mem("x", labels=[3]), "labels"),
        (mem("x", provenance={"source": "wiki", "checksum": "md5:abc"}), "provenance.checksum"),
        (
            mem("x", provenance={"source": "wiki", "checksum": checksum("y")}),
            "provenance.checksum",
        ),
        (mem("x", provenance={"origin": "wiki"}), "provenance"),
        (mem("x", id="has space"), "id"),
        (mem("x", id=""), "id"),
        (mem("x", colour="red"), "colour"),
    ],
)
def test_a_malformed_memory_is_refused_naming_the_field_and_nothing_is_stored(
    store: SqliteMemoryStore, item: dict[str, Any], field: str
) -> None:
    good = mem("a good memory written in the same batch")
    with pytest.raises(RunError) as err:
        store.remember([good, item], now=NOW)
    assert err.value.code == "MEMORY_INVALID"
    assert f"memory 2 field {field!r}" in err.value.message
    assert store.counts()["memory"] == 0


def test_an_unlabelled_item_is_its_own_code_and_nothing_is_stored(
    store: SqliteMemoryStore,
) -> None:
    with pytest.raises(RunError) as err:
        store.remember([mem("fine"), {"type": "semantic", "text": "no labels"}], now=NOW)
    assert err.value.code == "MEMORY_UNLABELLED"
    with pytest.raises(RunError) as err:
        store.record_experiences([{k: v for k, v in exp("g").items() if k != "labels"}])
    assert err.value.code == "MEMORY_UNLABELLED"
    assert store.counts() == {"memory": 0, "experience": 0, "value": 0}


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({k: v for k, v in exp("g").items() if k != "domain"}, "domain"),
        (exp("g", strategy=""), "strategy"),
        (exp(""), "goal"),
        (exp("g", outcome_status="won"), "outcome_status"),
        (exp("g", confidence_tier="platinum"), "confidence_tier"),
        (exp("g", iteration_count=0), "iteration_count"),
        (exp("g", iteration_count=2.5), "iteration_count"),
        (exp("g", lesson=["a"]), "lesson"),
        (exp("g", outcome="failure"), "outcome"),
    ],
)
def test_a_malformed_experience_is_refused_and_nothing_is_stored(
    store: SqliteMemoryStore, item: dict[str, Any], field: str
) -> None:
    with pytest.raises(RunError) as err:
        store.record_experiences([exp("fine"), item], now=NOW)
    assert err.value.code == "MEMORY_INVALID"
    assert f"experience 2 field {field!r}" in err.value.message
    assert store.counts()["experience"] == 0


def test_a_given_checksum_of_the_text_is_kept_and_defaults_are_filled(
    store: SqliteMemoryStore,
) -> None:
    text = "Orders are soft-deleted: usp_CancelOrder sets Status = 'Cancelled'"
    [mid] = store.remember(
        [mem(text, provenance={"source": "adr-7", "checksum": checksum(text)})], now=NOW
    )
    [hit] = store.search_memories("cancel order", limit=3, now=NOW)
    assert hit.id == mid and hit.location == f"memory:{mid}"
    assert hit.fields["provenance"] == {"source": "adr-7", "checksum": checksum(text)}
    assert hit.fields["importance"] == 0.5 and hit.fields["created_at"] == "2026-03-01T12:00:00Z"
    assert isinstance(store, MemoryStore)


def test_the_same_id_replaces_the_memory(store: SqliteMemoryStore) -> None:
    store.remember([mem("baskets expire after 30 days", id="m1")], now=NOW)
    store.remember([mem("baskets expire after 7 days", id="m1")], now=NOW)
    assert store.counts()["memory"] == 1
    [hit] = store.search_memories("basket expire", limit=5, now=NOW)
    assert "7 days" in hit.text


# --- searching ----------------------------------------------------------------------


def test_identifiers_are_found_in_every_spelling(store: SqliteMemoryStore) -> None:
    store.remember(
        [
            mem("BasketService caches the basket in Redis", id="basket"),
            mem("The audit trigger writes every status change", id="audit"),
        ],
        now=NOW,
    )
    for query in ("BasketService", "basket service", "basket_service"):
        assert ids(store.search_memories(query, limit=5, now=NOW))[:1] == ["basket"]


def test_an_expired_memory_is_never_returned(store: SqliteMemoryStore) -> None:
    store.remember(
        [
            mem("the deploy freeze lasts until friday", id="ttl", ttl_seconds=3600),
            mem(
                "the deploy freeze is announced in chat",
                id="until",
                expires_at="2026-03-02T00:00:00Z",
            ),
            mem("deploy freeze rules are in the wiki", id="kept"),
        ],
        now=NOW,
    )
    assert sorted(ids(store.search_memories("deploy freeze", limit=5, now=NOW))) == [
        "kept",
        "ttl",
        "until",
    ]
    later = NOW + timedelta(hours=1, seconds=1)
    assert sorted(ids(store.search_memories("deploy freeze", limit=5, now=later))) == [
        "kept",
        "until",
    ]
    assert ids(store.search_memories("", limit=5, now=NOW + timedelta(days=2))) == ["kept"]
    # Exactly at the expiry moment the memory is gone.
    at = NOW + timedelta(hours=1)
    assert "ttl" not in ids(store.search_memories("deploy freeze", limit=5, now=at))


def test_decay_halves_the_score_every_half_life(store: SqliteMemoryStore) -> None:
    text = "payments are captured after the order ships"
    store.remember(
        [
            mem(text, id="old", half_life_days=10, created_at="2026-02-19T12:00:00Z"),
            mem(text, id="new", half_life_days=10, created_at="2026-03-01T12:00:00Z"),
            mem(text, id="ageless", created_at="2025-01-01T00:00:00Z"),
        ],
        now=NOW,
    )
    hits = {h.id: h.score for h in store.search_memories("payments captured", limit=5, now=NOW)}
    assert hits["old"] == pytest.approx(hits["new"] / 2, rel=1e-6)
    assert hits["ageless"] == pytest.approx(hits["new"], rel=1e-6)
    assert ids(store.search_memories("payments captured", limit=1, now=NOW)) != ["old"]


def test_scope_keeps_other_repositories_and_sessions_out(store: SqliteMemoryStore) -> None:
    store.remember(
        [
            mem("orders table is partitioned by month", id="shop", scope={"repository": "shop"}),
            mem("orders table keeps ten years", id="crm", scope={"repository": "crm"}),
            mem("orders table naming follows the style guide", id="global"),
            mem(
                "orders table question asked in this chat",
                id="chat",
                scope={"repository": "shop", "session": "s1"},
            ),
        ],
        now=NOW,
    )

    def found(scope: dict[str, Any] | None) -> list[str]:
        return sorted(ids(store.search_memories("orders table", limit=10, scope=scope, now=NOW)))

    assert found({"repository": "shop"}) == ["chat", "global", "shop"]
    assert found({"repository": "shop", "session": "s2"}) == ["global", "shop"]
    assert found({"repository": "crm"}) == ["crm", "global"]
    assert found(None) == ["chat", "crm", "global", "shop"]
    with pytest.raises(RunError) as err:
        found({"repository": ""})
    assert err.value.code == "SCOPE_INVALID"
    with pytest.raises(RunError) as err:
        found({"tenant": "x"})
    assert err.value.code == "SCOPE_INVALID"


def test_an_item_is_visible_only_when_every_label_is_allowed(store: SqliteMemoryStore) -> None:
    store.remember(
        [
            mem("card numbers are tokenised", id="open"),
            mem("card numbers live in the vault", id="pci", labels=["pci"]),
            mem("card numbers and customer names", id="both", labels=["pci", "pii"]),
        ],
        now=NOW,
    )
    store.record_experiences([exp("tokenise card numbers", labels=["pci"], id="e-pci")])

    def found(labels: frozenset[str] | None) -> list[str]:
        return sorted(ids(store.search_memories("card numbers", limit=10, labels=labels, now=NOW)))

    assert found(None) == ["open"]
    assert found(frozenset()) == ["open"]
    assert found(frozenset({"pci"})) == ["open", "pci"]
    assert found(frozenset({"pci", "pii"})) == ["both", "open", "pci"]
    assert found(frozenset({"pii"})) == ["open"]
    assert store.search_experiences("card numbers", limit=5) == []
    assert ids(store.search_experiences("card", limit=5, labels=frozenset({"pci"}))) == ["e-pci"]


def test_each_axis_reads_its_own_fields(store: SqliteMemoryStore) -> None:
    store.record_experiences(
        [
            exp(
                "speed up the catalog page",
                id="strategy-hit",
                strategy="caching",
                action="cache the catalog query in memory",
            ),
            exp(
                "speed up checkout",
                id="surprise-hit",
                surprise="the cache served stale prices after a catalog update",
            ),
            exp(
                "fix lost orders",
                id="root-hit",
                lesson="a cache without invalidation on catalog writes serves stale data",
            ),
        ],
        now=NOW,
    )

    def top(axis: str, query: str) -> list[str]:
        return ids(store.search_experiences(query, axis=axis, limit=5))

    assert top("strategy", "cache") == ["strategy-hit"]
    assert top("surprise", "cache") == ["surprise-hit"]
    assert top("root_cause", "cache") == ["root-hit"]
    assert sorted(top("full", "cache")) == ["root-hit", "strategy-hit", "surprise-hit"]
    with pytest.raises(RunError) as err:
        top("lessons", "cache")
    assert err.value.code == "MEMORY_AXIS_UNKNOWN"


def test_experience_filters_narrow_by_every_field(store: SqliteMemoryStore) -> None:
    store.record_experiences(
        [
            exp("stock check", id="a", domain="orders", strategy="locking", pipeline="code_qa"),
            exp("stock check", id="b", domain="orders", strategy="retry", outcome_status="success"),
            exp("stock check", id="c", domain="payments", strategy="retry", pipeline="code_qa"),
            exp("stock check", id="d", domain="orders", strategy="retry", confidence_tier="gold"),
        ],
        now=NOW,
    )

    def found(**filters: Any) -> list[str]:
        return sorted(ids(store.search_experiences("stock check", limit=10, filters=filters)))

    assert found(domain="orders") == ["a", "b", "d"]
    assert found(domain="orders", strategy="retry") == ["b", "d"]
    assert found(outcome="failure") == ["a", "c", "d"]
    assert found(pipeline="code_qa") == ["a", "c"]
    assert found(confidence_tier="gold") == ["d"]
    assert found(domain="orders", outcome="success") == ["b"]
    with pytest.raises(RunError) as err:
        found(team="x")
    assert err.value.code == "MEMORY_AXIS_UNKNOWN"


def test_a_blank_query_lists_what_the_filters_allow(store: SqliteMemoryStore) -> None:
    store.record_experiences([exp("one", id="x1"), exp("two", id="x2", domain="payments")], now=NOW)
    assert ids(store.search_experiences("", limit=5, filters={"domain": "orders"})) == ["x1"]


def test_the_tier_is_set_by_experience_or_run_id(store: SqliteMemoryStore) -> None:
    store.record_experiences([exp("answer a question", run_id="r-42", pipeline="code_qa")])
    assert store.set_tier("r-42", "gold", note="cited the right procedure") == "run-r-42"
    [hit] = store.search_experiences("answer question", limit=1)
    assert hit.fields["confidence_tier"] == "gold"
    assert hit.fields["note"] == "cited the right procedure"
    store.set_tier("run-r-42", "abandoned")
    [hit] = store.search_experiences("answer question", limit=1)
    assert hit.fields["confidence_tier"] == "abandoned"
    with pytest.raises(RunError) as err:
        store.set_tier("r-43", "gold")
    assert err.value.code == "EXPERIENCE_NOT_FOUND"


def test_limit_is_honoured_and_order_is_stable(store: SqliteMemoryStore) -> None:
    store.remember(
        [mem(f"index rebuild note number {i}", id=f"n{i:02}") for i in range(30)], now=NOW
    )
    first = ids(store.search_memories("index rebuild", limit=7, now=NOW))
    assert len(first) == 7
    assert first == ids(store.search_memories("index rebuild", limit=7, now=NOW))
    assert ids(store.search_memories("index rebuild", limit=0, now=NOW)) == []


class ConceptEmbedder:
    """Vectors by concept, not by word: 'cart' and 'basket' are one direction."""

    name = "concepts-2"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [
            [1.0, 0.0] if any(w in t.lower() for w in ("cart", "basket")) else [0.0, 1.0]
            for t in texts
        ]


def test_vectors_find_what_shares_no_word_with_the_query(tmp_path: Path) -> None:
    path = str(tmp_path / "v.db")
    with_vectors = SqliteMemoryStore(path, create=True, embedder=ConceptEmbedder())
    with_vectors.remember(
        [mem("the basket is kept for 30 days", id="basket"), mem("shopping hours", id="hours")],
        now=NOW,
    )
    assert ids(with_vectors.search_memories("empty the cart", limit=2, now=NOW))[0] == "basket"
    bm25_only = SqliteMemoryStore(path, embedder=None)
    assert "basket" not in ids(bm25_only.search_memories("empty the cart", limit=2, now=NOW))


# --- the file ------------------------------------------------------------------------


def test_a_missing_file_reads_as_empty_and_a_foreign_one_is_refused(tmp_path: Path) -> None:
    assert open_memory_store(str(tmp_path / "none.db")).search_values("x", limit=3) == []
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError) as err:
        open_memory_store(str(foreign))
    assert err.value.code == "MEMORY_STORE_ERROR"
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, just some notes\n" * 40)
    with pytest.raises(StoreError) as err:
        open_memory_store(str(text))
    assert err.value.code == "MEMORY_STORE_ERROR"


def _edit(store: Any, statement: str) -> None:
    """Run SQL on the store's rows behind its back (SQLite file or Postgres database)."""
    if isinstance(store, SqliteMemoryStore):
        with sqlite3.connect(store.path) as db:
            db.execute(statement)
        return
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute(statement.replace("'[]'", "'{}'"))


def test_an_edited_row_is_an_error_not_an_answer(store: SqliteMemoryStore) -> None:
    store.remember([mem("vault keys rotate monthly", id="k", labels=["secret"])], now=NOW)
    _edit(store, "UPDATE memories SET labels = '[]', record = replace(record, '\"secret\"', '')")
    with pytest.raises(StoreError) as err:
        store.search_memories("vault keys", limit=3, now=NOW)
    assert err.value.code == "MEMORY_STORE_ERROR"


def test_a_denied_item_is_never_returned_counted_nor_scoring(store: Any, tmp_path: Path) -> None:
    """A caller's answers and scores are those of a store holding only what it may see:
    denied items are out of the BM25 statistics too (item count, mean length, how many
    items hold a word), not only out of the answers."""
    from tests.runtime.test_pgmemories import _experiences, _memories, _sentences

    sentences = _sentences()
    memories = _memories(sentences, secret=True)
    experiences = _experiences(sentences)
    for i, item in enumerate(experiences):
        item["labels"] = ["secret"] if i % 3 == 0 else []
    store.remember(memories, now=NOW)
    store.record_experiences(experiences, now=NOW)
    public = SqliteMemoryStore(str(tmp_path / "public.db"), create=True, embedder=None)
    public.remember([m for m in memories if not m["labels"]], now=NOW)
    public.record_experiences([e for e in experiences if not e["labels"]], now=NOW)
    denied = {i["id"] for i in memories + experiences if i["labels"]}
    seen = 0
    for query in ("label allowed scope", "token budget", "memories decay half life", "index"):
        for got, want in (
            (
                store.search_memories(query, limit=30, now=NOW),
                public.search_memories(query, limit=30, now=NOW),
            ),
            (
                store.search_experiences(query, axis="root_cause", limit=10),
                public.search_experiences(query, axis="root_cause", limit=10),
            ),
        ):
            assert not {h.id for h in got} & denied
            assert [h.id for h in got] == [h.id for h in want]
            assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-6)
            seen += len(got)
    assert seen > 40
    cleared = store.search_memories("token budget", limit=50, labels=frozenset({"secret"}))
    assert {h.id for h in cleared} & denied


def _reopen(store: Any) -> Any:
    """Another store object on the same file or database (another connection)."""
    if isinstance(store, SqliteMemoryStore):
        return SqliteMemoryStore(store.path, embedder=None)
    from runtime.retrieval.pgmemories import PostgresMemoryStore

    return PostgresMemoryStore(store.url)


def test_scores_follow_writes_made_elsewhere(store: Any) -> None:
    """The statistics a search scores by are never those of the store before a write,
    whether this object or another connection wrote."""
    store.remember(
        [mem("audit rows are kept", id="a"), mem("audit secret", id="s", labels=["x"])], now=NOW
    )
    before = store.search_memories("audit", limit=5, now=NOW)
    other = _reopen(store)
    other.remember([mem(f"audit note {i}", id=f"n{i}") for i in range(6)], now=NOW)
    after = store.search_memories("audit", limit=10, now=NOW)
    fresh = _reopen(store).search_memories("audit", limit=10, now=NOW)
    assert [(h.id, h.score) for h in after] == [(h.id, h.score) for h in fresh]
    assert {h.id: h.score for h in after}["a"] != {h.id: h.score for h in before}["a"]
    store.remember([mem("audit again", id="b")], now=NOW)
    mine = store.search_memories("audit", limit=10, now=NOW)
    assert [(h.id, h.score) for h in mine] == [
        (h.id, h.score) for h in _reopen(store).search_memories("audit", limit=10, now=NOW)
    ]


def test_text_with_nul_and_the_escape_round_trips(store):
    """NUL cannot be in a Postgres text value (runtime/net/pgtext.py escapes it): a memory
    holding it, and the escape character, reads back as written on both backends."""
    text = "vault key a\x00b and \U0010fffd0 kept"
    store.remember([mem(text)], now=NOW)
    hits = store.search_memories("vault key", limit=5, now=NOW)
    assert [h.text for h in hits] == [text]
