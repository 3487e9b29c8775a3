"""A denied memory, experience or value weighs nothing in a subject's ranking (issue 28): held
against an oracle, a store of the admitted items alone.

For every subject below, a search returns the same items, in the same order, with the same
scores, as the same search in a store that holds only the items the subject's labels admit:
the statistics BM25 weighs by (item count, mean length, each word's item count) are the
admitted items'. Both backends; the texts are real commit subjects and doc lines, with
words shared across labels so that denied items would move the scores if they counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from runtime.retrieval.memories import SqliteMemoryStore

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

# (text, labels): the hr and finance items share words with the public ones.
ITEMS = [
    ("Retry the payment capture when the gateway times out", []),
    ("Orders are shipped after the payment is captured", []),
    ("The basket service caches items per customer session", []),
    ("Stock is reserved when an order is placed and released on cancel", []),
    ("Payment capture retries twice, then the order is marked failed", ["finance"]),
    ("Refunds go through the payment gateway and post to the ledger", ["finance"]),
    ("The ledger closes monthly; payment totals are reconciled", ["finance"]),
    ("Salary payments are exported to the payroll gateway", ["hr"]),
    ("Customer session data is kept for thirty days", ["hr"]),
    ("Order order order payment payment gateway gateway gateway", ["hr", "finance"]),
]
QUERIES = [
    "payment capture",
    "payment gateway retries",
    "order shipped",
    "customer session",
    "ledger",
    "reserved stock cancel",
    "gateway",
]
SUBJECTS = [frozenset(), frozenset({"finance"}), frozenset({"hr"}), frozenset({"hr", "finance"})]


def _open(backend: str, where: Any, request: pytest.FixtureRequest) -> Any:
    if backend == "sqlite":
        return SqliteMemoryStore(str(where), create=True, embedder=None)
    from runtime.retrieval.pgmemories import PostgresMemoryStore

    return PostgresMemoryStore(str(request.getfixturevalue("pg_url")), create=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param


def _fill(store: Any, items: list[tuple[str, list[str]]]) -> None:
    store.remember(
        [{"type": "semantic", "text": t, "labels": labels} for t, labels in items], now=NOW
    )
    store.record_experiences(
        [
            {
                "domain": "orders",
                "strategy": "retry",
                "goal": t,
                "outcome_status": "failure",
                "labels": labels,
            }
            for t, labels in items
        ]
    )


def _ranked(hits: list[Any]) -> list[tuple[float, str]]:
    """(score, text) best first; an item's id is new in each store (equal scores fall back
    on it), so items of equal score are compared by text."""
    ranked = [(h.score, h.text) for h in hits]
    assert [s for s, _ in ranked] == sorted((s for s, _ in ranked), reverse=True)
    return sorted(ranked, key=lambda r: (-r[0], r[1]))


def _results(store: Any, labels: frozenset[str]) -> list[Any]:
    out = []
    for q in QUERIES:
        got = store.search_memories(q, limit=20, labels=labels, now=NOW)
        out.append(("memory", q, _ranked(got)))
        got = store.search_experiences(q, limit=20, labels=labels)
        out.append(("experience", q, _ranked(got)))
    return out


@pytest.mark.parametrize("labels", SUBJECTS, ids=lambda s: "+".join(sorted(s)) or "public")
def test_a_subjects_ranking_is_that_of_a_store_of_its_admitted_items(
    backend, tmp_path, request, labels
):
    mixed = _open(backend, tmp_path / "mixed.db", request)
    _fill(mixed, ITEMS)
    got = _results(mixed, labels)
    alone = SqliteMemoryStore(str(tmp_path / "alone.db"), create=True, embedder=None)
    _fill(alone, [(t, ls) for t, ls in ITEMS if set(ls) <= labels])
    want = _results(alone, labels)
    assert got == want
    assert any(hits for _, _, hits in got)  # the queries find something
    getattr(mixed, "close", lambda: None)()


def test_a_write_after_a_search_is_ranked_with_it(tmp_path):
    """What a search weighed by is read again after the store changes (own writes too)."""
    store = SqliteMemoryStore(str(tmp_path / "m.db"), create=True, embedder=None)
    _fill(store, ITEMS)
    before = store.search_memories("ledger", limit=20, labels=frozenset(), now=NOW)
    assert before == []  # the ledger items are finance's
    store.remember([{"type": "semantic", "text": "The ledger is public", "labels": []}], now=NOW)
    after = store.search_memories("ledger", limit=20, labels=frozenset(), now=NOW)
    assert [h.id for h in after] and len(after) == 1
