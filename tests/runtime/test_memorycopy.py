"""`runtime store copy FROM TO --what memories` (issue 34): SQLite -> Postgres -> SQLite,
verified by counts and hashes; the copies search as the original does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runtime.cli import cli
from runtime.engine import memorycopy
from runtime.errors import StoreError
from runtime.retrieval.memories import SqliteMemoryStore, open_memory_store
from runtime.retrieval.values import rebuild_values
from tests.runtime.test_memories import ConceptEmbedder
from tests.runtime.test_pgmemories import NOW, _experiences, _memories, _sentences

pytestmark = pytest.mark.postgres


@pytest.fixture
def source(tmp_path: Path) -> str:
    """A SQLite memory store of real text: memories (some secret, some decaying, some
    scoped), experiences, values and the vectors of a concept embedder."""
    path = str(tmp_path / "memories.db")
    store = SqliteMemoryStore(path, create=True, embedder=ConceptEmbedder())
    sentences = _sentences()
    store.remember(_memories(sentences, secret=True), now=NOW)
    store.remember(
        [{"type": "episodic", "text": "the cart was emptied twice", "labels": [], "id": "cart"}],
        now=NOW,
    )
    store.record_experiences(_experiences(sentences), now=NOW)
    rebuild_values(store)
    return path


def _searches(location: str) -> list[Any]:
    store = open_memory_store(location, embedder=ConceptEmbedder())
    out: list[Any] = []
    for query in ("label allowed scope", "basket", "token budget", ""):
        for labels in (None, frozenset({"secret"})):
            out.append(store.search_memories(query, limit=10, labels=labels, now=NOW))
        out.append(store.search_experiences(query, axis="root_cause", limit=5))
        out.append(store.search_values(query, limit=5))
    if hasattr(store, "close"):
        store.close()
    return [[(h.id, round(h.score, 6), h.text, sorted(h.labels)) for h in hits] for hits in out]


@pytest.fixture
def back(tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "back.db")


def test_a_copy_there_and_back_is_verified_and_searches_alike(
    source: str, pg_url: str, back: str
) -> None:
    done = CliRunner().invoke(
        cli, ["store", "copy", source, pg_url, "--what", "memories", "--json"]
    )
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    tables = {t["table"]: t for t in report["tables"]}
    assert report["ok"] and tables["memories"]["rows"] == 161
    assert tables["experiences"]["rows"] >= 15 and tables["value_items"]["rows"] >= 1
    assert tables["memories terms"]["rows"] > 1000  # the full text was compared, not only rows
    done = CliRunner().invoke(cli, ["store", "copy", pg_url, back, "--what", "memories"])
    assert done.exit_code == 0, done.output
    assert "verified" in done.output
    original = _searches(source)
    assert sum(len(h) for h in original) > 50
    assert _searches(pg_url) == original
    assert _searches(back) == original
    # the vectors came along as stored (none embedded again)
    copied = memorycopy._items(open_memory_store(pg_url), "memory")
    assert copied == memorycopy._items(open_memory_store(source), "memory")
    assert all(row[3] == "concepts-2" and row[4] for row in copied)


def test_a_copy_into_a_store_holding_memories_is_refused(source: str, pg_url: str) -> None:
    memorycopy.copy_memories(source, pg_url)
    with pytest.raises(StoreError) as err:
        memorycopy.copy_memories(source, pg_url)
    assert err.value.code == "STORE_COPY_TARGET_NOT_EMPTY"


def test_a_copy_that_differs_is_refused_and_nothing_is_kept(
    source: str, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def damage(kind: str, record: dict[str, Any]) -> dict[str, Any]:
        if kind == "experience" and record["id"].endswith("4"):
            return {**record, "lesson": record["lesson"] + " (changed)"}
        return record

    monkeypatch.setattr(memorycopy, "_damage", damage)
    with pytest.raises(StoreError) as err:
        memorycopy.copy_memories(source, pg_url)
    assert err.value.code == "STORE_COPY_MISMATCH" and "experiences" in err.value.message
    assert open_memory_store(pg_url).counts() == {"memory": 0, "experience": 0, "value": 0}


def test_copying_from_nothing_is_an_error(tmp_path: Path, pg_url: str) -> None:
    with pytest.raises(StoreError) as err:
        memorycopy.copy_memories(str(tmp_path / "none.db"), pg_url)
    assert err.value.code == "MEMORY_STORE_ERROR"
